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
# # 7. Constant shapes: what a compiled lookahead step needs
#
# On a GPU a decoding step of a small model is mostly kernel launches, and a **CUDA graph**
# replays a recorded step's launches as one. A graph replays *exactly* what it recorded, shapes
# included — and an eager lookahead step changes shape at every step. This tutorial
#
# 1. measures how the eager step's shapes change,
# 2. shows what a compiler does with changing shapes (it compiles again),
# 3. builds the constant-shape step of `ladref.CompiledDecoder`: G candidate rows always (dummies
#    when the pool has fewer) over a preallocated static KV cache,
# 4. checks that it decodes exactly like greedy decoding and compiles once (on the CPU, with
#    `torch.compile`; CUDA graphs themselves need a GPU), and
# 5. quotes what the GPU benchmark measured, when it has been run.
#
# Everything runs on a CPU with a tiny random model, in float64 / float32 for exact answers.

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

from ladref import CompiledDecoder, LookaheadConfig, greedy_decode, lookahead_decode
from ladref.masks import StepLayout, build_step_inputs, pad_candidates, render

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
# A step feeds q = (N-1)(W+g) tokens, g being the pool candidates that start with the current
# token (0..G), and attends over the past plus itself, a KV cache that grows by the 1..N tokens
# each step accepts. Every (q, past + q) pair is a new shape for the attention kernel.

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
# Two changes make every step the same shape:
#
# * **G candidate rows always.** `pad_candidates` fills the missing rows with dummies. A dummy
#   row is laid out like a candidate, so it sees only the current token and itself, and no other
#   token sees it: its outputs are ignored, its K/V never committed.
# * **A static KV cache.** The cache is preallocated for `max_length` positions; a step writes its
#   tokens after the committed ones and attends over all slots, the rest masked
#   (`ladref.masks.static_additive`); the accepted tokens' K/V are gathered into place.
#
# Here is a step with one real candidate and two dummies (`V1*`, `V2*` are dummies):

# %%
W, N, G = lookahead.window_size, lookahead.ngram_size, lookahead.max_candidates
found = torch.tensor([[5, 7]])  # g = 1 candidate (N-1 = 2 tokens after the current one)
padded = pad_candidates(found, G, fill=2)
step = build_step_inputs(2, torch.zeros(N - 1, W, dtype=torch.long), padded, position=9)
labels = [f"L{r}{c}" for r in range(N - 1) for c in range(W)] + [f"V{k}{j}" for k in range(G) for j in range(N - 1)]
print(render(step.allowed, labels))
print("shape of every step:", tuple(step.input_ids.shape), "tokens =", StepLayout(W, N, G).length, "= (N-1)(W+G)")

# %% [markdown]
# The dummies cost compute (a step always pays for G candidates) and attention runs over the
# whole cache. On a GPU, where the step is launch-bound, that is cheap; on a CPU it is not.
#
# ## 4. Same tokens, one compilation
#
# `CompiledDecoder(model, config, max_length=..., mode=None)` runs the constant-shape step without
# compiling: same mask, pool and verifier as `lookahead_decode`, so the same tokens in the same
# steps, each step feeding the full (N-1)(W+G) tokens.

# %%
reference = greedy_decode(tiny, prompt, 24, eos_token_id=[])
constant = CompiledDecoder(tiny, lookahead, max_length=64, mode=None)(prompt, 24, eos_token_id=[])
print("identical to greedy:", constant.token_ids == reference.token_ids, "| steps eager vs constant:",
      eager.stats.steps, constant.stats.steps)
print("tokens fed per step, eager:", sorted(set(eager.stats.forward_tokens_per_step)),
      "constant:", sorted(set(constant.stats.forward_tokens_per_step)))

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
for path in sorted(results.glob("*.json")):
    payload = json.loads(path.read_text())
    for s in payload.get("summary", []):
        if s["method"].startswith(("compiled", "generate")):
            rows.append(f"{path.stem:10s} {s['method']:28s} S={s['compression']:.2f} {s['tokens_per_second']:7.1f} tok/s")
print("\n".join(rows) if rows else "No GPU results are committed yet: run benchmarks/run_gpu.sh on a CUDA machine.")

# %% [markdown]
# ## Exercises
#
# 1. In section 1, which changes the shape more often: g or the cache length? Count the steps
#    where q changed against the steps where only past + q changed.
# 2. Make a step with g = 0 and G = 3: what does the mask look like, and what does verification
#    accept then? (`ladref.verify.verify_greedy` with no candidates.)
# 3. Why may a commit always copy N slots, even when fewer tokens were accepted? What would break
#    if the next step did not overwrite those slots? (Hint: `static_additive` and `length`.)
# 4. Time `CompiledDecoder(..., mode=None)` against `lookahead_decode` on the CPU for 64 tokens.
#    Which is faster here, and why would a GPU reverse it?
