"""A forward pass's logits (`forward_logits`, a batch's `batch_forward`); on a CPU, the head as W @ h^T.

On a CPU, the output head of a pass of several rows is computed as W @ h^T: CPU BLAS takes
``h @ W^T`` with few rows as one matrix-vector product per row, each reading the whole head, so a
pass keeping several rows of a model whose logits are its head applied to its last hidden state
(`ladref.facts.PLAIN_HEADS`) asks the model for that hidden state and computes the head itself. A
pass of several tokens attends with key/value heads shared by their query heads where the model's
facts say so (`ladref.hf_internals.shared_kv_scope`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

import torch

from .facts import ModelFacts
from .hf_internals import DynamicCache, cache_arg, shared_kv_scope
from .kernels import linear_scope

HEAD_ROWS = 256  # the most rows a pass computes the head for as W @ h^T (measured faster up to here on a CPU)


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
    row, a greedy step's, keeps the model's own head and torch's own linear layers.

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
