"""The tiny random models the property tests draw from, and hypothesis strategies shared by the tests.

Models are float64 so that every decoder's argmax chain is exactly reproducible, and small
(vocabulary 8..32) so that greedy text repeats and the n-gram pool actually gets hits.
"""

from __future__ import annotations

from functools import lru_cache

import torch
from families import build_family
from hypothesis import strategies as st

from ladref import LookaheadConfig

ARCHITECTURES = ("llama", "qwen2", "gpt2")


def build_tiny(arch: str, vocab: int, seed: int, attn: str = "sdpa", width: int = 32) -> torch.nn.Module:
    """A 2-layer, width-32 (or `width`) random causal LM of family `arch`, float64 (`families.build_family`)."""
    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {arch!r}")
    return build_family(arch, vocab, seed, attn, width)


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
