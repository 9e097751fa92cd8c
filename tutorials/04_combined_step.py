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
# # 4. Verification and the combined step, observed from outside
#
# `ladref.lookahead.lookahead_step` does five things around one forward pass:
#
# 1. fetch up to G candidates for the current token from the pool;
# 2. build ids, positions and mask for `[window | candidates]` and run the model;
# 3. lookahead branch: harvest n-grams, slide the window;
# 4. verification branch: accept the longest candidate prefix greedy decoding agrees with,
#    plus the model's own next token;
# 5. keep in the KV cache only the current token and the accepted candidate tokens.
#
# We run real steps on SmolLM2 until one accepts a candidate, then run that step once more and
# compare everything it touches before and after: the pool, the window, the KV cache and the
# output. Verification itself is then traced on a small example. (Writing the step is the last
# course task, so this notebook watches it rather than re-implementing it.)

# %%
import warnings

# transformers imports tqdm, which warns "IProgress not found" in a notebook without ipywidgets
# (its progress bars then fall back to plain text). Harmless here, so that one warning is hidden.
warnings.filterwarnings("ignore", message="IProgress not found")

# %%
import copy

import torch

from ladref import LookaheadConfig, chat_ids, greedy_decode, load_default_model
from ladref.lookahead import LookaheadState, lookahead_step
from ladref.masks import build_step_inputs
from ladref.results import DecodeStats
from ladref.runner import ModelRunner
from ladref.verify import verify_greedy

model, tokenizer = load_default_model(device="cpu")  # quiet; progress=True shows the loading bars


def show(ids):
    """Tokens as short readable strings."""
    return [repr(tokenizer.decode([int(t)]))[1:-1] for t in ids]


text = "Rewrite this sentence in the past tense: the cat sits on the mat and the dog sleeps on the rug."
prompt = chat_ids(tokenizer, text)[0]
greedy = greedy_decode(model, prompt, 40).token_ids
print(tokenizer.decode(greedy))

# %% [markdown]
# ## Run until a step accepts a candidate
#
# Before each step we save the cache and the state, so that we can run the interesting step again.

# %%
config = LookaheadConfig(window_size=4, ngram_size=4, max_candidates=4)
W, N, G = config.window_size, config.ngram_size, config.max_candidates
runner = ModelRunner(model)
state = LookaheadState.start(prompt, config)
current = runner.prefill(prompt, DecodeStats())
done = []
with torch.inference_mode():
    for step in range(30):
        saved = (copy.deepcopy(runner.cache), copy.deepcopy(state), current)
        accepted, width = lookahead_step(runner, state, current, config)
        print(f"step {step:2d}: {width:2d} tokens fed, accepted {show(accepted)}")
        if len(accepted) > 1:
            break
        done += accepted
        current = accepted[-1]
runner.cache, state, current = copy.deepcopy(saved)  # rewind to just before that step (keep `saved` intact)
print(f"\nback before step {step}: current token {show([current])[0]!r}, {runner.past_len} tokens in the KV cache")

# %% [markdown]
# ## Before the step: candidates and the step's layout
#
# The pool holds n-grams that start with the current token; the step verifies up to G of them.
# `build_step_inputs` (tutorial 3) lays the window and the candidates out in one input.

# %%
candidates = state.pool.candidates(current, G)  # (g, N-1)
for i, cand in enumerate(candidates):
    print(f"candidate {i}: {show([current])} + {show(cand)}")
layout = build_step_inputs(current, state.window, candidates, runner.past_len).layout
print(f"\nq = (N-1)(W+g) = {layout.length} tokens fed: {layout.lookahead_len} window cells, "
      f"{layout.length - layout.lookahead_len} candidate tokens")
print("window rows before the step:")
for row in state.window:
    print("   ", show(row))

# %% [markdown]
# ## Run the step once more and compare

# %%
before = copy.deepcopy(state)
past = runner.past_len
with torch.inference_mode():
    accepted, width = lookahead_step(runner, state, current, config)
position = len(done)
print("accepted:", show(accepted), "| greedy's next tokens:", show(greedy[position : position + len(accepted)]))
assert accepted == greedy[position : position + len(accepted)]

# %% [markdown]
# **The window slid by one row.** The old rows 1.. moved up, and the new bottom row is the
# model's prediction at the old bottom row: one Jacobi iteration (tutorial 1).

# %%
print("window rows after the step:")
for row in state.window:
    print("   ", show(row))
print("old rows 1.. moved up:", torch.equal(state.window[:-1], before.window[1:]))
print("steps run:", before.steps, "->", state.steps)

# %% [markdown]
# **The pool learned the window's columns.** Column c of the old window (with the current token
# in cell (0, 0)) plus the new row, read top to bottom, is an n-gram at consecutive positions.
# Harvesting starts once every row below the first came from the model (after N-2 steps).

# %%
print(f"harvesting on: {before.steps} steps run before this one, N-2 = {N - 2}")
old = before.window.clone()
old[0, 0] = current
for c, column in enumerate(torch.cat([old, state.window[-1:]]).t().tolist()):
    print(f"column {c}: {''.join(show(column))!r:40} in the pool before: {column in before.pool}, after: {column in state.pool}")

# %% [markdown]
# **The KV cache kept the current token and the accepted candidate tokens**, k + 1 entries for
# k matched tokens. The model's own last token is not in the cache yet: it is the next step's
# current token. The kept keys and values were computed in the step's single pass, under the
# right positions and mask, so they equal those of a plain causal pass over the accepted sequence.

# %%
print(f"cache: {past} -> {runner.past_len} tokens (1 current + {len(accepted) - 1} accepted candidate tokens)")
reference = ModelRunner(model)
with torch.inference_mode():
    reference.forward(torch.cat([prompt, torch.tensor(done + accepted[:-1])]))
same = all(torch.allclose(a.keys, b.keys, atol=1e-4) and torch.allclose(a.values, b.values, atol=1e-4)
           for a, b in zip(runner.cache.layers, reference.cache.layers))
print("cache == that of a plain causal pass over the accepted sequence:", same)
assert same and runner.past_len == past + len(accepted)

# %% [markdown]
# ## Verification, on a small example
#
# For candidate tokens c_1..c_{N-1} the model's argmax after the current token is y_1 and after
# c_j it is y_{j+1}. c_j is accepted while c_1..c_j all equal y_1..y_j; then y_{k+1} is appended.
# Here the "model" is a table: greedy decoding from the current token gives 5, 6, 2, ...

# %%
candidates = torch.tensor([[5, 1, 1], [5, 6, 1], [9, 6, 7]])  # (g, N-1) = (3, 3)
first_pred = torch.tensor(5)  # y_1, the argmax after the current token
cand_preds = torch.tensor([[6, 0, 0], [6, 2, 0], [6, 7, 8]])  # argmax after each candidate token
for i, (cand, preds) in enumerate(zip(candidates.tolist(), cand_preds.tolist())):
    targets = [int(first_pred)] + preds
    marks = ["=" if c == y else "x" for c, y in zip(cand, targets)]
    print(f"candidate {i}: c = {cand}  y = {targets}  {' '.join(marks)}")
verdict = verify_greedy(candidates, first_pred, cand_preds)
print(f"\nbest candidate {verdict.best}, {verdict.matched} tokens matched, accepted {verdict.tokens.tolist()}")

# %% [markdown]
# ## Exercises
#
# 1. In the step above, which flat step indices did the KV cache keep? Work them out from
#    `layout.candidate_index()` and the number of accepted tokens.
# 2. Verification keeps the *longest* matching prefix. Could two candidates tie? Does it
#    matter which one wins (think about the KV cache and the output)?
# 3. Suppose a step forgot to commit (the cache kept all q entries). Decode a few more steps in
#    your head: what goes wrong, and would the output still equal greedy's?
# 4. With G = 0 the step still feeds (N-1)W tokens and returns one token. Why is it still
#    exactly one greedy step?
