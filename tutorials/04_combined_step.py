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
# # 4. Verification and the combined step, observed from outside
#
# A decoding step reads like the paper's figure: *propose, one forward pass, harvest, verify,
# commit, learn*. `ladref.step.draft_step(runner, current, tree, window)` is the middle of it.
# Given the draft tree a proposer made for the current token, it
#
# * feeds `[current | lookahead window | draft tree]` in ONE forward pass, under the mask of
#   tutorial 3;
# * harvests the lookahead branch: the window's newest row is predicted, the window slides by one
#   row, and the (N, W) trajectory whose columns are new n-grams is handed back;
# * verifies the tree: the longest root path greedy decoding agrees with, plus the model's own
#   next token;
# * commits: only the current token and the accepted path stay in the KV cache.
#
# Proposing and learning belong to the loop around it: the proposer (`ladref.LookaheadProposer`,
# which holds the window and the n-gram pool) makes the tree before the step and adds the
# harvested n-grams to its pool after it.
#
# We run real lookahead steps on SmolLM2 until one accepts a draft, then run that step once more
# and compare everything it touches before and after: the window, the pool, the KV cache and the
# output. Verification itself is then traced on a small example. (Writing the step is a course
# task, so this notebook watches it rather than re-implementing it.)

# %%
import warnings

# transformers imports tqdm, which warns "IProgress not found" in a notebook without ipywidgets
# (its progress bars then fall back to plain text). Harmless here, so that one warning is hidden.
warnings.filterwarnings("ignore", message="IProgress not found")

# %%
import copy

import torch

from ladref import LookaheadConfig, LookaheadProposer, chat_ids, greedy_decode, load_default_model
from ladref.masks import build_step_inputs
from ladref.results import DecodeStats
from ladref.runner import ModelRunner
from ladref.step import draft_step
from ladref.tree import DraftTree
from ladref.verify import verify_greedy

model, tokenizer = load_default_model(device="cpu")  # quiet; progress=True shows the loading bars


def show(ids):
    """Tokens as short readable strings."""
    return [repr(tokenizer.decode([int(t)]))[1:-1] for t in ids]


text = "Rewrite this sentence in the past tense: the cat sits on the mat and the dog sleeps on the rug."
prompt = chat_ids(tokenizer, text)[0]
greedy = greedy_decode(model, prompt, 40).token_ids
print(tokenizer.decode(greedy))

# %% [markdown]
# ## Run until a step accepts a draft
#
# The loop is ours: ask the proposer for a tree, run the step, let the proposer learn. Before
# each step we save the cache, the proposer and the text so far, to run the interesting step
# again. (We wait for a step that also harvests: the window's first N-2 steps still hold prompt
# tokens, tutorial 2.)

# %%
config = LookaheadConfig(window_size=4, ngram_size=4, max_candidates=4)
W, N, G = config.window_size, config.ngram_size, config.max_candidates
runner = ModelRunner(model)
proposer = LookaheadProposer(config)
context = prompt.tolist()
proposer.begin(context)  # the window from the prompt's tail, the pool seeded with the prompt's n-grams
current = runner.prefill(prompt, DecodeStats())
done = []
with torch.inference_mode():
    for step in range(30):
        saved = copy.deepcopy((runner.cache, proposer))
        tree = proposer.propose(context)  # propose
        outcome = draft_step(runner, current, tree, proposer.window)  # forward, harvest, verify, commit
        proposer.learn(outcome)  # learn
        print(f"step {step:2d}: {outcome.fed:2d} tokens fed ({len(tree):2d} draft nodes), accepted {show(outcome.tokens)}")
        if outcome.path and outcome.harvest is not None:
            break
        done += outcome.tokens
        context += outcome.tokens
        current = outcome.tokens[-1]
runner.cache, proposer = copy.deepcopy(saved)  # rewind to just before that step (keep `saved` intact)
print(f"\nback before step {step}: current token {show([current])[0]!r}, {runner.past_len} tokens in the KV cache")

# %% [markdown]
# ## Before the step: the draft tree and the step's layout
#
# The pool holds n-grams that start with the current token; the proposer turns up to G of them
# into a trie, where n-grams that share a prefix share its nodes. `build_step_inputs`
# (tutorial 3) lays the window and the tree out in one input.

# %%
tree = proposer.propose(context)
candidates = proposer.pool.candidates(current, G)  # (g, N-1): the n-grams behind the tree
for i, cand in enumerate(candidates):
    print(f"n-gram {i}: {show([current])} + {show(cand)}")
print("\nthe trie (indented by depth):")
for node in range(len(tree)):
    print(f"   node {node}: {'    ' * (int(tree.depths[node]) - 1)}{show([tree.tokens[node]])[0]!r}  (parent {int(tree.parents[node])})")
layout = build_step_inputs(current, proposer.window.grid, tree, runner.past_len).layout
print(f"\nq = (N-1)W + n = {layout.lookahead_len} + {len(tree)} = {layout.length} tokens fed "
      f"(as {len(candidates)} flat rows the drafts would take {candidates.numel()} tokens)")
print("window rows before the step:")
for row in proposer.window.grid:
    print("   ", show(row))

# %% [markdown]
# ## Run the step once more and compare

# %%
before = copy.deepcopy(proposer)
past = runner.past_len
with torch.inference_mode():
    outcome = draft_step(runner, current, tree, proposer.window)
position = len(done)
print("accepted:", show(outcome.tokens), "| greedy's next tokens:", show(greedy[position : position + len(outcome.tokens)]))
assert outcome.tokens == greedy[position : position + len(outcome.tokens)]

# %% [markdown]
# **Verification walked down the tree.** The model's argmax after the current token
# (`outcome.root_pred`) picked a child of the root; the argmax after that node
# (`outcome.node_preds`) picked the next, until no child matched. The accepted path's tokens
# plus the last argmax are the step's output.

# %%
target = outcome.root_pred
for node in outcome.path:
    print(f"model predicts {show([target])[0]!r:10} -> node {node} ({show([tree.tokens[node]])[0]!r}) matches")
    target = int(outcome.node_preds[node])
print(f"model predicts {show([target])[0]!r:10} -> no child matches: it is the step's own token")
print("accepted path:", outcome.path, "=", show(tree.path_tokens(outcome.path[-1])), "+", show([target]))

# %% [markdown]
# **The window slid by one row.** The old rows 1.. moved up, and the new bottom row is the
# model's prediction at the old bottom row: one Jacobi iteration (tutorial 1).

# %%
print("window rows after the step:")
for row in proposer.window.grid:
    print("   ", show(row))
print("old rows 1.. moved up:", torch.equal(proposer.window.grid[:-1], before.window.grid[1:]))
print("window steps run:", before.window.steps, "->", proposer.window.steps)

# %% [markdown]
# **The step handed back the trajectory; the pool learns it when the proposer does.** Column c
# of the old window (with the current token in cell (0, 0)) plus the new row, read top to bottom,
# is an n-gram at consecutive positions (`outcome.harvest`, shape (N, W)). `draft_step` does not
# touch the pool: the loop's `proposer.learn(outcome)` adds the columns.

# %%
columns = outcome.harvest.t().tolist()
in_pool = [[column in p.pool for column in columns] for p in (before, proposer)]
proposer.learn(outcome)
for c, column in enumerate(columns):
    print(f"column {c}: {''.join(show(column))!r:36} in the pool before the step: {in_pool[0][c]!s:5}, "
          f"after the step: {in_pool[1][c]!s:5}, after learn: {column in proposer.pool}")

# %% [markdown]
# **The KV cache kept the current token and the accepted path**, k + 1 entries for k matched
# draft tokens. The model's own last token is not in the cache yet: it is the next step's
# current token. The kept keys and values were computed in the step's single pass, under the
# right positions and mask, so they equal those of a plain causal pass over the accepted sequence.

# %%
accepted = outcome.tokens
print(f"cache: {past} -> {runner.past_len} tokens (1 current + {len(outcome.path)} accepted draft tokens)")
reference = ModelRunner(model)
with torch.inference_mode():
    reference.forward(torch.cat([prompt, torch.tensor(done + accepted[:-1])]))
same = all(torch.allclose(a.keys, b.keys, atol=1e-4) and torch.allclose(a.values, b.values, atol=1e-4)
           for a, b in zip(runner.cache.layers, reference.cache.layers))
print("cache == that of a plain causal pass over the accepted sequence:", same)
assert same and runner.past_len == past + len(accepted)

# %% [markdown]
# ## Verification, on a small example
#
# `ladref.verify.verify_greedy(tree, root_pred, node_preds)` only needs the tree and the model's
# argmax after the root and after every node. Here the "model" is a table: greedy decoding from
# the current token gives 5, 6, 2, ... The three drafts `5 1 1`, `5 6 1` and `9 6 7` make a trie
# of 8 nodes.

# %%
tree = DraftTree.from_paths([[5, 1, 1], [5, 6, 1], [9, 6, 7]], "example")
root_pred = 5  # y_1, the argmax after the current token
node_preds = torch.tensor([6, 0, 0, 2, 0, 6, 7, 8])  # the argmax after each node
for node in range(len(tree)):
    print(f"node {node}: path {tree.path_tokens(node)!s:10} the model continues it with {int(node_preds[node])}")
verdict = verify_greedy(tree, root_pred, node_preds)
print(f"\naccepted path {verdict.path} ({verdict.matched} draft tokens), output {verdict.tokens.tolist()}")

# %% [markdown]
# ## Exercises
#
# 1. In the step above, which flat step indices did the KV cache keep? Work them out from
#    `layout.tree_index()` and `outcome.path`.
# 2. Rewind to just before the step (`runner.cache, proposer = copy.deepcopy(saved)`) and run
#    it again with its tree but without the window: `draft_step(runner, current, outcome.tree)`.
#    Are the accepted tokens the same? What does the outcome no longer hold, and how many tokens
#    did the step feed?
# 3. Suppose a step forgot to commit (the cache kept all q entries). Decode a few more steps in
#    your head: what goes wrong, and would the output still equal greedy's?
# 4. With an empty tree but a window (as in tutorial 2) `draft_step` does not take the shortcut
#    of `plain_step`. What does such a step feed, what does it hand back besides its one token,
#    and what does the KV cache keep? What does `plain_step` feed?
