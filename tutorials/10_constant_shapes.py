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
# # 10. Constant shapes: what a compiled lookahead step needs
#
# *Optional: this tutorial is for readers who want to run lookahead decoding compiled, with CUDA
# graphs on a GPU; nothing later in the course uses it.*
#
# On a GPU a decoding step of a small model is mostly kernel launches, and a **CUDA graph**
# replays a recorded step's launches as one. A graph replays *exactly* what it recorded, shapes
# included — and an eager lookahead step changes shape at every step. This tutorial
#
# 1. measures how the eager step's shapes change,
# 2. shows what a compiler does with changing shapes (it compiles again),
# 3. builds the constant-shape step of `ladref.CompiledDecoder`: every step padded to one width
#    with dummy tokens, over a preallocated static KV cache,
# 4. checks that it decodes exactly like greedy decoding and compiles once (on the CPU, with
#    `torch.compile`; CUDA graphs themselves need a GPU), and
# 5. quotes what the GPU benchmark measured, when it has been run.
#
# Everything runs on a CPU with a tiny random model, in float64 / float32 for exact answers.
#
# Where this sits: ladref has two tiers. The tutorials so far read **the reference**, one prompt,
# eager (`ladref.step`, the proposers). **The engine** (`ladref.batched`) runs every batch as one
# tensor program a step, and the compiled decoders are the engine too: a call is a batch of one
# row whose cache is the constant-shape runner built below (`ladref.batched.runner_cache`), only
# its forward pass compiled; `ladref.CapturedBatchDecoder` compiles the engine's whole step.

# %%
import warnings

# transformers imports tqdm, which warns "IProgress not found" in a notebook without ipywidgets
# (its progress bars then fall back to plain text). Harmless here, so that one warning is hidden.
warnings.filterwarnings("ignore", message="IProgress not found")

# %%
import json
import time
from pathlib import Path

import torch
from torch._dynamo.utils import counters
from transformers import LlamaConfig, LlamaForCausalLM

from ladref import CompiledDecoder, DraftTree, LookaheadConfig, greedy_decode, lookahead_decode
from ladref.masks import build_step_inputs, render
from ladref.results import DecodeStats
from ladref.runner import ModelRunner
from ladref.fast.static import StaticRunner

torch.manual_seed(0)
config = LlamaConfig(vocab_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, max_position_embeddings=256, eos_token_id=None)
config._attn_implementation = "sdpa"
tiny = LlamaForCausalLM(config).to(torch.float64).eval()
prompt = [1, 2, 3, 1, 2, 3, 1, 2, 5, 7]
lookahead = LookaheadConfig(window_size=3, ngram_size=3, max_candidates=3)

# %% [markdown]
# ## 1. The eager step changes shape
#
# A step feeds q = (N-1)W + n tokens, n being the nodes of the draft tree (the trie of the pool
# n-grams that start with the current token: 0 to G(N-1) nodes), and attends over the past plus
# itself, a KV cache that grows by the 1..N tokens each step accepts. Every (q, past + q) pair is
# a new shape for the attention kernel.

# %%
eager = lookahead_decode(tiny, prompt, 24, config=lookahead, eos_token_id=[])
past = len(prompt) - 1
shapes = []
for q, accepted in zip(eager.stats.forward_tokens_per_step, eager.stats.accepted_per_step):
    shapes.append((q, past + q))
    past += accepted
print("step (q, past + q):", shapes[:12], "...")
print(f"{len(set(shapes))} different shapes in {len(shapes)} steps; q took the values {sorted(set(s[0] for s in shapes))}")

# %% [markdown]
# ## 2. A compiler specializes on shapes
#
# `torch.compile` traces a function for the shapes it first sees. A second shape makes it
# recompile, into a graph with *dynamic* shapes; a CUDA graph, though, is a recording of
# concrete launches, and ``mode="reduce-overhead"`` records a new one for every new shape. A toy
# attention shows the recompilation: count the graphs compiled for changing shapes, then for one.

# %%
def attention(q, k):
    return (q @ k.transpose(-1, -2)).softmax(-1)


torch._dynamo.reset()
compiled_attention = torch.compile(attention)
for q_len, past_len in shapes[:6]:
    compiled_attention(torch.randn(q_len, 8), torch.randn(past_len, 8))
print("graphs compiled for 6 changing shapes:", counters["stats"]["unique_graphs"])
torch._dynamo.reset()
counters.clear()
compiled_attention = torch.compile(attention)
for _ in range(6):
    compiled_attention(torch.randn(12, 8), torch.randn(40, 8))
print("graphs compiled for 6 calls of one shape:", counters["stats"]["unique_graphs"])

# %% [markdown]
# ## 3. The constant-shape step
#
# Two changes make every step the same shape, both in the runner (`ladref.fast.static.StaticRunner`),
# so the step itself stays the one `lookahead_decode` runs:
#
# * **One width always.** The runner pads every step to a fixed width: dummy tokens are
#   appended after the real ones. A dummy sees only itself and no real token sees it, so the
#   real tokens' outputs do not change; its logits are never read and its K/V never committed.
#   `StaticRunner(..., step_width=w)` pads every step to w tokens; `CompiledDecoder` takes
#   w = (N-1)(W+G), the widest a lookahead step can be.
# * **A static KV cache.** The cache is preallocated for `max_length` positions; a step writes its
#   tokens after the committed ones and attends over all slots, the rest masked
#   (`ladref.masks.static_additive`), or, where the keys can be cut, over the committed slots
#   and its own only (`StaticRunner.span`); the accepted tokens' K/V are gathered into place.
#
# Here is a step whose tree holds one n-gram (2 nodes), padded to the width of G = 3 n-grams: the
# padded mask is the step's own, with the dummies (`D`) on the diagonal after it.

# %%
W, N, G = lookahead.window_size, lookahead.ngram_size, lookahead.max_candidates
width = lookahead.max_step_tokens()  # (N-1)(W+G)
tree = DraftTree.from_paths([[5, 7]], "lookahead")  # one n-gram: the N-1 = 2 tokens after the current one
step = build_step_inputs(prompt[-1], torch.tensor([[4, 6, 1], [3, 3, 8]]), tree, position=len(prompt) - 1)
pad = width - step.input_ids.shape[0]
padded = torch.block_diag(step.allowed, torch.eye(pad, dtype=torch.bool))  # what the runner sends
labels = [f"L{r}{c}" for r in range(N - 1) for c in range(W)] + [f"V{j}" for j in range(len(tree))] + [f"D{d}" for d in range(pad)]
print(render(padded, labels))
print(f"{step.input_ids.shape[0]} real tokens + {pad} dummies = {width} = (N-1)(W+G), whatever the tree")

# %% [markdown]
# The padding changes nothing the step reads: the same step through a `ModelRunner` (no padding)
# and through a `StaticRunner` that pads it to `width` gives the same logits for the real tokens.

# %%
logits = []
for runner in (ModelRunner(tiny), StaticRunner(tiny, max_length=64, step_width=width)):
    runner.prefill(torch.tensor(prompt), DecodeStats())  # the prompt but its last token, the current one
    logits.append(runner.forward(step.input_ids, step.position_ids, step.allowed))
print("logits of the real tokens, eager vs padded:", tuple(logits[0].shape), tuple(logits[1].shape),
      "equal:", torch.allclose(logits[0], logits[1][: step.input_ids.shape[0]], atol=1e-10))

# %% [markdown]
# The dummies cost compute (a step always pays for the widest tree) and attention runs over the
# whole cache. On a GPU, where the step is launch-bound, that is cheap; on a CPU it is not.
#
# ## 4. Same tokens, one compilation
#
# `CompiledDecoder(model, config, max_length=..., mode=None)` runs the constant-shape step without
# compiling: the engine's step (the window and pool as tensors, the twin of `lookahead_decode`'s
# proposer, and the same verifier) over a padding `StaticRunner`, so the same tokens in the same
# steps. Its statistics count each step's real tokens; the model computes `decoder.step_tokens`
# = (N-1)(W+G) of them every step.

# %%
reference = greedy_decode(tiny, prompt, 24, eos_token_id=[])
uncompiled = CompiledDecoder(tiny, lookahead, max_length=64, mode=None)
constant = uncompiled(prompt, 24, eos_token_id=[])
print("identical to greedy:", constant.token_ids == reference.token_ids, "| steps eager vs constant:",
      eager.stats.steps, constant.stats.steps)
print("real tokens per step, the same:", eager.stats.forward_tokens_per_step == constant.stats.forward_tokens_per_step,
      f"| computed per step: {uncompiled.step_tokens} (the runner's step_width {uncompiled.runner.step_width})")

# %% [markdown]
# Now compile it (`mode="default"`: on a CPU, `torch.compile` fuses kernels; `"reduce-overhead"`
# would add CUDA graphs on a GPU). float32, two prompts: one compilation, then replays.

# %%
tiny32 = LlamaForCausalLM(config).float().eval()
tiny32.load_state_dict({k: v.float() for k, v in tiny.state_dict().items()})
torch._dynamo.reset()
counters.clear()
decoder = CompiledDecoder(tiny32, lookahead, max_length=64, mode="default")
start = time.perf_counter()
decoder.warmup()
print(f"compile + capture: {decoder.capture_s:.1f} s (once per decoder)")
graphs = counters["stats"]["unique_graphs"]
for p in (prompt, [4, 4, 9, 4, 4, 9]):
    out = decoder(p, 24, eos_token_id=[])
    print("identical to greedy:", out.token_ids == greedy_decode(tiny32, p, 24, eos_token_id=[]).token_ids)
print("graphs compiled by the two calls:", counters["stats"]["unique_graphs"] - graphs)

# %% [markdown]
# ## 5. What it buys on a GPU
#
# The GPU benchmark (`bash benchmarks/run_gpu.sh`, [GPU results](../../gpu/)) measures
# transformers' static-cache compiled greedy decoding, ladref's compiled greedy decoding and
# compiled lookahead. Its numbers, when they have been committed:

# %%
results = Path("..") / "benchmarks" / "results_gpu"
rows = []
for path in sorted(results.rglob("*.json")):  # compiled rows may sit in a folder of their own
    payload = json.loads(path.read_text())
    for s in payload.get("summary", []):
        if s["method"].startswith(("compiled", "generate", "greedy")):
            where = path.relative_to(results).with_suffix("")
            rows.append(f"{str(where):26s} {s['method']:18s} S={s['compression']:.2f} {s['tokens_per_second']:7.1f} tok/s")
print("\n".join(rows) if rows else "No GPU results are committed yet: run benchmarks/run_gpu.sh on a CUDA machine.")

# %% [markdown]
# ## Exercises
#
# 1. In section 1, which changes the shape more often: the tree's size n or the cache length?
#    Count the steps where q changed against the steps where only past + q changed.
# 2. Pad a step whose tree is empty (`DraftTree.empty()`) to the width of G = 3 n-grams: how
#    many dummies does it get, what does the mask look like, and what does verification accept
#    then? (`ladref.verify.verify_greedy` with an empty tree.)
# 3. The commit copies the k accepted tokens' keys/values and is not compiled. A compiled commit
#    would need one shape: why may it always copy N slots, even when fewer tokens were accepted?
#    What would break if the next step did not overwrite those slots? (Hint: `static_additive`
#    and `length`.)
# 4. Time `CompiledDecoder(..., mode=None)` against `lookahead_decode` on the CPU for 64 tokens.
#    Which is faster here, and why would a GPU reverse it?
