"""The one factory of tiny random models, built from config (float64, eval mode, no downloads).

Every family of the model matrix of docs/models.md, the models ladref must refuse, and a peaky
model for the sampling tests. `tests/strategies.py` draws Llama, Qwen2 and GPT-2 from it.
"""

from __future__ import annotations

from functools import lru_cache

import torch
import transformers

SUPPORTED = ("llama", "mistral", "qwen2", "qwen3", "gpt2", "gemma", "phi", "phi3", "olmo", "stablelm", "gpt_neox", "opt")
# family -> why ladref refuses it
REFUSED = {
    "mamba": "recurrent (state-space) model without attention",
    "gemma2": "sliding-window attention layers",
    "mistral_sliding": "sliding-window attention layers",
    "flash_attention_2": "attention implementation that ignores 4-D masks",
}

CONTEXT = 512  # max_position_embeddings of every tiny model


def _config(family: str, vocab: int, width: int = 32) -> tuple[object, type]:
    """(config, model class) of a 2-layer model of `family` with hidden size `width`."""
    t = transformers
    common = dict(vocab_size=vocab, bos_token_id=0, eos_token_id=None, pad_token_id=0)
    attention = dict(hidden_size=width, intermediate_size=2 * width, num_hidden_layers=2, num_attention_heads=4,
                     max_position_embeddings=CONTEXT)
    gqa = dict(attention, num_key_value_heads=2)
    table = {
        "llama": lambda: (t.LlamaConfig(**gqa, **common), t.LlamaForCausalLM),
        "mistral": lambda: (t.MistralConfig(**gqa, sliding_window=None, **common), t.MistralForCausalLM),
        "mistral_sliding": lambda: (t.MistralConfig(**gqa, sliding_window=8, **common), t.MistralForCausalLM),
        "qwen2": lambda: (t.Qwen2Config(**gqa, use_sliding_window=False, **common), t.Qwen2ForCausalLM),
        "qwen3": lambda: (t.Qwen3Config(**gqa, head_dim=8, use_sliding_window=False, **common), t.Qwen3ForCausalLM),
        "gpt2": lambda: (t.GPT2Config(n_embd=width, n_layer=2, n_head=4, n_positions=CONTEXT, **common), t.GPT2LMHeadModel),
        "gemma": lambda: (t.GemmaConfig(**gqa, head_dim=8, **common), t.GemmaForCausalLM),
        "gemma2": lambda: (t.Gemma2Config(**gqa, head_dim=8, sliding_window=8, **common), t.Gemma2ForCausalLM),
        "phi": lambda: (t.PhiConfig(**attention, **common), t.PhiForCausalLM),
        "phi3": lambda: (t.Phi3Config(**gqa, sliding_window=None, **common), t.Phi3ForCausalLM),
        "olmo": lambda: (t.OlmoConfig(**gqa, **common), t.OlmoForCausalLM),
        "stablelm": lambda: (t.StableLmConfig(**gqa, **common), t.StableLmForCausalLM),
        "gpt_neox": lambda: (t.GPTNeoXConfig(**attention, **common), t.GPTNeoXForCausalLM),
        "opt": lambda: (t.OPTConfig(hidden_size=width, ffn_dim=2 * width, num_hidden_layers=2, num_attention_heads=4,
                                    word_embed_proj_dim=width, max_position_embeddings=CONTEXT, **common), t.OPTForCausalLM),
        "mamba": lambda: (t.MambaConfig(hidden_size=width, state_size=4, num_hidden_layers=2, **common), t.MambaForCausalLM),
    }
    if family not in table:
        raise ValueError(f"unknown family {family!r}")
    return table[family]()


def build_family(family: str, vocab: int = 16, seed: int = 0, attn: str = "sdpa", width: int = 32) -> torch.nn.Module:
    """A tiny random float64 causal LM of `family` (or of the refused configurations above)."""
    flash = family == "flash_attention_2"
    family = "llama" if flash else family
    config, cls = _config(family, vocab, width)
    config._attn_implementation = "eager" if family in ("mamba", "gemma2") else attn
    torch.manual_seed(seed)
    model = cls(config).to(torch.float64).eval()
    if flash:  # flash-attn is not installed here: only the configuration ladref must refuse
        model.config._attn_implementation = "flash_attention_2"
    return model


@lru_cache(maxsize=16)
def family_model(family: str, vocab: int = 16, seed: int = 0) -> torch.nn.Module:
    """Cached `build_family` (models are read-only in the tests)."""
    return build_family(family, vocab, seed)


@lru_cache(maxsize=4)
def peaky_model(vocab: int = 8, seed: int = 0, scale: float = 0.3) -> torch.nn.Module:
    """A tiny Llama whose next-token distributions are far from uniform (random init is nearly flat).

    The output embedding is redrawn with standard deviation `scale` so that probabilities range
    over orders of magnitude: a wrong accept rule then shows up clearly in the sampling tests.
    """
    model = build_family("llama", vocab, seed)
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        head = model.get_output_embeddings().weight
        head.copy_(torch.randn(head.shape, generator=generator, dtype=head.dtype) * scale)
    return model
