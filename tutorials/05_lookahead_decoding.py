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
# # 5. Full lookahead decoding: a colored trace, statistics, speedup
#
# `ladref.lookahead_decode` loops the combined step of tutorial 4 until `max_new_tokens` or
# EOS. Its output is exactly greedy's; what changes is the number of steps. Here we decode a
# prompt both ways on SmolLM2, color each token by where it came from (like the animation of
# the LMSYS blog post), and measure S and the wall-clock speedup on this machine.

# %%
import warnings

# transformers imports tqdm, which warns "IProgress not found" in a notebook without ipywidgets
# (its progress bars then fall back to plain text). Harmless here, so that one warning is hidden.
warnings.filterwarnings("ignore", message="IProgress not found")

# %%
import html

import matplotlib.pyplot as plt
from IPython.display import HTML, display

from ladref import (
    LookaheadConfig,
    chat_ids,
    greedy_decode,
    load_default_model,
    lookahead_decode,
)

model, tokenizer = load_default_model(device="cpu")  # quiet; progress=True shows the loading bars
prompt = chat_ids(tokenizer, "Write a Python function is_palindrome(s) that ignores case and spaces, with a docstring.")
MAX_NEW = 48
config = LookaheadConfig(window_size=4, ngram_size=4, max_candidates=4)
greedy_decode(model, prompt, 4)  # warm-up, so neither timing below pays first-call costs

# %%
greedy = greedy_decode(model, prompt, MAX_NEW, tokenizer=tokenizer)
lookahead = lookahead_decode(model, prompt, MAX_NEW, config=config, tokenizer=tokenizer)
print("identical to greedy:", lookahead.token_ids == greedy.token_ids)
assert lookahead.token_ids == greedy.token_ids
print(lookahead.text)

# %% [markdown]
# ## Which tokens came from verification?
#
# Step i commits `accepted_per_step[i]` tokens (`DecodeStats`): all but the last were a pool
# n-gram that verification accepted, the last is the model's own prediction. Below,
# **green** tokens came from a verified n-gram, plain ones from the model's own prediction, and
# a thin bar separates steps.

# %%
def colored_trace(token_ids, accepted_per_step):
    """HTML: each step's verified tokens on green, its own token plain, steps separated by a bar."""
    spans, i = [], 0
    for n in accepted_per_step:
        for j in range(n):
            text = html.escape(tokenizer.decode([token_ids[i + j]])).replace("\n", "&#8629;<br>")
            style = "background:#b7e4c7;" if j < n - 1 else ""
            spans.append(f'<span style="{style}font-family:monospace">{text}</span>')
        spans.append('<span style="border-left:1px solid #999;margin:0 1px"></span>')
        i += n
    return f'<div style="line-height:1.8">{"".join(spans)}</div>'


display(HTML(colored_trace(lookahead.token_ids, lookahead.stats.accepted_per_step)))

# %% [markdown]
# The same trace as text, one step per line (`[...]` = accepted from a verified n-gram):

# %%
i = 0
for step, n in enumerate(lookahead.stats.accepted_per_step):
    toks = [repr(tokenizer.decode([t]))[1:-1] for t in lookahead.token_ids[i : i + n]]
    verified = f"[{''.join(toks[:-1])}]" if n > 1 else ""
    print(f"step {step:2d}: {verified}{toks[-1]}")
    i += n

# %% [markdown]
# ## Statistics

# %%
rows = [("greedy", greedy.stats), ("lookahead", lookahead.stats)]
print(f"{'':10} {'tokens':>6} {'steps':>5} {'S':>5} {'fed/step':>8} {'seconds':>8} {'tok/s':>6}")
for name, s in rows:
    print(f"{name:10} {s.new_tokens:6d} {s.steps:5d} {s.compression:5.2f} {s.mean_forward_tokens:8.1f} "
          f"{s.wall_time_s:8.2f} {s.tokens_per_second:6.1f}")
speedup = greedy.stats.wall_time_s / lookahead.stats.wall_time_s
print(f"\ncompression S = {lookahead.stats.compression:.2f}, wall-clock speedup on this machine = {speedup:.2f}x")

# %%
accepted = lookahead.stats.accepted_per_step
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.2))
ax1.bar(range(len(accepted)), accepted, color=["#52b788" if a > 1 else "#adb5bd" for a in accepted])
ax1.set_xlabel("step")
ax1.set_ylabel("tokens committed")
ax1.set_title(f"tokens per step (S = {lookahead.stats.compression:.2f})")
ax2.hist(accepted, bins=range(1, config.ngram_size + 2), align="left", rwidth=0.8, color="#4c72b0")
ax2.set_xlabel("tokens committed in a step (1..N)")
ax2.set_ylabel("steps")
ax2.set_title("distribution")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Reading the numbers honestly
#
# S counts steps saved; the wall-clock speedup also pays for the wider steps: each lookahead step
# here feeds `(N-1)W + n` tokens (the window, plus the n nodes of the draft tree: up to 24 in
# all) instead of one. On a GPU an eager 24-token pass costs about as much as a 1-token pass
# (kernel launches, not arithmetic, set its time), but once CUDA graphs remove the launches a
# 121-token step costs about 1.7-1.8 one-token steps (H200, float16, SmolLM2:
# `benchmarks/results_gpu/`), so even there the speedup stays below S. On a CPU a
# wider pass costs noticeably more, so the speedup printed above is usually well below S and
# can be below 1. Tutorial 6 measures that cost and uses it to choose W, N and G; the Benchmarks
# page of the documentation has results over whole datasets.
#
# ## Exercises
#
# 1. Turn verification off (`max_candidates=0`). What is S? Why is the output unchanged?
# 2. Try `pool_from_prompt=False`, and a prompt that asks to repeat or edit a given text.
#    Where do the green tokens come from in each case?
# 3. Sweep W in (1, 2, 4, 8) with G = W and N = 4. Plot S and the wall-clock speedup
#    against W. Where does the speedup peak on your machine?
# 4. Compare with prompt lookup decoding (`ladref.prompt_lookup_decode`) on the same prompt:
#    which tokens does each method get for free? (Tutorial 7 puts four draft sources side by side.)
