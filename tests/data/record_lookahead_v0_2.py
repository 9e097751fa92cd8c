"""(Run once, on ladref 0.2.0.) Record lookahead_decode's tokens and per-step statistics with ladref 0.2.0 (main 4b80847)."""
import json, random, sys
sys.path.insert(0, str(__import__("pathlib").Path(__file__).parents[1]))  # tests/
import torch
from strategies import build_tiny
from ladref import LookaheadConfig, lookahead_decode, jacobi_decode

torch.set_num_threads(1)
rng = random.Random(20261124)
cases = []
for i in range(80):
    arch = rng.choice(["llama", "qwen2", "gpt2"]); vocab = rng.choice([8, 16, 32]); seed = rng.randint(0, 3)
    if rng.random() < 0.5:
        prompt = [rng.randrange(vocab) for _ in range(rng.randint(1, 12))]
    else:
        period = [rng.randrange(vocab) for _ in range(rng.randint(1, 4))]
        n = rng.randint(1, 12); prompt = (period * n)[:n]
    cfg = dict(window_size=rng.randint(1, 8), ngram_size=rng.randint(2, 6), max_candidates=rng.randint(0, 8),
               pool_from_prompt=rng.random() < 0.5)
    eos = rng.choice([None, rng.randrange(vocab)])
    max_new = rng.randint(1, 40)
    sample = i % 4 == 3
    model = build_tiny(arch, vocab, seed)
    kw = dict(config=LookaheadConfig(**cfg), eos_token_id=[] if eos is None else eos)
    if sample:
        kw.update(do_sample=True, temperature=rng.choice([0.7, 1.0, 1.5]), generator=torch.Generator().manual_seed(i))
    r = lookahead_decode(model, prompt, max_new, **kw)
    block = rng.randint(1, 9)
    j = jacobi_decode(model, prompt, max_new, block_size=block, eos_token_id=kw["eos_token_id"])
    cases.append(dict(arch=arch, vocab=vocab, seed=seed, prompt=prompt, config=cfg, eos=eos, max_new_tokens=max_new,
                      sample=dict(temperature=kw["temperature"], seed=i) if sample else None,
                      tokens=r.token_ids, accepted_per_step=r.stats.accepted_per_step,
                      jacobi_block_size=block, jacobi_tokens=j.token_ids, jacobi_accepted_per_step=j.stats.accepted_per_step,
                      jacobi_forward_tokens_per_step=j.stats.forward_tokens_per_step))
json.dump({"recorded_with": "ladref 0.2.0 (git 4b80847), float64 tiny models from tests/strategies.build_tiny", "cases": cases},
          open(sys.argv[1], "w"), indent=0)
print(len(cases), sum(c["sample"] is not None for c in cases))
