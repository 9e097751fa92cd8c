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
# # 4. Verification and the combined step, traced by hand
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
# We run a few real steps on SmolLM2 until one accepts a candidate, then replay that step by
# hand, watching the KV cache before and after.

# %%
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm in a notebook without ipywidgets

# %%
import contextlib
import copy
import io

import torch

from ladref import LookaheadConfig, chat_ids, greedy_decode, load_default_model
from ladref.lookahead import LookaheadState, lookahead_step
from ladref.masks import build_step_inputs
from ladref.results import DecodeStats
from ladref.runner import ModelRunner
from ladref.verify import verify_greedy

with contextlib.redirect_stderr(io.StringIO()):  # hide the GGUF loader's progress bars
    model, tokenizer = load_default_model(device="cpu")


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
# Before each step we save the cache and the state, so that we can replay the interesting step.

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
print(f"\nreplaying step {step}: current token {show([current])[0]!r}, {runner.past_len} tokens in the KV cache")

# %% [markdown]
# ## 1. Candidates from the pool

# %%
candidates = state.pool.candidates(current, G)  # (g, N-1)
for i, cand in enumerate(candidates):
    print(f"candidate {i}: {show([current])} + {show(cand)}")

# %% [markdown]
# ## 2. One forward pass over both branches
#
# We keep logits only where they are needed: the current token (y_1), the window's newest row
# (the next Jacobi iteration) and every candidate token.

# %%
past = runner.past_len
step_in = build_step_inputs(current, state.window, candidates, past)
layout = step_in.layout
last_row, cand_index = layout.last_row_index(), layout.candidate_index()
keep = torch.cat([torch.tensor([0]), last_row, cand_index.flatten()])
print(f"q = {layout.length} tokens at positions {step_in.position_ids.tolist()}")
print("cache before the pass :", tuple(runner.cache.layers[0].keys.shape), "(batch, kv heads, tokens, head dim)")
with torch.inference_mode():
    logits = runner.forward(step_in.input_ids, step_in.position_ids, step_in.allowed, keep)
print("cache after the pass  :", tuple(runner.cache.layers[0].keys.shape), f"= {past} + {layout.length}")
preds = logits.argmax(-1)
first, new_row, cand_preds = preds[0], preds[1 : W + 1], preds[W + 1 :].view_as(candidates)

# %% [markdown]
# ## 3. Lookahead branch: harvest and slide

# %%
window = step_in.input_ids[: layout.lookahead_len].view_as(state.window)
if state.steps >= N - 2:
    state.pool.harvest(window, new_row)
    print("harvested:", ["".join(show(col)) for col in torch.cat([window, new_row[None]]).t()])
state.window = torch.cat([window[1:], new_row[None]])
state.steps += 1

# %% [markdown]
# ## 4. Verification
#
# For candidate tokens c_1..c_{N-1} the model's argmax after the current token is y_1 and after
# c_j it is y_{j+1}. c_j is accepted while c_1..c_j all equal y_1..y_j; then y_{k+1} is appended.

# %%
for i, cand in enumerate(candidates):
    targets = [int(first)] + cand_preds[i].tolist()
    marks = ["=" if int(c) == y else "x" for c, y in zip(cand, targets)]
    print(f"candidate {i}: c = {show(cand)}\n             y = {show(targets)}   {' '.join(marks)}")
verdict = verify_greedy(candidates, first, cand_preds)
print(f"\nbest candidate {verdict.best}, {verdict.matched} tokens matched, accepted {show(verdict.tokens)}")
position = len(done)
print("accepted == greedy's next tokens:", verdict.tokens.tolist() == greedy[position : position + verdict.matched + 1])

# %% [markdown]
# ## 5. Commit the KV cache
#
# The cache now holds K/V for all q step tokens. Only the current token and the accepted
# candidate tokens belong to the sequence; their K/V were computed at the right positions under
# the right mask, so `ModelRunner.commit` gathers them into place and cuts the rest. The model's
# own last token is not in the cache yet: it is the next step's current token.

# %%
kept = torch.cat([torch.tensor([0]), cand_index[verdict.best, : verdict.matched]]) if verdict.best is not None else torch.tensor([0])
print("step indices kept:", kept.tolist())
with torch.inference_mode():  # the cache holds inference tensors: edit it in inference mode
    runner.commit(past, kept)
print("cache after commit    :", tuple(runner.cache.layers[0].keys.shape), f"= {past} + {kept.numel()}")

reference = ModelRunner(model)
with torch.inference_mode():
    reference.forward(torch.cat([prompt, torch.tensor(done + verdict.tokens[:-1].tolist())]))
same = all(torch.allclose(a.keys, b.keys, atol=1e-4) and torch.allclose(a.values, b.values, atol=1e-4)
           for a, b in zip(runner.cache.layers, reference.cache.layers))
print("cache == that of a plain causal pass over the accepted sequence:", same)

# %% [markdown]
# ## The library's step does exactly this
#
# Rewind once more and let `lookahead_step` run the same step.

# %%
runner.cache, state, current = copy.deepcopy(saved)
with torch.inference_mode():
    accepted, width = lookahead_step(runner, state, current, config)
print("lookahead_step accepted:", show(accepted), "| by hand:", show(verdict.tokens), "| equal:", accepted == verdict.tokens.tolist())
assert accepted == verdict.tokens.tolist() and same

# %% [markdown]
# ## Exercises
#
# 1. Which step indices would be kept if candidate 1 had matched all N-1 tokens? Check your
#    answer with `layout.candidate_index()`.
# 2. Verification keeps the *longest* matching prefix. Could two candidates tie? Does it
#    matter which one wins (think about the KV cache and the output)?
# 3. Remove step 5 (no commit, the cache keeps all q entries). Decode a few more steps: what
#    goes wrong, and would the output still equal greedy's?
# 4. With G = 0 the step still feeds (N-1)W tokens and returns one token. Why is it still
#    exactly one greedy step?
