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
# # 7. Draft trees and other proposers
#
# The n-gram pool of lookahead decoding is one **draft source**: something that guesses the
# tokens after the current one. Prompt lookup (copy what followed the same words earlier in the
# text), Jacobi decoding (the previous iteration's guesses) and Token Recycling (the model's own
# top-k predictions from earlier steps) are others. They differ only in where their drafts come
# from, so ladref runs them all through the one step of tutorial 4: every source proposes a
# `ladref.DraftTree`, the trees are merged into one trie, ONE forward pass verifies it, and the
# output is exactly greedy's whatever was drafted. This notebook
#
# 1. builds a trie and its attention mask, and plots both;
# 2. runs four of the draft sources ladref ships side by side on one prompt of SmolLM2: tokens per
#    step S, tokens fed per step, and whose drafts were accepted;
# 3. merges all four into one `draft_decode`, with a proposer of our own that only watches;
# 4. writes a proposer that drafts;
# 5. builds the counted suffix trie of suffix decoding on a short text, shows the drafts it
#    proposes, and lets it remember one request's answer for the next.

# %%
import warnings

# transformers imports tqdm, which warns "IProgress not found" in a notebook without ipywidgets
# (its progress bars then fall back to plain text). Harmless here, so that one warning is hidden.
warnings.filterwarnings("ignore", message="IProgress not found")

# %%
import html

import matplotlib.pyplot as plt
from IPython.display import HTML, display
from matplotlib.colors import ListedColormap

from ladref import (
    DraftSource,
    DraftTree,
    JacobiProposer,
    LookaheadConfig,
    LookaheadProposer,
    PromptLookupProposer,
    RecyclingProposer,
    SuffixMemory,
    SuffixProposer,
    chat_ids,
    draft_decode,
    greedy_decode,
    jacobi_decode,
    load_default_model,
    lookahead_decode,
    prompt_lookup_decode,
    recycling_decode,
    suffix_decode,
)
from ladref.masks import StepLayout, render
from ladref.sources.suffix_trie import SuffixTrie, grow

model, tokenizer = load_default_model(device="cpu")  # quiet; progress=True shows the loading bars


def show(ids):
    """Tokens as short readable strings."""
    return [repr(tokenizer.decode([int(t)]))[1:-1] for t in ids]


# %% [markdown]
# ## 1. A trie of drafts
#
# A `DraftTree` is a token per node and the index of each node's parent (-1 for a child of the
# root, the current token), parents before children. `DraftTree.from_paths` inserts token paths
# into a trie: a path that starts like one already there reuses those nodes.

# %%
words = [" the cat sat on", " the cat is", " the dog ran"]
paths = [tokenizer.encode(w) for w in words]
for w, p in zip(words, paths):
    print(f"{w!r:20} -> {len(p)} tokens {show(p)}")
tree = DraftTree.from_paths(paths, "example")
print(f"\ntrie: {len(tree)} nodes for {sum(len(p) for p in paths)} path tokens "
      f"(as flat rows, `DraftTree.chains`: {len(DraftTree.chains(paths, 'example'))})")
for node in range(len(tree)):
    print(f"   node {node}: {show([tree.tokens[node]])[0]!r:8} parent {int(tree.parents[node]):2d}, "
          f"depth {int(tree.depths[node])}, path {show(tree.path_tokens(node))}")

# %% [markdown]
# `extend` returns a new tree with more paths (a tree never changes in place). A path whose
# prefix is already there adds only its new tail, a path already there adds nothing, and the
# nodes it adds carry the new source's name: that is how the trees of several sources merge.

# %%
bigger = tree.extend([tokenizer.encode(w) for w in (" the dog ran away", " a cat", " the cat is")], "other")
print(f"{len(tree)} nodes -> {len(bigger)} nodes (the original tree still has {len(tree)})")
for node in range(len(tree), len(bigger)):
    parent = int(bigger.parents[node])
    under = "the root" if parent < 0 else f"node {parent} ({show([bigger.tokens[parent]])[0]!r})"
    print(f"   new node {node}: {show([bigger.tokens[node]])[0]!r} under {under}, source {bigger.sources[node]!r}")

# %% [markdown]
# ## Its mask
#
# A node sits at position p + depth (p: the current token's position) and may see the current
# token, its ancestors and itself (`DraftTree.ancestors`): its root path, one ordinary causal
# sequence. Two branches never see each other, so `cat` and `dog` are both verified as the token
# after `the`, in the same pass. The step's mask without a lookahead window
# (`StepLayout(0, 0, tree)`) puts the current token first:

# %%
layout = StepLayout(window_size=0, ngram_size=0, tree=bigger)
labels = ["current"] + [f"{t.strip()}{d}" for t, d in zip(show(bigger.tokens), bigger.depths.tolist())]
print("ancestors (node i may see node j):")
print(render(bigger.ancestors(), labels[1:]))
print("\nthe step's mask, current token first:")
print(render(layout.allowed(), labels))


# %%
def draw_tree(ax, tree, labels):
    """The trie left to right: the current token, then one column per depth."""
    y, leaves = {}, 0
    def place(node):  # leaves top to bottom in order, a parent at the middle of its children
        nonlocal leaves
        kids = tree.children.get(node, [])
        for kid in kids:
            place(kid)
        y[node] = (sum(y[k] for k in kids) / len(kids)) if kids else leaves
        leaves += 0 if kids else 1
    place(-1)
    depth = {-1: 0, **{i: int(d) for i, d in enumerate(tree.depths)}}
    for node, parent in enumerate(tree.parents.tolist()):
        ax.plot([depth[parent], depth[node]], [y[parent], y[node]], color="grey", lw=1, zorder=1)
    colors = {"example": "#dd8452", "other": "#55a868"}
    for node in [-1, *range(len(tree))]:
        color = "#4c72b0" if node < 0 else colors.get(tree.sources[node], "#8172b3")
        ax.text(depth[node], y[node], labels[node + 1], ha="center", va="center", fontsize=9, color="white",
                bbox={"boxstyle": "round", "facecolor": color, "edgecolor": "none"}, zorder=2)
    ax.set_xlim(-0.5, max(depth.values()) + 0.5)
    ax.set_ylim(leaves - 0.5, -0.5)
    ax.set_xticks(range(max(depth.values()) + 1), ["p"] + [f"p+{d}" for d in range(1, max(depth.values()) + 1)])
    ax.set_yticks([])
    ax.set_xlabel("position")
    ax.set_title("the trie (orange: first source, green: added by `extend`)", fontsize=9)


fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [1, 1.1]})
draw_tree(left, bigger, labels)
allowed = layout.allowed().float()
right.imshow(allowed, cmap=ListedColormap(["white", "#dd8452"]))
right.set_xticks(range(len(labels)), labels, rotation=90, fontsize=8)
right.set_yticks(range(len(labels)), labels, fontsize=8)
right.set_xticks([x - 0.5 for x in range(len(labels) + 1)], minor=True)
right.set_yticks([x - 0.5 for x in range(len(labels) + 1)], minor=True)
right.grid(which="minor", color="lightgrey", lw=0.5)
right.set_title("its mask: each node sees the current token and its root path", fontsize=9)
fig.tight_layout()
plt.show()

# %% [markdown]
# Verification walks this tree from the root (tutorial 4): the model's argmax after the current
# token picks a child, the argmax after that child picks the next, and so on. A branch the model
# does not take costs one forward-pass slot per node and nothing else.
#
# ## 2. Four draft sources on one prompt
#
# | decoder | proposer | drafts |
# |---|---|---|
# | `lookahead_decode` | `LookaheadProposer` | up to G pool n-grams that start with the current token, plus the lookahead window it feeds |
# | `prompt_lookup_decode` | `PromptLookupProposer` | what followed the latest earlier occurrence of the text's last 1-3 tokens |
# | `jacobi_decode` | `JacobiProposer` | the previous iteration's unconverged guesses, as one chain |
# | `recycling_decode` | `RecyclingProposer` | an 80-node tree template grown from each token's latest top-k successors |
#
# Each decodes the same prompt; every output is greedy's, token for token.

# %%
prompt = chat_ids(tokenizer, "Write a Python function is_palindrome(s) that ignores case and spaces, with a docstring.")[0]
MAX_NEW = 80
greedy = greedy_decode(model, prompt, MAX_NEW, tokenizer=tokenizer)
print(greedy.text)
results = {
    "lookahead": lookahead_decode(model, prompt, MAX_NEW, config=LookaheadConfig(window_size=4, ngram_size=4, max_candidates=4)),
    "prompt lookup": prompt_lookup_decode(model, prompt, MAX_NEW),
    "Jacobi": jacobi_decode(model, prompt, MAX_NEW, block_size=8),
    "Token Recycling": recycling_decode(model, prompt, MAX_NEW),
}
for name, result in results.items():
    assert result.token_ids == greedy.token_ids, name
print("\nevery decoder's output is greedy's")


# %%
def mean(values):
    return sum(values) / len(values) if values else 0.0


def accepted_drafts(stats):
    """Per source: drafted tokens accepted in all, and steps in which it proposed something."""
    return {source: (sum(k * n for k, n in hist.items()), sum(hist.values())) for source, hist in stats.accepted_by_source.items()}


def table(results):
    print(f"{'':16} {'steps':>5} {'S':>5} {'fed/step':>8} {'window':>7} {'drafts':>7}   accepted draft tokens (steps proposing)")
    for name, result in results.items():
        s = result.stats
        credit = ", ".join(f"{src} {tokens} ({steps})" for src, (tokens, steps) in accepted_drafts(s).items())
        print(f"{name:16} {s.steps:5d} {s.compression:5.2f} {s.mean_forward_tokens:8.1f} {mean(s.window_tokens_per_step):7.1f} "
              f"{mean(s.draft_tokens_per_step):7.1f}   {credit}")


table({"greedy": greedy, **results})

# %% [markdown]
# `fed/step` is the mean width q of a step: the current token, plus `window` lookahead-branch
# tokens (`stats.window_tokens_per_step`), plus `drafts` tree nodes (`stats.draft_tokens_per_step`).
# `stats.accepted_by_source[source]` is a histogram {k: steps} of how many of that source's
# draft tokens a step accepted, over the steps in which it proposed something:

# %%
for name, result in results.items():
    for source, hist in result.stats.accepted_by_source.items():
        print(f"{name:16} {source:14} {dict(sorted(hist.items()))}")

# %%
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.2))
names = list(results)
ax1.bar(names, [results[n].stats.compression for n in names], color="#4c72b0")
ax1.axhline(1, color="grey", lw=0.8, ls="--")
ax1.set_ylabel("S (tokens per step)")
ax1.set_title("tokens per step")
window = [mean(results[n].stats.window_tokens_per_step) for n in names]
drafts = [mean(results[n].stats.draft_tokens_per_step) for n in names]
ax2.bar(names, [1] * len(names), color="#adb5bd", label="current token")
ax2.bar(names, window, bottom=[1] * len(names), color="#4c72b0", label="lookahead window")
ax2.bar(names, drafts, bottom=[1 + w for w in window], color="#dd8452", label="draft tree")
ax2.set_ylabel("tokens fed per step")
ax2.set_title("what a step feeds")
ax2.legend(fontsize=8)
for ax in (ax1, ax2):
    ax.tick_params(axis="x", labelsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# Reading the numbers:
#
# * **lookahead** pays for its window every step ((N-1)W - 1 = 11 tokens besides the current one
#   here) and verifies short n-grams: up to G = 4 of N-1 = 3 tokens each, so it feeds up to
#   12 draft nodes a step (fewer where they share a prefix) but accepts at most N-1 = 3 of them;
#   its pool starts with the prompt's n-grams;
# * **prompt lookup** feeds a single chain, copied from the text, only when the text's last
#   tokens occurred before; on code that repeats names it can accept long runs at once;
# * **Jacobi** feeds its m = 8 guesses every step and rarely has even the first one accepted
#   (tutorial 1): a guess counts only at its exact position;
# * **Token Recycling** starts every call with an empty matrix (cold start) and fills it from
#   every position it feeds; its tree is wide (up to 80 nodes), so it feeds the most.
#
# Which source wins depends on the text: input-grounded tasks (edits, summaries) favour prompt
# lookup, repetitive ones the pool. And S is not speed: a wider step costs more, on a CPU much
# more (tutorial 6), so tokens fed per step matter as much as S.
#
# ## 3. All four in one step, and a proposer that watches
#
# `draft_decode` takes any list of proposers (at most one may bring a lookahead window), merges
# their trees each step and credits each accepted node to the source that proposed it (a node
# two sources both propose goes to the first in the list).
#
# `stats` keeps a histogram per source, not which source each accepted token came from. A
# proposer of our own can watch that. A proposer is an object with a `name`, three methods and
# three options (the `ladref.Proposer` protocol); inheriting `ladref.DraftSource` sets the options
# to their defaults:
#
# * `begin(prompt)`: a new call starts (reset, or keep what was learned);
# * `propose(context)`: a `DraftTree` of guesses after `context[-1]`, the current token;
# * `learn(outcome)`: the `ladref.StepOutcome` of the step just run: what was fed (`input_ids`),
#   the tree, the accepted `tokens` and `path`, the model's predictions.
#
# This one proposes nothing (an empty tree changes no step) and records every step's accepted
# tokens with the source of each.

# %%
class Watcher(DraftSource):
    """Proposes nothing; records, for every step, the source of each accepted token."""

    name = "watcher"

    def begin(self, prompt):
        self.steps = []

    def propose(self, context):
        return DraftTree.empty()

    def learn(self, outcome):
        drafted = [(token, outcome.tree.sources[node]) for token, node in zip(outcome.tokens, outcome.path)]
        self.steps.append(drafted + [(outcome.tokens[-1], "model")])  # the last token is the model's own


watcher = Watcher()
proposers = [PromptLookupProposer(), LookaheadProposer(LookaheadConfig(window_size=4, ngram_size=4, max_candidates=4)),
             JacobiProposer(block_size=8), RecyclingProposer.for_model(model), watcher]
merged = draft_decode(model, prompt, MAX_NEW, proposers=proposers)
assert merged.token_ids == greedy.token_ids
table({"all four": merged})

# %% [markdown]
# Within a step the merged tree holds every source's drafts, so the step accepts at least what
# each source alone would have from there; it feeds the sum of their trees minus what they
# share. The watcher's record, each token on the color of its source (white: the model's own
# token ending each step; a bar separates steps):

# %%
colors = {"prompt_lookup": "#f4a261", "lookahead": "#b7e4c7", "jacobi": "#cdb4db", "recycling": "#a2d2ff", "model": "#ffffff"}
spans = []
for step in watcher.steps:
    for token, source in step:
        text = html.escape(tokenizer.decode([token])).replace("\n", "&#8629;<br>")
        spans.append(f'<span style="background:{colors[source]};font-family:monospace" title="{source}">{text}</span>')
    spans.append('<span style="border-left:1px solid #999;margin:0 1px"></span>')
legend = " ".join(f'<span style="background:{c};padding:0 4px">{s}</span>' for s, c in colors.items())
display(HTML(f'<div style="line-height:1.8">{legend}<br><br>{"".join(spans)}</div>'))

# %% [markdown]
# The same record as text, for the steps that accepted a draft:

# %%
for i, step in enumerate(watcher.steps):
    if len(step) > 1:
        print(f"step {i:2d}: " + " ".join(f"{show([t])[0]}[{s}]" for t, s in step))

# %% [markdown]
# ## 4. A proposer that drafts
#
# A tiny **retrieval** source (in the spirit of REST, which drafts from a
# datastore of text): it keeps a few reference answers and proposes what followed the last two
# tokens of the context in them, up to `branches` continuations merged into a trie. Its
# datastore here is the model's answer to a neighbouring question.

# %%
class Retrieval(DraftSource):
    """Drafts the continuations of the context's last `n` tokens found in reference texts."""

    name = "retrieval"

    def __init__(self, texts, n=2, depth=8, branches=4):
        self.texts, self.n, self.depth, self.branches = [list(t) for t in texts], n, depth, branches

    def begin(self, prompt):
        pass  # the datastore is fixed: nothing to reset

    def propose(self, context):
        key, drafts = list(context[-self.n:]), []
        for text in self.texts:
            drafts += [text[i + self.n : i + self.n + self.depth] for i in range(len(text) - self.n) if text[i : i + self.n] == key]
        return DraftTree.from_paths(drafts[: self.branches], self.name)

    def learn(self, outcome):
        pass  # the context passed to propose already holds the accepted tokens


neighbour = chat_ids(tokenizer, "Write a Python function is_anagram(a, b) that ignores case and spaces, with a docstring.")[0]
reference = greedy_decode(model, neighbour, MAX_NEW).token_ids
retrieval = draft_decode(model, prompt, MAX_NEW, proposers=[Retrieval([reference])])
assert retrieval.token_ids == greedy.token_ids
table({"retrieval": retrieval, "prompt lookup": results["prompt lookup"]})

# %% [markdown]
# Whatever a proposer drafts, the output stays greedy's: a wrong draft only costs its slots in
# the forward pass. What the step does check, before any forward pass, is the protocol and the
# vocabulary:

# %%
class Incomplete:
    name = "incomplete"

    def propose(self, context):  # no begin, no learn
        return DraftTree.empty()


class OutOfVocabulary(Retrieval):
    def propose(self, context):
        return DraftTree.from_paths([[10**9]], self.name)


for proposer in (Incomplete(), OutOfVocabulary([])):
    try:
        draft_decode(model, prompt, 8, proposers=[proposer])
    except (TypeError, ValueError) as err:
        print(f"{type(err).__name__}: {err}")

# %% [markdown]
# The options ask the step for more: `window` (a `ladref.LookaheadWindow` the step feeds as its
# lookahead branch, as `LookaheadProposer` does) and `topk` (an int k: the step then returns the
# model's top-k next tokens after every token it fed in `StepOutcome.top`, as Token Recycling
# needs); `evidence` grades a proposal for adaptive decoding. `DraftSource` sets them to None, 0
# and 0. The documentation's page on draft trees and proposers has the full protocol.
#
# ## 5. Suffix decoding: every earlier continuation, counted
#
# Prompt lookup copies what followed the *latest* earlier occurrence of the text's last tokens.
# `SuffixProposer` (SuffixDecoding, the draft-free source production engines took up after
# lookahead) counts them all. A suffix trie holds every substring of the text up to a depth D,
# each node counting how often its string occurred: the node of a pattern has one child per token
# that ever followed the pattern, with how often. The trie of a short text, cut at depth 3, below
# the token ` the`:

# %%
text = tokenizer.encode(" the cat sat. the cat ran. the cat sat. the dog sat. the cat")
trie = SuffixTrie(depth=3)
trie.extend(text)


def print_trie(node, depth=0):
    """Each child with its count, the most frequent first, its own children indented below it."""
    for token, child in sorted(node.children.items(), key=lambda item: -item[1].count):
        print(f"{'    ' * depth}{show([token])[0]!r} x{child.count}")
        print_trie(child, depth + 1)


the = tokenizer.encode(" the")
print(f"{show(the)[0]!r} x{trie.find(the).count}")
print_trie(trie.find(the), depth=1)

# %% [markdown]
# The proposer keeps such a trie of the request (prompt and output, grown as tokens are
# committed). A pattern is a suffix of the text that something followed before; a draft grows
# from the pattern's node best first, each node's probability the product, along its path, of
# the share of each parent's occurrences that went on with the child's token (the present one
# among them, which has not gone on yet), and a pattern of L tokens earns at most
# `spec_factor` x L draft nodes: a long match, a big tree. Every pattern length grows its draft
# and the one expecting the most accepted tokens (the sum of its nodes' probabilities) is
# proposed; its pattern's length is the proposal's `evidence`.

# %%
proposer = SuffixProposer(spec_factor=2.0)
proposer.begin(text)
for length, node in proposer.trie.matches(text, proposer.max_match):  # every pattern, shortest first
    tokens, parents, score = grow(node, int(proposer.spec_factor * length), proposer.max_depth, proposer.min_prob)
    print(f"pattern {show(text[-length:])}: score {score:.2f}, tokens {show(tokens)}, parents {parents}")
drafts = proposer.propose(text)
print(f"\nproposed: the draft of the last {proposer.evidence} tokens")
for node in range(len(drafts)):
    print(f"   node {node}: parent {int(drafts.parents[node]):2d}, path {show(drafts.path_tokens(node))}")

# %% [markdown]
# With `merge_matches=True` the patterns do not compete: all of them (and, with a memory, their
# matches there too) grow ONE tree, best first, a path drafted once at the highest probability
# any pattern gives it, at most `spec_factor` x (the longest L) nodes. A big tree then holds the
# alternatives of several patterns, not only the deeper guesses of one.

# %%
merged = SuffixProposer(spec_factor=2.0, merge_matches=True)
merged.begin(text)
drafts = merged.propose(text)
print(f"merged: {len(drafts)} nodes, the longest pattern {merged.evidence} tokens")
for node in range(len(drafts)):
    print(f"   node {node}: parent {int(drafts.parents[node]):2d}, path {show(drafts.path_tokens(node))}")

# %% [markdown]
# With a `SuffixMemory` the proposer also drafts from the outputs of earlier requests (kept up to
# a bound in tokens, the oldest evicted): the answer to the neighbouring question of section 4,
# decoded first, helps the next request.

# %%
memory = SuffixMemory(max_tokens=4096)
suffix_decode(model, neighbour, MAX_NEW, memory=memory)  # its answer goes into the memory
remembering = suffix_decode(model, prompt, MAX_NEW, memory=memory)
alone = suffix_decode(model, prompt, MAX_NEW)
assert remembering.token_ids == alone.token_ids == greedy.token_ids
print(f"memory: {memory.tokens} tokens in {memory.trie.nodes} trie nodes")
table({"suffix": alone, "suffix + memory": remembering})

# %% [markdown]
# ## Exercises
#
# 1. Reverse the order of the four proposers in section 3 (the watcher stays last). Does the
#    output change? S? The credit in `accepted_by_source`? Two parts of a step depend on the
#    order: `merge_all` merges the trees first proposer first (a node two sources propose keeps
#    the first one's name, and the nodes are fed in that order), and `RecyclingProposer.learn`
#    keeps, for a token fed more than once, the top-k after its last occurrence. Which numbers
#    can each of them move, and which can neither?
# 2. Token Recycling's warm start: keep one `RecyclingProposer.for_model(model, warm=True)` and
#    pass it twice, `recycling_decode(model, prompt, MAX_NEW, proposer=it)`. How does S change on
#    the second call, and why? Is the second call's output still greedy's?
# 3. Give Token Recycling a smaller tree (`TreeTemplate.best_first(size=20)`): how do S and the
#    tokens fed per step change? Which is the better trade on this CPU (tutorial 6)?
# 4. Cap the merged tree with `draft_decode(..., draft_budget=16)`. Which source loses its drafts
#    first, and why (hint: `DraftTree.prune` keeps the first nodes)?
# 5. Make `Retrieval` learn: add the accepted tokens of every step to its datastore in `learn`.
#    Which proposer of this notebook does it become?
# 6. Suffix decoding's `spec_factor` (alpha): try 0.5, 1 and 4 on the prompt of section 2. How do
#    S and the tokens fed per step move? Why does a short match earn a small tree?
