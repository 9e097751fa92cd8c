"""`StaticRunner`: a model over a preallocated KV cache, fed steps of a few fixed widths, each compiled once.

A compiled graph has fixed shapes. The runner gives a step of any q tokens one of a few shapes:
it pads the step to the smallest *width* w >= q of its buckets, the dummy tokens after the real
ones. A dummy sees only itself and the committed context and no real token sees it, so the real
tokens' logits are exactly those of the unpadded step; the dummies' logits are dropped and their
keys/values never committed. Each width compiles once, into a callable of its own, so a decoder
may switch widths from step to step without compiling again.

The KV cache is transformers' `StaticCache` (through the primitives of `ladref.hf_internals`): a step
writes its w tokens at slots ``length .. length+w-1`` and attends over the slots before them and
its own, or over all M slots where its shape must not change (`StaticRunner.span`), any others
masked (`ladref.masks.static_additive`); a commit gathers the accepted tokens' keys/values into
place and sets the length. The commit is not compiled: on a CPU the cache's buffers are packed
into one block each for keys, values and lengths (`ladref.hf_internals.pack_static_cache`), so it is a
few operations for all layers at once, and a later process has nothing to compile for it. On a
GPU they stay one buffer per layer, as they were when a compiled greedy step took 3.3 ms on an
H200: with the packed cache, CUDA graphs were skipped there ("mutated inputs", at the layers'
``cumulative_length.add_``, the counters then views of one block) and the step took 10.5 ms
(`benchmarks/results_gpu/logs/compiled_pair_h200.log`; the unpacked step not yet re-measured).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence

import torch

from ..config import check_int
from ..kernels import attention_scope
from ..masks import static_additive
from ..results import DecodeStats
from ..hf_internals import (gather_block_slots, gather_static_slots, guard_static_cache, new_static_cache, pack_static_cache,
                            set_static_length, shared_kv_scope, static_cache_ready, static_forward)
from ..runner import Runner
from ..pricing.compiling import check_mode, check_widths, compile_own, compile_scope
from .package_record import weights_digest
from .precompiled import check_compile_dir, packaged_step

DEFAULT_WIDTHS = (1, 2, 4, 8, 16, 32, 64)


def pad_step(input_ids: torch.Tensor, position_ids: torch.Tensor, allowed: torch.Tensor, width: int):
    """Pad a step of q tokens to `width` with dummies after the real ones: (width,) ids, positions, (width, width) mask.

    A dummy repeats the last real token and its position and sees only itself (the mask's
    diagonal); no real token sees it, so the real tokens compute exactly what they would unpadded.
    """
    q = input_ids.shape[0]
    ids = torch.cat([input_ids, input_ids[-1:].expand(width - q)])
    positions = torch.cat([position_ids, position_ids[-1:].expand(width - q)])
    mask = torch.eye(width, dtype=torch.bool)
    mask[:q, :q] = allowed
    return ids, positions, mask


def static_step(runner: StaticRunner, input_ids, position_ids, allowed, length, slots, last: int = 0) -> torch.Tensor:
    """The step every width compiles: (w,) ids and positions, (w, w) mask, () length, (n,) the slots
    it attends over, 0 .. n-1 (`StaticRunner.span`) -> (w, V) logits (uncompiled, a prompt's pass
    asks for the `last` positions' only: (last, V))."""
    set_static_length(runner.cache, length)  # the step writes at slots length .. length+w-1
    mask = static_additive(allowed, length, slots.shape[0], runner.dtype)  # (1, 1, w, n): the first n of M slots
    written = length + torch.arange(input_ids.shape[0], device=input_ids.device)  # (w,) the slots it writes
    return static_forward(runner.model, runner.cache, input_ids, position_ids, mask, written, last)


def static_commit(runner: StaticRunner, src: torch.Tensor, dst: torch.Tensor, length: torch.Tensor) -> None:
    """Gather slots `src` into slots `dst` ((k,) each), then set the length: a few operations on a
    packed cache (`pack_static_cache`), run as they are (nothing to compile)."""
    if runner.blocks is not None:
        gather_block_slots(runner.blocks, src, dst, length)
    else:
        gather_static_slots(runner.cache, src, dst)
        set_static_length(runner.cache, length)


class StaticRunner(Runner):
    """A model plus a preallocated static KV cache, fed steps padded to a few widths, optionally compiled.

    Unlike `ladref.runner.ModelRunner`, one StaticRunner serves many calls (`prefill` starts a new
    one): its cache buffers keep their addresses, so the steps compiled once serve every call.
    The prompt (a new length each call) runs uncompiled: in a pass of its own, or, deferred
    (`prefill`), with the first step, whose pass then runs uncompiled at its own width.

    Args:
        model: a decoder-only transformers model using eager or SDPA attention.
        max_length: M, the cache's slots: prompt + new tokens + one step's width must fit.
        attention_backend: the SDPA kernel choice (`ladref.kernels.sdpa_backends`).
        compile_mode: None (eager), or how to compile each width: "default" (Inductor),
            "reduce-overhead" (CUDA graphs, CUDA only), "max-autotune" (frozen weights and
            Inductor's max-autotune GEMM templates; on a CPU its C++ micro-kernels).
        commit_slots: the most tokens one commit may keep (N for lookahead decoding), a check;
            default the largest width (without widths: no limit).
        step_width: shorthand for ``widths=(step_width,)``: every step padded to one width.
        widths: the width buckets, increasing; a step of q tokens runs at the smallest width >= q.
            None (and no `step_width`): `DEFAULT_WIDTHS` when compiled, else each step as it comes.
        compile_dir: a folder of AOTInductor packages (`ladref.fast.precompiled`): the step is
            compiled ahead of time into a file there once, one package for all the runner's
            widths (the width a dynamic dimension: one copy of the weights), and loaded, in
            seconds, by every later runner of the same model and settings, in any process
            ("max-autotune" or "default").
            A package that cannot be used is reported and built again; a folder that cannot be
            written is reported and the step compiled in the process, as without it.
        weights: the model's `ladref.fast.package_record.weights_digest`, when the caller has it
            (the runners of one model share one: hashing reads every weight);
            default computed at the first package lookup.

    Attributes:
        compile_s: {width: seconds its compilation (or loading) took}, for the widths compiled so far.
        from_disk: {width: whether a usable package was found in `compile_dir`} (with a `compile_dir`).
    """

    def __init__(self, model: torch.nn.Module, max_length: int, attention_backend: str = "auto",
                 compile_mode: str | None = None, commit_slots: int | None = None, step_width: int | None = None, *,
                 widths: Sequence[int] | None = None, compile_dir: str | os.PathLike | None = None,
                 weights: str | None = None) -> None:
        super().__init__(model, attention_backend)
        check_int("max_length", max_length, 2)
        check_mode(compile_mode, self.device)
        if weights is not None and not isinstance(weights, str):
            raise TypeError(f"weights must be the model's weights_digest (a str) or None, got {type(weights).__name__}")
        self.compile_dir, self.weights = check_compile_dir(compile_dir, compile_mode), weights
        if widths is None and step_width is not None:
            widths = (step_width,)
        if widths is None and compile_mode is not None:
            widths = tuple(w for w in DEFAULT_WIDTHS if w <= max_length)
        self.widths = None if widths is None else check_widths(widths, max_length)
        if commit_slots is None and self.widths is not None:
            commit_slots = self.widths[-1]
        if commit_slots is not None:
            check_int("commit_slots", commit_slots, 1)
        self.max_length, self.commit_slots, self.compile_mode = max_length, commit_slots, compile_mode
        self.cache = new_static_cache(model, max_length)
        self.length = 0
        self.compile_s: dict[int, float] = {}
        self.from_disk: dict[int, bool] = {}
        self._steps: dict[int, Callable] = {}
        self._package: tuple[Callable | None, bool] | None = None  # (every width's step, from disk) once looked for
        self.blocks: tuple[torch.Tensor, ...] | None = None  # the cache packed (`pack_static_cache`) by its first forward, on a CPU
        self._packed = False

    @property
    def past_len(self) -> int:
        """Tokens committed in the cache (and the prompt a deferred `prefill` will cache)."""
        return self.length + self.pending_len()

    def width_for(self, q: int) -> int:
        """The width a step of q tokens runs at: the smallest bucket >= q (q itself without buckets)."""
        if self.widths is None:
            return q
        for width in self.widths:
            if width >= q:
                return width
        raise ValueError(f"a step of {q} tokens is wider than this runner's largest width {self.widths[-1]} (widths {self.widths})")

    def compile(self, widths: Sequence[int] | None = None) -> float:
        """Compile the steps of `widths` (default: all) now; returns the seconds it took.

        A width not compiled here compiles at its first step.
        """
        start = time.perf_counter()
        for width in (self.widths or ()) if widths is None else widths:
            self._step_for(self.width_for(width))
        return time.perf_counter() - start

    @torch.inference_mode()  # on a GPU the length counters are inference tensors (moved there inside the first forward)
    def reset(self) -> None:
        """Start a new call: the cache's contents are forgotten (its buffers stay where they are)."""
        self.length, self.pending = 0, None
        if static_cache_ready(self.cache):
            set_static_length(self.cache, torch.tensor(0, device=self.device))

    def empty(self) -> None:
        """Forget the cache (`reset`)."""
        self.reset()

    def details(self) -> list[str]:
        """The kernels, what a static step attends over (the slots it uses, or all max_length of
        them: `span`), and how (key/value heads shared by their query heads: `ladref.hf_internals.shared_kv_scope`)."""
        return super().details() + (["span=used"] if self.cuts() else []) + [f"compile_mode={self.compile_mode}",
                                                                            f"max_length={self.max_length}"]

    def cuts(self, step: Callable | None = None) -> bool:
        """Whether `step` (default: the compiled steps) attends over the slots it uses only (`span`):
        where the model attends through `ladref.hf_internals.shared_kv_attention`, which cuts the keys to
        its mask, and the step may change shape from call to call: run eagerly, or loaded from a
        package (its span a dynamic dimension; looked for, or not yet). A step compiled in the
        process keeps one shape: all M slots."""
        if not self.facts.shared_kv:
            return False
        if step is static_step or self.compile_mode is None:
            return True
        return self.compile_dir is not None and (self._package is None or self._package[0] is not None)

    def span(self, width: int, step: Callable | None = None) -> int:
        """n, the cache slots a step of `width` at the current length attends over: length + width
        (the committed ones and its own; a static cache's later slots hold nothing it may see) where
        `step` `cuts`, else all M. Attention's cost grows with n."""
        return self.length + width if self.cuts(step) else self.max_length

    def prefill_whole(self, prompt: torch.Tensor, stats: DecodeStats) -> torch.Tensor:
        """Start a new call (`reset`), then `Runner.prefill_whole`."""
        self.reset()
        return super().prefill_whole(prompt, stats)

    def prefill(self, prompt: torch.Tensor, stats: DecodeStats, defer: bool = False) -> int:
        """Start a new call (`reset`), then `Runner.prefill`: with `defer`, the first step's pass runs
        uncompiled, at its own width (`_with_prompt`)."""
        self.reset()
        return super().prefill(prompt, stats, defer)

    def run_prompt(self, tokens: torch.Tensor) -> torch.Tensor:
        """As `Runner.run_prompt`, uncompiled (the prompt's length changes from call to call)."""
        return self._run(static_step, tokens, torch.arange(tokens.shape[0]), None, tokens.shape[0], last=1)

    @torch.inference_mode()  # the compiled steps' inputs are always inference tensors (a guard checks it)
    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor | None = None, allowed: torch.Tensor | None = None,
                keep: torch.Tensor | None = None) -> torch.Tensor:
        """As `ModelRunner.forward` (same arguments, same result), padded to a width, through the static cache.

        Args:
            input_ids: (q,) token ids, q <= the largest width.
            position_ids: (q,) absolute positions; None means past_len + arange(q).
            allowed: (q, q) bool mask within the step; None means causal.
            keep: (k,) indices of the positions whose logits are needed; None keeps all q.

        Returns:
            (k, V) logits in float32 (float64 if the model is float64).
        """
        if self.pending is not None:
            return self._with_prompt(input_ids, position_ids, allowed, keep)
        q = input_ids.shape[0]
        width = self.width_for(q)
        if self.length + width > self.max_length:
            raise ValueError(f"the static cache holds {self.max_length} positions (max_length); a step of width {width} "
                             f"after {self.length} tokens needs {self.length + width}")
        if position_ids is None:
            position_ids = torch.arange(self.length, self.length + q)
        if allowed is None:
            allowed = torch.ones(q, q, dtype=torch.bool).tril_()
        step = static_step if self.compile_mode is None else self._step_for(width)
        ids, positions, mask = pad_step(input_ids.cpu(), position_ids.cpu(), allowed.cpu(), width)
        logits = self._run(step, ids, positions, mask, q)  # (width, V)
        return logits.index_select(0, (torch.arange(q) if keep is None else keep).to(self.device))

    def _with_prompt(self, input_ids: torch.Tensor, position_ids: torch.Tensor | None, allowed: torch.Tensor | None,
                     keep: torch.Tensor | None) -> torch.Tensor:
        """`forward`'s first step after a deferred `prefill`: the P prompt tokens, then the step's q,
        in one uncompiled pass of P + q tokens (`prepend_prompt`) that computes the step's logits only."""
        ids, positions, allowed, keep = self.with_pending(input_ids, position_ids, allowed, keep)
        n, first = ids.shape[0], int(keep.min())  # the step's rows start at P; `keep` lies among them
        positions = torch.arange(n) if positions is None else positions.cpu()
        logits = self._run(static_step, ids.cpu(), positions, None if allowed is None else allowed.cpu(), n, last=n - first)
        return logits.index_select(0, (keep - first).to(self.device))  # (k, V)

    @torch.inference_mode()
    def commit(self, past_len: int, accepted: torch.Tensor) -> None:
        """As `ModelRunner.commit`: keep `past_len` entries plus the last step's entries `accepted`, in place."""
        k = accepted.shape[0]
        slots = k if self.commit_slots is None else self.commit_slots
        if not 1 <= k <= slots:
            raise ValueError(f"a commit keeps 1..{slots} tokens (commit_slots), got {k}")
        src, dst, to = past_len + accepted.cpu(), past_len + torch.arange(k), self.device  # (k,) each: not compiled, any k
        static_commit(self, src.to(to), dst.to(to), torch.tensor(past_len + k, device=to))
        self.length = past_len + k

    @contextlib.contextmanager
    def attending(self):
        """What every pass of this runner runs inside, eager or traced for a package: its SDPA kernels
        (`ladref.kernels.attention_scope`) and key/value heads shared by their query heads
        (`ladref.hf_internals.shared_kv_scope`)."""
        with attention_scope(self.kernels), shared_kv_scope(self.model, self.facts):
            yield

    @torch.inference_mode()
    def _run(self, step: Callable, ids, positions, mask, q: int, last: int = 0) -> torch.Tensor:
        """Run `step` over w tokens written at the current length, then count the q real ones as appended."""
        width = ids.shape[0]
        if self.length + width > self.max_length:
            raise ValueError(f"the static cache holds {self.max_length} positions (max_length); a step needs {self.length + width}")
        to = self.device
        mask = torch.ones(width, width, dtype=torch.bool).tril_() if mask is None else mask
        slots = torch.arange(self.span(width, step), device=to)  # (n,)
        args = (ids.to(to), positions.to(to), mask.to(to), torch.tensor(self.length, device=to), slots)
        with self.attending():
            logits = step(self, *args, last=last) if last else step(self, *args)
        if not self._packed:  # the first forward (always eager) allocated the buffers: pack them before anything holds them
            self.blocks = pack_static_cache(self.cache) if self.device.type == "cpu" else None  # a GPU: see the module's docstring
            self._packed = True
        self.length += q
        return logits if logits.dtype == torch.float64 else logits.float()

    @torch.inference_mode()  # grad off while compiling: Inductor freezes weights only then
    def _step_for(self, width: int) -> Callable:
        """The step of `width`, compiled (or loaded) at its first use. A step compiled here is then
        run three times past the committed slots (compiled, CUDA graphs recorded, replayed); a
        step from a package is not run: nothing is left to compile or record, and its first call
        costs what later ones do."""
        if width not in self._steps:
            start, length = time.perf_counter(), self.length
            if not static_cache_ready(self.cache):  # the first forward allocates the cache's buffers: run it eagerly
                self._run(static_step, torch.zeros(1, dtype=torch.long), torch.zeros(1, dtype=torch.long), None, 0)
            guard_static_cache(self.cache)  # a graph holding these buffers serves this cache only
            step, runs = None, 0
            if self.compile_dir is not None:  # one package for every width; None when it could not be loaded or built
                if self._package is None:
                    self.weights = self.weights or weights_digest(self.model)
                    self._package = packaged_step(self, self.compile_dir, self.weights, static_step)
                step, self.from_disk[width] = self._package
            if step is None:
                step, runs = compile_own(static_step, f"static_step_{width}", self.compile_mode, self.device), 3
            with compile_scope(self.compile_mode):
                for _ in range(runs):  # compile; record CUDA graphs; replay. Writes only slots from `length` on
                    self._run(step, torch.zeros(width, dtype=torch.long), torch.arange(width), None, 0)
                    self.commit(length, torch.zeros(1, dtype=torch.long))
                    self.length = length
            self._steps[width] = step
            self.compile_s[width] = time.perf_counter() - start
        return self._steps[width]
