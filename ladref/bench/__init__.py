"""What you run rather than read: benchmarks, auto-tuning, FLOPs, datasets, the demo and the
prompt-lookup baseline. It builds on the core (`ladref`); the core never imports it.

    python -m ladref demo                      # greedy vs lookahead on the embedded model
    python -m ladref bench --dataset gsm8k     # the benchmark (ladref.bench.benchmark)

Modules: `cli` (the ``python -m ladref`` dispatcher), `demo` (with `demo_rounds`, its timing, and
`demo_verdict`, what it concludes), `benchmark` (the bench command),
`measure` (run decoders interleaved), `report` (tables and files), `autotune`, `scaling`,
`flops`, `agreement` (outputs against generate and greedy), `hf` (transformers' generate and prompt
lookup as a peer decoder), `datasets` (HumanEval, MT-bench, GSM8K and Spec-Bench prompts, offline),
`leaderboard` (Spec-Bench's layout), `context` (speed against prompt length), `cost` (the cost
curve and surface), `load` (speculation under load: batches of every size, with `engines`, the
serving engines' rules for drafting under load, and `load_report`), `multi` (requests in order,
memories kept across them), `figures` (the figures' shared frame) and `runinfo`.
"""

from .datasets import DATASETS, Prompt, encode_prompts, load_prompts
from .hf import generate_decode, hf_prompt_lookup_decode

__all__ = ["DATASETS", "Prompt", "encode_prompts", "generate_decode", "load_prompts", "hf_prompt_lookup_decode"]
