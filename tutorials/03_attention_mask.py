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
# # 3. The attention mask
#
# One lookahead step sends **both** branches through the model in a single forward pass: the
# (N-1, W) lookahead window and g candidate n-grams. What keeps them from disturbing each other
# is the attention mask built by `ladref.masks`. Here we build it for the paper's Figure 5
# setting (N = 4, W = 5, two candidates), plot it, and check on a real (tiny, random) model that
# a token cannot see the other branch.

# %%
import warnings

# transformers imports tqdm, which warns "IProgress not found" in a notebook without ipywidgets
# (its progress bars then fall back to plain text). Harmless here, so that one warning is hidden.
warnings.filterwarnings("ignore", message="IProgress not found")

# %%
import matplotlib.pyplot as plt
import torch
from matplotlib.colors import ListedColormap
from transformers import LlamaConfig, LlamaForCausalLM

from ladref.masks import StepLayout, build_step_inputs, render
from ladref.runner import ModelRunner

# %% [markdown]
# ## Layout
#
# The step's input is `[window rows | candidates]`. Window cell (r, c) sits at flat index
# `r * W + c` and at position `p + r + c` (p = the current token's position); cell (0, 0) *is*
# the current token. Candidate g's token j sits after the window at position `p + 1 + j`.

# %%
W, N, g = 5, 4, 2
layout = StepLayout(window_size=W, ngram_size=N, num_candidates=g)
offsets = layout.position_offsets()
labels = [f"L{r}{c}" for r in range(N - 1) for c in range(W)] + [f"V{k}{j}" for k in range(g) for j in range(N - 1)]
print(f"q = (N-1)(W+g) = {layout.length} tokens: {layout.lookahead_len} in the lookahead branch, {g * (N - 1)} to verify")
print("relative positions:", offsets.tolist())

# %% [markdown]
# `L r c` is lookahead cell (r, c), `V k j` token j of candidate k. The mask as text
# (`#` = may attend; rows are queries, columns keys; the KV cache, visible to all, is not drawn):

# %%
allowed = layout.allowed()
print(render(allowed, labels))

# %% [markdown]
# ## Figure 5
#
# The same mask drawn like the paper's Figure 5: blue for the lookahead branch, orange for the
# verification branch, and the number in each visible cell is the key's relative position.

# %%
kind = torch.zeros_like(allowed, dtype=torch.float)
L = layout.lookahead_len
kind[:L][allowed[:L]] = 1.0
kind[L:][allowed[L:]] = 2.0
fig, ax = plt.subplots(figsize=(8, 8))
ax.imshow(kind, cmap=ListedColormap(["white", "#4c72b0", "#dd8452"]), vmin=0, vmax=2)
for i in range(layout.length):
    for j in range(layout.length):
        if allowed[i, j]:
            ax.text(j, i, str(int(offsets[j])), ha="center", va="center", fontsize=7, color="white")
ax.set_xticks(range(layout.length), [f"{lab}\n{int(o)}" for lab, o in zip(labels, offsets)], fontsize=6)
ax.set_yticks(range(layout.length), labels, fontsize=7)
ax.set_xticks([x - 0.5 for x in range(layout.length + 1)], minor=True)
ax.set_yticks([y - 0.5 for y in range(layout.length + 1)], minor=True)
ax.grid(which="minor", color="lightgrey", lw=0.5)
for edge in range(W, L, W):
    ax.axhline(edge - 0.5, color="grey", lw=0.8)
    ax.axvline(edge - 0.5, color="grey", lw=0.8)
ax.axhline(L - 0.5, color="black", lw=1.5)
ax.axvline(L - 0.5, color="black", lw=1.5)
ax.set_title(f"combined-step mask, N={N}, W={W}, {g} candidates (number = key's relative position)")
plt.show()

# %% [markdown]
# Reading the picture:
#
# * row 0 of the window is an ordinary causal block: cell (0, c) sees cells (0, 0..c);
# * cell (r >= 1, c) sees row 0 up to column c, then the cells above it in column c: positions
#   0, 1, ..., c, c+1, ..., c+r, exactly **one causal sequence**, the Jacobi trajectory that
#   produced it;
# * candidate token (k, j) sees the current token (column 0) and its own candidate up to j;
# * nothing in the lookahead block looks at a candidate, and no candidate looks at a window
#   cell other than the current token or at another candidate.

# %%
cand, look = slice(L, None), slice(1, L)
print("candidates see lookahead cells (other than the current token):", bool(allowed[cand, look].any()))
print("lookahead cells see candidates:", bool(allowed[:L, cand].any()))
first, second = slice(L, L + N - 1), slice(L + N - 1, None)
print("candidate 0 sees candidate 1:", bool(allowed[first, second].any()))
for i in range(layout.length):  # each query's visible positions form 0, 1, ..., its own position
    seen = sorted(offsets[allowed[i]].tolist())
    assert seen == list(range(int(offsets[i]) + 1)), labels[i]
print("every query sees exactly one token at each position 0 .. its own: one causal sequence")

# %% [markdown]
# ## On a real model: the branches cannot see each other
#
# A tiny random Llama in float64 (so comparisons are exact to rounding) runs the step. We then
# change the tokens of one branch and check that the other branch's logits do not move.

# %%
config = LlamaConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, max_position_embeddings=256, bos_token_id=0, eos_token_id=None, pad_token_id=0)
config._attn_implementation = "sdpa"
torch.manual_seed(0)
tiny = LlamaForCausalLM(config).to(torch.float64).eval()
context = torch.randint(0, 32, (7,))


def step_logits(window, candidates, current=5):
    """Logits of every token of a combined step over `context` (cached) + the step."""
    runner = ModelRunner(tiny)
    runner.forward(context)
    step = build_step_inputs(current, window, candidates, runner.past_len)
    return runner.forward(step.input_ids, step.position_ids, step.allowed)


window = torch.randint(0, 32, (N - 1, W))
candidates = torch.randint(0, 32, (g, N - 1))
base = step_logits(window, candidates)
other_candidates = step_logits(window, torch.randint(0, 32, (g, N - 1)))
other_window = step_logits(torch.randint(0, 32, (N - 1, W)), candidates)
print("new candidates -> lookahead logits unchanged:", torch.allclose(base[:L], other_candidates[:L], atol=1e-12))
print("new window     -> candidate logits unchanged:", torch.allclose(base[L:], other_window[L:], atol=1e-12))
print("(sanity) new window -> lookahead logits changed:", not torch.allclose(base[1:L], other_window[1:L]))

# %% [markdown]
# And each query computes what an ordinary causal pass over its own sequence would: take cell
# (2, 3), whose sequence is row 0 up to column 3 followed by cells (1, 3) and (2, 3).

# %%
r, c = 2, 3
ids = window.clone()
ids[0, 0] = 5
sequence = torch.cat([ids[0, : c + 1], ids[1 : r + 1, c]])
with torch.inference_mode():
    plain = tiny(torch.cat([context, sequence])[None]).logits[0, -1]
print("cell (2, 3) logits == plain causal pass:", torch.allclose(base[r * W + c], plain, atol=1e-10))

# %% [markdown]
# ## Exercises
#
# 1. Draw the mask for N = 2. What is left of the lookahead branch, and what algorithm does it
#    run? (Compare with tutorial 1.)
# 2. The mask hides entries, but the attention kernel still computes the full (q, c + q) score
#    matrix. How many of the q * q in-step entries are actually visible, as a function of
#    W, N, g? (`ladref.bench.flops` charges for all of them.)
# 3. Break the mask on purpose (e.g. let candidate tokens see row 0) and run
#    `python -m pytest -m task1_1` against your change: which property fails first?
# 4. Why are the positions `p + r + c` and not simply consecutive flat indices? What would go
#    wrong with rotary position embeddings otherwise?
