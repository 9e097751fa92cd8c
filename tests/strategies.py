"""Tiny random models built from config, and hypothesis strategies shared by the tests.

Models are float64 so that every decoder's argmax chain is exactly reproducible, and small
(vocabulary 8..32) so that greedy text repeats and the n-gram pool actually gets hits.
"""

from __future__ import annotations

from functools import lru_cache

import torch
from hypothesis import strategies as st
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from ladref import LookaheadConfig

ARCHITECTURES = ("llama", "qwen2", "gpt2")


def build_tiny(arch: str, vocab: int, seed: int, attn: str = "sdpa", width: int = 32) -> torch.nn.Module:
    """A 2-layer, width-32 (or `width`) random causal LM of family `arch`, float64, in eval mode."""
    common = dict(vocab_size=vocab, bos_token_id=0, eos_token_id=None, pad_token_id=0)
    if arch == "llama":
        config = LlamaConfig(hidden_size=width, intermediate_size=2 * width, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, max_position_embeddings=512, **common)
        cls = LlamaForCausalLM
    elif arch == "qwen2":
        config = Qwen2Config(hidden_size=width, intermediate_size=2 * width, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, max_position_embeddings=512, use_sliding_window=False, **common)
        cls = Qwen2ForCausalLM
    elif arch == "gpt2":
        config = GPT2Config(n_embd=width, n_layer=2, n_head=4, n_positions=512, **common)
        cls = GPT2LMHeadModel
    else:
        raise ValueError(f"unknown architecture {arch!r}")
    config._attn_implementation = attn
    torch.manual_seed(seed)
    return cls(config).to(torch.float64).eval()


@lru_cache(maxsize=32)
def tiny_model(arch: str = "llama", vocab: int = 16, seed: int = 0, attn: str = "sdpa") -> torch.nn.Module:
    """Cached `build_tiny` (models are read-only in the tests)."""
    return build_tiny(arch, vocab, seed, attn)


def hf_greedy(model: torch.nn.Module, prompt: list[int], max_new_tokens: int, eos: int | None = None) -> list[int]:
    """The trusted oracle: transformers' `generate(do_sample=False)`, prompt removed."""
    ids = torch.tensor([prompt])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens, do_sample=False,
                         eos_token_id=eos, pad_token_id=0)
    return out[0, len(prompt):].tolist()


architectures = st.sampled_from(ARCHITECTURES)
vocab_sizes = st.sampled_from((8, 16, 32))
seeds = st.integers(0, 3)


@st.composite
def prompts(draw, vocab: int, min_size: int = 1, max_size: int = 12) -> list[int]:
    """A prompt, often periodic (as real text is repetitive) so that prompt seeding matters."""
    if draw(st.booleans()):
        return draw(st.lists(st.integers(0, vocab - 1), min_size=min_size, max_size=max_size))
    period = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=4))
    length = draw(st.integers(min_size, max_size))
    return (period * length)[:length]


@st.composite
def lookahead_configs(draw) -> LookaheadConfig:
    """N in 2..6, W in 1..8, G in 0..8, with or without prompt seeding."""
    return LookaheadConfig(
        window_size=draw(st.integers(1, 8)),
        ngram_size=draw(st.integers(2, 6)),
        max_candidates=draw(st.integers(0, 8)),
        pool_from_prompt=draw(st.booleans()),
    )
