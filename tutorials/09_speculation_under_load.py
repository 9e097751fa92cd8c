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
# # 9. Speculation under load: batches, the KV cache, where drafting stops paying
#
# Tutorials 1 to 8 decode one prompt at a time. A server decodes many at once: it puts B
# requests (the *rows* of a batch) into one forward pass, and that pass then yields B tokens,
# one per row. Drafting feeds extra tokens into the same pass, so drafting and batching compete
# for the same spare capacity: a draft that pays for one prompt alone can cost more than it
# yields in a batch of eight. This notebook builds the picture from the ground up:
#
# 1. why a pass of B rows costs about one read of the weights (a tiny roofline, and a curve
#    measured on this machine);
# 2. prefill and decode, the two kinds of pass;
# 3. static and continuous batching, and why memory for the KV cache, not compute, limits B;
# 4. a batch decoded by ladref, every row exact to rounding, each row accepting its own drafts;
# 5. stragglers: why S averaged over the rows is not the batch's speed-up;
# 6. the batch size at which drafting stops paying, when the weights dominate;
# 7. the KV term: at long contexts every extra row reads its own cache, drafts share one, and
#    drafting pays again at large B;
# 8. rules that decide whether to draft from the batch and the machine, with ladref's public
#    decoders;
# 9. the host's work around each pass.

# %%
import warnings

# transformers imports tqdm, which warns "IProgress not found" in a notebook without ipywidgets
# (its progress bars then fall back to plain text). Harmless here, so that one warning is hidden.
warnings.filterwarnings("ignore", message="IProgress not found")

# %%
import contextlib
import json
import os
import time
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
    draft_decode,
    greedy_decode,
    load_default_model,
    lookahead_decode,
    prompt_lookup_decode,
)
from ladref.bench.host import measure_host_overhead
from ladref.bench.host_meter import tiny_llama

model, tokenizer = load_default_model(device="cpu")  # quiet; progress=True shows the loading bars
BENCHMARKS = Path("..") / "benchmarks"  # the committed results (the notebook runs in tutorials/)

# %% [markdown]
# ## 1. Why B rows cost about one read of the weights
#
# To produce one token, a decoding pass multiplies that token's hidden state by every weight
# matrix of the model: about 2 floating-point operations (a multiply and an add) per weight,
# **2P FLOPs per token** for a model of P parameters. To do so it must bring every weight from
# memory to the processor: **W bytes per pass** (P times the bytes of the dtype). A pass that
# feeds n tokens, whether they are n rows of one token each or one row's n drafted tokens,
# still reads each weight once and uses it n times. So
#
#     t(n) = max( W / bandwidth ,  n x 2P / compute )          (the *roofline* of a pass)
#
# The first term is the time to read the weights (bytes over bytes per second), the second the
# time to compute n tokens (FLOPs over FLOPs per second). While the first is larger, extra tokens
# are free: the processor waits on memory anyway. The **ridge**, the n where the two terms meet,
#
#     ridge = (W / bandwidth) / (2P / compute)
#
# is how many tokens a pass can feed for the price of one. A pass also reads each row's **KV
# cache** (the keys and values of every earlier token, kept so that they are not recomputed; a
# row of L cached tokens holds L x k bytes, k given in section 3). That adds B x L x k bytes to
# the first term; section 7 is about it. At the short contexts of this section it is small, so we
# leave it out for now and come back to it.
#
# Here are W, P and the KV bytes for the model of this notebook, SmolLM2-135M, in float32 on
# this CPU:

# %%
config = model.config
P = sum(p.numel() for p in model.parameters())  # the output head shares the embedding's weights: counted once
W_BYTES = sum(p.numel() * p.element_size() for p in model.parameters())
HEAD_DIM = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def kv_bytes_per_token(layers, kv_heads, head_dim, dtype_bytes):
    """Bytes of KV cache one token takes: a key and a value vector per layer and per key/value head."""
    return 2 * layers * kv_heads * head_dim * dtype_bytes


KV_TOKEN = kv_bytes_per_token(config.num_hidden_layers, config.num_key_value_heads, HEAD_DIM, 4)
print(f"P = {P / 1e6:.1f} M parameters, W = {W_BYTES / 1e6:.0f} MB of float32 weights read per pass")
print(f"2P = {2 * P / 1e9:.2f} GFLOP per token: {2 * P / W_BYTES:.1f} FLOP per byte read, for a pass of one token")
print(f"KV cache: {KV_TOKEN} bytes per token; a row of 128 cached tokens: {128 * KV_TOKEN / 1e6:.1f} MB "
      f"({128 * KV_TOKEN / W_BYTES:.1%} of the weights)")

# %% [markdown]
# Half a FLOP per byte is very little: a processor computes far more FLOPs per second than it
# reads bytes, so a one-token pass is bound by memory, and the tokens up to the ridge ride along
# nearly free. Does this machine agree? `CostSurface.measure` times the very pass a batch's step
# runs: B rows that each feed q tokens, B x q tokens in all, over 128 cached tokens per row (the
# fastest of `repeats` passes). Timings on a shared CPU are noisy: a point out of line is more
# likely another program than the model.

# %%
measured = CostSurface.measure(model, batches=(1, 2, 4, 8), widths=(1, 2, 4, 8), kv_lengths=(128,), repeats=2)
print(measured.label, "| KV length 128")
print("t(q, B) in ms" + "".join(f"{f'q={q}':>9}" for q in measured.widths))
for b in measured.batches:
    print(f"   B = {b:2d}   " + "".join(f"{measured.time(q, batch=b) * 1e3:9.1f}" for q in measured.widths))

weights_s, token_s = measured.time(1, batch=1), measured.time(8, batch=8) / 64  # the fitted roofline's two terms
here_roof = (weights_s, token_s)
print(f"\nfitted roofline: one weight read {weights_s * 1e3:.0f} ms (an effective {W_BYTES / weights_s / 1e9:.0f} GB/s), "
      f"{token_s * 1e3:.2f} ms a token past the ridge (an effective {2 * P / token_s / 1e9:.0f} GFLOP/s): "
      f"ridge about {weights_s / token_s:.0f} tokens a pass")

# %% [markdown]
# The fit takes the weight read from the one-token pass, t(1, B=1), and the time per token from
# the widest pass measured, t(8, B=8) / 64, which is past the ridge. The dotted lines on the left
# are a committed measurement of the same passes on the project's 2-core CPU
# (`benchmarks/archive/load/threads_linears_b16/load_surface_cpu.json`, KV 128): rows up to
# B = 16, drafts up to q = 32. If this run's points lie far from them, another program was likely
# busy on the machine. On the right, a
# committed measurement of the same model on an NVIDIA H200 in float16
# (`benchmarks/results_gpu/cost_batch/cost_surface_cuda.json`): every pass up to 16 rows of 32
# tokens, at every KV length measured, takes about the same time.

# %%
gpu = CostSurface.load(BENCHMARKS / "results_gpu" / "cost_batch" / "cost_surface_cuda.json")
cpu = CostSurface.load(BENCHMARKS / "archive" / "load" / "threads_linears_b16" / "load_surface_cpu.json")
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4))
committed = {"committed: rows (q = 1)": ([(b, 1) for b in cpu.batches], "C0"),
             "committed: drafts (B = 1)": ([(1, q) for q in (1, 2, 4, 8, 16, 32)], "C1")}
for kind, (points, color) in committed.items():
    ax1.plot([b * q for b, q in points], [cpu.time(q, 128, batch=b) * 1e3 for b, q in points], ":", color=color, label=kind)
for b in measured.batches:
    for q in measured.widths:
        kind = "rows (q = 1)" if q == 1 else "drafts (B = 1)" if b == 1 else "both"
        style = {"rows (q = 1)": ("o", "C0"), "drafts (B = 1)": ("s", "C1"), "both": ("x", "grey")}[kind]
        ax1.scatter(b * q, measured.time(q, batch=b) * 1e3, marker=style[0], color=style[1], label=kind, zorder=3)
n = np.arange(1, 65)
ax1.plot(n, np.maximum(weights_s, n * token_s) * 1e3, color="black", lw=1, label="fitted roofline max(W read, n x token)")
handles = {h.get_label(): h for h in ax1.get_legend_handles_labels()[0]}
ax1.legend(handles.values(), handles.keys(), fontsize=8)
ax1.set_yscale("log")
ax1.set_title("this CPU, float32, KV 128: time of a pass (dotted: committed)", fontsize=9)
for kv, style in zip(gpu.kv_lengths, ("-", "--", ":")):
    for b, color in zip(gpu.batches, plt.cm.viridis(np.linspace(0, 0.85, len(gpu.batches)))):
        ax2.plot([b * q for q in gpu.widths], [gpu.time(q, kv, batch=b) * 1e3 for q in gpu.widths], style, color=color,
                 label=f"B = {b}" if kv == gpu.kv_lengths[0] else None)
ax2.set_ylim(0, None)
ax2.legend(fontsize=8, title="solid KV 128, dashed 512, dotted 1024", title_fontsize=7)
ax2.set_title("H200, float16 (committed): time of a pass", fontsize=9)
for ax in (ax1, ax2):
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens per pass, B x q")
    ax.set_ylabel("ms")
    ax.grid(True, alpha=0.3)
fig.tight_layout()
plt.show()

# %% [markdown]
# On the CPU, a pass of a few tokens costs about a one-token pass, and past the ridge the time
# grows with the tokens: the roofline's two regimes. Up to the ridge, **the pass hardly cares
# whether its tokens are rows or drafts**: that is the whole reason batching works (B rows for
# the price of about one) and the reason it competes with drafting (the rows use up the free
# tokens the drafts would have used). The rule holds while the weight read dominates the memory
# term, that is at short contexts like these 128 tokens; section 7 shows where it breaks.
#
# On the H200 the curve is flat over everything measured. Such a GPU computes hundreds of FLOPs
# in the time it reads a byte, so its ridge lies in the hundreds of tokens; and this small
# model's pass there is bound by launching its kernels one by one rather than by reading its
# weights, which flattens the curve further. Either way, tokens are nearly free far beyond B = 16.
#
# ## 2. Prefill and decode
#
# A request is served in two phases. **Prefill** runs the whole prompt, L tokens, through the
# model in one pass, to fill the KV cache and get the first new token: L tokens share one weight
# read, far past the ridge, so prefill is bound by compute. **Decode** then produces one token a
# pass per row: bound by memory, as section 1 showed. Timed on this machine (128 arbitrary
# token ids, the logits of the last position only, as a prefill needs):

# %%
def median_seconds(fn, repeats=3):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


ids = torch.arange(1000, 1128)[None]  # (1, 128)
with torch.inference_mode():
    prefill_s = median_seconds(lambda: model(ids, logits_to_keep=1))
print(f"prefill of 128 tokens: {prefill_s * 1e3:.0f} ms, {128 / prefill_s:.0f} tokens/s")
print(f"decode, one row:       {weights_s * 1e3:.0f} ms a token, {1 / weights_s:.0f} tokens/s")

# %% [markdown]
# Per token, prefill is many times cheaper than decode: its tokens share the weight read.
# Decoding wastes the processor's arithmetic, and both batching and drafting are ways to put that
# arithmetic back to work. (Engines also mix the two: vLLM's *chunked prefill* cuts long prompts
# into chunks and puts them into the decode passes of other rows, to fill those passes.)
#
# **How ladref runs a batch's passes.** It caches the prompts first, **each prompt in a forward
# call of its own** (all but its last token; a one-token prompt needs none), and stacks the
# results into one cache: prompts differ most in length, and one pass padded to the longest would
# make the short ones pay for it. Then every decoding step is ONE forward pass of all live rows.
# `BatchResult.passes` counts the prompts' caching as one pass (`passes = steps + 1`), although it
# is B calls of the model. A hook on the model's decoder counts the calls:

# %%
texts = [
    "What is 2 + 2?",
    "Write a Python function is_palindrome(s) that ignores case and spaces.",
    "Repeat after me: the quick brown fox jumps over the lazy dog, the quick brown fox jumps over the lazy dog.",
    "Write a short story about a robot who learns to paint.",
]
prompts = [chat_ids(tokenizer, t)[0] for t in texts]
MAX_NEW = 40
calls = []
hook = model.get_decoder().register_forward_hook(lambda module, args, output: calls.append(1))
batch = greedy_decode(model, prompts, MAX_NEW, tokenizer=tokenizer)
hook.remove()
print(batch)
print(f"{len(prompts)} prompts of {[len(p) for p in prompts]} tokens: {len(calls)} calls of the model = "
      f"{len(prompts)} prompt calls + {batch.steps} steps; BatchResult.passes = {batch.passes} = steps + 1")

# %% [markdown]
# ## 3. Static and continuous batching; the KV cache limits B
#
# **Static batching** starts B requests together and runs the batch until its last row is done.
# A row that finishes early stops producing tokens, but no new request takes its place: in
# ladref a finished row leaves the passes (they get narrower), and nothing joins. ladref's
# decoders batch this way: you hand them a list of prompts.
#
# **Continuous batching** (also *iteration-level scheduling*: Orca, then vLLM and every serving
# engine since) decides the batch anew at every step: rows that finished leave, and requests
# waiting in the queue join at once, with their prefill. The batch stays full, and B changes
# from step to step with the traffic. A decision to draft must then be made per step too,
# against the current B: vLLM can switch speculation off for new requests while more than a set
# number of requests are running (its `disable_by_batch_size` setting, at first the
# `speculative_disable_by_batch_size` engine argument), and its dynamic speculative decoding
# picks the draft length from the batch size and the acceptance seen so far. Sections 6 to 8
# show why such a threshold exists, and why one fixed number cannot suit every machine.
#
# **What limits B is memory.** Every row keeps its KV cache: for each layer, a key and a value
# vector per key/value head and per token. In bytes per token,
#
#     k = 2 x layers x kv_heads x head_dim x dtype_bytes
#
# (2: keys and values). A row of L tokens holds L x k bytes, and the cache must sit in the
# accelerator's memory next to the weights. Models with *grouped-query attention* (GQA) keep fewer
# key/value heads than query heads, to shrink exactly this. For this notebook's model and for two
# 7B-class models (their configs' shapes; parameter counts rounded), with an 80 GB GPU in mind:

# %%
GPU_MEMORY = 80e9  # bytes: an 80 GB accelerator (ignoring activations and what an engine holds back)
KV_MODELS = {  # name: (layers, kv_heads, head_dim, parameters, dtype bytes)
    "SmolLM2-135M, float32 (here)": (config.num_hidden_layers, config.num_key_value_heads, HEAD_DIM, P, 4),
    "SmolLM2-135M, bfloat16": (config.num_hidden_layers, config.num_key_value_heads, HEAD_DIM, P, 2),
    "Llama-2-7B, float16 (32 KV heads)": (32, 32, 128, 6.74e9, 2),
    "Mistral-7B, float16 (GQA: 8 KV heads)": (32, 8, 128, 7.24e9, 2),
}
print(f"{'':38} {'KV bytes/token':>15} {'weights GB':>11} {'tokens in 80 GB':>16} {'rows of 4096':>13}")
for name, (layers, kv_heads, head_dim, params, nbytes) in KV_MODELS.items():
    k = kv_bytes_per_token(layers, kv_heads, head_dim, nbytes)
    tokens = (GPU_MEMORY - params * nbytes) / k  # the memory the weights leave, in tokens of cache
    print(f"{name:38} {k:15,d} {params * nbytes / 1e9:11.1f} {tokens:16,.0f} {tokens // 4096:13,.0f}")

# %% [markdown]
# A 7B model without GQA takes half a mebibyte per token: beside its weights, 80 GB hold about
# 127,000 tokens of cache, thirty rows of 4096 tokens, however fast the GPU computes. That is why
# serving engines care so much about wasting none of it, and why newer models use GQA.
#
# **Paged blocks.** The simple way to store a batch's cache is one tensor per layer of shape
# (B, heads, T, head_dim), every row padded to the longest, and memory reserved up front for the
# longest a row may grow. vLLM's *PagedAttention* (Kwon et al., 2023) stores the cache instead in
# fixed-size **blocks** of a few tokens each (16 by default in vLLM), allocated as a row grows,
# like pages of virtual memory; each sequence has a **block table** that lists, in order, the
# physical blocks holding its tokens, and the attention kernel follows that table. A row then
# wastes at most one partly filled block, rows can join and leave without moving anyone's cache,
# and rows with a common prefix can share its blocks.
#
# ladref keeps the simple layout, for clarity: one (B, heads, T, head_dim) tensor per layer, a
# *frontier* T where every pass writes all rows' new entries, and *holes*, slots a row does not
# use (after a short prompt, or a rejected draft), hidden by the row's attention mask. The price
# is memory and padded compute, as section 4 shows.
#
# ## 4. A batch in ladref
#
# Every decoder of ladref takes a list of prompts as well as one prompt; the prompts may differ
# in length. The result is a `ladref.BatchResult`: `.rows` (one `DecodeResult` per prompt, in
# order, each with its own `.stats`), `.token_ids`, `.texts`, `.passes` (section 2) and the
# batch's statistics `.steps` (the most steps any row took) and `.compression` (S over the
# batch: every row's tokens over every row's steps). One batched step does for every row at once
# what the one-prompt step of tutorials 3 to 5 does for one, as tensor operations over the rows,
# around one forward pass of all rows (section 9 says why it is built that way).
#
# Each row gets its own positions and its own attention mask, so each row computes what it would
# compute alone: its output is its batch-1 output **exact to rounding**. The batch multiplies
# matrices of other shapes, which round differently: in float64 every row is identical to its
# batch-1 output; in float32 or half precision a near-tie between two tokens may, rarely, tip the
# other way. Section 2 decoded the batch with greedy decoding; here each row against the same
# prompt decoded alone:

# %%
alone = [greedy_decode(model, p, MAX_NEW) for p in prompts]
for b, (prompt, row, one) in enumerate(zip(prompts, batch, alone)):
    first = next((i for i, (x, y) in enumerate(zip(row.token_ids, one.token_ids)) if x != y), None)
    check = "= batch-1 greedy" if row.token_ids == one.token_ids else f"differs from batch-1 greedy at token {first} (rounding)"
    print(f"row {b}: prompt {len(prompt):2d} tokens -> {len(row.token_ids):2d} new, {check}: {row.text[:50]!r}")
print(f"\n{batch.passes} passes for the batch; one prompt at a time: {sum(r.stats.steps + 1 for r in alone)}")

# %% [markdown]
# Row 0 stops at its end-of-sequence token after a few tokens; from then on the passes hold three
# rows. The draft decoders take the same list. Their rows should equal batched greedy's rows,
# token for token, with the same caveat about rounding (`S` is a row's tokens per step;
# `fed/step` the tokens it fed per step, its width q):

# %%
drafters = {
    "prompt lookup": prompt_lookup_decode(model, prompts, MAX_NEW),
    "lookahead W=N=G=4": lookahead_decode(model, prompts, MAX_NEW, config=LookaheadConfig(4, 4, 4)),
}
print(f"{'':18} {'row':>3} {'tokens':>6} {'steps':>5} {'S':>5} {'fed/step':>8}")
for name, result in drafters.items():
    for b, (row, greedy_row) in enumerate(zip(result, batch)):
        equal = "" if row.token_ids == greedy_row.token_ids else "   differs from batched greedy"
        s = row.stats
        print(f"{name if b == 0 else '':18} {b:3d} {s.new_tokens:6d} {s.steps:5d} {s.compression:5.2f} "
              f"{s.mean_forward_tokens:8.1f}{equal}")
    print(f"{'':18} {result.passes} passes for the batch\n")

# %% [markdown]
# **Ragged acceptance.** In one pass each row verifies its own draft and accepts its own number of
# tokens (`row.stats.accepted_per_step`), so the rows drift apart: the code and the repeated
# sentence often move several tokens at a time, the story mostly one at a time. In the grid below each column
# is one step, one forward pass of the live rows; a blank cell is a row that has finished.

# %%
def accepted_matrix(result):
    """rows x steps: tokens each row accepted in each step, NaN once it is done."""
    grid = np.full((len(result), result.steps), np.nan)
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
    ax.set_title(f"{name}: tokens accepted per step (numbers: more than one)", fontsize=9)
    fig.colorbar(image, ax=ax, pad=0.01)
fig.tight_layout()
plt.show()

# %% [markdown]
# **The price of one padded tensor.** A pass computes B x Q tokens, Q the widest row's step,
# whatever the other rows fed; a narrower row's extra slots are masked out. A packed layout
# (TensorRT-LLM packs the requests of a batch end to end; vLLM's paged cache lets its kernels
# skip the padding too) pays only for the tokens fed:

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
# ## 5. Stragglers: S over the rows is not the batch's speed-up
#
# `BatchResult.compression` is S over the batch: every row's tokens over every row's steps. It
# says how much work the rows saved, but not how much sooner the batch finishes. A static batch
# runs until its **slowest row** (the one that needs the most steps) is done; a row that finished
# early waits, its slot empty. So the batch needs as many passes as its slowest row needs steps
# (`BatchResult.steps`), and its speed-up over batched greedy, in passes, is greedy's slowest row
# over the drafted batch's slowest row:

# %%
greedy_steps = [row.stats.steps for row in batch]
print(f"batched greedy: steps per row {greedy_steps}, the batch needs {batch.steps} steps\n")
print(f"{'':18} {'steps per row':>18} {'S per row':>24} {'mean S':>7} {'batch S':>8} {'batch steps':>12} {'speed-up in passes':>19}")
for name, result in drafters.items():
    steps = [row.stats.steps for row in result]
    s_rows = [row.stats.compression for row in result]
    print(f"{name:18} {str(steps):>18} {' '.join(f'{s:5.2f}' for s in s_rows):>24} {np.mean(s_rows):7.2f} "
          f"{result.compression:8.2f} {result.steps:12d} {batch.steps / result.steps:19.2f}")

# %% [markdown]
# With prompt lookup the mean S is well above 1, yet the batch finishes hardly sooner than
# batched greedy: it waits for the story, a row with all its 40 tokens to write that prompt
# lookup barely helps (the story repeats little of its prompt). Lookahead helps the story more,
# and its batch gains more. Which row is
# the straggler decides; had the story been short, the batch would have followed the next
# slowest row. (The passes after the other rows left are narrower. On a machine where fewer rows
# cost less they are cheaper; on a memory-bound one, section 1, a pass of one row costs about
# what a pass of four does, and the passes count.)
#
# **Continuous batching** is the fix: when a row finishes, a waiting request takes its slot at
# the next step, so no slot stays empty, and the speed-up goes back to what the rows' steps saved
# in total: greedy's row steps over the drafted row steps, the ratio batch S measures. A small
# simulation shows it, from the steps per row measured above: a stream of 16 requests (these four
# prompts, four times over) served through 4 slots, either in static batches of 4 or
# continuously. It counts passes, and assumes a row's steps do not depend on its batch-mates
# (true here: each row drafts and accepts on its own).

# %%
def static_passes(steps, slots):
    """Passes to serve the requests in order, `slots` at a time, each batch until its slowest row is done."""
    return sum(max(steps[i : i + slots]) for i in range(0, len(steps), slots))


def continuous_passes(steps, slots):
    """Passes when a finished row's slot is given to the next request in the queue at once."""
    queue, running, passes = list(steps), [], 0
    while queue or running:
        running += [queue.pop(0) for _ in range(min(slots - len(running), len(queue)))]
        running = [left - 1 for left in running if left > 1]
        passes += 1
    return passes


stream = {"greedy": greedy_steps * 4} | {name: [row.stats.steps for row in result] * 4 for name, result in drafters.items()}
static_base, continuous_base = static_passes(stream["greedy"], 4), continuous_passes(stream["greedy"], 4)
print(f"{'16 requests, 4 slots':20} {'static passes':>14} {'speed-up':>9} {'continuous passes':>18} {'speed-up':>9} "
      f"{'row steps saved':>16}")
for name, steps in stream.items():
    s, c = static_passes(steps, 4), continuous_passes(steps, 4)
    print(f"{name:20} {s:14d} {static_base / s:9.2f} {c:18d} {continuous_base / c:9.2f} {sum(stream['greedy']) / sum(steps):16.2f}")

# %% [markdown]
# Continuous batching needs fewer passes for every method (no slot waits idle), and drafting's
# speed-up moves from the straggler's toward the row steps saved ("row steps saved": greedy's row
# steps over the method's). A single request's time still depends on its own S: continuous
# batching helps the server's throughput, not the straggler itself.
#
# ## 6. Where drafting stops paying, while the weights dominate
#
# Back to the cost of a pass. A draft source that yields S tokens per step while each row feeds
# q tokens per step, in a batch of B, is faster than batched greedy (1 token per row per pass of
# t(1, B)) by about
#
#     speed-up(B) = S x t(1, B) / t(q, B)          (S / CostSurface.relative(q, batch=B))
#
# `CostSurface.roofline(weights_s, token_s)` builds the surface t(q, B) = max(weights_s,
# B x q x token_s) of section 1 (its ridge is weights_s / token_s tokens). Three are used below:
# the roofline fitted on this machine in section 1, and two models, not measurements:
#
# * a CPU roofline `roofline(0.015, 0.0014)`: 15 ms per weight read, 1.4 ms per token, ridge
#   about 11 tokens, a nominal estimate for a small CPU, not a measurement. The committed
#   measurement of section 1 on the project's 2-core CPU
#   (`benchmarks/archive/load/threads_linears_b16/`) gives t(1, B=1) = 52 ms a pass and
#   t(8, B=8) / 64 = about 3.1 ms a token: a ridge of about 17 tokens;
# * a GPU-shaped roofline `roofline(0.01, 0.01 / 512)`: ridge 512 tokens.
#
# The S and q of the two draft sources are those measured on the batch of section 4 (every row's
# steps together); a stronger, hypothetical source is added for contrast.

# %%
def pooled(result):
    """S and the mean q over every row's steps."""
    return result.compression, result.mean_forward_tokens


CPU_ROOF, GPU_ROOF = (0.015, 0.0014), (0.01, 0.01 / 512)
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
    for source, (s, q) in sources.items():
        ax.plot(BATCHES, [s / surfaces[name].relative(q, batch=b) for b in BATCHES], label=f"{source}: S={s:.2f}, q={q:.1f}")
    ax.axhline(1, color="grey", lw=0.8, ls="--")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("batch size B")
    ax.set_title(f"{name}: ridge {roofs[name][0] / roofs[name][1]:.0f} tokens", fontsize=9)
    ax.grid(True, alpha=0.3)
axes[0].set_ylabel("predicted speed-up over batched greedy")
axes[0].legend(fontsize=7)
fig.tight_layout()
plt.show()

# %% [markdown]
# Each curve is flat while the drafted pass, B x q tokens, stays under the ridge; past that,
# t(q, B) grows with B while t(1, B) does not (yet), and the speed-up falls as ridge / B. Solving
# S x weights_s = B x q x token_s gives the break-even batch size in one line:
#
#     B* = S x ridge / q
#
# A source that feeds many tokens per step for a small S (the lookahead window of W = N = G = 4)
# has spent the CPU's headroom already at B = 1; a thin chain with a modest S (prompt lookup)
# lasts to a batch of a few on a CPU, to more than a hundred on the GPU-shaped surface. Once B
# rows alone fill the ridge, t(q, B) = q t(1, B) and the speed-up is S / q, at most 1: every
# rejected draft token is then pure loss. This is the reasoning behind a batch-size threshold.
# But it rests on section 1's rule, "rows or drafts, the pass does not care", which needs the
# weights to dominate the bytes a pass reads.
#
# ## 7. The KV term: rows read their own cache, drafts share one
#
# Put the KV cache back into the roofline. A pass of B rows, each with L cached tokens and
# feeding q new ones, reads the weights once and **every row's cache**, and computes, per token
# fed, 2P FLOPs for the weights and about 4 x layers x heads x head_dim x L for attention (a dot
# product with every cached key, then a weighted sum of every cached value):
#
#     t(B, q, L) = max( (W + B x L x k) / bandwidth ,  B x q x (2P + 4 x layers x heads x head_dim x L) / compute )
#
# The compute term is the same for n rows of one token as for one row of n tokens. The memory
# term is not: **n rows read n caches, while n drafted tokens of one row read that row's one
# cache**. At L = 128 the caches are small next to W (section 1: 1 % of it for a row of SmolLM2),
# so rows and drafts cost the same. At long contexts the caches outweigh the weights: then every
# extra row costs a full cache read, while drafts stay nearly free, because they share the cache
# their row reads anyway. In a large batch at long context the pass stays memory-bound, and
# drafting pays again at large B. This is the point of MagicDec (Chen et al., 2024, "MagicDec:
# Breaking the Latency-Throughput Tradeoff for Long Context Generation with Speculative
# Decoding").
#
# Computed with the formula (a model, not a measurement) for the 7B-class GQA model of
# section 3 on a GPU with the datasheet peaks of an NVIDIA H100 SXM (3.35 TB/s, 989 TFLOP/s dense
# bf16, 80 GB), first the cost of n tokens per pass as n rows or as n drafts of one row:

# %%
SEVEN_B = dict(layers=32, heads=32, kv_heads=8, head_dim=128, params=7.24e9, nbytes=2)  # Mistral-7B's shape, float16
BANDWIDTH, COMPUTE = 3.35e12, 989e12  # bytes/s and FLOP/s: an H100 SXM's datasheet peaks (a model)


def pass_seconds(rows, q, kv, m=None):
    """The roofline with the KV term: t(B, q, L) for `rows` rows feeding q tokens each over `kv` cached ones."""
    m = SEVEN_B if m is None else m
    k = kv_bytes_per_token(m["layers"], m["kv_heads"], m["head_dim"], m["nbytes"])
    memory = (m["params"] * m["nbytes"] + rows * kv * k) / BANDWIDTH
    compute = rows * q * (2 * m["params"] + 4 * m["layers"] * m["heads"] * m["head_dim"] * kv) / COMPUTE
    return max(memory, compute)


base = pass_seconds(1, 1, 128)
ridge_7b = (SEVEN_B["params"] * SEVEN_B["nbytes"] / BANDWIDTH) / (2 * SEVEN_B["params"] / COMPUTE)
print(f"one token, one row, L = 128: {base * 1e3:.2f} ms (the weight read); ridge about {ridge_7b:.0f} tokens a pass")
print("times below relative to that pass\n")
k_7b = kv_bytes_per_token(SEVEN_B["layers"], SEVEN_B["kv_heads"], SEVEN_B["head_dim"], SEVEN_B["nbytes"])
room = GPU_MEMORY - SEVEN_B["params"] * SEVEN_B["nbytes"]  # bytes left for the cache
print(f"{'L':>7} {'n':>4} {'n rows of 1 token':>18} {'1 row of n tokens':>18} {'n rows fit in 80 GB':>20}")
for kv in (128, 4096, 32768):
    for n in (8, 64):
        print(f"{kv:7d} {n:4d} {pass_seconds(n, 1, kv) / base:18.2f} {pass_seconds(1, n, kv) / base:18.2f} "
              f"{str(n * kv * k_7b <= room):>20}")

# %% [markdown]
# Now the speed-up of drafting in a batch of B rows, S x t(B, 1, L) / t(B, q, L), for a
# hypothetical source with S = 2 that feeds q = 4 tokens per row, at several context lengths.
# A batch is only drawn while its cache fits in the 80 GB beside the weights:

# %%
S_DRAFT, Q_DRAFT = 2.0, 4
sizes = 2 ** np.arange(0, 11)
fig, ax = plt.subplots(figsize=(8, 3.8))
print(f"{'L':>7} {'largest B that fits':>20} {'first B (of 1, 2, 4, ...) where drafting loses':>48}")
for kv in (128, 1024, 4096, 16384):
    fits = [int(b) for b in sizes if b * kv * k_7b <= room]
    gains = [S_DRAFT * pass_seconds(b, 1, kv) / pass_seconds(b, Q_DRAFT, kv) for b in fits]
    ax.plot(fits, gains, marker="o", label=f"L = {kv}")
    stop = next((b for b, g in zip(fits, gains) if g < 1), None)
    print(f"{kv:7d} {int(room // (kv * k_7b)):20d} {stop if stop else f'none up to B = {fits[-1]}':>48}")
ax.axhline(1, color="grey", lw=0.8, ls="--")
ax.set_xscale("log", base=2)
ax.set_xlabel("batch size B (only sizes whose cache fits in 80 GB)")
ax.set_ylabel("speed-up over batched greedy")
ax.set_title(f"roofline with the KV term (a model): 7B GQA, H100-like, S = {S_DRAFT}, q = {Q_DRAFT}", fontsize=9)
ax.legend(fontsize=8)
ax.grid(True, alpha=0.3)
plt.show()


# %% [markdown]
# With the weights dominating (L = 128), rows and drafts cost the same, and drafting stops paying
# once the batch's drafted tokens pass the ridge, as in section 6. At 4096 tokens of context, 64
# rows cost over three times what 64 drafts of one row cost, and the pass stays bound by
# the cache reads at every B that fits in memory: drafting keeps its speed-up, because the drafts
# ride on a cache read that the pass makes anyway. The longer the context, the larger the batch
# at which drafting still pays. The curves of sections 1 and 6 were measured or modelled at KV
# 128: they describe the short-context case only.
#
# The effect is visible even on this CPU with SmolLM2, whose cache is small next to its weights.
# The committed surface of section 1 (`benchmarks/archive/load/threads_linears_b16/`, 2 threads,
# float32) was measured at KV 128 and 512. Going from 128 to 512 cached tokens adds 384 tokens of
# cache per row: n rows read n times that, n drafts of one row read it once.

# %%
short, long_ = cpu.kv_lengths  # the committed CPU surface of section 1
print(f"committed CPU surface, ms a pass, KV {short} -> {long_}:\n")
print(f"{'n':>3} {'n rows of 1 token':>24} {'1 row of n tokens':>24} {'extra cache read, rows / drafts':>33}")
for n in (8, 16):
    rows = [cpu.time(1, kv, batch=n) * 1e3 for kv in (short, long_)]
    drafts = [cpu.time(n, kv, batch=1) * 1e3 for kv in (short, long_)]
    extra = (long_ - short) * KV_TOKEN
    print(f"{n:3d} {rows[0]:7.0f} -> {rows[1]:4.0f} ({rows[1] / rows[0] - 1:+4.0%}) {drafts[0]:7.0f} -> {drafts[1]:4.0f} "
          f"({drafts[1] / drafts[0] - 1:+4.0%}) {n * extra / 1e6:14.0f} MB / {extra / 1e6:.0f} MB")

# %% [markdown]
# A longer cache makes a pass of n rows noticeably dearer and a pass of n drafts barely so. On a
# GPU serving a 7B model at thousands of tokens of context, the same asymmetry decides whether a
# batch of a hundred should still draft.
#
# ## 8. Deciding whether to draft, under load
#
# A prediction from averages is not a decision. A decoder can decide at every step, from the
# batch it is in: how many rows are live, and how wide a pass of that batch can be before it
# costs more. `ladref.adaptive_decode` does this row by row: it prices each row's step on
# `CostSurface.at(B)`, the cost curve of a pass of the B rows live at this step (rows that finish
# make the next passes cheaper), and feeds only the drafts whose expected accepted tokens pay for
# their share of the pass. The surface is its `cost` argument.
#
# Four rules against batched greedy, all built from ladref's public decoders:
#
# * **always draft**: `prompt_lookup_decode(..., draft_len=4)`, up to 4 draft tokens a row;
# * **threshold**: the same while the batch has at most 4 rows, greedy above (the idea of vLLM's
#   `disable_by_batch_size`; here decided once for the call, since a static batch only shrinks;
#   `ladref.bench.engines.threshold_decode` decides it at every step);
# * **headroom**: read the surface once: draft the longest chain k whose pass costs at most 25 %
#   more than a greedy pass of the same batch, t(1 + k, B) <= 1.25 t(1, B), acceptance ignored;
#   `draft_decode(..., proposers=PromptLookupProposer(8), draft_budget=k)` feeds at most k draft
#   tokens a row per step;
# * **adaptive**: `adaptive_decode(..., cost=surface)`.
#
# A tiny random model (a 2-layer Llama, float64, built from its config as in tutorial 6) makes
# the contrast quick to see: its greedy texts soon cycle, so its drafts are often accepted. In
# float64 every rule's rows must be identical to greedy's. Two surfaces, both models: a
# CPU-like roofline with a ridge of about 4 tokens, which a batch of 8 greedy rows is already
# past (a smaller ridge than section 6's 11, to make the point with 8 rows), and the GPU-shaped
# one. The table prices every run's passes on both surfaces: "padded" charges each pass B x Q
# tokens (ladref's layout), "packed" the tokens fed (a packed engine's).

# %%
@contextlib.contextmanager
def one_thread():
    """Tiny models run on one torch thread: for such small matrices threads only add overhead."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


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
NO_EOS = {"eos_token_id": []}  # the tiny model's rows run to their budget


def headroom_budget(surface, rows, slack=1.25, longest=8):
    """The most draft tokens k a row may feed with t(1 + k, B) <= slack x t(1, B) on the surface."""
    curve = surface.at(rows)
    return max(k for k in range(longest + 1) if curve.time(1 + k) <= slack * curve.time(1))


def headroom(prompts, surface):
    k = headroom_budget(surface, len(prompts))
    if k == 0:
        return greedy_decode(tiny, prompts, TINY_NEW, **NO_EOS)
    return draft_decode(tiny, prompts, TINY_NEW, proposers=PromptLookupProposer(8), draft_budget=k, **NO_EOS)


def threshold(prompts, limit=4, draft_len=4):
    if len(prompts) > limit:
        return greedy_decode(tiny, prompts, TINY_NEW, **NO_EOS)
    return prompt_lookup_decode(tiny, prompts, TINY_NEW, draft_len=draft_len, **NO_EOS)


def drafted(result):
    """Draft and window tokens fed per row per pass."""
    fed = sum(sum(r.stats.draft_tokens_per_step) + sum(r.stats.window_tokens_per_step) for r in result)
    return fed / len(result) / result.passes


def modelled(result, roof, packed=False):
    """Seconds of the run's passes on a roofline: padded B x Q tokens per pass (packed: the tokens fed)."""
    weights_s, token_s = roof
    return sum(max(weights_s, (sum(qs) if packed else len(qs) * max(qs)) * token_s) for qs in widths_per_pass(result))


rules = {
    "greedy": lambda rows: greedy_decode(tiny, rows, TINY_NEW, **NO_EOS),
    "always draft 4": lambda rows: prompt_lookup_decode(tiny, rows, TINY_NEW, draft_len=4, **NO_EOS),
    "threshold (B <= 4)": threshold,
    "headroom, CPU-like": lambda rows: headroom(rows, CPU_LIKE),
    "adaptive, CPU-like": lambda rows: adaptive_decode(tiny, rows, TINY_NEW, cost=CPU_LIKE, **NO_EOS),
    "headroom, GPU-shaped": lambda rows: headroom(rows, GPU_LIKE),
    "adaptive, GPU-shaped": lambda rows: adaptive_decode(tiny, rows, TINY_NEW, cost=GPU_LIKE, **NO_EOS),
}
print("modelled time relative to batched greedy on the same surface (padded: B x Q per pass; packed: tokens fed)")
print(f"{'':24} {'passes':>6} {'drafts/row/pass':>16} {'CPU-like padded':>16} {'CPU-like packed':>16} {'GPU-shaped':>11}")
with one_thread():
    for size in (1, 4, 8):
        rows = tiny_batch[:size]
        results = {name: rule(rows) for name, rule in rules.items()}
        base_run = results["greedy"]
        print(f"B = {size}   (headroom's k: CPU-like {headroom_budget(CPU_LIKE, size)}, GPU-shaped {headroom_budget(GPU_LIKE, size)})")
        for name, result in results.items():
            assert result.token_ids == base_run.token_ids, name  # every rule keeps greedy's output
            cpu_padded, cpu_packed, gpu_time = (modelled(result, roof, packed) / modelled(base_run, roof, packed)
                                                for roof, packed in ((CPU_LIKE_ROOF, False), (CPU_LIKE_ROOF, True), (GPU_ROOF, False)))
            print(f"   {name:21} {result.passes:6d} {drafted(result):16.2f} {cpu_padded:16.2f} {cpu_packed:16.2f} {gpu_time:11.2f}")

# %% [markdown]
# Reading the table (times below 1 beat batched greedy on that surface):
#
# * on the GPU-shaped surface, every run that drafts gains, at every B here: a batch of 8 is
#   nowhere near a ridge of 512. The threshold rule gives that gain away at B = 8, and so do the
#   rules priced on the CPU-like surface from B = 4 on, since they stop drafting there;
# * on the CPU-like surface, drafting 4 tokens a row at B = 4 or 8 widens passes that the rows
#   already fill, and costs more than it saves; the rules that read that surface (headroom,
#   adaptive) draft at B = 1 and stop where the batch alone fills the ridge. Priced on the other
#   surface, the same rules are badly wrong (adaptive priced on the GPU-shaped surface feeds its
#   whole lookahead window, many times greedy's time on the CPU-like one): the surface is the one
#   input that tells a CPU from a GPU, and a fixed threshold cannot know it;
# * adaptive prices the pass as a whole, padding included: a draft that widens the pass must pay
#   for every row's time, while one within the width another row feeds anyway costs nothing.
#
# None of these surfaces has a KV term: with long contexts (section 7) the right threshold moves
# up, and a rule that reads a surface measured at the context lengths it serves moves with it.
# ladref's benchmark of all this on real prompts, batch by batch, is
# `python -m ladref bench --dataset specbench --batch 1,2,4,8,16`; its results are on the
# Benchmarks page.
#
# ## 9. Host work: what a batch costs besides its pass
#
# Sections 6 to 8 price a step by its forward pass alone. On a GPU the pass of a small model takes
# milliseconds, and what the host does around it adds to every step: the Python of the step, the
# torch operations it dispatches (each one a kernel launch on a GPU), and every value it reads back
# from the device (`.item()`, `.tolist()`, `bool(tensor)`), where the host waits until the GPU has
# finished all the work queued before it. Host work that grows with B eats the gain batching is for.
#
# ladref's first batch design ran each row's one-prompt loop in a thread of its own, the rows
# meeting at one forward pass: proposing, laying out, verifying and committing ran once per row, in
# Python, each row reading its results back several times a step. On an H100 and an H200 (float16,
# SmolLM2-135M, 12 prompts; [GPU results](../../gpu/), `benchmarks/results_gpu/load_h100/` and
# `load_h200/`) adaptive decoding then made 0.27x and 0.48x batched greedy's throughput at B = 12,
# where the measured cost surface predicted about 1.9x: the host loop, not the GPU, decided.
#
# The batched step does the same work as tensor operations over the rows, on the model's device,
# and between two passes the host reads ONE small tensor: which rows stopped, how wide the next
# pass is, and how far the cache's frontier moved. Host work is measurable without a GPU: with a
# tiny model the forward pass is nearly free, so the time outside it is the host's, and torch's
# profiler counts the operations and the reads. `python -m ladref bench --host-overhead` does
# exactly that (`ladref.bench.host`, one torch thread); here a short version of it, against
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


with quiet_stderr(), one_thread():
    points = measure_host_overhead(tiny_llama(), batches=(1, 16), methods=("greedy", "prompt_lookup", "generate"),
                                   max_new_tokens=24, rounds=1)
print(f"{'':14} {'B':>3} {'ms/pass':>8} {'host ms/pass':>13} {'torch ops/pass':>15} {'reads/pass':>11} {'= greedy':>9}")
for point in points:
    print(f"{point.method:14} {point.batch:3d} {point.ms_per_pass:8.2f} {point.host_ms_per_pass:13.2f} "
          f"{point.ops_per_pass:15.0f} {point.reads_per_pass:11.1f} {str(point.match):>9}")

# %% [markdown]
# One read a pass, and a count of torch operations that does not grow with B: that is what keeps
# a batch's host work flat. The committed runs of the full benchmark (48 new tokens a row, three
# rounds, every method) measured both designs on the same machine: the thread design at the last
# commit that had it (in the archive of past runs), the tensor program in the current results:

# %%
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
# With a thread per row, every figure grew with B: at B = 16 batched greedy read from the device
# dozens of times a pass. With one tensor program the reads stay at one a pass at every B, and
# the host work grows only as much as the tensors it handles do. What remains is a fixed cost a
# step: a drafting step dispatches a few hundred small operations (proposing, merging the trees,
# verifying, committing), several times greedy's. Capturing the whole step in one graph, so that
# it is launched once, is the next step for that cost.
#
# ## Exercises
#
# 1. Predict with B* = S x ridge / q the batch size at which prompt lookup (S and q from section
#    6's table) stops paying on the CPU roofline (ridge about 11), then on this machine's fitted
#    one. Check both against the table. Why does the lookahead window of W = N = G = 4 stop
#    paying already at B = 1 on a CPU?
# 2. KV memory. For Llama-2-7B in float16 (32 layers, 32 key/value heads of 128), compute the
#    bytes of cache per token and how many rows of 4096 tokens fit in 80 GB beside the weights
#    (6.74 B parameters). How many change with an 8-bit cache? A static server reserves room for
#    4096 tokens a row, but its rows use 1,000 tokens on average: how much of the cache is wasted,
#    and how much would 16-token paged blocks waste?
# 3. The KV term. Redo section 7's speed-up computation with Llama-2-7B's shape instead of the GQA
#    model (`SEVEN_B` with `kv_heads=32`, `params=6.74e9`): at L = 4096, which batch sizes fit,
#    and does drafting (S = 2, q = 4) still pay at the largest? For the GQA model, at how many
#    cached tokens over the whole batch (B x L) does the cache read equal the weight read?
# 4. Stragglers. With the steps per row of section 5, compute the static and continuous passes of
#    the 16-request stream with 2 slots and with 8 slots, for greedy and prompt lookup. When does
#    static batching lose most against continuous? Does continuous batching shorten the slowest
#    request's own time?
# 5. Thresholds. In section 8, run the threshold rule with `limit=2` and `limit=8`, and with
#    `draft_len=1`, at B = 1, 4 and 8. Which setting is best on the CPU-like surface, and which on
#    the GPU-shaped one? Can any one threshold suit both?
