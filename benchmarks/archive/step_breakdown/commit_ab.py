"""A/B in one process: the packed eager commit (new) against the per-layer compiled 64-slot commit (old).

A measurement script: the old commit is rebuilt here from `ladref.runner` primitives and set on each runner
(an instance attribute) for its turns; the library itself has only the new one. Its log: commit_ab.log.
"""
import time

import torch

torch.set_num_threads(2)
from ladref import load_default_model, CompiledAdaptiveDecoder
from ladref.bench.datasets import encode_prompts, load_prompts
from ladref.fast.compiling import compile_own
from ladref.results import DecodeStats
from ladref.runner import gather_static_slots, set_static_length

def old_static_commit(runner, src, dst, length):
    gather_static_slots(runner.cache, src, dst)
    set_static_length(runner.cache, length)

def make_old(runner):
    compiled = compile_own(old_static_commit, f"old_commit_{id(runner)}", "max-autotune", runner.device)
    @torch.inference_mode()
    def commit(past_len, accepted):
        k, slots = accepted.shape[0], runner.commit_slots
        padded = torch.cat([accepted.cpu(), accepted[-1:].cpu().expand(slots - k)])
        dst = (past_len + torch.arange(slots)).clamp_(max=runner.max_length - 1)
        compiled(runner, past_len + padded, dst, torch.tensor(past_len + k))
        runner.length = past_len + k
    return commit

model, tok = load_default_model()
dec = CompiledAdaptiveDecoder(model, max_lengths=(512, 1404), compile_dir="/tmp/aot3")
dec.warmup()
ids = encode_prompts(tok, load_prompts("specbench", 2))
olds = {id(r): make_old(r) for r in dec.runners}
t = time.perf_counter()
for r in dec.runners:  # compile the old commit once, outside the timing
    r.prefill(torch.arange(20), DecodeStats()); olds[id(r)](10, torch.tensor([0, 1])); r.reset()
print(f"old commit compiled in {time.perf_counter() - t:.1f} s", flush=True)
outs = {}
for rnd in range(2):
    for variant in ("new", "old"):
        for r in dec.runners:
            if variant == "old":
                r.commit = olds[id(r)]
            elif "commit" in r.__dict__:
                del r.commit
        t = time.perf_counter()
        res = [dec(p, 128) for p in ids]
        s = time.perf_counter() - t
        toks = sum(len(x.token_ids) for x in res); steps = sum(x.stats.steps for x in res)
        outs.setdefault(variant, [x.token_ids for x in res])
        print(f"round {rnd} {variant}: {s:.1f} s, {toks} tokens, {1e3 * s / steps:.1f} ms/step, same as new: {[x.token_ids for x in res] == outs['new']}", flush=True)
