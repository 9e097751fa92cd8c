"""ladref: a pure-PyTorch reference for Jacobi decoding and Lookahead Decoding.

    >>> from ladref import lookahead_decode, LookaheadConfig
    >>> result = lookahead_decode(model, input_ids, LookaheadConfig(window_size=4, ngram_size=4, max_candidates=4))
    >>> result.token_ids, result.stats.compression
"""

from .config import LookaheadConfig
from .datasets import load_prompts
from .generate import lookahead_generator
from .greedy import greedy_decode
from .jacobi import jacobi_decode
from .lookahead import lookahead_decode
from .models import chat_ids, default_device, load_default_model
from .plookup import prompt_lookup_decode
from .results import DecodeResult, DecodeStats
from .sampling import sample_decode

__all__ = [
    "DecodeResult",
    "DecodeStats",
    "LookaheadConfig",
    "chat_ids",
    "default_device",
    "greedy_decode",
    "jacobi_decode",
    "load_default_model",
    "load_prompts",
    "lookahead_decode",
    "lookahead_generator",
    "prompt_lookup_decode",
    "sample_decode",
]
__version__ = "0.1.0"
