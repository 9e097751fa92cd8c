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
# (N-1, W) lookahead window and the draft tree of candidate n-grams to verify. What keeps them
# from disturbing each other is the attention mask built by `ladref.masks`. Here we build it for
# the paper's Figure 5 setting (N = 4, W = 5) with three candidate n-grams, laid out two ways:
# as the paper's G flat rows and merged into a trie (`ladref.DraftTree`). We plot both masks and
# check on a real (tiny, random) model that a token cannot see the other branch, and that the
# trie changes no prediction verification reads.

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

from ladref import DraftTree
from ladref.masks import StepLayout, build_step_inputs, render
from ladref.runner import ModelRunner

# %% [markdown]
# ## Two layouts of the same drafts
#
# The pool proposes n-grams that start with the current token; the step verifies the N-1 tokens
# after it. Take three of them, written with letters: `a b c`, `a b d` and `e f g`. The paper
# feeds them as G separate rows (`DraftTree.chains`); merged into a trie
# (`DraftTree.from_paths`) the shared prefix `a b` is fed once. Both are a `DraftTree`: one token
# per node and the index of its parent (-1: the current token, the root).

# %%
letters = "abcdefg"
ids = {ch: 11 + i for i, ch in enumerate(letters)}  # token ids of a small vocabulary
name = {v: k for k, v in ids.items()}
ngrams = [[ids[ch] for ch in word] for word in ("abc", "abd", "efg")]
rows = DraftTree.chains(ngrams, "pool")
trie = DraftTree.from_paths(ngrams, "pool")
for title, tree in (("G flat rows", rows), ("trie", trie)):
    print(f"{title:12}: {len(tree)} nodes, tokens {[name[t] for t in tree.tokens.tolist()]}, parents {tree.parents.tolist()}")

# %% [markdown]
# ## Layout of the step
#
# The step's input is `[window rows | tree nodes]`. Window cell (r, c) sits at flat index
# `r * W + c` and at position `p + r + c` (p = the current token's position); cell (0, 0) *is*
# the current token. Tree node i sits after the window at position `p + depth(i)`.

# %%
W, N = 5, 4


def labels_of(layout):
    """`L r c` for lookahead cell (r, c); a tree node's letter and depth, e.g. `b2`."""
    tree = layout.tree
    nodes = [f"{name[t]}{d}" for t, d in zip(tree.tokens.tolist(), tree.depths.tolist())]
    return [f"L{r}{c}" for r in range(N - 1) for c in range(W)] + nodes


for title, tree in (("G flat rows", rows), ("trie", trie)):
    layout = StepLayout(window_size=W, ngram_size=N, tree=tree)
    print(f"{title:12}: q = (N-1)W + n = {layout.lookahead_len} + {len(tree)} = {layout.length} tokens; "
          f"relative positions of the tree nodes {layout.position_offsets()[layout.lookahead_len:].tolist()}")
layout = StepLayout(window_size=W, ngram_size=N, tree=trie)
labels, offsets, L = labels_of(layout), layout.position_offsets(), layout.lookahead_len

# %% [markdown]
# The mask of the trie step as text (`#` = may attend; rows are queries, columns keys; the KV
# cache, visible to all, is not drawn):

# %%
allowed = layout.allowed()
print(render(allowed, labels))

# %% [markdown]
# ## Figure 5, with G rows and with a trie
#
# The same masks drawn like the paper's Figure 5: blue for the lookahead branch, orange for the
# verification branch, and the number in each visible cell is the key's relative position. On
# the left the paper's layout, one row per n-gram; on the right the trie.

# %%
def draw(ax, layout, title):
    allowed, offsets, labels, L = layout.allowed(), layout.position_offsets(), labels_of(layout), layout.lookahead_len
    kind = torch.zeros_like(allowed, dtype=torch.float)
    kind[:L][allowed[:L]] = 1.0
    kind[L:][allowed[L:]] = 2.0
    ax.imshow(kind, cmap=ListedColormap(["white", "#4c72b0", "#dd8452"]), vmin=0, vmax=2)
    for i in range(layout.length):
        for j in range(layout.length):
            if allowed[i, j]:
                ax.text(j, i, str(int(offsets[j])), ha="center", va="center", fontsize=6, color="white")
    ax.set_xticks(range(layout.length), [f"{lab}\n{int(o)}" for lab, o in zip(labels, offsets)], fontsize=5)
    ax.set_yticks(range(layout.length), labels, fontsize=6)
    ax.set_xticks([x - 0.5 for x in range(layout.length + 1)], minor=True)
    ax.set_yticks([y - 0.5 for y in range(layout.length + 1)], minor=True)
    ax.grid(which="minor", color="lightgrey", lw=0.5)
    for edge in range(W, L, W):
        ax.axhline(edge - 0.5, color="grey", lw=0.8)
        ax.axvline(edge - 0.5, color="grey", lw=0.8)
    ax.axhline(L - 0.5, color="black", lw=1.5)
    ax.axvline(L - 0.5, color="black", lw=1.5)
    ax.set_title(title, fontsize=9)


fig, axes = plt.subplots(1, 2, figsize=(14, 7.5))
draw(axes[0], StepLayout(W, N, rows), f"G = 3 flat rows: q = {StepLayout(W, N, rows).length}")
draw(axes[1], layout, f"the same n-grams as a trie: q = {layout.length}")
fig.suptitle(f"combined-step mask, N={N}, W={W} (number = key's relative position)")
fig.tight_layout()
plt.show()

# %% [markdown]
# Reading the picture:
#
# * row 0 of the window is an ordinary causal block: cell (0, c) sees cells (0, 0..c);
# * cell (r >= 1, c) sees row 0 up to column c, then the cells above it in column c: positions
#   0, 1, ..., c, c+1, ..., c+r, exactly **one causal sequence**, the Jacobi trajectory that
#   produced it;
# * a tree node sees the current token (column 0), its ancestors and itself
#   (`DraftTree.ancestors`): its root path, again one causal sequence. In the flat layout each
#   row is a chain, so the two rows `a b c` and `a b d` compute `a` and `b` twice; in the trie
#   `c3` and `d3` share the nodes `a1` and `b2`;
# * nothing in the lookahead block looks at a tree node, and no tree node looks at a window
#   cell other than the current token, or at a node off its own path.

# %%
tree_part, look = slice(L, None), slice(1, L)
print("tree nodes see lookahead cells (other than the current token):", bool(allowed[tree_part, look].any()))
print("lookahead cells see tree nodes:", bool(allowed[:L, tree_part].any()))
branch_e = [L + i for i, t in enumerate(trie.tokens.tolist()) if name[t] in "efg"]
branch_a = [L + i for i, t in enumerate(trie.tokens.tolist()) if name[t] in "abcd"]
print("the 'e f g' branch sees the 'a b' branch:", bool(allowed[branch_e][:, branch_a].any()))
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
current = 5


def step_logits(window, tree):
    """Logits of every token of a combined step over `context` (cached) + the step."""
    runner = ModelRunner(tiny)
    runner.forward(context)
    step = build_step_inputs(current, window, tree, runner.past_len)
    return runner.forward(step.input_ids, step.position_ids, step.allowed)


window = torch.randint(0, 32, (N - 1, W))
other_tree = DraftTree(torch.randint(0, 32, (len(trie),)), trie.parents, trie.sources)  # same shape, new tokens
base = step_logits(window, trie)
new_tree = step_logits(window, other_tree)
new_window = step_logits(torch.randint(0, 32, (N - 1, W)), trie)
print("new tree tokens -> lookahead logits unchanged:", torch.allclose(base[:L], new_tree[:L], atol=1e-12))
print("new window      -> tree logits unchanged:", torch.allclose(base[L:], new_window[L:], atol=1e-12))
print("(sanity) new window -> lookahead logits changed:", not torch.allclose(base[1:L], new_window[1:L]))

# %% [markdown]
# And each query computes what an ordinary causal pass over its own sequence would. Take window
# cell (2, 3), whose sequence is row 0 up to column 3 followed by cells (1, 3) and (2, 3), and the
# trie node `d3`, whose sequence is the current token, `a`, `b`, `d`.

# %%
def plain_last_logits(sequence):
    with torch.inference_mode():
        return tiny(torch.cat([context, torch.as_tensor(sequence)])[None]).logits[0, -1]


r, c = 2, 3
cells = window.clone()
cells[0, 0] = current
print("cell (2, 3) logits == plain causal pass:",
      torch.allclose(base[r * W + c], plain_last_logits(torch.cat([cells[0, : c + 1], cells[1 : r + 1, c]])), atol=1e-10))
d3 = trie.find_path(ngrams[1])[-1]  # the node reached by a, b, d
print("node d3 logits == plain causal pass over [current, a, b, d]:",
      torch.allclose(base[L + d3], plain_last_logits([current, *ngrams[1]]), atol=1e-10))

# %% [markdown]
# So the trie changes no prediction verification reads: the logits after `a b d` are the same
# whether `a b` was fed once (trie) or twice (rows); the trie only feeds fewer tokens.

# %%
flat = step_logits(window, rows)
row_d = L + 2 * (N - 1) - 1  # the last node of the second row, 'a b d'
print("d3 in the trie == the end of row 'a b d':", torch.allclose(base[L + d3], flat[row_d], atol=1e-10))

# %% [markdown]
# ## Exercises
#
# 1. Draw the mask for N = 2. What is left of the lookahead branch, and what algorithm does it
#    run? (Compare with tutorial 1.)
# 2. Set `window[0, 0]` to some other token and call `step_logits(window, trie)` again. Which
#    logits change, and why? (Look at what `build_step_inputs` puts in cell (0, 0).)
# 3. Build the trie from the same n-grams in another order, `e f g`, `a b d`, `a b c`. How do the
#    nodes' order, their parents and their relative positions change? Do the logits after
#    `a b d` change?
# 4. Break the isolation on purpose: copy `build_step_inputs(current, window, trie, p).allowed`,
#    let node `e1` also see node `a1`, and run the step with that mask (`runner.forward(ids,
#    positions, allowed)`). Which tokens' logits change? Why do some change that still see
#    exactly what they saw before?
# 5. In the trie step, list the tokens fed at relative position 3. How can several tokens share
#    a position in one forward pass without disturbing each other's predictions?
