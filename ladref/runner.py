"""`ModelRunner`: a model and its KV cache, the one module that touches transformers internals.

Everything model-specific lives here: the prompt prefill, the forward pass with a custom 4-D
additive mask and explicit position ids (on a CPU, a pass of several rows computes the output
head itself: `forward_logits`), and the KV-cache commit that keeps an accepted
verification branch by gathering its keys/values; and the static-cache primitives that
`ladref.fast.static.StaticRunner` builds its constant-shape steps from; and the attention that
static steps and eager passes of several tokens run (`shared_kv_scope`). The rest of ladref only
sees runners.

Facts this module relies on (transformers 5.x):
  * a 4-D float mask of shape (1, 1, q, past + q) is passed to attention as-is; a *bool* 4-D mask
    is silently misread by eager attention, so we always send 0 / finfo.min floats;
  * forward() takes the KV cache as `cache` (5.24 on) or `past_key_values` (before): `cache_arg`;
  * `DynamicCache` layers hold `keys` / `values` tensors of shape (B, H_kv, T, D), and a
    `DynamicLayer` subclass may keep them as views of larger buffers (`RoomyLayer`);
  * `logits_to_keep` accepts a 1-D tensor of positions on the common decoder-only models (an
    empty one computes no logits), and ``hidden_states[-1]`` of ``output_hidden_states=True`` is
    the last hidden state after the final norm, the head's input (`forward_logits`);
  * a `StaticCache` layer writes a step at its `cumulative_length` counter, and marks its
    buffers as *unguarded* static addresses (see `guard_static_cache` for why that matters);
  * SDPA attention copies each key/value head once per query head (`repeat_kv`) for a pass of
    several tokens with a mask, and a `StaticCache` layer hands it all its slots; an attention
    function registered with `AttentionInterface` and named in ``config._attn_implementation``
    replaces it (`shared_kv_attention`, `shared_kv_scope`: heads shared, slots cut to the mask's).

Every forward runs inside the runner's scoped SDPA kernel choice (`ladref.kernels`): a lookahead
step has a new shape at every step, and a kernel that plans per shape would pay for it each time.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, DynamicCache, DynamicLayer, StaticCache
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

from .kernels import SMALL_ROWS, attention_scope, linear_scope, sdpa_backends
from .masks import prepend_prompt, to_additive
from .results import DecodeStats

SUPPORTED_ATTENTION = ("eager", "sdpa")
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# forward() arguments a step needs: the custom mask, explicit positions and a rollable KV cache
FORWARD_ARGS = ("attention_mask", "position_ids")
# the KV cache argument's name: `cache` from transformers 5.24 on, `past_key_values` before
CACHE_ARGS = ("cache", "past_key_values")
# model types whose logits are exactly their output head applied to the last hidden state (the last
# of ``hidden_states``), nothing in between (no scale, no soft-capping): the families of docs/models.md
PLAIN_HEADS = frozenset({"llama", "mistral", "qwen2", "qwen3", "gpt2", "gemma", "phi", "phi3", "olmo", "stablelm",
                         "gpt_neox", "opt"})
HEAD_ROWS = 256  # the most rows a pass computes the head for as W @ h^T (measured faster up to here on a CPU)
SPARE = 64  # the fewest free slots a `RoomyLayer` grows by (else an eighth of its length)
SHARED_KV = "ladref_shared_kv_sdpa"  # the name `shared_kv_scope` registers `shared_kv_attention` under


def cache_arg(model: torch.nn.Module, params: Mapping[str, object] | None = None) -> str | None:
    """The name `model.forward` takes its KV cache under (`cache` or `past_key_values`), or None;
    `params`: forward()'s signature parameters, when the caller has read them already."""
    params = inspect.signature(model.forward).parameters if params is None else params
    return next((name for name in CACHE_ARGS if name in params), None)


@dataclass(frozen=True)
class ModelFacts:
    """What the decoders need to know of a model, read once per call (`check_model`).

    Attributes:
        vocab_size: V, rows of the input embedding.
        device: where the weights are (its first parameter's device).
        dtype: the weights' dtype.
        context: the text config's ``max_position_embeddings`` (None: unbounded).
        attention: the attention implementation (``config._attn_implementation``).
        keeps_logits: whether its forward takes ``logits_to_keep`` (then a pass computes only the
            logits it is asked for: a prompt's prefill skips the (L, V) head).
        own_head: whether a pass of several rows computes the output head itself (`forward_logits`):
            a float32 / float64 CPU model of a `PLAIN_HEADS` type that takes ``logits_to_keep``, its head
            a linear layer (where it was measured faster).
        small_linears: whether a pass of a few rows computes its linear layers as W @ x^T
            (`ladref.kernels.linear_scope`): a float32 / float64 CPU model (where it was measured faster).
        shared_kv: whether `shared_kv_scope` changes how it attends: a CPU model on SDPA attention
            with fewer key/value heads than query heads. Its passes of several tokens
            (`forward_logits`) and all its static steps attend with the heads shared, and a static
            step over the slots it uses only (`ladref.fast.static.StaticRunner.span`).
    """

    vocab_size: int
    device: torch.device
    dtype: torch.dtype
    context: int | None
    attention: str | None
    keeps_logits: bool = False
    own_head: bool = False
    small_linears: bool = False
    shared_kv: bool = False

    @classmethod
    def of(cls, model: torch.nn.Module) -> "ModelFacts":
        """Read the facts of a module with parameters (`check_model` checks the rest)."""
        if not isinstance(model, torch.nn.Module) or not hasattr(model, "config"):
            raise TypeError(f"model must be a transformers causal LM (torch.nn.Module with .config), got {type(model).__name__}")
        param = next(model.parameters(), None)
        if param is None:
            raise ValueError(f"{type(model).__name__} has no parameters")
        config = model.config
        context = getattr(config.get_text_config(), "max_position_embeddings", None)
        keeps = "logits_to_keep" in inspect.signature(model.forward).parameters
        small = param.device.type == "cpu" and param.dtype in (torch.float32, torch.float64)
        own_head = (keeps and small and getattr(config, "model_type", None) in PLAIN_HEADS
                    and isinstance(model.get_output_embeddings(), torch.nn.Linear))
        attention, text = getattr(config, "_attn_implementation", None), config.get_text_config()
        grouped = getattr(text, "num_key_value_heads", None) not in (None, getattr(text, "num_attention_heads", None))
        return cls(model.get_input_embeddings().num_embeddings, param.device, param.dtype, context, attention, keeps,
                   own_head, small, attention == "sdpa" and param.device.type == "cpu" and grouped)


def check_model(model: object) -> ModelFacts:
    """Raise a clear error if `model` cannot run ladref's custom-mask forward passes; else its facts.

    Checked before any forward pass: a decoder-only `torch.nn.Module` with a config; a forward
    taking a 4-D mask, position ids and a KV cache (recurrent models such as Mamba do not); eager
    or SDPA attention (flash-attention kernels ignore custom masks); full-attention KV layers only
    (a sliding-window or linear-attention cache cannot be rolled back); floating-point weights.
    """
    facts = ModelFacts.of(model)
    name, config = type(model).__name__, model.config
    if getattr(config, "is_encoder_decoder", False):
        raise ValueError(f"{name} is an encoder-decoder model; ladref decodes decoder-only causal LMs")
    params = inspect.signature(model.forward).parameters
    missing = [arg for arg in FORWARD_ARGS if arg not in params] + ([] if cache_arg(model, params) else ["past_key_values"])
    if missing:
        raise ValueError(
            f"{name} (model_type {getattr(config, 'model_type', '?')!r}) is not an attention model with a KV cache: "
            f"its forward() lacks {', '.join(missing)}; recurrent / state-space models cannot run lookahead steps"
        )
    if facts.attention not in SUPPORTED_ATTENTION:
        raise ValueError(
            f"attention implementation {facts.attention!r} cannot take ladref's custom 4-D attention mask; "
            f"load the model with attn_implementation='sdpa' or 'eager'"
        )
    kinds = {type(layer).__name__ for layer in DynamicCache(config=config).layers}
    if kinds - {DynamicLayer.__name__}:
        raise ValueError(
            f"{name} has {', '.join(sorted(kinds - {DynamicLayer.__name__}))} cache layers (sliding-window or "
            "recurrent attention), whose cache ladref cannot roll back; use a model with full attention"
        )
    if facts.dtype not in FLOAT_DTYPES:
        raise ValueError(f"{name} has {facts.dtype} weights; ladref needs float16, bfloat16, float32 or float64 weights")
    return facts


class RoomyLayer(DynamicLayer):
    """A `DynamicLayer` whose keys and values are the first T slots of buffers with room to spare.

    transformers' layer appends a pass's entries by concatenation, copying the whole cache every
    pass: (B, H_kv, T, D) keys and values a layer, 9% of a batched greedy pass of 16 rows over
    760 slots on a 2-core CPU (`benchmarks/archive/load/batch_profile_cpu_b16_second.log`). Here a pass
    writes its q entries in place. The buffers grow, by an eighth or `SPARE` slots, only when full.
    Keys and values that ladref sets from outside (a commit's cut, a trim: views of the buffers)
    keep the buffers; any other tensor set there is copied into fresh buffers by the next pass.
    """

    room: tuple[torch.Tensor, torch.Tensor] | None = None  # (B, H_kv, C, D) keys and values, C >= T

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep only the batch rows `indices` (copied out), letting the buffers go now rather than at the next pass."""
        self.keys, self.values = self.keys.index_select(0, indices), self.values.index_select(0, indices)
        self.room = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        """Append (B, H_kv, q, D) keys and values; returns the (B, H_kv, T + q, D) cached ones (views)."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        t, q = self.get_seq_length(), key_states.shape[-2]
        if not self._holds(key_states, t + q):
            self._grow(key_states, value_states, t, t + q)
        for buffer, new in zip(self.room, (key_states, value_states)):
            buffer[..., t : t + q, :] = new
        self.keys, self.values = (buffer[..., : t + q, :] for buffer in self.room)
        return self.keys, self.values

    def _holds(self, key_states: torch.Tensor, length: int) -> bool:
        """Whether the buffers have `length` slots and the cached keys and values are views of their first ones."""
        if self.room is None or self.room[0].shape[-2] < length or self.room[0].shape[:2] != key_states.shape[:2]:
            return False
        return all(t.dim() == 4 and t.data_ptr() == r.data_ptr() and t.stride() == r.stride()
                   for t, r in zip((self.keys, self.values), self.room))

    def _grow(self, key_states: torch.Tensor, value_states: torch.Tensor, t: int, length: int) -> None:
        """New buffers of `length` slots and room to spare, the t cached entries copied in."""
        capacity = length + max(SPARE, length // 8)
        self.room = tuple(new.new_empty((*new.shape[:2], capacity, new.shape[-1])) for new in (key_states, value_states))
        if t:
            for buffer, old in zip(self.room, (self.keys, self.values)):
                buffer[..., :t, :] = old


def new_cache(config: object) -> DynamicCache:
    """An empty `DynamicCache` for a model of `config` whose layers are `RoomyLayer`s (full attention:
    `check_model`)."""
    cache = DynamicCache(config=config)
    cache.layers = [RoomyLayer() for _ in cache.layers]
    if cache.layer_class_to_replicate is not None:  # a config that names no layers: they are made at the first pass
        cache.layer_class_to_replicate = RoomyLayer
    return cache


def shared_kv_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        attention_mask: torch.Tensor | None, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' SDPA attention, but for a pass with a mask each key/value head serves its group
    of query heads inside SDPA (``enable_gqa``), not copied once per query head (`repeat_kv`).

    transformers shares them only for a pass without a mask (and, outside torch.compile and export,
    a one-token pass); with ladref's mask it copies the whole cache of every layer, H / H_kv times,
    before attending: over a static cache of M slots that is every slot, whatever the length
    (SmolLM2-135M, 3 key/value heads for 9: 4.7 MB written a layer over 1,024 slots). torch's CPU
    flash kernel reads the shared heads directly, with the same result (bitwise, for SmolLM2-135M's
    compiled steps). A pass without a mask, or with a position bias or soft-capping, is
    transformers' own.

    A mask narrower than the keys attends over the keys' first n slots only: a static cache of M
    slots hands every layer all M, and a step that has cached fewer needs only the first
    length + w (`ladref.fast.static.StaticRunner.span`); attention's cost grows with the slots.

    Args:
        query: (B, H, q, D); key, value: (B, H_kv, T, D); attention_mask: (B, 1, q, n) additive, n <= T.

    Returns:
        (B, q, H, D) attention output, and no weights.
    """
    if attention_mask is not None:  # a static step's span (`StaticRunner.span`): the first n slots (all: a view of them)
        key, value = key[:, :, :attention_mask.shape[-1]], value[:, :, :attention_mask.shape[-1]]  # no test of n: one program
    own = kwargs.get("softcap") is not None or kwargs.get("position_bias") is not None
    if attention_mask is None or getattr(module, "num_key_value_groups", 1) == 1 or own:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=kwargs.get("dropout", 0.0),
                                         scale=kwargs.get("scaling"), enable_gqa=True)  # (B, H, q, D)
    return out.transpose(1, 2).contiguous(), None


@contextlib.contextmanager
def shared_kv_scope(model: torch.nn.Module, facts: ModelFacts):
    """Within: `model` attends with `shared_kv_attention` where ``facts.shared_kv``; any other model
    attends as it is. The config's attention implementation (which its sub-configs follow) is set
    on entering and restored on leaving (attribute writes, no walk over the modules), so every
    static step, and every eager pass of several tokens (`forward_logits`), runs inside it. A pass
    sent no mask (a prompt's prefill, a causal step) gets the mask transformers makes for SDPA: for
    an implementation without a mask function of its own it would make none, and SDPA's causal
    flag over a longer cache would cut the keys to the queries'."""
    if not facts.shared_kv:
        yield
        return
    AttentionInterface.register(SHARED_KV, shared_kv_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(SHARED_KV, sdpa_mask)  # a pass sent no mask gets SDPA's (else none: keys cut wrong)
    model.config._attn_implementation = SHARED_KV
    try:
        yield
    finally:
        model.config._attn_implementation = "sdpa"


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
        SDPA kernels, and whether key/value heads are shared by their query heads (`shared_kv_scope`)."""
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
        """The kernels, and how a pass of several rows computes its head and linear layers (`forward_logits`): its
        step times depend on them."""
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


def batch_forward(model: torch.nn.Module, facts: ModelFacts, cache: DynamicCache, input_ids: torch.Tensor,
                  position_ids: torch.Tensor, mask: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
    """One forward pass of a batch over a shared `DynamicCache`, appending every row's Q keys/values.

    Args:
        facts: the model's `ModelFacts`.
        input_ids: (B, Q) token ids; position_ids: (B, Q) absolute positions.
        mask: (B, 1, Q, T + Q) additive mask over the cache's T slots and the step.
        keep: (k,) the step positions whose logits to compute, every row; None: all Q.

    Returns:
        (B, Q, V) logits ((B, k, V) with `keep`) in float32 (float64 if the model is float64).
    """
    inputs = {"input_ids": input_ids, "position_ids": position_ids, "attention_mask": mask, "use_cache": True,
              cache_arg(model) or "past_key_values": cache}
    return forward_logits(model, facts, inputs, None if keep is None else keep.to(input_ids.device))


def forward_logits(model: torch.nn.Module, facts: ModelFacts, inputs: Mapping[str, object], keep: torch.Tensor | None) -> torch.Tensor:
    """One forward pass: the (B, k, V) logits at the step positions `keep` (None: all Q), in float32
    (float64 if the model is float64). A pass of a few rows (B x Q in `ladref.kernels.SMALL_ROWS`) of
    a model with ``facts.small_linears`` computes its linear layers as W @ x^T (`linear_scope`), and
    a pass of several tokens (Q >= 2) of a model with ``facts.shared_kv`` attends with each key/value
    head shared by its query heads (`shared_kv_scope`): a drafting step's mask would otherwise copy
    the whole cache H / H_kv times. A one-token pass copies nothing: transformers folds the query
    heads onto their key/value head itself (``pack_gqa``), and SDPA's shared heads measured no
    faster for it.

    A pass keeping several rows (B x k >= 2) of a model with ``facts.own_head`` asks the model for
    its last hidden state and no logits, and computes the head itself, as W @ h^T: CPU BLAS takes
    ``h @ W^T`` with few rows as one matrix-vector product per row, each reading the whole head
    (SmolLM2-135M's 49152 x 576 on 2 threads: 18 ms for 4 rows as ``F.linear``, 5 ms as W @ h^T;
    20 against 14 ms for 16; ``benchmarks/archive/step_breakdown/head_gemm.log``). A pass of one
    row, a greedy step's, keeps the model's own head, whose linear layer `linear_scope` computes
    as W @ [h; 0]^T like the others (a matrix-vector product reads W at about a third of the speed).

    Args:
        inputs: the model's keyword arguments (input_ids (B, Q), position_ids, mask, cache).
        keep: (k,) step positions, every row; passed to the model as ``logits_to_keep`` when it takes it.
    """
    batch, q = inputs["input_ids"].shape
    heads = shared_kv_scope(model, facts) if q > 1 else contextlib.nullcontext()  # one token: transformers' `pack_gqa`
    with linear_scope(batch * q, facts.small_linears), heads:
        logits = _logits(model, facts, inputs, keep)
    return logits if logits.dtype == torch.float64 else logits.float()


def _logits(model: torch.nn.Module, facts: ModelFacts, inputs: Mapping[str, object], keep: torch.Tensor | None) -> torch.Tensor:
    """`forward_logits`' pass, its logits in the model's dtype: the head W @ h^T, or the model's own."""
    batch, q = inputs["input_ids"].shape
    rows = batch * (q if keep is None else keep.shape[0])
    if facts.own_head and 2 <= rows <= HEAD_ROWS:
        none = torch.zeros(0, dtype=torch.long, device=inputs["input_ids"].device)
        hidden = model(**inputs, output_hidden_states=True, logits_to_keep=none).hidden_states[-1]  # (B, Q, D), after the last norm
        hidden = hidden if keep is None else hidden[:, keep]  # (B, k, D)
        head = model.get_output_embeddings()
        logits = (head.weight @ hidden.reshape(rows, -1).T).T  # (B k, V), a transposed view
        logits = (logits if head.bias is None else logits + head.bias).reshape(batch, rows // batch, -1)
    else:
        kept = {"logits_to_keep": keep} if keep is not None and facts.keeps_logits else {}
        logits = model(**inputs, **kept).logits
        logits = logits if keep is None or facts.keeps_logits else logits[:, keep]
    return logits


def stack_caches(cache: DynamicCache, rows: Sequence[DynamicCache | None]) -> None:
    """Fill an empty `cache` with the single-row caches `rows`, in order: each layer's (1, H_kv, T_b, D)
    keys/values zero-padded to the longest T and stacked into (B, H_kv, T, D). A row of None holds
    nothing (T_b = 0); when every row is None the cache stays empty."""
    filled = [row for row in rows if row is not None]
    if not filled:
        return
    for i in range(len(filled[0].layers)):
        like = {name: getattr(filled[0].layers[i], name) for name in ("keys", "values")}
        entries = [[like[name][:, :, :0] if row is None else getattr(row.layers[i], name) for row in rows] for name in like]
        longest = max(t.shape[-2] for t in entries[0])
        keys, values = (torch.cat([torch.nn.functional.pad(t, (0, 0, 0, longest - t.shape[-2])) for t in ts]) for ts in entries)
        cache.update(keys, values, i)


def move_row_slots(cache: DynamicCache, src: torch.Tensor, dst: torch.Tensor) -> None:
    """Copy each batch row b's keys/values at slots ``src[b]`` to slots ``dst[b]``, every layer, nothing read back.

    Every entry is read before any is written. A row's targets must be distinct, and distinct
    from its other moves' targets (`ladref.batched.cache.ragged_commit_plan` makes them so).

    Args:
        src: (B, K) long slot indices on the cache's device, one row per batch row.
        dst: (B, K) long, where each of them goes.
    """
    rows = torch.arange(src.shape[0], device=src.device)[:, None]
    for layer in cache.layers:
        for name in ("keys", "values"):
            full = getattr(layer, name)  # (B, H_kv, T, D)
            full[rows, :, dst] = full[rows, :, src]  # (B, K, H_kv, D)


def trim_cache(cache: DynamicCache, length: int, rows: torch.Tensor | None = None) -> None:
    """Keep the first `length` slots of every layer, and only the batch rows `rows` (None: all)."""
    for layer in cache.layers:
        if layer.keys is None:  # nothing cached yet (every prompt a single token)
            continue
        layer.keys, layer.values = layer.keys[..., :length, :], layer.values[..., :length, :]
        if rows is not None:
            layer.batch_select_indices(rows.to(layer.keys.device))


def new_static_cache(model: torch.nn.Module, max_length: int) -> StaticCache:
    """A `StaticCache` of `max_length` slots for `model` (its buffers are allocated by the first forward)."""
    return StaticCache(config=model.config, max_cache_len=max_length)


def static_cache_ready(cache: StaticCache) -> bool:
    """Whether the cache's key/value buffers exist (a first forward allocates them)."""
    return all(layer.is_initialized for layer in cache.layers)


def guard_static_cache(cache: StaticCache) -> None:
    """Make every compiled graph that holds this cache's buffers check, at each call, that they are its own.

    transformers marks a `StaticCache`'s keys, values and length counters as static addresses
    *without* a guard. Under Inductor's freezing (``torch._inductor.config.freezing`` with grad
    disabled), Dynamo installs every static tensor into the graph as a constant attribute, so a
    frozen graph traced with one cache holds that cache's buffers, and with no guard on them it is
    silently reused for any other cache of the same shapes: it reads and writes the first cache
    (wrong tokens), and advances its length counter, which nobody resets, until a write runs
    past the cache (``index out of bounds`` inside the generated kernel). Marking the buffers
    *guarded* adds an identity check: another cache gets a graph of its own. Call it after the
    buffers exist (`static_cache_ready`).
    """
    for layer in cache.layers:
        for buffer in (layer.keys, layer.values, layer.cumulative_length):
            torch._dynamo.mark_static_address(buffer, guard=True)


def static_cache_buffers(cache: StaticCache) -> dict[str, torch.Tensor]:
    """Every layer's key/value buffers and length counter by name (``k0``, ``v0``, ``n0``, ...), the
    tensors themselves: what an exported step registers and a loaded one is bound to."""
    buffers = {}
    for i, layer in enumerate(cache.layers):
        buffers.update({f"k{i}": layer.keys, f"v{i}": layer.values, f"n{i}": layer.cumulative_length})
    return buffers


def set_static_length(cache: StaticCache, length: torch.Tensor) -> None:
    """Set every layer's length counter, where its next forward writes its keys/values.

    transformers' `StaticLayer.update` writes a step's q keys/values at slots
    ``cumulative_length .. cumulative_length + q - 1`` (it ignores ``cache_position``).
    """
    for layer in cache.layers:
        layer.cumulative_length.copy_(length)


def gather_static_slots(cache: StaticCache, src: torch.Tensor, dst: torch.Tensor) -> None:
    """Copy every layer's keys/values at slots `src` to slots `dst`, in place ((k,) each)."""
    for layer in cache.layers:
        layer.keys.index_copy_(2, dst, layer.keys.index_select(2, src))
        layer.values.index_copy_(2, dst, layer.values.index_select(2, src))


def pack_static_cache(cache: StaticCache) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """Move every layer's keys, values and length counter into three blocks, (L, ...) each, every
    layer's buffers becoming views of its own slice (same shapes, contiguous): a commit then moves
    the slots of all L layers in two gathers (`gather_block_slots`) instead of two per layer. None,
    and nothing moved, when the layers' buffers differ in shape (e.g. sliding-window layers).

    Call once, when the buffers exist (`static_cache_ready`) and before anything holds them: a
    compiled graph or a loaded package keeps the addresses it was given.
    """
    layers = cache.layers
    if len({(tuple(layer.keys.shape), tuple(layer.values.shape)) for layer in layers}) != 1:
        return None
    keys, values = (torch.stack([getattr(layer, name) for layer in layers]) for name in ("keys", "values"))
    with torch.inference_mode(False):  # counters stay normal tensors, as transformers makes them: a reset sets them outside
        lengths = torch.stack([layer.cumulative_length for layer in layers])
        for i, layer in enumerate(layers):
            layer.keys, layer.values, layer.cumulative_length = keys[i], values[i], lengths[i]
    return keys, values, lengths


def gather_block_slots(blocks: tuple[torch.Tensor, torch.Tensor, torch.Tensor], src: torch.Tensor, dst: torch.Tensor,
                       length: torch.Tensor) -> None:
    """`gather_static_slots` then `set_static_length` over a cache packed by `pack_static_cache`, every layer at once."""
    keys, values, lengths = blocks  # (L, B, H, M, D), (L, B, H, M, D), (L,)
    for block in (keys, values):
        block.index_copy_(3, dst, block.index_select(3, src))
    lengths.copy_(length)


def static_forward(model: torch.nn.Module, cache: StaticCache, input_ids: torch.Tensor, position_ids: torch.Tensor,
                   mask: torch.Tensor, cache_position: torch.Tensor, last: int = 0) -> torch.Tensor:
    """One forward pass over a static cache, writing the step's keys/values into it.

    Args:
        model: the model whose layers `cache` holds.
        cache: the static KV cache of M slots.
        input_ids: (q,) token ids.
        position_ids: (q,) absolute positions.
        mask: (1, 1, q, n) additive mask over the cache's first n <= M slots (`ladref.masks.static_additive`;
            n < M only inside `shared_kv_scope`, which cuts the keys to it).
        cache_position: (q,) the slots the step's keys/values are written to.
        last: compute the logits of the last `last` positions only (0: all q; 1: a prompt prefill).

    Returns:
        (q, V) logits in the model's dtype, or (last, V).
    """
    params = inspect.signature(model.forward).parameters
    kwargs = {"logits_to_keep": last} if last and "logits_to_keep" in params else {}
    kwargs[cache_arg(model, params) or "past_key_values"] = cache
    if "cache_position" in params:  # gone from transformers 5.24 on
        kwargs["cache_position"] = cache_position
    out = model(input_ids=input_ids[None], position_ids=position_ids[None], attention_mask=mask, use_cache=True, **kwargs)
    return out.logits[0, -last:] if last else out.logits[0]


def fill_static_cache(cache: StaticCache, stacked: DynamicCache, rows: int, like: DynamicCache) -> int:
    """Allocate a batch's static buffers, (B, H_kv, M, D) a layer (at the first call), and copy a stacked cache's T slots into the first T.

    Args:
        cache: a fresh `StaticCache` (`new_static_cache`) of M slots.
        stacked: the rows' prompts' keys/values, (B, H_kv, T, D) a layer (`stack_caches`), or empty.
        rows: B.
        like: any cache of the model holding one entry a layer: its head counts and sizes shape the buffers.

    Returns:
        T, the slots filled (0 for an empty `stacked`).
    """
    filled = 0
    for i, layer in enumerate(cache.layers):
        if not layer.is_initialized:  # once: later calls write into the same buffers (a captured graph holds them)
            shape = like.layers[i]
            layer.lazy_initialization(shape.keys.expand(rows, -1, -1, -1), shape.values.expand(rows, -1, -1, -1))
        if i < len(stacked.layers) and stacked.layers[i].keys is not None:
            keys, values = stacked.layers[i].keys, stacked.layers[i].values
            filled = keys.shape[-2]
            layer.keys[:, :, :filled].copy_(keys)
            layer.values[:, :, :filled].copy_(values)
    return filled


def compact_static_rows(cache: StaticCache, order: torch.Tensor) -> None:
    """Reorder each batch row's slots in place: row b's slot j takes its slot ``order[b, j]`` ((B, M) long), every layer."""
    for layer in cache.layers:
        for full in (layer.keys, layer.values):  # (B, H_kv, M, D)
            index = order[:, None, :, None].expand(-1, full.shape[1], -1, full.shape[3])
            full.copy_(full.gather(2, index))
