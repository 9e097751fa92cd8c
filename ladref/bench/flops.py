"""FLOPs accounting for greedy, Jacobi and lookahead decoding, from the model's shape.

The estimate counts the matrix multiplications of one forward pass, the way
`torch.utils.flop_counter.FlopCounterMode` does (2 FLOPs per multiply-add; norms, activations,
softmax, biases and the embedding lookup are ignored). A pass over ``q`` new tokens, with ``c``
tokens already in the KV cache and ``k`` positions whose logits are computed, costs::

    F(q, c, k) = 2 * P * q                      # the layers' weight matrices (P parameters)
               + 4 * L * A * q * (c + q)        # Q K^T and softmax(.) V over the full context
               + 2 * d * V * k                  # the LM head, only for the kept logits

with L layers, hidden size d, attention width A = heads * head_dim, vocabulary V. The attention
term is for the full (q, c + q) score matrix: ladref's custom mask hides entries but the kernel
still computes them (and grouped-query K/V are broadcast to all heads before the products).

Per step of decoding, with context ``c``:
  * greedy: ``F(1, c, 1)`` for 1 token;
  * Jacobi with block m: ``F(m + 1, c, m + 1)`` for 1..m+1 tokens;
  * lookahead with W, N and g <= G candidates: ``F((N-1)(W+g), c, 1 + W + g(N-1))`` for 1..N tokens.
Every decoder's first pass also runs the prompt's first p tokens, all but its last (greedy: the
whole prompt, as transformers' generate() does; a drafting decoder: before its first step's tokens,
`Runner.prefill` with ``defer``): `decode_flops` books ``F(p, 0, 0)`` of it as the prefill and the
rest as step 1.
Lookahead therefore spends about (N-1)(W+G) times greedy's FLOPs per step to save a factor S
of steps: its FLOPs ratio to greedy is roughly (N-1)(W+G) / S (the paper's "extra FLOPs").
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..config import LookaheadConfig, check_int
from ..results import DecodeStats

FLOPS_METHODS = ("greedy", "jacobi", "lookahead", "plookup", "tree")
"""Decoders whose steps the FLOPs model can replay (`ladref.bench.measure` benchmarks these and more)."""


@dataclass(frozen=True)
class ModelShape:
    """What the FLOPs formula needs to know about a model.

    Attributes:
        layers: L, transformer blocks.
        hidden_size: d, the residual width (input of the LM head).
        attention_width: A = attention heads * head dim (width of Q K^T and of softmax(.) V).
        vocab_size: V, LM-head outputs.
        layer_params: P, parameters of the weight matrices inside the blocks (2-D weights of
            linear / Conv1D layers; norms, biases, embeddings and the LM head excluded).
    """

    layers: int
    hidden_size: int
    attention_width: int
    vocab_size: int
    layer_params: int

    def __post_init__(self) -> None:
        for name in ("layers", "hidden_size", "attention_width", "vocab_size", "layer_params"):
            check_int(f"ModelShape.{name}", getattr(self, name), 1)

    @classmethod
    def from_model(cls, model: torch.nn.Module) -> "ModelShape":
        """Read L, d, A, V from ``model.config`` and count P from the model's blocks.

        Args:
            model: a transformers decoder-only causal LM (Llama, Qwen2, GPT-2, ...).
        """
        if not isinstance(model, torch.nn.Module) or not hasattr(model, "config"):
            raise TypeError(f"model must be a transformers causal LM, got {type(model).__name__}")
        config = model.config.get_text_config()
        layers = _first(config, "num_hidden_layers", "n_layer")
        hidden = _first(config, "hidden_size", "n_embd")
        heads = _first(config, "num_attention_heads", "n_head")
        head_dim = getattr(config, "head_dim", None) or hidden // heads
        vocab = model.get_output_embeddings().weight.shape[0]
        return cls(layers, hidden, heads * head_dim, vocab, _layer_matrix_params(model))


def _first(config: object, *names: str) -> int:
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return int(value)
    raise ValueError(f"model config has none of {names}; cannot estimate FLOPs")


def _layer_matrix_params(model: torch.nn.Module) -> int:
    """Parameters of 2-D weights other than the input embeddings and the LM head."""
    skip = {id(model.get_input_embeddings().weight), id(model.get_output_embeddings().weight)}
    skip |= {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}  # e.g. GPT-2 positions
    return sum(p.numel() for p in model.parameters() if p.dim() == 2 and id(p) not in skip)


def forward_flops(shape: ModelShape, new_tokens: int, context: int, logits: int | None = None) -> int:
    """F(q, c, k): FLOPs of one forward pass (matmuls only, 2 per multiply-add).

    Args:
        shape: the model's `ModelShape`.
        new_tokens: q >= 1, tokens fed in this pass.
        context: c >= 0, tokens already in the KV cache.
        logits: k, positions whose LM-head logits are computed; default q.

    Returns:
        2*P*q + 4*L*A*q*(c+q) + 2*d*V*k.
    """
    logits = new_tokens if logits is None else logits
    for name, value, low in (("new_tokens", new_tokens, 1), ("context", context, 0), ("logits", logits, 0)):
        check_int(name, value, low)
    q, c = new_tokens, context
    weights = 2 * shape.layer_params * q
    attention = 4 * shape.layers * shape.attention_width * q * (c + q)
    head = 2 * shape.hidden_size * shape.vocab_size * logits
    return weights + attention + head


def lookahead_step_shape(config: LookaheadConfig, candidates: int | None = None) -> tuple[int, int]:
    """(q, k) of one lookahead step: tokens fed and logits kept, for g candidates (default G)."""
    W, N = config.window_size, config.ngram_size
    g = config.max_candidates if candidates is None else candidates
    return (N - 1) * (W + g), 1 + W + g * (N - 1)


def step_flops(shape: ModelShape, method: str, context: int, config: LookaheadConfig | None = None,
               block_size: int = 8, candidates: int | None = None) -> int:
    """FLOPs of one decoding step of `method` at context length c (worst case g = G for lookahead).

    Args:
        shape: the model's `ModelShape`.
        method: "greedy", "plookup" (estimated as greedy's step), "jacobi" or "lookahead".
        context: c, tokens in the KV cache before the step.
        config: W, N, G for "lookahead" (default `LookaheadConfig()`).
        block_size: m for "jacobi".
        candidates: g for "lookahead"; default G.
    """
    if method in ("greedy", "plookup"):
        return forward_flops(shape, 1, context, 1)
    if method == "jacobi":
        return forward_flops(shape, block_size + 1, context, block_size + 1)
    if method == "lookahead":
        q, k = lookahead_step_shape(LookaheadConfig() if config is None else config, candidates)
        return forward_flops(shape, q, context, k)
    raise ValueError(f"method must be one of {FLOPS_METHODS}, got {method!r}")


def flops_ratio(shape: ModelShape, config: LookaheadConfig, compression: float, context: int) -> float:
    """Predicted lookahead / greedy FLOPs per generated token: F_lookahead(c) / (S * F_greedy(c)).

    Args:
        shape: the model's `ModelShape`.
        config: W, N, G (every step charged for G candidates, an upper bound).
        compression: S, tokens per lookahead step (measured, >= 1).
        context: c, a typical context length.
    """
    if not compression >= 1:
        raise ValueError(f"compression S must be >= 1, got {compression!r}")
    return step_flops(shape, "lookahead", context, config) / (compression * step_flops(shape, "greedy", context))


@dataclass(frozen=True)
class FlopsReport:
    """FLOPs of one decoding call.

    Attributes:
        prefill: FLOPs of the prompt pass (all prompt tokens but the last, one logit kept).
        per_step: FLOPs of each decoding step, in order.
    """

    prefill: int
    per_step: tuple[int, ...]

    @property
    def decode(self) -> int:
        """FLOPs of the decoding steps (prefill excluded)."""
        return sum(self.per_step)

    @property
    def total(self) -> int:
        return self.prefill + self.decode


def decode_flops(shape: ModelShape, stats: DecodeStats, method: str, config: LookaheadConfig | None = None) -> FlopsReport:
    """Replay a call's `DecodeStats` through the formula, step by step.

    The context of step i is the prefill plus every token accepted before it; its width q is
    ``stats.forward_tokens_per_step[i]`` (so a lookahead step with g < G candidates is charged
    for g). "plookup" steps are charged as q-token passes with all q logits, since transformers'
    prompt lookup verifies q-1 drafted tokens and reads every logit; so are "tree" steps (native
    prompt lookup, Token Recycling, adaptive decoding: every fed token's logits are read).
    Step 1 is charged its share of a pass that also ran the prompt (every drafting decoder defers
    its prefill, `ladref.runner.Runner.prefill`).

    Args:
        shape: the model's `ModelShape`.
        stats: the `DecodeStats` of a greedy / jacobi / lookahead / plookup / tree call.
        method: which decoder produced `stats` (decides the logits kept per step).
        config: the W, N, G used, for "lookahead".
    """
    if method not in FLOPS_METHODS:
        raise ValueError(f"method must be one of {FLOPS_METHODS}, got {method!r}")
    if method == "lookahead" and config is None:
        raise ValueError("decode_flops needs the LookaheadConfig of a lookahead call")
    context, per_step = stats.prefill_tokens, []
    apart = method == "plookup"  # transformers' prompt lookup: the prompt's pass books one logit row
    prefill = forward_flops(shape, context, 0, int(apart)) if context else 0
    for index, (accepted, q) in enumerate(zip(stats.accepted_per_step, stats.forward_tokens_per_step)):
        if method == "lookahead":  # the current token, the window's newest row (when fed) and the draft tree
            fed_window = stats.window_tokens_per_step[index] if stats.window_tokens_per_step else q - 1
            drafts = stats.draft_tokens_per_step[index] if stats.draft_tokens_per_step else q - (config.ngram_size - 1) * config.window_size
            k = 1 + (config.window_size if fed_window else 0) + drafts
        else:
            k = q if method in ("jacobi", "plookup", "tree") else 1
        if index == 0 and not apart:  # the first pass also ran the prompt: this step's share of it
            per_step.append(forward_flops(shape, context + q, 0, k) - prefill)
        else:
            per_step.append(forward_flops(shape, q, context, k))
        context += accepted
    return FlopsReport(prefill, tuple(per_step))


def measure_forward_flops(model: torch.nn.Module, new_tokens: int, context: int, logits: int | None = None) -> int:
    """Count one forward pass's FLOPs with `torch.utils.flop_counter.FlopCounterMode`.

    Fills the KV cache with `context` arbitrary tokens (not counted), then counts a pass over
    `new_tokens` more with `logits` logits kept (default all). Use an eager-attention model:
    fused SDPA kernels may not be counted on every device. The pass computes its linear layers as
    the model's modules do (`F.linear`), outside `ladref.kernels.linear_scope`.

    Returns:
        The counted FLOPs, to compare with `forward_flops`.
    """
    from torch.utils.flop_counter import FlopCounterMode

    from ..facts import check_model
    from ..runner import ModelRunner

    runner = ModelRunner(model, facts=replace(check_model(model), small_linears=False))  # the model's own F.linear
    vocab = model.get_input_embeddings().num_embeddings
    with torch.inference_mode():
        if context:
            runner.forward(torch.arange(context) % vocab)
        keep = None if logits is None else torch.arange(logits)
        with FlopCounterMode(display=False) as counter:
            runner.forward(torch.arange(new_tokens) % vocab, keep=keep)
    return int(counter.get_total_flops())
