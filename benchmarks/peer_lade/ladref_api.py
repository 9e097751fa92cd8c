"""Every ladref name the peer comparison uses, imported in this one place."""

from __future__ import annotations

from ladref import DraftTree, LookaheadConfig, LookaheadWindow, greedy_decode, lookahead_decode
from ladref.bench.agreement import first_divergence
from ladref.bench.datasets import DATASET_ALIASES, canonical_dataset, encode_prompts, load_prompts
from ladref.masks import build_step_inputs
from ladref.models import default_gguf_path, load_default_model
from ladref.sources.ngram_pool import NGramPool
from ladref.results import DecodeStats
from ladref.runner import ModelRunner
from ladref.verify import Verdict

__all__ = [
    "DATASET_ALIASES", "DecodeStats", "DraftTree", "LookaheadConfig", "LookaheadWindow", "ModelRunner", "NGramPool", "Verdict",
    "build_step_inputs", "canonical_dataset", "default_gguf_path", "encode_prompts", "first_divergence", "greedy_decode",
    "load_default_model", "load_prompts", "lookahead_decode",
]
