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

import matplotlib.pyplot as plt
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
# *continuation*). Each key keeps at most `capacity` continuations, most recently added first
# (adding an n-gram that is already there moves it to the front); a full key forgets its least
# recently added one. Only adding refreshes an entry: reading a key's candidates, or having one
# of them accepted, leaves the order as it is.

# %%
pool = NGramPool(ngram_size=3, capacity=2)
for ngram in ([1, 2, 3], [1, 4, 5], [1, 2, 3], [1, 6, 7]):
    pool.add(ngram)
    print(f"add {ngram} -> candidates for key 1: {pool.candidates(1, limit=5).tolist()}")

# %% [markdown]
# `[1, 2, 3]` was moved to the front by its second insertion, so adding `[1, 6, 7]` evicted
# `[1, 4, 5]`, the least recently added.
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
# The step we run is the real combined step, `ladref.step.draft_step(runner, current, tree,
# window)`. Besides the window it takes a **draft tree** (`ladref.tree.DraftTree`): a trie of
# drafted paths, the guessed continuations of the current token that the step verifies, paths
# that share a prefix sharing its nodes. Tutorial 3 lays the tree out in the attention mask and
# tutorial 4 verifies it; here we pass an empty one (`DraftTree.empty()`), so nothing is
# verified and each step yields one greedy token. We start from an empty pool and print the
# window and the harvested n-grams of five steps. (The pool keeps `max(G, 1)` continuations per
# key unless `pool_capacity` is given; we give 8.)

# %%
config = LookaheadConfig(window_size=5, ngram_size=4, max_candidates=0, pool_from_prompt=False, pool_capacity=8)
proposer = LookaheadProposer(config)
proposer.begin(prompt.tolist())  # the window starts as the prompt's last (N-1)W tokens; the pool empty
runner = ModelRunner(model)
current = runner.prefill(prompt, DecodeStats())
trace = []  # (the window as fed, the new row, the harvest) of every step, for the figure below
with torch.inference_mode():
    for step in range(5):
        window = proposer.window.grid.clone()
        window[0, 0] = current  # the step replaces cell (0, 0) with the current token
        outcome = draft_step(runner, current, DraftTree.empty(), proposer.window)
        proposer.learn(outcome)  # adds the harvested columns to the pool
        new_row = proposer.window.grid[-1]
        trace.append((window, new_row.clone(), outcome.harvest))
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
# The last of these steps as a picture, drawn from the recorded state above. Left: the window
# the step fed, N-1 rows of past Jacobi iterations (oldest at the top) over W columns, with the
# current token in cell (0, 0), and below it the new row the step predicted; each cell shows its
# token and its position (p = the current token's position). Right: the harvest, one n-gram per
# column read top to bottom, stored in the pool under its first token.

# %%
def draw_harvest(window, new_row, harvest, title):
    """The fed window and the new row (left), the W column n-grams as pool entries (right)."""
    rows, width = window.shape
    grid = torch.cat([window, new_row[None]])
    colors = plt.cm.tab10.colors
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 3.8), gridspec_kw={"width_ratios": [1.4, 1]})
    for r in range(rows + 1):
        for c in range(width):
            face = "#f4a261" if r == rows else ("#8ecae6" if (r, c) != (0, 0) else "#adb5bd")
            left.add_patch(plt.Rectangle((c - 0.5, r - 0.5), 1, 1, facecolor=face, edgecolor="white", lw=2))
            left.text(c, r - 0.08, show([grid[r, c]])[0], ha="center", va="center", fontsize=9)
            left.text(c, r + 0.3, f"p+{r + c}", ha="center", va="center", fontsize=7, color="#555555")
    for c in range(width):  # one n-gram per column
        left.add_patch(plt.Rectangle((c - 0.45, -0.45), 0.9, rows + 0.9, fill=False, edgecolor=colors[c], lw=2))
    left.axhline(rows - 0.5, color="black", lw=1.5)
    left.set_xlim(-0.5, width - 0.5)
    left.set_ylim(rows + 0.5, -0.5)
    left.set_xticks(range(width), [f"column {c}" for c in range(width)], fontsize=8)
    names = {0: " (oldest)", rows - 1: " (newest)"}
    left.set_yticks(range(rows + 1), [f"iteration row {r}{names.get(r, '')}" for r in range(rows)]
                    + ["new row (predicted)"], fontsize=8)
    left.set_title(f"the window fed (N-1 = {rows} rows x W = {width} columns; grey: the current token) "
                   "and the new row", fontsize=9)
    right.axis("off")
    right.set_title("harvest: W n-grams into the pool, keyed by their first token", fontsize=9)
    if harvest is None:
        right.text(0, 0.5, "nothing harvested: the window still holds prompt tokens", fontsize=9)
    for c, column in enumerate([] if harvest is None else harvest.t().tolist()):
        key, rest = show(column[:1])[0], " ".join(f"'{t}'" for t in show(column[1:]))
        right.text(0, 0.9 - c * 0.8 / max(width - 1, 1), f"column {c}: key '{key}' -> {rest}", fontsize=9,
                   color=colors[c], va="center", family="monospace")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    plt.show()


window, new_row, harvest = trace[-1]
assert torch.equal(harvest, torch.cat([window, new_row[None]]))  # the harvest is the window fed plus the new row
draw_harvest(window, new_row, harvest, f"step {len(trace) - 1}: W = {config.window_size}, N = {config.ngram_size}")

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
# 1. Run the harvesting loop above for 12 steps and count the harvested n-grams that occur,
#    token for token, somewhere in the 12 tokens those steps produced. What fraction is that?
#    How does it change with W (3, 5, 8) and with N (3, 4, 5)?
# 2. How many n-grams did the five steps above harvest, and how many does the pool hold? Find
#    an n-gram harvested more than once: where is it among its key's candidates now, and why?
# 3. The pool is keyed by one token. Sketch a pool keyed by the last two tokens. Which
#    candidates would it stop proposing, and why might that help or hurt?
# 4. Why must harvesting wait N-2 steps after the window is initialised from the prompt?
