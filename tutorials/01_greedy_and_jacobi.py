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
# # 1. Greedy decoding as a fixed point; Jacobi decoding step by step
#
# Greedy decoding produces one token per forward pass: `y_i = argmax p(y_i | y_<i, x)`.
# Written out for m tokens this is a system of m equations in m unknowns, and the greedy
# output is its solution. **Jacobi decoding** solves the system the way Jacobi's method solves
# a linear system: guess every unknown, re-evaluate all equations in one parallel pass, repeat.
#
# This notebook uses the embedded SmolLM2-135M-Instruct model on the CPU.

# %%
import warnings

# transformers imports tqdm, which warns "IProgress not found" in a notebook without ipywidgets
# (its progress bars then fall back to plain text). Harmless here, so that one warning is hidden.
warnings.filterwarnings("ignore", message="IProgress not found")

# %%

import matplotlib.pyplot as plt
import torch

from ladref import chat_ids, greedy_decode, load_default_model
from ladref.sources.jacobi import converged_prefix, jacobi_iteration, next_guess
from ladref.results import DecodeStats
from ladref.runner import ModelRunner

model, tokenizer = load_default_model(device="cpu")  # quiet; progress=True shows the loading bars
prompt = chat_ids(tokenizer, "List the days of the week.")[0]
print(f"prompt: {prompt.shape[0]} tokens")


def show(ids):
    """Tokens as short readable strings."""
    return [repr(tokenizer.decode([int(t)]))[1:-1] for t in ids]


# %% [markdown]
# ## Greedy decoding: one token per pass

# %%
M = 24
greedy = greedy_decode(model, prompt, M, tokenizer=tokenizer)
print(greedy.text)
print(f"{greedy.stats.new_tokens} tokens in {greedy.stats.steps} forward passes (S = {greedy.stats.compression:.2f})")

# %% [markdown]
# ## The greedy output is a fixed point
#
# Feed the prompt **and** the whole greedy output through the model in a single causal pass.
# The argmax at every position reproduces the next greedy token: all m equations hold at once.
# Any other sequence would change under this map; the greedy output is its fixed point.

# %%
full = torch.cat([prompt, torch.tensor(greedy.token_ids)])
with torch.inference_mode():
    logits = model(full[None]).logits[0]
predicted = logits[prompt.shape[0] - 1 : -1].argmax(-1)
print("one pass reproduces greedy:", predicted.tolist() == greedy.token_ids)

# %% [markdown]
# ## Jacobi decoding, one iteration at a time
#
# We keep a block of m guessed tokens. One iteration feeds `[current, g_1 .. g_m]` and reads the
# argmax after each token, `o_0 .. o_m`. `o_0` is exact (its context is all known). Guess `g_i`
# has **converged** when it equals `o_{i-1}` and all guesses before it converged; then `o_i` is
# exact too. We commit the converged guesses plus the next exact prediction, and the remaining
# predictions become the next guess. This is the loop of `ladref.decoders.methods.jacobi_decode`, unrolled.

# %%
m = 8
runner, stats = ModelRunner(model), DecodeStats()
current = runner.prefill(prompt, stats)
guess = prompt[-m:].clone()  # initial guess: the prompt's tail, as jacobi_decode does
committed, history = [], []
with torch.inference_mode():
    while len(committed) < M:
        past = runner.past_len
        preds = jacobi_iteration(runner, current, guess)  # (m+1,)
        k = converged_prefix(guess, preds)
        history.append((len(committed), guess.clone(), preds.clone(), k))
        committed += preds[: k + 1].tolist()
        runner.commit(past, torch.arange(k + 1))
        current, guess = int(preds[k]), next_guess(preds, k, m)
committed = committed[:M]
print("Jacobi output == greedy output:", committed == greedy.token_ids)
assert committed == greedy.token_ids
print(f"{len(history)} iterations for {M} tokens")

# %% [markdown]
# Each row below is one iteration: the guess that went in, and which of its tokens had
# converged. `*` marks a converged guess, `+` the exact prediction committed after them.

# %%
for it, (start, g, preds, k) in enumerate(history[:10]):
    cells = [f"{'*' if i < k else ' '}{t}" for i, t in enumerate(show(g))]
    print(f"iter {it:2d} @ {start:2d}: committed {k + 1}  +{show(preds[k:k+1])[0]!r:12}  guess: {' | '.join(cells)}")

# %% [markdown]
# The same thing as a picture: for each iteration (row) and each guessed position (column),
# green cells hold a guess that was already the correct greedy token **at that position**, and
# the black line marks how many of them could be committed.

# %%
grid = torch.zeros(len(history), m)
for it, (start, g, preds, k) in enumerate(history):
    target = greedy.token_ids[start : start + m]  # g_i should be the (start + i)-th greedy token
    for i, t in enumerate(g.tolist()[: len(target)]):
        grid[it, i] = 1.0 if t == target[i] else 0.0
fig, ax = plt.subplots(figsize=(6, 0.3 * len(history) + 1))
ax.imshow(grid, cmap="Greens", vmin=0, vmax=1.5, aspect="auto")
for it, (_, _, _, k) in enumerate(history):
    ax.plot([k - 0.5, k - 0.5], [it - 0.5, it + 0.5], color="black", lw=2)
ax.set_xlabel("guessed position i (1..m)")
ax.set_ylabel("iteration")
ax.set_xticks(range(m), [str(i + 1) for i in range(m)])
ax.set_yticks(range(len(history)))
ax.set_title("correct guesses (green) and the converged prefix (left of the line)")
plt.show()

# %% [markdown]
# ## Why so few tokens settle
#
# A guess can only be committed when **every** guess before it is right, because its prediction
# was made from that prefix. Right tokens at the right position from a wrong prefix are rare:
# a language model continues its (wrong) context, so the later guesses keep shifting. Most
# iterations commit a single token, and Jacobi decoding is barely better than greedy while
# feeding m+1 tokens per pass. (`ladref.jacobi_decode(model, prompt, M, block_size=m)` runs
# exactly the loop above and reports the same S in `result.stats.compression`.)

# %%
per_iter = [k + 1 for *_, k in history]
print("tokens committed per iteration:", per_iter)
print(f"S = {M / len(history):.2f} tokens per pass, with {m + 1} tokens fed per pass (greedy: S = 1, 1 token fed)")

# %% [markdown]
# Lookahead decoding (next tutorials) keeps the parallel Jacobi iterations but stops requiring
# tokens to land at the right position: it collects the n-grams the iterations produce and
# verifies them wherever they fit.
#
# ## Exercises
#
# 1. Change the block size m (1, 4, 16). How do the number of iterations and the tokens fed
#    per pass change? What is the total number of tokens fed to the model for each m?
# 2. Initialise the guess with a constant token (e.g. the EOS id) instead of the prompt's tail.
#    Does it change the output? The number of iterations?
# 3. Try a prompt with a very predictable answer ("Count from 1 to 30, separated by commas.").
#    Do more tokens settle per iteration? Why?
# 4. Prove that Jacobi decoding commits at least one token per iteration and always produces
#    greedy's output.
