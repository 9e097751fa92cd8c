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
# # 6. Cost and scaling: FLOPs per step, the scaling law, choosing W, N, G
#
# Lookahead decoding trades FLOPs for steps: a step feeds up to (N-1)(W+G) tokens and yields S
# tokens on average. Whether that is a good trade depends on what a wider forward pass costs
# on *your* hardware. This notebook
#
# 1. counts FLOPs per step with `ladref.bench.flops` (and checks the formula against PyTorch's
#    FLOP counter),
# 2. measures what a q-token forward pass costs on this machine,
# 3. runs a small scaling-law sweep with `ladref.bench.scaling`,
# 4. puts it together into a rule for choosing W, N and G.

# %%
import warnings

# transformers imports tqdm, which warns "IProgress not found" in a notebook without ipywidgets
# (its progress bars then fall back to plain text). Harmless here, so that one warning is hidden.
warnings.filterwarnings("ignore", message="IProgress not found")

# %%
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from IPython.display import Image, display
from transformers import LlamaConfig, LlamaForCausalLM

from ladref import LookaheadConfig, load_default_model
from ladref.bench.autotune import interpolate_cost, measure_forward_cost
from ladref.bench.flops import (
    ModelShape,
    forward_flops,
    lookahead_step_shape,
    measure_forward_flops,
    step_flops,
)
from ladref.bench.scaling import fit_log_linear, plot_scaling, scaling_sweep

model, tokenizer = load_default_model(device="cpu")  # quiet; progress=True shows the loading bars
shape = ModelShape.from_model(model)
print(shape)

# %% [markdown]
# ## 1. FLOPs of one step
#
# `forward_flops(shape, q, c, k)` counts the matrix multiplications of a pass over q new tokens
# with c cached tokens and k logits kept: `2 P q + 4 L A q (c + q) + 2 d V k`. A lookahead step
# with g candidates laid out as the paper's flat rows has `q = (N-1)(W+g)` and keeps
# `k = 1 + W + g(N-1)` logits (`lookahead_step_shape`); ladref merges the candidates into a trie
# of n <= g(N-1) nodes, so it feeds `(N-1)W + n` and the table below is the worst case. A step
# that verifies a draft tree of n nodes without a window (prompt lookup, Token Recycling) feeds
# `q = 1 + n` and reads every logit.

# %%
context = 256
greedy_step = step_flops(shape, "greedy", context)
print(f"{'method':28} {'q':>4} {'GFLOPs/step':>12} {'x greedy':>9}")
print(f"{'greedy':28} {1:4d} {greedy_step / 1e9:12.3f} {1.0:9.1f}")
print(f"{'jacobi (m = 8)':28} {9:4d} {step_flops(shape, 'jacobi', context, block_size=8) / 1e9:12.3f} "
      f"{step_flops(shape, 'jacobi', context, block_size=8) / greedy_step:9.1f}")
configs = [LookaheadConfig(2, 3, 2), LookaheadConfig(4, 4, 4), LookaheadConfig(8, 5, 8), LookaheadConfig(15, 5, 15)]
for cfg in configs:
    q, _ = lookahead_step_shape(cfg)
    f = step_flops(shape, "lookahead", context, cfg)
    name = f"lookahead W={cfg.window_size} N={cfg.ngram_size} G={cfg.max_candidates}"
    print(f"{name:28} {q:4d} {f / 1e9:12.3f} {f / greedy_step:9.1f}")
tree_step = forward_flops(shape, 81, context, 81)  # recycling_decode's default tree: 80 nodes
print(f"{'draft tree of 80 nodes':28} {81:4d} {tree_step / 1e9:12.3f} {tree_step / greedy_step:9.1f}")

# %% [markdown]
# Per generated token, lookahead costs about `(N-1)(W+G) / S` times greedy's FLOPs: with
# W = N = G of a few and S around 2, that is ten times more arithmetic for half the steps.
#
# The formula is checked against `torch.utils.flop_counter.FlopCounterMode` on a tiny model with
# eager attention (the counter cannot see inside every fused kernel):

# %%
tiny_config = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                          bos_token_id=0, eos_token_id=None, pad_token_id=0)
tiny_config._attn_implementation = "eager"
torch.manual_seed(0)
tiny_eager = LlamaForCausalLM(tiny_config).eval()
tiny_shape = ModelShape.from_model(tiny_eager)
for q, c, k in [(1, 32, 1), (24, 32, 13), (60, 100, 60)]:
    print(f"q={q:2d} c={c:3d} k={k:2d}: formula {forward_flops(tiny_shape, q, c, k):>10,}   "
          f"counted {measure_forward_flops(tiny_eager, q, c, k):>10,}")

# %% [markdown]
# ## 2. What a wider pass costs on this machine
#
# FLOPs are not time. `ladref.bench.autotune.measure_forward_cost` times one forward pass over q new
# tokens (median of a few runs, fixed context). On a GPU t(q) stays nearly flat up to dozens or
# hundreds of tokens, because decoding is limited by reading the weights, not by arithmetic; on
# a CPU it rises much sooner. (Timings are noisy when other programs share the CPU: if the
# curve below is not increasing, run the cell again.)

# %%
blocks = (1, 4, 16, 64)
cost = measure_forward_cost(model, blocks, context=128, repeats=2)
flops = {q: forward_flops(shape, q, 128, q) for q in blocks}
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(blocks, [cost[q] / cost[1] for q in blocks], marker="o", label="measured time t(q) / t(1)")
ax.plot(blocks, [flops[q] / flops[1] for q in blocks], marker="s", ls="--", label="FLOPs F(q) / F(1)")
ax.set_xscale("log", base=2)
ax.set_yscale("log", base=2)
ax.set_xlabel("tokens per forward pass q")
ax.set_ylabel("relative to q = 1")
ax.legend()
ax.grid(True, alpha=0.3)
ax.set_title(f"forward-pass cost on this machine ({torch.get_num_threads()} threads)")
plt.show()
for q in blocks:
    print(f"q={q:3d}: {cost[q] * 1e3:8.1f} ms  ({cost[q] / cost[1]:5.2f} x a 1-token pass)")

# %% [markdown]
# ## 3. The scaling law
#
# The paper (section 4) observes that with N large enough, S grows linearly in the log of the
# per-step tokens: doubling W (with G = W) adds a roughly constant amount to S.
# `scaling_sweep` measures S on a grid of (W, N); `fit_log_linear` fits
# `S = a + b log2((N-1)(W+G))` per N; `plot_scaling` draws it.
#
# Sweeping SmolLM2 takes too long for a CPU notebook, so the sweep below runs on a tiny random
# model: its text is meaningless but repetitive, which is enough to watch the mechanics (pool
# hits grow with the window). The Benchmarks page shows the sweep on SmolLM2 over real prompts.

# %%
tiny_config._attn_implementation = "sdpa"
torch.manual_seed(1)
tiny = LlamaForCausalLM(tiny_config).to(torch.float64).eval()
prompts = [torch.randint(0, 64, (12,), generator=torch.Generator().manual_seed(s)) for s in range(3)]
points = scaling_sweep(tiny, prompts, windows=(1, 2, 4, 8, 16), ngrams=(3, 5), max_new_tokens=48)
for p in points:
    print(f"N={p.ngram} W={p.window:2d} G={p.candidates:2d}: per-step tokens {p.step_tokens:3d}, "
          f"S = {p.compression:.2f}, steps = {p.steps}")
for n, fit in fit_log_linear(points).items():
    print(f"N={n}: S = {fit.intercept:.2f} + {fit.slope:.2f} log2(tokens per step), r2 = {fit.r2:.2f}")
with tempfile.TemporaryDirectory() as folder:
    display(Image(filename=str(plot_scaling(points, Path(folder) / "scaling.png", "scaling sweep, tiny random model"))))

# %% [markdown]
# ## 4. Choosing W, N, G for your hardware
#
# A step of width q takes t(q) and yields S tokens; greedy takes t(1) per token. So
#
#     predicted speedup = S * t(1) / t(q)
#
# and a configuration only pays off when S exceeds its **break-even** `t(q) / t(1)`. The
# table uses the costs measured above (`interpolate_cost` fills in q between measured points).

# %%
print(f"{'W':>3} {'N':>3} {'G':>3} {'q':>4} {'break-even S':>13}")
for w, n in [(1, 3), (2, 3), (4, 4), (8, 5), (15, 5)]:
    cfg = LookaheadConfig(w, n, w)
    q, _ = lookahead_step_shape(cfg)
    print(f"{w:3d} {n:3d} {w:3d} {q:4d} {interpolate_cost(cost, q) / interpolate_cost(cost, 1):13.2f}")

# %% [markdown]
# Rules of thumb that follow:
#
# * find the largest q whose t(q) is still close to t(1): that is your free budget of tokens per
#   step (on a data-center GPU and a 7B model, dozens to a hundred and more; on this CPU, few);
# * spend it as `(N-1)(W+G) <= q`, with G = W as in the paper, and N around 4-6: larger N
#   makes each accepted n-gram longer but the window rows cost W tokens each;
# * then measure S on prompts like yours: `ladref.bench.autotune.recommend(model, prompts)` does the
#   whole procedure (t(q), S per config, greedy interleaved) and only recommends a config that
#   was measured faster than greedy;
# * or let each step decide: `ladref.adaptive_decode` measures t(q) once (`ladref.CostModel`,
#   see the cost model page of the documentation) and feeds, step by step, only the drafts whose
#   expected accepted tokens pay for their share of t(q).
#
# ## Exercises
#
# 1. Use the costs above and the S you measured in tutorial 5 to predict that run's speedup.
#    How close is it to the measured one?
# 2. Run `measure_forward_cost` with `torch.set_num_threads(1)`. How does the break-even S move?
# 3. In `forward_flops`, which term dominates for SmolLM2 at q = 24 and c = 256? At c = 4096?
# 4. Run `ladref.bench.autotune.recommend(model, [prompt])` on a few prompts of your own (it takes a
#    few minutes on a CPU). Which configuration does it pick, and why?
