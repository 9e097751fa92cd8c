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
# # 9. Speculation under load: batches, the cost surface, where drafting stops paying
#
# Tutorials 5 to 8 decode one prompt at a time. A server decodes many: it puts B requests in
# one forward pass, and each pass then yields B tokens instead of one. Drafting and batching
# feed the same forward pass, so they compete for the same spare capacity: a draft that pays
# for one prompt can cost more than it yields in a batch of eight. This notebook
#
# 1. decodes a batch of prompts with greedy and with the draft decoders, and checks every row
#    against the same prompt decoded alone;
# 2. draws ragged acceptance: each row accepts its own number of tokens per pass, commits them
#    into one shared padded KV cache, and leaves the passes when it is done;
# 3. measures the cost surface t(q, B) of this machine (B rows feeding q tokens each) and sets
#    it beside two roofline models, one CPU-shaped and one GPU-shaped;
# 4. predicts, from S and q, the batch size at which a draft source stops paying;
# 5. lets adaptive decoding, the production engines' rules and a rule of our own decide per
#    step, on a tiny model where the answer is easy to see;
# 6. measures the host's work around each pass: why a batch run as B copies of the one-prompt
#    loop lost on a GPU, and what a batch-native step changes.

# %%
import warnings

# transformers imports tqdm, which warns "IProgress not found" in a notebook without ipywidgets
# (its progress bars then fall back to plain text). Harmless here, so that one warning is hidden.
warnings.filterwarnings("ignore", message="IProgress not found")

# %%
import contextlib
import json
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from ladref import (
    CostSurface,
    LookaheadConfig,
    PromptLookupProposer,
    adaptive_decode,
    chat_ids,
    greedy_decode,
    load_default_model,
    lookahead_decode,
    prompt_lookup_decode,
)
from ladref.batched.cache import ragged_commit_plan
from ladref.bench.engines import chain_decode, threshold_decode
from ladref.bench.host import measure_host_overhead
from ladref.bench.host_meter import tiny_llama
from ladref.decode import decode_with_proposers

model, tokenizer = load_default_model(device="cpu")  # quiet; progress=True shows the loading bars

# %% [markdown]
# ## 1. A batch of prompts
#
# Every decoder of ladref takes a list of prompts as well as one prompt. The prompts may differ
# in length (no padding to do by hand); the result is a `ladref.BatchResult`: `.rows` (one
# `DecodeResult` per prompt, in order), `.token_ids`, `.texts` and `.passes`, the forward
# passes the batch ran. Each row gets the tokens that the one-prompt loop of tutorials 3 to 5
# (`ladref.step`) gives it, but the batch does not run that loop once per row: one batched step
# (`ladref.batched`) drafts, lays out, verifies and commits for every row at once, as tensor
# operations over (B, ...), around one forward pass of all rows in a (B, Q) tensor. Section 6
# shows why it is built that way.

# %%
texts = [
    "What is 2 + 2?",
    "List three primary colors.",
    "Write a Python function is_palindrome(s) that ignores case and spaces.",
    "Repeat after me: the quick brown fox jumps over the lazy dog, the quick brown fox jumps over the lazy dog.",
]
prompts = [chat_ids(tokenizer, t)[0] for t in texts]
MAX_NEW = 40
batch = greedy_decode(model, prompts, MAX_NEW, tokenizer=tokenizer)
print(batch)
alone = [greedy_decode(model, p, MAX_NEW) for p in prompts]
for b, (prompt, row, one) in enumerate(zip(prompts, batch, alone)):
    same = row.token_ids == one.token_ids
    first = next((i for i, (x, y) in enumerate(zip(row.token_ids, one.token_ids)) if x != y), None)
    check = "equal to batch-1 greedy" if same else f"differs from batch-1 greedy at token {first} (rounding)"
    print(f"row {b}: prompt {len(prompt):2d} tokens -> {len(row.token_ids):2d} new, {check}: {row.text[:50]!r}")
print(f"\n{batch.passes} forward passes for the batch; one prompt at a time: {sum(r.stats.steps for r in alone)}")

# %% [markdown]
# Each row holds the tokens, positions and mask of its batch-1 step, so its output is its
# batch-1 output; the one caveat is rounding, since a batch multiplies matrices of other shapes
# (in float64 every row is exact; in float32 a row could, rarely, flip a near-tie). Row 0 stops
# at its end-of-sequence token after a few tokens: from then on the passes hold three rows.
#
# The draft decoders take the same list. Their rows must equal batched greedy's rows, token for
# token:

# %%
drafters = {
    "prompt lookup": prompt_lookup_decode(model, prompts, MAX_NEW),
    "lookahead W=N=G=4": lookahead_decode(model, prompts, MAX_NEW, config=LookaheadConfig(4, 4, 4)),
}
print(f"{'':18} {'row':>3} {'steps':>5} {'S':>5} {'fed/step':>8}")
for name, result in drafters.items():
    for b, (row, greedy_row) in enumerate(zip(result, batch)):
        equal = "" if row.token_ids == greedy_row.token_ids else "   differs from batched greedy"
        s = row.stats
        print(f"{name if b == 0 else '':18} {b:3d} {s.steps:5d} {s.compression:5.2f} {s.mean_forward_tokens:8.1f}{equal}")
    print(f"{'':18} {result.passes} passes for the batch\n")

# %% [markdown]
# ## 2. Ragged acceptance
#
# In one pass each row verifies its own draft and accepts its own number of tokens
# (`row.stats.accepted_per_step`): the rows drift apart. The prompts are cached first (each prompt
# alone, counted as the batch's first pass in `passes`), then every step is one forward pass of all
# live rows; a blank cell is a row that has finished.

# %%
def accepted_matrix(result):
    """rows x passes: tokens each row accepted in each pass, NaN once it is done."""
    steps = max(row.stats.steps for row in result)
    grid = np.full((len(result), steps), np.nan)
    for b, row in enumerate(result):
        grid[b, : row.stats.steps] = row.stats.accepted_per_step
    return grid


fig, axes = plt.subplots(len(drafters), 1, figsize=(11, 1.3 + 1.1 * len(drafters) * len(prompts) / 2))
for ax, (name, result) in zip(axes, drafters.items()):
    grid = accepted_matrix(result)
    image = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", vmin=1, vmax=max(4, np.nanmax(grid)), aspect="auto")
    for b, i in zip(*np.nonzero(grid > 1)):
        ax.text(i, b, int(grid[b, i]), ha="center", va="center", fontsize=7, color="black" if grid[b, i] > 3 else "white")
    ax.set_yticks(range(len(result)), [f"row {b}" for b in range(len(result))])
    ticks = [0] + [i for i in range(grid.shape[1]) if (i + 1) % 5 == 0]  # column i is step i + 1
    ax.set_xticks(ticks, [str(i + 1) for i in ticks])
    ax.set_xlabel("step (one forward pass of the live rows each)")
    ax.set_title(f"{name}: tokens accepted per pass (numbers: more than one)", fontsize=9)
    fig.colorbar(image, ax=ax, pad=0.01)
fig.tight_layout()
plt.show()

# %% [markdown]
# **One padded cache, a frontier, and holes.** All rows share one `DynamicCache` of shape
# (B, heads, T, head_dim). A pass writes every row's step at the same slots, the *frontier*
# T .. T + Q - 1, Q being the widest row's step. A row's committed tokens are the slots its
# mask leaves open, not necessarily its first ones: a prompt shorter than the longest leaves a
# *hole* after it, hidden by its mask, as a padded batch in transformers' `generate` does.
# Positions are each row's own count of tokens, so a hole changes nothing the row computes.
#
# After verification each row keeps what it accepted: its current token's entry (step entry 0)
# stays where it is, and its accepted draft entries move, in path order, to the slots right
# after it. The moves of all rows are one plan of (B, K) index tensors,
# `ladref.batched.cache.ragged_commit_plan(frontier, entries, counts)`: row b's first
# `counts[b]` entries of `entries[b]` go to slots `frontier, frontier + 1, ...`; a column past
# its count moves a slot onto itself, so every row has K moves and no row needs a loop of its
# own. Three rows whose prompts cached 6, 4 and 8 slots (frontier 8), whose steps fed 3, 1 and
# 4 tokens and kept entries [0, 2], [0] and [0, 1, 3]:

# %%
def slots(cells, frontier):
    return "".join(cells[:frontier]) + " | " + "".join(cells[frontier:])


FRONTIER, held, widths, kept = 8, [6, 4, 8], [3, 1, 4], [[0, 2], [0], [0, 1, 3]]
width, most = max(widths), max(map(len, kept))
entries = torch.tensor([k + [0] * (most - len(k)) for k in kept])  # (B, K), padded with entry 0
counts = torch.tensor([len(k) for k in kept])  # (B,)
print("before the commit (c: committed, digits: the step's entries, .: hidden; | marks the frontier):")
for b, (n, q) in enumerate(zip(held, widths)):
    print(f"   row {b}: {slots(['c'] * n + ['.'] * (FRONTIER - n) + [str(i) for i in range(q)] + ['.'] * (width - q), FRONTIER)}")
sources, targets = ragged_commit_plan(FRONTIER, entries, counts)
print(f"\nthe plan, sources -> targets, (B, K) = {tuple(sources.shape)}:")
for b in range(len(held)):
    moves = [f"{s} -> {t}" for s, t in zip(sources[b].tolist(), targets[b].tolist())]
    print(f"   row {b}: " + ", ".join(moves) + ("   (all in place)" if sources[b].equal(targets[b]) else ""))
advance = int(counts.max())
print(f"\nafter it (the frontier moves {advance} slots, past the row that kept the most):")
for b, (n, keep) in enumerate(zip(held, kept)):
    cells = ["c"] * n + ["."] * (FRONTIER - n) + [str(i) for i in keep]
    print(f"   row {b}: {slots(cells + ['.'] * (FRONTIER + width - len(cells)), FRONTIER)}")

# %% [markdown]
# In `ladref.batched.cache.BatchCache.commit` this plan is one gather and one scatter per layer,
# and the kept slots are opened in each row's additive mask (its `bias`, a (B, slots) tensor).
# Nothing of it is read back to the host: the host only needs to know how far the frontier
# moves, which it learns in its one small read a step (section 6). A greedy step needs no move
# at all: its one entry is already in place. The price of the holes is memory: the cache grows
# by the most any row kept at each step, and a row that kept less leaves the difference hidden.
# A row that stops (end-of-sequence token, or its budget) is marked on the device; at the next
# read the loop drops it from the batch dimension of the cache, the mask and every source's
# state (`index_select`), so the passes shrink as rows finish, as `BatchResult.passes` and the
# blank cells above show.
#
# The price of one tensor is padding: a pass computes B x Q tokens, whatever the rows fed.
# (vLLM maps each request to paged blocks and TensorRT-LLM packs ragged sequences, so they pay
# for the tokens fed only; ladref keeps the padded layout for clarity.)

# %%
def widths_per_pass(result):
    """For each step (one pass each, after the prompts'): the tokens each live row's step fed (its width q)."""
    steps = [row.stats.forward_tokens_per_step for row in result]
    return [[s[k] for s in steps if k < len(s)] for k in range(max(map(len, steps)))]


fig, axes = plt.subplots(1, len(drafters), figsize=(11, 3), sharey=True)
for ax, (name, result) in zip(axes, drafters.items()):
    per_pass = widths_per_pass(result)
    x = range(1, len(per_pass) + 1)
    ax.step(x, [len(qs) * max(qs) for qs in per_pass], where="mid", label="computed: B x Q (padded)")
    ax.step(x, [sum(qs) for qs in per_pass], where="mid", label="fed: sum of the rows' q")
    ax.step(x, [len(qs) for qs in per_pass], where="mid", color="grey", ls=":", label="live rows B")
    ax.set_xlabel("step (one forward pass)")
    ax.set_title(name, fontsize=9)
    ax.grid(True, alpha=0.3)
axes[0].set_ylabel("tokens in the pass")
axes[0].legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 3. The cost surface t(q, B)
#
# Tutorial 6 measured t(q): the time of one pass over q new tokens. A batch adds an axis: B rows
# that each feed q tokens, B x q tokens in all. `ladref.fast.surface.CostSurface.measure` times
# that padded pass for each B and q (the median of `repeats` passes, at a KV length of 128
# here). It is this machine's measurement, and timings on a shared CPU are noisy: a point out
# of line is more likely another program than the model.

# %%
measured = CostSurface.measure(model, batches=(1, 2, 4, 8), widths=(1, 2, 4, 8), kv_lengths=(128,), repeats=2)
print(measured.label)
print("t(q, B) in ms" + "".join(f"{f'q={q}':>9}" for q in measured.widths))
for b in measured.batches:
    print(f"   B = {b:2d}   " + "".join(f"{measured.time(q, batch=b) * 1e3:9.1f}" for q in measured.widths))

# %% [markdown]
# Decoding on either device is bound by one of two limits. Each pass reads every weight once,
# however few tokens it feeds; and each token fed costs its share of arithmetic. The
# **roofline** model keeps the larger of the two:
#
#     t(q, B) = max(weights_s, B x q x token_s)
#
# Its **ridge**, weights_s / token_s tokens, is the headroom: how many tokens a pass can feed
# before it costs more than one weight read. `CostSurface.roofline(weights_s, token_s)` builds
# this surface. Two are used below, both models, not measurements:
#
# * a CPU roofline `roofline(0.015, 0.0014)`: 15 ms per weight read, 1.4 ms of compute per token,
#   ridge about 11 tokens (the shape measured for SmolLM2 on the project's 2-core CPU);
# * a GPU-shaped roofline `roofline(0.01, 0.01 / 512)`: 10 ms per pass, ridge 512 tokens (a
#   data-center GPU's order of magnitude for a large model).
#
# The same formula also gives a rough roofline for this machine: weights_s from t(1, B=1), and
# token_s from the widest pass measured, t(8, B=8) / 64.

# %%
CPU_ROOF = (0.015, 0.0014)
GPU_ROOF = (0.01, 0.01 / 512)
here_roof = (measured.time(1, batch=1), measured.time(8, batch=8) / 64)
print(f"this machine, fitted roofline: weights_s = {here_roof[0] * 1e3:.1f} ms, token_s = {here_roof[1] * 1e3:.2f} ms, "
      f"ridge {here_roof[0] / here_roof[1]:.0f} tokens per pass")
cpu_small = CostSurface.roofline(*CPU_ROOF, widths=measured.widths, batches=measured.batches)

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4))
colors = plt.cm.viridis(np.linspace(0, 0.85, len(measured.batches)))
for b, color in zip(measured.batches, colors):
    ax1.plot(measured.widths, [measured.relative(q, batch=b) for q in measured.widths], marker="o", color=color, label=f"B = {b}")
    ax1.plot(measured.widths, [cpu_small.relative(q, batch=b) for q in measured.widths], ls="--", color=color)
    ax2.scatter([b * q for q in measured.widths], [b * q / measured.time(q, batch=b) for q in measured.widths], color=color, zorder=3,
                label=f"measured, B = {b}")
ax1.set_xscale("log", base=2)
ax1.set_xlabel("tokens per row q")
ax1.set_ylabel("t(q, B) / t(1, B)")
ax1.set_title("a wider step, relative to a greedy pass of the same batch\n(solid: measured here; dashed: CPU roofline model)", fontsize=9)
ax1.legend(fontsize=8)
tokens = np.arange(1, 1025)
for (w, t), style, label in [(CPU_ROOF, "-", "CPU roofline (model)"), (here_roof, "-.", "this machine, fitted roofline"),
                             (GPU_ROOF, "--", "GPU-shaped roofline (model)")]:
    ax2.plot(tokens, tokens / np.maximum(w, tokens * t), ls=style, color="black" if style != "-." else "grey", label=label)
ax2.set_xscale("log", base=2)
ax2.set_yscale("log")
ax2.set_xlabel("tokens per pass B x q")
ax2.set_ylabel("tokens fed per second")
ax2.set_title("throughput grows with the tokens per pass, up to the ridge", fontsize=9)
ax2.legend(fontsize=7)
for ax in (ax1, ax2):
    ax.grid(True, alpha=0.3)
fig.tight_layout()
plt.show()

# %% [markdown]
# On the right, the measured points of every B lie, where the timing is clean, on one curve of
# B x q alone: the pass does not care whether its tokens are rows or drafts. Below the ridge,
# tokens are almost free: throughput grows in proportion to the tokens per pass. Past it, every
# token costs token_s and throughput is flat.
#
# That is the whole story of speculation under load: **a batch of B greedy rows spends the same
# headroom that drafts spend.** One row alone has a ridge's worth of free tokens for its drafts;
# B rows have ridge / B each. On a CPU, with a ridge near 11, four greedy rows leave each row
# about two free tokens and eight leave none; on a GPU-shaped surface, with a ridge in the
# hundreds, a batch of dozens still leaves room.
#
# ## 4. Where drafting stops paying
#
# A draft source that yields S tokens per step while each row feeds q tokens per step, in a
# batch of B, is faster than batched greedy (1 token per row per pass of t(1, B)) by about
#
#     speedup(B) = S x t(1, B) / t(q, B)          (S / CostSurface.relative(q, batch=B))
#
# Here is that prediction for the two draft sources of section 2, with their S and q as
# measured on this batch, and for a stronger hypothetical source.

# %%
def pooled(result):
    """S and the mean q over every row's steps."""
    steps = sum(row.stats.steps for row in result)
    return (sum(len(row.token_ids) for row in result) / steps,
            sum(sum(row.stats.forward_tokens_per_step) for row in result) / steps)


sources = {f"{name} (measured)": pooled(result) for name, result in drafters.items()}
sources["a strong draft tree (hypothetical)"] = (2.5, 16.0)
BATCHES = tuple(range(1, 257))
roofs = {"CPU roofline (model)": CPU_ROOF, "this machine, fitted roofline": here_roof, "GPU-shaped roofline (model)": GPU_ROOF}
surfaces = {name: CostSurface.roofline(*roof, widths=range(1, 33), batches=BATCHES) for name, roof in roofs.items()}


def break_even(surface, s, q):
    """The first batch size at which the draft source is slower than batched greedy (None: never, up to 256)."""
    return next((b for b in BATCHES if s / surface.relative(q, batch=b) < 1), None)


print("the batch size B at which each source becomes slower than batched greedy:\n")
print(f"{'':36} {'S':>5} {'q':>5}" + "".join(f"{name.split(' (')[0].split(',')[0]:>22}" for name in surfaces))
for name, (s, q) in sources.items():
    cells = [break_even(surface, s, q) for surface in surfaces.values()]
    print(f"{name:36} {s:5.2f} {q:5.1f}" + "".join(f"{'already at 1' if c == 1 else (c or '> 256'):>22}" for c in cells))

fig, axes = plt.subplots(1, 2, figsize=(12, 3.8), sharey=True)
for ax, name in zip(axes, ("CPU roofline (model)", "GPU-shaped roofline (model)")):
    surface = surfaces[name]
    for source, (s, q) in sources.items():
        ax.plot(BATCHES, [s / surface.relative(q, batch=b) for b in BATCHES], label=f"{source}: S={s:.2f}, q={q:.1f}")
    ax.axhline(1, color="grey", lw=0.8, ls="--")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("batch size B")
    ax.set_title(f"{name}: ridge {roofs[name][0] / roofs[name][1]:.0f} tokens", fontsize=9)
    ax.grid(True, alpha=0.3)
axes[0].set_ylabel("predicted speedup over batched greedy")
axes[0].legend(fontsize=7)
fig.tight_layout()
plt.show()

# %% [markdown]
# Each curve is flat while the batch's drafted pass, B x q tokens, stays under the ridge; past
# that, t(q, B) grows with B while t(1, B) does not (yet), and the speedup falls as ridge / B.
# Solving S x weights_s = B x q x token_s gives the break-even batch size in one line:
#
#     B* = S x ridge / q
#
# A source that feeds many tokens per step for a small S (the lookahead window of W = N = G = 4
# fed about 15 per step above, for S near 1.3) has already spent the CPU's headroom at B = 1; a
# thin chain with a modest S (prompt lookup) lasts to a batch of a few on a CPU, to a couple of
# hundred on the GPU-shaped surface. Once B rows alone fill the ridge, t(q, B) = q t(1, B) and
# the speedup is S / q, at most 1, reached only if every drafted token is accepted: from there
# on every rejected draft token is pure loss.
#
# ## 5. Deciding per step, under load
#
# The prediction is an average. `ladref.adaptive_decode` decides step by step and row by row:
# it prices each row's step on the curve of the batch it runs in, `CostSurface.at(B)`, read
# again at every step (rows that finish make the next passes cheaper), and feeds only the
# drafts whose expected accepted tokens pay for their share of the pass. The surface is its
# `cost` argument.
#
# A tiny random model (a 2-layer Llama, float64, built from its config as in tutorial 6) makes
# the contrast quick to see: its greedy texts soon cycle, so its drafts are often accepted. Two
# surfaces, both models: a CPU-like roofline whose ridge, about 4 tokens, a batch of 8 greedy
# rows is already past (a smaller ridge than section 3's 11, to make the point with 8 rows;
# exercise 3 tries that one), and the GPU-shaped one.

# %%
tiny_config = LlamaConfig(vocab_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, max_position_embeddings=512, bos_token_id=0, eos_token_id=None, pad_token_id=0)
tiny_config._attn_implementation = "sdpa"
torch.manual_seed(0)
tiny = LlamaForCausalLM(tiny_config).to(torch.float64).eval()

CPU_LIKE_ROOF = (0.015, 0.004)
CPU_LIKE = CostSurface.roofline(*CPU_LIKE_ROOF, label="CPU-like roofline, ridge 4 (model)")
GPU_LIKE = CostSurface.roofline(*GPU_ROOF, label="GPU-shaped roofline, ridge 512 (model)")
tiny_batch = [[1, 2, 3], [4, 5], [7, 1], [9, 4], [2, 2, 8], [11, 3], [6, 10], [13, 14, 15]]
TINY_NEW = 40

runs = {"greedy": greedy_decode(tiny, tiny_batch, TINY_NEW, eos_token_id=[])}
runs["adaptive, CPU-like"] = adaptive_decode(tiny, tiny_batch, TINY_NEW, cost=CPU_LIKE, eos_token_id=[])
runs["adaptive, GPU-shaped"] = adaptive_decode(tiny, tiny_batch, TINY_NEW, cost=GPU_LIKE, eos_token_id=[])
one_row = adaptive_decode(tiny, tiny_batch[:1], TINY_NEW, cost=CPU_LIKE, eos_token_id=[])


def drafted(result):
    """Draft and window tokens fed per row per pass."""
    fed = sum(sum(r.stats.draft_tokens_per_step) + sum(r.stats.window_tokens_per_step) for r in result)
    return fed / len(result) / result.passes


def modelled(result, roof, packed=False):
    """Seconds of the run's passes on a roofline: padded B x Q tokens per pass (packed: the tokens fed)."""
    weights_s, token_s = roof
    return sum(max(weights_s, (sum(qs) if packed else len(qs) * max(qs)) * token_s) for qs in widths_per_pass(result))


print(f"alone, on the CPU-like surface: {one_row.passes} passes, {drafted(one_row):.2f} draft tokens per pass\n")
print(f"a batch of {len(tiny_batch)}: {'passes':>6} {'drafts/row/pass':>16} {'same output':>12}")
for name, result in runs.items():
    print(f"{name:22} {result.passes:6d} {drafted(result):16.2f} {str(result.token_ids == runs['greedy'].token_ids):>12}")

# %%
fig, ax = plt.subplots(figsize=(8, 3.2))
for name, result in runs.items():
    ax.step(range(1, len(widths_per_pass(result)) + 1), [sum(qs) for qs in widths_per_pass(result)], where="mid", label=name)
ax.set_xlabel("step (one forward pass)")
ax.set_ylabel("tokens fed by the batch")
ax.set_title(f"a batch of {len(tiny_batch)} rows, tiny model: what each pass feeds", fontsize=9)
ax.legend(fontsize=8)
ax.grid(True, alpha=0.3)
plt.show()

# %% [markdown]
# One row alone on the CPU-like surface drafts freely: one pass costs one weight read up to 3
# tokens. Eight rows on the same surface are past its ridge. Each row prices the pass as a whole
# (`ladref.batched.policy.BatchPolicy`, every row at once): the other rows' expected tokens count
# in what the pass yields, and the pass is as wide as its widest row. A draft that widens it makes all eight rows' pass
# dearer for one row's gain, so no row drafts. On the GPU-shaped surface the same eight rows
# feed many draft tokens each, every pass, and need well under half the passes. The output is
# greedy's either way.
#
# ### The engines' rules, and one of our own
#
# Serving engines decide per batch whether n-gram speculation is worth it
# (`ladref.bench.engines`, both drafting with prompt lookup):
#
# * `threshold_decode(model, prompts, n, draft_len=4, threshold=4)`: draft up to 4 tokens per
#   row while the batch has at most 4 running rows, none above (vLLM's `disable_by_batch_size`);
# * `chain_decode(model, prompts, n, surface=...)`: every step, the draft length k that
#   maximises the expected tokens per second, (1 - a^(k+1)) / (1 - a) / t(1 + k, B), with a
#   the batch's running acceptance rate (vLLM's dynamic speculative decoding).
#
# A rule for a batch is a `ladref.batched.source.BatchChoice`, an object with three methods:
#
# * `choose(merged, state, window_cells, kv)` returns what every row feeds this step: a (B, n)
#   bool tensor of draft nodes and a (B,) bool tensor of the rows that feed the lookahead
#   window. `merged` holds every row's proposed drafts merged into one trie per row
#   (`merged.kept`: (B, n) bool, the nodes proposed, parents before children); `state` is where
#   the rows stand (`state.size`: B, the live rows; `state.text`, `state.length`: each row's
#   tokens); `window_cells` is the window's size in tokens (None without a window) and `kv` the
#   cache slots the pass attends to;
# * `observe(state, outcome)` learns from each step (`outcome.verdict.depth`: (B,) the draft
#   tokens each row accepted);
# * `select(keep)` forgets the rows that finished (`keep`: the indices of the rows that stay).
#
# Ours ignores acceptance altogether: every row drafts the longest chain whose pass costs at
# most 25 % more than a greedy pass of the same batch. Like ladref's own rules it is a tensor
# operation over the rows, with no loop over them and nothing read from the device.
# `decode_with_proposers` runs it on ladref's drafting loop (the loop every draft decoder
# shares), with prompt lookup drafting up to 8 tokens.

# %%
class Headroom:
    """Draft k tokens a row, k the largest with t(1 + k, B) <= slack x t(1, B) on the surface; acceptance ignored."""

    def __init__(self, surface, slack=1.25, max_len=8):
        self.surface, self.slack, self.max_len = surface, slack, max_len

    def choose(self, merged, state, window_cells, kv):
        curve = self.surface.at(state.size)  # the batch's live rows: a number the host knows
        k = max(k for k in range(self.max_len + 1) if curve.time(1 + k) <= self.slack * curve.time(1))
        feed = merged.kept & (merged.kept.cumsum(-1) <= k)  # (B, n): each row's first k nodes (k = 0: a greedy step)
        return feed, torch.zeros(state.size, dtype=torch.bool, device=feed.device)

    def observe(self, state, outcome):
        pass

    def select(self, keep):
        pass


def headroom_decode(model, prompts, max_new_tokens, surface):
    return decode_with_proposers(model, prompts, max_new_tokens, PromptLookupProposer(8), "headroom", 8, {"eos_token_id": []},
                                 batch_choice=lambda rows: Headroom(surface))


rules = {
    "greedy": lambda rows: greedy_decode(tiny, rows, TINY_NEW, eos_token_id=[]),
    "threshold (k=4, B<=4)": lambda rows: threshold_decode(tiny, rows, TINY_NEW, eos_token_id=[]),
    "chain, CPU-like": lambda rows: chain_decode(tiny, rows, TINY_NEW, surface=CPU_LIKE, eos_token_id=[]),
    "headroom, CPU-like": lambda rows: headroom_decode(tiny, rows, TINY_NEW, CPU_LIKE),
    "adaptive, CPU-like": lambda rows: adaptive_decode(tiny, rows, TINY_NEW, cost=CPU_LIKE, eos_token_id=[]),
    "chain, GPU-shaped": lambda rows: chain_decode(tiny, rows, TINY_NEW, surface=GPU_LIKE, eos_token_id=[]),
    "adaptive, GPU-shaped": lambda rows: adaptive_decode(tiny, rows, TINY_NEW, cost=GPU_LIKE, eos_token_id=[]),
}
print("modelled time relative to batched greedy on the same surface (padded: B x Q per pass; packed: tokens fed)")
print(f"{'':24} {'passes':>6} {'drafts/row/pass':>16} {'CPU-like padded':>16} {'CPU-like packed':>16} {'GPU-shaped':>11}")
for size in (1, 2, 4, 8):
    rows = tiny_batch[:size]
    results = {name: rule(rows) for name, rule in rules.items()}
    base = results["greedy"]
    print(f"B = {size}")
    for name, result in results.items():
        assert result.token_ids == base.token_ids, name  # every rule keeps greedy's output
        cpu_padded, cpu_packed, gpu = (modelled(result, roof, packed) / modelled(base, roof, packed)
                                       for roof, packed in ((CPU_LIKE_ROOF, False), (CPU_LIKE_ROOF, True), (GPU_ROOF, False)))
        print(f"   {name:21} {result.passes:6d} {drafted(result):16.2f} {cpu_padded:16.2f} {cpu_packed:16.2f} {gpu:11.2f}")

# %% [markdown]
# Reading the table (times below 1 beat batched greedy on that surface):
#
# * the rules that price their steps on the GPU-shaped surface draft at every B here and cut its
#   time by 40 to 70 %: a batch of 8 is nowhere near a ridge of 512;
# * on the CPU-like surface the threshold rule keeps drafting 4 tokens at B = 4, past the ridge,
#   and pays for it; a rule that reads the surface (chain, headroom, adaptive) drafts less as B
#   grows and stops where the batch alone fills the ridge. The same rule, priced on the other
#   surface, would be badly wrong: the surface is the one input that tells a CPU from a GPU;
# * adaptive prices the pass as a whole, padding included: a draft that widens the pass must pay
#   for every row's time, while one within the width another row feeds for its own sake costs
#   nothing. The packed column shows what a layout without padding (vLLM's, TensorRT-LLM's)
#   would charge for the same passes.
#
# ladref's benchmark of all this on real prompts, batch by batch, is
# `python -m ladref bench --dataset specbench --batch 1,2,4,8,16`; its results are on the
# Benchmarks page.
#
# ## 6. Host work: what a batch costs besides its pass
#
# Sections 3 to 5 price a step by its forward pass alone. On a GPU the pass of a small model
# takes a few milliseconds, and what the host does around it adds to every step: the Python of
# the step, the torch operations it dispatches (each one a kernel launch on a GPU), and every
# value it reads back from the device (`.item()`, `.tolist()`, `bool(tensor)`), where the host
# waits until the GPU has finished all the work queued before it. Host work that grows with B
# eats exactly the gain that batching is for.
#
# ladref's first batch design ran each row's one-prompt loop in a thread of its own, the rows
# meeting at one forward pass: proposing, laying out, verifying and committing ran once per
# row, in Python, each row reading its results back several times a step. On an H100 and an
# H200 (float16, SmolLM2-135M, 12 prompts; [GPU results](../../gpu/)) adaptive decoding then
# made 0.27x and 0.48x batched greedy's throughput at B = 12, where the measured cost surface
# predicted about 1.9x: the host loop, not the GPU, decided.
#
# The batched step (`ladref.batched`) does the same work as tensor operations over (B, ...)
# on the model's device, and between two passes the host reads ONE small tensor: which rows
# stopped, how wide the next pass is, whether it feeds a window, and how far the frontier moved
# (section 2). Host work is measurable even without a GPU: with a tiny model the forward pass
# is nearly free, so the time outside it is the host's, and torch's profiler counts the
# operations and the reads (`aten::_local_scalar_dense` is one read). `python -m ladref bench
# --host-overhead` does exactly that (`ladref.bench.host`); here a short version of it, against
# transformers' batched `generate` as the anchor:

# %%
@contextlib.contextmanager
def quiet_stderr():
    """torch's profiler logs a line from C++ each time it starts and stops; hidden here."""
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(null)
        os.close(saved)


with quiet_stderr():
    points = measure_host_overhead(tiny_llama(), batches=(1, 16), methods=("greedy", "prompt_lookup", "generate"),
                                   max_new_tokens=24, rounds=1)
print(f"{'':14} {'B':>3} {'ms/pass':>8} {'host ms/pass':>13} {'torch ops/pass':>15} {'reads/pass':>11} {'= greedy':>9}")
for point in points:
    print(f"{point.method:14} {point.batch:3d} {point.ms_per_pass:8.2f} {point.host_ms_per_pass:13.2f} "
          f"{point.ops_per_pass:15.0f} {point.reads_per_pass:11.1f} {str(point.match):>9}")

# %% [markdown]
# One read a pass and a number of torch operations that does not change with B: that is what
# makes a batch's host work flat. The committed runs of the full benchmark (48 new tokens a row,
# three rounds, every method) measured both designs on the same machine: the thread design at
# the last commit that had it (in the archive of past runs), the tensor program in the current
# results:

# %%
BENCHMARKS = Path("..") / "benchmarks"
designs = {"a thread per row": BENCHMARKS / "archive" / "host_overhead" / "thread_design" / "host_overhead.json",
           "one tensor program": BENCHMARKS / "results" / "host_overhead" / "host_overhead.json"}
runs_by_design = {name: {(p["method"], p["batch"]): p for p in json.loads(path.read_text())["points"]}
                  for name, path in designs.items()}
METHODS = ("greedy", "prompt_lookup", "lookahead", "recycling", "adaptive")
print(f"{'':14} {'host ms/pass, B = 1 -> 16':>40} {'device->host reads/pass, B = 1 -> 16':>44}")
for method in METHODS:
    cells = []
    for field, digits in (("host_ms_per_pass", 2), ("reads_per_pass", 1)):
        cells.append("   ".join(f"{runs[method, 1][field]:6.{digits}f} -> {runs[method, 16][field]:6.{digits}f}"
                               for runs in runs_by_design.values()))
    print(f"{method:14} {cells[0]:>40} {cells[1]:>44}")
print(f"{'':14} {'(a thread per row   one tensor program)':>40} {'(a thread per row   one tensor program)':>44}")

fig, axes = plt.subplots(1, 2, figsize=(12, 3.6), sharex=True)
for (name, runs), style in zip(runs_by_design.items(), ("--", "-")):
    for method, color in zip(METHODS, plt.cm.tab10.colors):
        batches = sorted(b for m, b in runs if m == method)
        for ax, field in zip(axes, ("host_ms_per_pass", "reads_per_pass")):
            ax.plot(batches, [runs[method, b][field] for b in batches], style, marker="o", color=color,
                    label=f"{method}" if style == "-" else None)
for ax, label in zip(axes, ("host work a pass (ms)", "device->host reads a pass")):
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch size B")
    ax.set_ylabel(label)
    ax.grid(True, alpha=0.3)
axes[0].set_title("dashed: a thread per row; solid: one tensor program (CPU, tiny model)", fontsize=9)
axes[1].legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# With a thread per row, every figure grows with B: at B = 16 batched greedy read from the
# device dozens of times a pass, and a drafting method's host work was several times its B = 1
# figure. With one tensor program the reads stay at one a pass at every B, and the host work
# grows only as much as the tensors it handles do. On a CPU that growth is real work (a step's
# tensors are bigger at B = 16); on a GPU it runs on the device, where a (16, n) operation
# costs what a (1, n) one does. What remains is a fixed cost a step: a drafting step dispatches
# a few hundred small operations (proposing, merging the trees, verifying, committing), several
# times greedy's. Capturing the whole step in one graph, so that it is launched once, is the
# next step for that cost.
#
# ## Exercises
#
# 1. Predict with B* = S x ridge / q the batch size at which prompt lookup (S and q from
#    section 4's table) stops paying on the CPU roofline, then on this machine's fitted one.
#    Check both against the table. Why does the lookahead window stop paying already at B = 1?
# 2. Change the threshold rule: run `threshold_decode` on the tiny batch with `threshold=2` and
#    `threshold=8`, and with `draft_len=1`. Which setting is best on the CPU-like surface, and
#    which on the GPU-shaped one? Can any one threshold suit both?
# 3. Replace `CPU_LIKE` in section 5 by the CPU roofline of section 3, `CostSurface.roofline(0.015,
#    0.0014)` (ridge 11). At which B does adaptive decoding stop drafting now?
# 4. Write a `BatchChoice` of your own: for instance `Headroom` with the running acceptance of
#    `observe` (`outcome.verdict.depth`: the draft tokens each row accepted), or one that drafts
#    only while the batch has a single row left. Keep it a tensor operation over the rows.
#    Compare its modelled times with the table's.
# 5. Run section 6's measurement for `lookahead` and `adaptive` too. Which parts of a drafting
#    step do its extra torch operations come from? (`torch.profiler` around one call of
#    `lookahead_decode` on the tiny model, its table sorted by count, tells you.)
