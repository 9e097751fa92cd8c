# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 2. The n-gram pool: harvesting the Jacobi trajectory, seeding from the prompt
#
# Jacobi iterations rarely put a right token at the right position, but they do produce
# plausible **n-grams**: short runs of tokens, each predicted by the model from the ones before
# it. Lookahead decoding keeps them in a pool (`ladref.sources.ngram_pool.NGramPool`) keyed by their
# first token, and later proposes them as candidates whenever the current token matches a key.

# %%
import warnings

# transformers imports tqdm, which warns "IProgress not found" in a notebook without ipywidgets
# (its progress bars then fall back to plain text). Harmless here, so that one warning is hidden.
warnings.filterwarnings("ignore", message="IProgress not found")

# %%

import torch

from ladref import DraftTree, LookaheadConfig, LookaheadProposer, chat_ids, load_default_model, lookahead_decode
from ladref.sources.ngram_pool import NGramPool
from ladref.results import DecodeStats
from ladref.runner import ModelRunner
from ladref.step import draft_step

model, tokenizer = load_default_model(device="cpu")  # quiet; progress=True shows the loading bars


def show(ids):
    """Tokens as short readable strings."""
    return [repr(tokenizer.decode([int(t)]))[1:-1] for t in ids]


# %% [markdown]
# ## The pool on its own
#
# An n-gram of N tokens is stored as key = its first token, value = the other N-1 tokens (a
# *continuation*). Each key keeps at most `capacity` continuations, most recently used first;
# a full key forgets its least recently used one.

# %%
pool = NGramPool(ngram_size=3, capacity=2)
for ngram in ([1, 2, 3], [1, 4, 5], [1, 2, 3], [1, 6, 7]):
    pool.add(ngram)
    print(f"add {ngram} -> candidates for key 1: {pool.candidates(1, limit=5).tolist()}")

# %% [markdown]
# `[1, 2, 3]` was refreshed by its second insertion, so adding `[1, 6, 7]` evicted
# `[1, 4, 5]`, the least recently used.
#
# ## Seeding from the prompt
#
# With `LookaheadConfig(pool_from_prompt=True)` (the default), every n-gram of the prompt goes
# into the pool before decoding starts (`seed_from_tokens`). Answers often repeat their question.

# %%
text = "Rewrite this sentence in the past tense: the cat sits on the mat and the dog sleeps on the rug."
prompt = chat_ids(tokenizer, text)[0]
seeded = NGramPool(ngram_size=4, capacity=4)
seeded.seed_from_tokens(prompt.tolist())
print(f"{prompt.shape[0]} prompt tokens -> {len(seeded)} 4-grams in the pool")
the = tokenizer.encode(" the")[0]
for cand in seeded.candidates(the, limit=4):
    print(f"  ' the' -> {show(cand)}")

# %% [markdown]
# ## Harvesting the Jacobi trajectory
#
# The lookahead branch keeps the last N-1 Jacobi iterations of a W-token guess as a window of
# shape (N-1, W), each row one position to the right of the row above
# (`LookaheadProposer.window.grid`). One step predicts a new row; each **column** of
# `[window; new row]` then reads N tokens at consecutive positions, each the model's prediction
# after the ones above it: an n-gram. The step hands that (N, W) trajectory back in
# `StepOutcome.harvest`, the window slides by one row, and the proposer's `learn` adds the W
# column n-grams to its pool (`NGramPool.harvest`).
#
# We run the real combined step (`ladref.step.draft_step`) with an empty draft tree, so nothing
# is verified and each step yields one greedy token, starting from an empty pool, and print the
# window and the harvested n-grams. (The pool keeps `max(G, 1)` continuations per key unless
# `pool_capacity` is given; we give 8.)

# %%
config = LookaheadConfig(window_size=5, ngram_size=4, max_candidates=0, pool_from_prompt=False, pool_capacity=8)
proposer = LookaheadProposer(config)
proposer.begin(prompt.tolist())  # the window starts as the prompt's last (N-1)W tokens; the pool empty
runner = ModelRunner(model)
current = runner.prefill(prompt, DecodeStats())
with torch.inference_mode():
    for step in range(5):
        window = proposer.window.grid.clone()
        window[0, 0] = current  # the step replaces cell (0, 0) with the current token
        outcome = draft_step(runner, current, DraftTree.empty(), proposer.window)
        proposer.learn(outcome)  # adds the harvested columns to the pool
        new_row = proposer.window.grid[-1]
        print(f"step {step}: current {show([current])[0]!r}, accepted {show(outcome.tokens)}, {outcome.fed} tokens fed")
        for r in range(window.shape[0]):
            print(f"   window row {r}: {' | '.join(f'{t:>9}' for t in show(window[r]))}")
        print(f"   new row     : {' | '.join(f'{t:>9}' for t in show(new_row))}")
        if outcome.harvest is not None:  # harvesting starts once the window holds model outputs
            print("   harvested:", ["".join(show(col)) for col in outcome.harvest.t()])
        else:
            print("   (window still holds prompt tokens: nothing harvested yet)")
        current = outcome.tokens[-1]
print(f"pool size after 5 steps: {len(proposer.pool)} n-grams")

# %% [markdown]
# Early windows are made of prompt tokens cycled into place, so the first N-2 steps harvest
# nothing; afterwards every step adds W n-grams. Many are wrong for the current position but
# right *somewhere later*: that is what verification exploits.
#
# ## Does the pool pay off?
#
# Compare full lookahead decoding (verification on: up to G = 4 pool n-grams per step, merged
# into a draft tree) with and without prompt seeding on the prompt above. Both produce exactly
# greedy's tokens; S is tokens per step.

# %%
for from_prompt in (False, True):
    cfg = LookaheadConfig(window_size=4, ngram_size=4, max_candidates=4, pool_from_prompt=from_prompt)
    result = lookahead_decode(model, prompt, 32, config=cfg, tokenizer=tokenizer)
    print(f"pool_from_prompt={from_prompt}: {result.stats.steps} steps for {result.stats.new_tokens} tokens, "
          f"S = {result.stats.compression:.2f}")
print(result.text)

# %% [markdown]
# ## Exercises
#
# 1. Count how many harvested n-grams later appear, token for token, in the greedy output.
#    How does that fraction change with W and with N?
# 2. Implement an unbounded pool (the reference implementation's `GUESS_SET_SIZE = -1`). Does it
#    help S on this prompt? What does it cost at verification time?
# 3. The pool is keyed by one token. Sketch a pool keyed by the last two tokens. Which
#    candidates would it stop proposing, and why might that help or hurt?
# 4. Why must harvesting wait N-2 steps after the window is initialised from the prompt?
