"""What ladref needs to know of a model (`ModelFacts`), and the check that it can decode it (`check_model`).

Read once per call, before any forward pass: the vocabulary, device and dtype, the context, the
attention implementation, and how a pass computes its output head and linear layers on a CPU
(`ladref.head.forward_logits`). What the check asks of transformers goes through
`ladref.hf_internals`.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, replace

import torch

from .hf_internals import cache_arg, unrollable_layers
from .kernels import check_attention_backend

SUPPORTED_ATTENTION = ("eager", "sdpa")
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# forward() arguments a step needs: the custom mask, explicit positions and a rollable KV cache
FORWARD_ARGS = ("attention_mask", "position_ids")
# how a pass computes the model's forward: ladref's measured CPU choices, or transformers' own (`forward_choice`)
FORWARD_KERNELS = ("auto", "transformers")
# model types whose logits are exactly their output head applied to the last hidden state (the last
# of ``hidden_states``), nothing in between (no scale, no soft-capping): the families of docs/models.md
PLAIN_HEADS = frozenset({"llama", "mistral", "qwen2", "qwen3", "gpt2", "gemma", "phi", "phi3", "olmo", "stablelm",
                         "gpt_neox", "opt"})


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
        own_head: whether a pass of several rows computes the output head itself
            (`ladref.head.forward_logits`): a float32 / float64 CPU model of a `PLAIN_HEADS` type that
            takes ``logits_to_keep``, its head a linear layer (where it was measured faster).
        small_linears: whether a pass of a few rows computes its linear layers as W @ x^T
            (`ladref.kernels.linear_scope`): a float32 / float64 CPU model (where it was measured faster).
        shared_kv: whether `ladref.hf_internals.shared_kv_scope` changes how it attends: a CPU model
            on SDPA attention with fewer key/value heads than query heads. Its passes of several
            tokens (`ladref.head.forward_logits`) and all its static steps attend with the heads
            shared, and a static step over the slots it uses only (`ladref.fast.static.StaticRunner.span`).
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
    if others := unrollable_layers(config):
        raise ValueError(
            f"{name} has {', '.join(others)} cache layers (sliding-window or "
            "recurrent attention), whose cache ladref cannot roll back; use a model with full attention"
        )
    if facts.dtype not in FLOAT_DTYPES:
        raise ValueError(f"{name} has {facts.dtype} weights; ladref needs float16, bfloat16, float32 or float64 weights")
    return facts


def check_kernels(kernels: object) -> str:
    """`kernels` if it is one of `FORWARD_KERNELS`, else a TypeError / ValueError naming them."""
    if not isinstance(kernels, str):
        raise TypeError(f"kernels must be a str, one of {FORWARD_KERNELS}, got {type(kernels).__name__}")
    if kernels not in FORWARD_KERNELS:
        raise ValueError(f"unknown kernels {kernels!r}; choose one of {FORWARD_KERNELS}")
    return kernels


def forward_choice(model: object, options: Mapping[str, object]) -> tuple[ModelFacts, str]:
    """The checked model's facts and the SDPA kernel choice a call's ``kernels`` and ``attention_backend`` ask for.

    ``kernels="auto"`` (default) keeps ladref's measured CPU choices (`ModelFacts.own_head`,
    ``small_linears``, ``shared_kv``: `ladref.head.forward_logits`) and ``attention_backend`` as given.
    ``kernels="transformers"`` runs the model's forward exactly as transformers runs it: none of those
    choices, and torch's own SDPA dispatch (``attention_backend`` "auto" becomes "torch").

    Raises:
        TypeError, ValueError: an unknown ``kernels``, or ``kernels="transformers"`` with an SDPA kernel
            picked by ``attention_backend`` (transformers picks none); and what `check_model` refuses.
    """
    kernels, backend = check_kernels(options.get("kernels", "auto")), options.get("attention_backend", "auto")
    check_attention_backend(backend)
    facts = check_model(model)
    if kernels == "auto":
        return facts, backend
    if backend not in ("auto", "torch"):
        raise ValueError(f"kernels='transformers' runs the forward as transformers does, with torch's own SDPA dispatch; "
                         f"attention_backend={backend!r} picks a kernel: pass one or the other")
    return replace(facts, own_head=False, small_linears=False, shared_kv=False), "torch"
