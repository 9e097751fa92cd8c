"""The one module that touches transformers internals.

Everything model-specific lives here: the forward pass with a custom 4-D additive mask and
explicit position ids, and the KV-cache commit that keeps an accepted verification branch by
gathering its keys/values. The rest of ladref only sees `ModelRunner`.

Facts this module relies on (transformers 5.x):
  * a 4-D float mask of shape (1, 1, q, past + q) is passed to attention as-is; a *bool* 4-D mask
    is silently misread by eager attention, so we always send 0 / finfo.min floats;
  * `DynamicCache` layers hold `keys` / `values` tensors of shape (B, H_kv, T, D);
  * `logits_to_keep` accepts a 1-D tensor of positions on the common decoder-only models.
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache, DynamicLayer

from .masks import to_additive

SUPPORTED_ATTENTION = ("eager", "sdpa")
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# forward() arguments a step needs: the custom mask, explicit positions and a rollable KV cache
FORWARD_ARGS = ("attention_mask", "position_ids", "past_key_values")


def check_model(model: object) -> None:
    """Raise a clear error if `model` cannot run ladref's custom-mask forward passes.

    Checked before any forward pass: a decoder-only `torch.nn.Module` with a config; a forward
    taking a 4-D mask, position ids and a KV cache (recurrent models such as Mamba do not); eager
    or SDPA attention (flash-attention kernels ignore custom masks); full-attention KV layers only
    (a sliding-window or linear-attention cache cannot be rolled back); floating-point weights.
    """
    if not isinstance(model, torch.nn.Module) or not hasattr(model, "config"):
        raise TypeError(f"model must be a transformers causal LM (torch.nn.Module with .config), got {type(model).__name__}")
    name, config = type(model).__name__, model.config
    if getattr(config, "is_encoder_decoder", False):
        raise ValueError(f"{name} is an encoder-decoder model; ladref decodes decoder-only causal LMs")
    params = inspect.signature(model.forward).parameters
    missing = [arg for arg in FORWARD_ARGS if arg not in params]
    if missing:
        raise ValueError(
            f"{name} (model_type {getattr(config, 'model_type', '?')!r}) is not an attention model with a KV cache: "
            f"its forward() lacks {', '.join(missing)}; recurrent / state-space models cannot run lookahead steps"
        )
    impl = getattr(config, "_attn_implementation", None)
    if impl not in SUPPORTED_ATTENTION:
        raise ValueError(
            f"attention implementation {impl!r} cannot take ladref's custom 4-D attention mask; "
            f"load the model with attn_implementation='sdpa' or 'eager'"
        )
    kinds = {type(layer).__name__ for layer in DynamicCache(config=config).layers}
    if kinds - {DynamicLayer.__name__}:
        raise ValueError(
            f"{name} has {', '.join(sorted(kinds - {DynamicLayer.__name__}))} cache layers (sliding-window or "
            "recurrent attention), whose cache ladref cannot roll back; use a model with full attention"
        )
    dtype = next(model.parameters()).dtype
    if dtype not in FLOAT_DTYPES:
        raise ValueError(f"{name} has {dtype} weights; ladref needs float16, bfloat16, float32 or float64 weights")


class ModelRunner:
    """A model plus the KV cache of one decoding call (nothing survives the call).

    Args:
        model: a decoder-only transformers model using eager or SDPA attention.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        check_model(model)
        self.model = model
        self.cache = DynamicCache(config=model.config)
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        self._logits_to_keep = "logits_to_keep" in inspect.signature(model.forward).parameters

    @property
    def past_len(self) -> int:
        """Tokens held in the KV cache."""
        return self.cache.get_seq_length()

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
            allowed: (q, q) bool mask within the step; None means causal.
            keep: (k,) indices of the positions whose logits are needed; None keeps all q.

        Returns:
            (k, V) logits in float32 (float64 if the model is float64).
        """
        past = self.past_len
        q = input_ids.shape[0]
        if position_ids is None:
            position_ids = torch.arange(past, past + q, device=self.device)
        if allowed is None:
            allowed = torch.ones(q, q, dtype=torch.bool).tril_()
        kwargs = {}
        if keep is not None and self._logits_to_keep:
            kwargs["logits_to_keep"] = keep.to(self.device)
        out = self.model(
            input_ids=input_ids.to(self.device)[None],
            position_ids=position_ids.to(self.device)[None],
            attention_mask=to_additive(allowed.to(self.device), past, self.dtype),
            past_key_values=self.cache,
            use_cache=True,
            **kwargs,
        )
        logits = out.logits[0]
        if keep is not None and not self._logits_to_keep:
            logits = logits[keep.to(self.device)]
        return logits if logits.dtype == torch.float64 else logits.float()

    def commit(self, past_len: int, keep: torch.Tensor) -> None:
        """Keep the cache's first `past_len` entries plus the last step's entries `keep`.

        Verification branches are not a suffix of the step, so the accepted branch's K/V are
        gathered into place, then the cache is cut behind them.

        Args:
            past_len: cache length before the last step.
            keep: (k,) sorted step-relative indices of the tokens that became committed.
        """
        src = past_len + keep.to(self.device)
        for layer in self.cache.layers:
            for name in ("keys", "values"):
                full = getattr(layer, name)
                kept = full.index_select(-2, src)  # (B, H_kv, k, D)
                full = full[..., : past_len + keep.shape[0], :]
                full[..., past_len:, :] = kept
                setattr(layer, name, full)
