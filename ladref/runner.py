"""`Runner`, what the decoding loops drive, and `ModelRunner`: a model and the KV cache of one call.

A runner caches the prompt (`Runner.prefill`, or deferred into the first step's pass), runs a
forward pass with a custom 4-D additive mask and explicit position ids (`ModelRunner.forward`,
its logits from `ladref.head.forward_logits`), and commits an accepted verification branch by
gathering its keys/values (`ModelRunner.commit`). The model's facts come from `ladref.facts`, its
cache from `ladref.hf_internals`; the rest of ladref only sees runners.

Every forward runs inside the runner's scoped SDPA kernel choice (`ladref.kernels`): a lookahead
step has a new shape at every step, and a kernel that plans per shape would pay for it each time.
"""

from __future__ import annotations

import torch

from .facts import ModelFacts, check_model
from .head import forward_logits
from .hf_internals import cache_arg, new_cache
from .kernels import SMALL_ROWS, attention_scope, sdpa_backends
from .masks import prepend_prompt, to_additive
from .results import DecodeStats


class Runner:
    """What the decoding loops drive (`ModelRunner`, `ladref.fast.static.StaticRunner`): the checked
    model, its facts, the SDPA kernel choice, and the operations every runner implements (`past_len`,
    `forward`, `commit`; `prefill` and `prefill_whole` are written here in terms of `forward`).

    Args:
        model: a decoder-only transformers model using eager or SDPA attention (`check_model`).
        attention_backend: which SDPA kernels every forward may use (`sdpa_backends`); "auto"
            avoids kernels that plan per shape.
        facts: the model's facts when the caller has checked it already (`check_model`).

    Attributes:
        facts: the model's `ModelFacts`, read once.
        device, dtype, vocab_size: the facts every step reads.
        kernels: the SDPA kernels of every forward (None: torch's own choice).
        max_length: the static cache's slots (None: the cache grows).
        widths: the step widths a runner can take without recompiling (None: any).
    """

    max_length: int | None = None
    widths: tuple[int, ...] | None = None
    pending: torch.Tensor | None = None  # (P,) the prompt a deferred `prefill` left to the first step's pass

    def __init__(self, model: torch.nn.Module, attention_backend: str = "auto", facts: ModelFacts | None = None) -> None:
        self.model, self.facts = model, check_model(model) if facts is None else facts
        self.device, self.dtype, self.vocab_size = self.facts.device, self.facts.dtype, self.facts.vocab_size
        self.kernels = sdpa_backends(attention_backend, self.device, self.facts.attention)

    @property
    def rows(self) -> int:
        """The rows of the batch whose forward pass this runner's next step joins (1: a prompt alone)."""
        return 1

    @property
    def step_width(self) -> int | None:
        """The largest width (every step pads to at most this many tokens); None: steps are not padded."""
        return None if self.widths is None else self.widths[-1]

    def empty(self) -> None:
        """Forget the cache (a commit that keeps nothing)."""
        self.pending = None
        self.commit(0, torch.zeros(0, dtype=torch.long))

    def with_pending(self, input_ids: torch.Tensor, position_ids: torch.Tensor | None, allowed: torch.Tensor | None,
                     keep: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        """A forward's arguments, with the prompt of a deferred `prefill` before them the first time (`prepend_prompt`)."""
        if self.pending is None:
            return input_ids, position_ids, allowed, keep
        prompt, self.pending = self.pending, None
        return prepend_prompt(prompt, input_ids, position_ids, allowed, keep)

    def pending_len(self) -> int:
        """P, the prompt tokens a deferred `prefill` has not cached yet (0: none)."""
        return 0 if self.pending is None else self.pending.shape[0]

    def details(self) -> list[str]:
        """What a timing of this runner depends on besides the model (`ladref.pricing.timing.describe`): its
        SDPA kernels, and whether key/value heads are shared by their query heads
        (`ladref.hf_internals.shared_kv_scope`)."""
        return (["sdpa=" + ("+".join(k.name.lower() for k in self.kernels) if self.kernels else "default")]
                + (["kv_heads=shared"] if self.facts.shared_kv else []))

    @property
    def past_len(self) -> int:
        """Tokens committed in the KV cache (a deferred prompt's counted: `prefill`)."""
        raise NotImplementedError

    def prefill(self, prompt: torch.Tensor, stats: DecodeStats, defer: bool = False) -> int:
        """Cache the prompt's K/V except its last token, which becomes the first step's input.

        Every drafting decoder starts this way, so that each step (Jacobi or lookahead) feeds the
        current token and its guesses together. Every runner shares this one; how a prompt's own pass
        runs is the runner's `run_prompt`.

        Args:
            prompt: (L,) prompt ids.
            stats: its ``prefill_tokens`` is set to L-1.
            defer: run those L-1 tokens in the first step's pass, before its tokens (`prepend_prompt`),
                not in a pass of their own: the decoding loops' choice, one pass fewer a prompt.

        Returns:
            The current token (the prompt's last).
        """
        self.pending = None
        if prompt.shape[0] > 1 and defer:
            self.pending = prompt[:-1].cpu()
        elif prompt.shape[0] > 1:
            self.run_prompt(prompt[:-1])
        stats.prefill_tokens = prompt.shape[0] - 1
        return int(prompt[-1])

    def prefill_whole(self, prompt: torch.Tensor, stats: DecodeStats) -> torch.Tensor:
        """Cache the whole prompt in one pass, as transformers' generate() does; greedy decoding's start.

        In float16 / bfloat16 the rounding depends on how a computation is split, so the oracle
        makes generate()'s own split (measured: the (L-1) + 1 split of `prefill` parts from
        generate at bfloat16 near-ties, this one does not). The pass is booked like `prefill`'s
        (L-1 prefill tokens; the last prompt token is step 1's, which these logits complete).

        Returns:
            (V,) logits after the prompt's last token.
        """
        stats.prefill_tokens, self.pending = prompt.shape[0] - 1, None
        return self.run_prompt(prompt)[-1]

    def run_prompt(self, tokens: torch.Tensor) -> torch.Tensor:
        """One pass caching (L,) `tokens` at the start of a call; returns the (1, V) logits after the last."""
        return self.forward(tokens, keep=torch.tensor([tokens.shape[0] - 1]))

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor | None = None, allowed: torch.Tensor | None = None,
                keep: torch.Tensor | None = None) -> torch.Tensor:
        """Feed (q,) tokens under a (q, q) mask; returns the logits of the rows `keep`."""
        raise NotImplementedError

    def commit(self, past_len: int, accepted: torch.Tensor) -> None:
        """Keep `past_len` cached entries plus the last step's entries `accepted`."""
        raise NotImplementedError


class ModelRunner(Runner):
    """A model plus the KV cache of one decoding call (nothing survives the call).

    Args:
        model: a decoder-only transformers model using eager or SDPA attention.
        attention_backend: which SDPA kernels every forward may use (`sdpa_backends`); "auto"
            avoids kernels that plan per shape.
        facts: the model's facts when the caller has checked it already (`check_model`), or
            changed one of them (a measurement of the model's own ``F.linear``).
    """

    def __init__(self, model: torch.nn.Module, attention_backend: str = "auto", facts: ModelFacts | None = None) -> None:
        super().__init__(model, attention_backend, facts)
        self.cache = new_cache(model.config)
        self._cache_arg = cache_arg(model) or "past_key_values"

    @property
    def past_len(self) -> int:
        """Tokens held in the KV cache (and the prompt a deferred `prefill` will cache)."""
        return self.cache.get_seq_length() + self.pending_len()

    def details(self) -> list[str]:
        """The kernels, and how a pass of several rows computes its head and linear layers
        (`ladref.head.forward_logits`): its step times depend on them."""
        return super().details() + (["head=W@h^T"] if self.facts.own_head else []) + (
            [f"linears=W@x^T({SMALL_ROWS.start}-{SMALL_ROWS.stop - 1})"] if self.facts.small_linears else [])

    @torch.no_grad()
    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        allowed: torch.Tensor | None = None,
        keep: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Run one forward pass over new tokens, appending their K/V to the cache.

        Args:
            input_ids: (q,) token ids.
            position_ids: (q,) absolute positions; None means past_len + arange(q).
            allowed: (q, q) bool mask within the step; None means causal, and then no mask is sent:
                the model builds its own causal mask, the computation generate() makes.
            keep: (k,) indices of the positions whose logits are needed; None keeps all q.

        Returns:
            (k, V) logits in float32 (float64 if the model is float64).
        """
        input_ids, position_ids, allowed, keep = self.with_pending(input_ids, position_ids, allowed, keep)
        past = self.past_len
        q = input_ids.shape[0]
        if position_ids is None:
            position_ids = torch.arange(past, past + q, device=self.device)
        inputs = {"input_ids": input_ids.to(self.device)[None], "position_ids": position_ids.to(self.device)[None],
                  "use_cache": True, self._cache_arg: self.cache}
        if allowed is not None:
            inputs["attention_mask"] = to_additive(allowed.to(self.device), past, self.dtype)
        with attention_scope(self.kernels):
            return forward_logits(self.model, self.facts, inputs, None if keep is None else keep.to(self.device))[0]

    def commit(self, past_len: int, accepted: torch.Tensor) -> None:
        """Keep the cache's first `past_len` entries plus the last step's entries `accepted`.

        Verification branches are not a suffix of the step, so the accepted branch's K/V are
        gathered into place, then the cache is cut behind them.

        Args:
            past_len: cache length before the last step.
            accepted: (k,) sorted step-relative indices of the tokens that became committed.
        """
        src = past_len + accepted.to(self.device)
        in_place = bool((accepted.cpu() == torch.arange(accepted.shape[0])).all())  # a prefix of the step: only cut
        for layer in self.cache.layers:
            for name in ("keys", "values"):
                full = getattr(layer, name)
                if full is None:  # a layer that has cached nothing yet (no pass has run)
                    continue
                kept = None if in_place else full.index_select(-2, src)  # (B, H_kv, k, D)
                full = full[..., : past_len + accepted.shape[0], :]
                if kept is not None:
                    full[..., past_len:, :] = kept
                setattr(layer, name, full)
