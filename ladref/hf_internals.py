"""transformers' internals, in one place: the KV caches, the attention a pass runs, the static-cache steps.

The only module of the library that imports transformers' caches and attention registry (the
few others that import transformers at all take a public name each: tests/test_layout.py holds the
list and checks it): a cache whose layers have room to spare (`RoomyLayer`,
`new_cache`), the attention with key/value heads shared by their query heads (`shared_kv_scope`),
a batch's cache operations (`stack_caches`, `move_row_slots`, `trim_cache`) and the static-cache
primitives that `ladref.fast.static.StaticRunner` and `ladref.batched.static` build their
constant-shape steps from (`new_static_cache` ... `compact_static_rows`, `static_forward`). The
rest of ladref sees runners (`ladref.runner`), facts (`ladref.facts`) and these functions.

Facts this module relies on (transformers 5.x):
  * a 4-D float mask of shape (1, 1, q, past + q) is passed to attention as-is; a *bool* 4-D mask
    is silently misread by eager attention, so we always send 0 / finfo.min floats;
  * forward() takes the KV cache as `cache` (5.24 on) or `past_key_values` (before): `cache_arg`;
  * `DynamicCache` layers hold `keys` / `values` tensors of shape (B, H_kv, T, D), and a
    `DynamicLayer` subclass may keep them as views of larger buffers (`RoomyLayer`);
  * `logits_to_keep` accepts a 1-D tensor of positions on the common decoder-only models (an
    empty one computes no logits), and ``hidden_states[-1]`` of ``output_hidden_states=True`` is
    the last hidden state after the final norm, the head's input (`ladref.head.forward_logits`);
  * a `StaticCache` layer writes a step at its `cumulative_length` counter, and marks its
    buffers as *unguarded* static addresses (see `guard_static_cache` for why that matters);
  * SDPA attention copies each key/value head once per query head (`repeat_kv`) for a pass of
    several tokens with a mask, and a `StaticCache` layer hands it all its slots; an attention
    function registered with `AttentionInterface` and named in ``config._attn_implementation``
    replaces it (`shared_kv_attention`, `shared_kv_scope`: heads shared, slots cut to the mask's).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Mapping, Sequence
from typing import Protocol

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, DynamicCache, DynamicLayer, StaticCache
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

# the KV cache argument's name: `cache` from transformers 5.24 on, `past_key_values` before
CACHE_ARGS = ("cache", "past_key_values")
SPARE = 64  # the fewest free slots a `RoomyLayer` grows by (else an eighth of its length)
SHARED_KV = "ladref_shared_kv_sdpa"  # the name `shared_kv_scope` registers `shared_kv_attention` under


def cache_arg(model: torch.nn.Module, params: Mapping[str, object] | None = None) -> str | None:
    """The name `model.forward` takes its KV cache under (`cache` or `past_key_values`), or None;
    `params`: forward()'s signature parameters, when the caller has read them already."""
    params = inspect.signature(model.forward).parameters if params is None else params
    return next((name for name in CACHE_ARGS if name in params), None)


def unrollable_layers(config: object) -> list[str]:
    """The kinds of cache layer (class names, sorted) a model of `config` has besides full attention's
    `DynamicLayer`: sliding-window or recurrent layers, whose cache cannot be rolled back
    (`ladref.facts.check_model` refuses them)."""
    kinds = {type(layer).__name__ for layer in DynamicCache(config=config).layers}
    return sorted(kinds - {DynamicLayer.__name__})


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
    `ladref.facts.check_model`)."""
    cache = DynamicCache(config=config)
    cache.layers = [RoomyLayer() for _ in cache.layers]
    if cache.layer_class_to_replicate is not None:  # a config that names no layers: they are made at the first pass
        cache.layer_class_to_replicate = RoomyLayer
    return cache


class KVSharing(Protocol):
    """What `shared_kv_scope` reads of a model's facts: a `ladref.facts.ModelFacts` (which imports this module)."""

    @property
    def shared_kv(self) -> bool:
        """Whether the model attends with its key/value heads shared (`ladref.facts.ModelFacts.shared_kv`)."""


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
def shared_kv_scope(model: torch.nn.Module, facts: KVSharing):
    """Within: `model` attends with `shared_kv_attention` where ``facts.shared_kv``; any other model
    attends as it is. The config's attention implementation (which its sub-configs follow) is set
    on entering and restored on leaving (attribute writes, no walk over the modules), so every
    static step, and every eager pass of several tokens (`ladref.head.forward_logits`), runs inside
    it. A pass sent no mask (a prompt's prefill, a causal step) gets the mask transformers makes for
    SDPA: for an implementation without a mask function of its own it would make none, and SDPA's
    causal flag over a longer cache would cut the keys to the queries'."""
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
