"""A/B in one process: the output head of a pass of several rows computed as W @ h^T by ladref (new)
against the model's own head, ``F.linear`` (old).

A measurement script: the old way is chosen by emptying `ladref.runner.PLAIN_HEADS` for its turns
(read whenever a runner reads its model's facts); the library itself has no switch. Step widths
are timed through `ModelRunner` turn by turn; the decoders run over 12 Spec-Bench prompts (2 per
task, 32 new tokens), each with its own cost curve (a `CostCache` keys curves by the runner, whose
details name the head). Its log: head_ab.log. `linears_ab.py` runs the same turns for another change.
"""
import statistics
import time

import torch

torch.set_num_threads(2)
import ladref.runner as runner_module
from ladref import adaptive_decode, greedy_decode, load_default_model
from ladref.sources.prompt_lookup import prompt_lookup_decode
from ladref.bench.datasets import encode_prompts, load_prompts
from ladref.fast.cost_cache import CostCache
from ladref.results import DecodeStats
from ladref.runner import ModelRunner

VARIANTS = {"new": runner_module.PLAIN_HEADS, "old": frozenset()}
model, tok = load_default_model()


def use(variant: str) -> None:
    runner_module.PLAIN_HEADS = VARIANTS[variant]


def widths_ab(use, kv: int = 512, widths=(1, 2, 3, 4, 6, 8, 16, 32, 64), rounds: int = 8) -> None:
    """Steps of q tokens through `ModelRunner`, each variant (`use(name)` turns it on) in turn: `use` is
    called when a variant's runner is built and again before each of its passes, for a switch read
    at every pass (``ladref.kernels.SMALL_ROWS``) as well as one read when a runner is built."""
    runners = {}
    for variant in ("new", "old"):
        use(variant)
        runners[variant] = ModelRunner(model)
        runners[variant].prefill(torch.arange(kv + 1) % 1000 + 5, DecodeStats())
    times = {}
    for rnd in range(rounds):
        for q in widths:
            for variant in (("new", "old") if rnd % 2 else ("old", "new")):
                r, ids = runners[variant], torch.arange(q) + 100
                use(variant)
                start = time.perf_counter()
                r.forward(ids, None, torch.ones(q, q, dtype=torch.bool).tril_())
                seconds = time.perf_counter() - start
                r.commit(kv, torch.zeros(0, dtype=torch.long))
                if rnd:  # the first round warms up
                    times.setdefault((q, variant), []).append(seconds)
    print(f"one step of q tokens at KV {kv}, median of {rounds - 1} in turns (ms):")
    for q in widths:
        old, new = (1e3 * statistics.median(times[(q, v)]) for v in ("old", "new"))
        print(f"  q={q:3d}  old {old:6.1f}  new {new:6.1f}  new/old {new / old:.2f}")


def decoders_ab(use, rounds: int = 4, batches=(8,)) -> None:
    """Greedy, prompt lookup and adaptive over 12 Spec-Bench prompts, then batched greedy over the first
    `batches` of them, each variant in turn."""
    ids = [p[0] for p in encode_prompts(tok, load_prompts("specbench", 2))]
    cache, outs = CostCache(), {}
    for variant in ("new", "old"):  # each variant's cost curve, measured once, outside the timings
        use(variant)
        adaptive_decode(model, ids[0], 2, cache=cache)
    calls = {
        "greedy": lambda p: greedy_decode(model, p, 32),
        "prompt_lookup": lambda p: prompt_lookup_decode(model, p, 32),
        "adaptive": lambda p: adaptive_decode(model, p, 32, cache=cache),
    }
    for rnd in range(rounds):
        for variant in (("old", "new") if rnd % 2 == 0 else ("new", "old")):
            use(variant)
            for name, call in calls.items():
                start = time.perf_counter()
                results = [call(p) for p in ids]
                seconds = time.perf_counter() - start
                tokens, steps = sum(len(x.token_ids) for x in results), sum(x.stats.steps for x in results)
                outs.setdefault(name, [x.token_ids for x in results])
                print(f"round {rnd} {variant} {name:13s} {seconds:6.1f} s  {tokens / seconds:5.2f} tok/s  S {tokens / steps:.2f}  "
                      f"same tokens as the first run: {[x.token_ids for x in results] == outs[name]}", flush=True)
        for size in batches:
            for variant in (("old", "new") if rnd % 2 == 0 else ("new", "old")):
                use(variant)
                start = time.perf_counter()
                result = greedy_decode(model, ids[:size], 32)
                seconds = time.perf_counter() - start
                tokens = sum(len(t) for t in result.token_ids)
                same = result.token_ids == outs["greedy"][:size]
                print(f"round {rnd} {variant} greedy B={size}     {seconds:6.1f} s  {tokens / seconds:5.2f} tok/s  "
                      f"rows equal to batch-1 greedy: {same}", flush=True)
    use("new")


if __name__ == "__main__":
    widths_ab(use)
    decoders_ab(use)
