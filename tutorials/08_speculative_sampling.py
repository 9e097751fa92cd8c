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
# # 8. Speculative sampling
#
# Greedy verification asks "is the draft the argmax?". When the model *samples*, a draft cannot be
# checked that way: any token may come out. Speculative sampling instead **accepts a draft at
# random**, with a probability chosen so that the emitted token is distributed exactly as the
# target model's distribution p, whatever proposed the draft. This notebook
#
# 1. accepts one draft d drawn from a draft distribution q (`ladref.accept.accept_one`) and checks
#    its exact joint law by histogram;
# 2. proves in two lines why the law is preserved, and shows a plausible bug break it;
# 3. tries several drafts, the children of a tree node (`ladref.accept.accept_several`);
# 4. treats lookahead decoding's deterministic n-gram drafts as q = a point mass: the rule
#    `ladref.sampling.SamplingChooser` verifies with (it calls `accept_one`);
# 5. checks, on a tiny model, that sampled lookahead decoding and plain sampling (`sample_decode`)
#    give the same token frequencies.

# %%
import warnings

# transformers imports tqdm, which warns "IProgress not found" in a notebook without ipywidgets
# (its progress bars then fall back to plain text). Harmless here, so that one warning is hidden.
warnings.filterwarnings("ignore", message="IProgress not found")

# %%
import matplotlib.pyplot as plt
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from ladref import LookaheadConfig, lookahead_decode, sample_decode
from ladref.accept import accept_one, accept_several, point_mass, residual
from ladref.sampling import SamplingChooser, Warp

torch.set_num_threads(1)  # tiny tensors: one thread is fastest


def chi_square_p(counts, probs):
    """p-value of a chi-square goodness-of-fit test (cells with expected count < 5 pooled)."""
    counts, expected = counts.flatten().double(), probs.flatten().double() * counts.sum()
    small = expected < 5
    obs = torch.cat([counts[~small], counts[small].sum()[None]])
    exp = torch.cat([expected[~small], expected[small].sum()[None]])
    keep = exp > 0
    stat = ((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum()
    return float(torch.special.gammaincc(torch.tensor((int(keep.sum()) - 1) / 2, dtype=torch.float64), stat / 2))


# %% [markdown]
# ## 1. One draft from a draft distribution q
#
# A draft source (a small model, say) proposes d ~ q; the target model's distribution at the same
# position is p. `accept_one(p, q, d)` applies the rule in three lines:
#
# ```text
# # accept d with probability min(1, p(d) / q(d)): always when the target likes d at least as much;
# # on rejection, sample y from the residual norm(max(0, p - q)): the mass p has and q lacks;
# # jointly P(accept, y = x) = min(p(x), q(x)) and P(reject, y = x) = max(0, p(x) - q(x)).
# ```
#
# Here p and q are two made-up distributions over 6 tokens. We draw 8000 drafts from q, pass each
# to `accept_one`, and count (accepted?, token).

# %%
V = 6
p = torch.tensor([0.40, 0.25, 0.15, 0.10, 0.06, 0.04], dtype=torch.float64)  # target
q = torch.tensor([0.10, 0.15, 0.30, 0.25, 0.05, 0.15], dtype=torch.float64)  # draft
def run_one(rule, p, q, draws, generator):
    """(2, V) counts of (rejected?, token): row 0 accepted drafts, row 1 replaced ones."""
    counts = torch.zeros(2, len(p), dtype=torch.long)
    for _ in range(draws):
        draft = int(torch.multinomial(q, 1, generator=generator))
        token, accepted = rule(p, q, draft, generator)
        counts[int(not accepted), token] += 1
    return counts


DRAWS = 8000
counts = run_one(accept_one, p, q, DRAWS, torch.Generator().manual_seed(0))  # every draw comes from the generator
exact = torch.stack([torch.minimum(p, q), (p - q).clamp(min=0)])  # the joint law
print(f"acceptance rate {counts[0].sum() / DRAWS:.3f} (exact: sum of min(p, q) = {exact[0].sum():.3f})")
print(f"chi-square p-value of the joint (accepted, token) counts against the exact law: {chi_square_p(counts, exact):.3f}")
print(f"chi-square p-value of the tokens against p: {chi_square_p(counts.sum(0), p):.3f}")

# %% [markdown]
# For a correct rule the p-value is uniformly distributed on [0, 1]: a value like 0.01 turns up one
# time in a hundred by chance alone. A wrong rule drives it towards 0 as the draws grow (section 2).

# %%
x = torch.arange(V)
fig, ax = plt.subplots(figsize=(8, 3.5))
ax.bar(x - 0.2, counts[0] / DRAWS, 0.4, color="tab:green", label="accepted draft (empirical)")
ax.bar(x - 0.2, counts[1] / DRAWS, 0.4, bottom=counts[0] / DRAWS, color="tab:orange", label="residual sample (empirical)")
ax.bar(x + 0.2, q, 0.4, color="lightgray", label="q, the draft distribution")
ax.scatter(x - 0.2, exact[0], marker="_", s=400, color="darkgreen", label="exact min(p, q)")
ax.scatter(x - 0.2, p, marker="_", s=400, color="black", label="exact p")
ax.set(xlabel="token", ylabel="probability", title="accept_one: accepted drafts fill min(p, q), the residual tops it up to p")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# Where q over-proposes a token (tokens 2, 3, 5) only the part min(p, q) = p is accepted; where q
# under-proposes (tokens 0, 1, 4) every such draft is accepted and the residual adds the missing
# max(0, p - q). The acceptance rate is sum min(p, q) = 1 - TV(p, q): the closer the draft
# distribution is to the target, the more drafts survive.
#
# ## 2. Why the law is preserved
#
# Let β = Σ_x max(0, p(x) - q(x)), the probability of a rejection (it equals Σ_x max(0, q(x) - p(x))
# because p and q both sum to 1). Then
#
# $$P(y = x) = \underbrace{q(x)\min\left(1, \tfrac{p(x)}{q(x)}\right)}_{\text{d = x, accepted}}
#   + \underbrace{\beta \cdot \tfrac{\max(0,\,p(x) - q(x))}{\beta}}_{\text{rejected, residual gives x}}
#   = \min(p(x), q(x)) + \max(0, p(x) - q(x)) = p(x).$$
#
# The second term must be the residual and nothing else. A plausible bug draws from p itself after
# a rejection: the token law becomes min(p, q) + β p, too little on token 0 (the token q
# under-proposes most) and too much on the tokens q over-proposes (2, 3, 5). The same test catches
# it: draw tokens from that law, as the biased rule would produce them, and test them against p.

# %%
beta = float((p - q).clamp(min=0).sum())  # the probability of a rejection
biased_law = torch.minimum(p, q) + beta * p  # accepted drafts, then p instead of the residual
print(f"the biased law sums to {float(biased_law.sum()):.6f}; it differs from p by up to {float((biased_law - p).abs().max()):.3f}")
draws = torch.multinomial(biased_law, DRAWS, replacement=True, generator=torch.Generator().manual_seed(1))
biased = torch.stack([torch.zeros(V, dtype=torch.long), torch.bincount(draws, minlength=V)])  # tokens only
print(f"biased rule: chi-square p-value of the tokens against p = {chi_square_p(biased.sum(0), p):.1e}")
print("token frequencies  correct:", [round(v, 3) for v in (counts.sum(0) / DRAWS).tolist()])
print("                   biased: ", [round(v, 3) for v in (biased.sum(0) / DRAWS).tolist()])
print("                   p:      ", p.tolist())

# %% [markdown]
# ## 3. Several drafts: the children of a tree node
#
# A draft tree proposes several children at a node; if they are k i.i.d. draws from q, SpecInfer's
# multi-round rule tries them in turn: with r_1 = p, draft d_i is accepted with probability
# min(1, r_i(d_i) / q(d_i)), and on rejection the target of the next round becomes the residual
# r_{i+1} = norm(max(0, r_i - q)). If all k are rejected the token is drawn from r_{k+1}. Each round
# is `accept_one` against r_i, so by induction from the last round the token is ~ p. The gain is
# the acceptance rate: a node with more children is more often continued.

# %%
def several_law(p, q, k):
    """(k + 1, V) exact law: row i < k, P(draft i accepted, y = x); row k, P(all rejected, y = x)."""
    law, reach, r = torch.zeros(k + 1, len(p), dtype=torch.float64), 1.0, p
    for i in range(k):
        law[i] = reach * torch.minimum(r, q)
        left = (r - q).clamp(min=0)
        reach, r = reach * left.sum(), left / left.sum()
    law[k] = reach * r
    return law


rates, exact_rates, tokens_k, generator = [], [], {}, torch.Generator().manual_seed(2)
for k in range(1, 5):
    counts_k = torch.zeros(k + 1, V, dtype=torch.long)
    for _ in range(3000):
        drafts = torch.multinomial(q, k, replacement=True, generator=generator).tolist()
        token, index = accept_several(p, q, drafts, generator)
        counts_k[k if index is None else index, token] += 1
    law = several_law(p, q, k)
    rates.append(float(counts_k[:k].sum() / 3000))
    exact_rates.append(float(law[:k].sum()))
    tokens_k[k] = counts_k.sum(0) / 3000
    print(f"k = {k}: some draft accepted {rates[-1]:.3f} (exact {exact_rates[-1]:.3f}); "
          f"tokens vs p: chi-square p = {chi_square_p(counts_k.sum(0), p):.3f}; "
          f"(index, token) vs exact: p = {chi_square_p(counts_k, law):.3f}")

# %%
fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2))
left.plot(range(1, 5), exact_rates, "o-", label="exact")
left.plot(range(1, 5), rates, "x", markersize=9, label="3000 draws")
left.set(xticks=range(1, 5), xlabel="children tried (k)", ylabel="P(a draft is accepted)", title="more children, more acceptance")
left.legend()
for k, freq in tokens_k.items():
    right.plot(x, freq, "o", alpha=0.7, label=f"k = {k}")
right.plot(x, p, "k_", markersize=20, label="p")
right.set(xlabel="token", ylabel="frequency", title="the emitted token is ~ p for every k")
right.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 4. Lookahead's drafts are deterministic: q is a point mass
#
# Lookahead decoding's n-grams are not sampled from any q: they are fixed by the past. That is the
# case q = one-hot(d) (`point_mass`): d is accepted with probability min(1, p(d) / 1) = p(d), and the
# residual max(0, p - one-hot(d)) is p with d removed, renormalised. `SamplingChooser`, ladref's
# chooser for sampled verification (docs/sampling.md), runs exactly this: `accept_one` with
# q = `point_mass` (d), so with the same seed the two draw the same tokens.

# %%
ours, theirs, scores_gen = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)
chooser = SamplingChooser(Warp(), theirs)  # temperature 1, no top-k / top-p
same = 0
for _ in range(1000):
    scores = torch.randn(V, generator=scores_gen, dtype=torch.float64) * 2
    target, d = chooser.probs((), scores), int(torch.randint(0, V, (), generator=scores_gen))
    same += accept_one(target, point_mass(d, V), d, ours)[0] == chooser.choose((), scores, [d])
print(f"accept_one with q = point_mass(d) and SamplingChooser drew the same token {same} times out of 1000")
print("residual of p against point_mass(0):", [round(v, 3) for v in residual(p, point_mass(0, V)).tolist()])

# %% [markdown]
# With several distinct n-gram drafts d_1, .., d_m at a position, `SamplingChooser` still runs one
# round, against d_1: the token y it emits is ~ p whatever the drafts, and the tree walk
# (`ladref.verify.verify_chosen`) descends into the child whose token is y, whichever draft that
# is. So draft d_i is accepted with probability p(d_i), and some draft with probability
# p(d_1) + .. + p(d_m): the law of running one round per draft, each against the residual the
# previous rejections left (p with the rejected drafts removed), with fewer draws. Deterministic
# drafts pay off exactly as much as the model's mass on them. That is why the
# lookahead window keeps proposing its greedy (most likely) n-grams when sampling: the argmax is
# the single token with the most mass.
#
# ## 5. On a model: sampled lookahead decoding vs plain sampling
#
# A tiny 2-layer Llama over 8 tokens, built from its config in float64, with its output layer
# redrawn so its next-token distributions are far from uniform. The prompt repeats token 0 with
# different followers, so the n-gram pool has competing drafts from the first step. We sample
# three tokens 150 times with `lookahead_decode(do_sample=True)` and 150 times with
# `sample_decode`, and compare the frequencies of the *third* token with each other (a two-sample
# chi-square test) and with its exact law, enumerated over the 64 possible first two tokens.

# %%
config = LlamaConfig(vocab_size=8, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, max_position_embeddings=256, bos_token_id=0, eos_token_id=None, pad_token_id=0)
config._attn_implementation = "sdpa"
torch.manual_seed(0)
tiny = LlamaForCausalLM(config).to(torch.float64).eval()
with torch.no_grad():  # a peaky output layer: probabilities over orders of magnitude
    head = tiny.get_output_embeddings().weight
    head.copy_(torch.randn(head.shape, generator=torch.Generator().manual_seed(1), dtype=head.dtype) * 0.3)

PROMPT, NEW, RUNS = [0, 7, 0, 4, 0, 5, 7, 0, 2, 0], 3, 150
model_gen = torch.Generator().manual_seed(3)
lookahead = [lookahead_decode(tiny, PROMPT, NEW, config=LookaheadConfig(2, 3, 4), do_sample=True, generator=model_gen)
             for _ in range(RUNS)]
plain = [sample_decode(tiny, PROMPT, NEW, generator=model_gen) for _ in range(RUNS)]
third_la = torch.bincount(torch.tensor([r.token_ids[2] for r in lookahead]), minlength=8)
third_plain = torch.bincount(torch.tensor([r.token_ids[2] for r in plain]), minlength=8)
steps = sum(r.stats.steps for r in lookahead)
print(f"lookahead: {RUNS * NEW} tokens in {steps} steps (S = {RUNS * NEW / steps:.2f}): drafts were accepted")

# %%
with torch.no_grad():  # the exact law of the third token: sum over the 64 first two tokens
    firsts = torch.cartesian_prod(torch.arange(8), torch.arange(8))  # (64, 2)
    ids = torch.cat([torch.tensor(PROMPT).expand(64, -1), firsts], dim=1)
    logp = tiny(ids).logits.double().log_softmax(-1)  # (64, L + 2, 8)
L = len(PROMPT)
prefix = logp[:, L - 1].gather(1, firsts[:, :1]) + logp[:, L].gather(1, firsts[:, 1:])  # (64, 1)
third_exact = (prefix.exp() * logp[:, L + 1].exp()).sum(0)


def two_sample_p(a, b):
    """p-value of a chi-square test that two count vectors share one distribution (rare tokens pooled)."""
    table = torch.stack([a, b]).double()
    rare = table.sum(0) < 10
    table = torch.cat([table[:, ~rare], table[:, rare].sum(1, keepdim=True)], dim=1)
    table = table[:, table.sum(0) > 0]
    expected = table.sum(1, keepdim=True) * table.sum(0, keepdim=True) / table.sum()
    stat = ((table - expected) ** 2 / expected).sum()
    return float(torch.special.gammaincc(torch.tensor((table.shape[1] - 1) / 2, dtype=torch.float64), stat / 2))


print(f"lookahead vs sample_decode (two-sample): p = {two_sample_p(third_la, third_plain):.3f}")
print(f"lookahead vs the exact law: p = {chi_square_p(third_la, third_exact):.3f}; "
      f"sample_decode vs the exact law: p = {chi_square_p(third_plain, third_exact):.3f}")

xs = torch.arange(8)
fig, ax = plt.subplots(figsize=(7, 3))
ax.bar(xs - 0.2, third_la / RUNS, 0.4, label="lookahead_decode(do_sample=True)")
ax.bar(xs + 0.2, third_plain / RUNS, 0.4, label="sample_decode")
ax.plot(xs, third_exact, "k_", markersize=22, label="exact")
ax.set(xlabel="third generated token", ylabel="frequency", title=f"the third token, {RUNS} samples each")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# The two samplers draw different random numbers (a uniform per position with drafts, a
# multinomial on rejection, against one multinomial per token), so their outputs differ sample by sample; only the
# distributions agree, and the tests above cannot tell them apart. `tests/test_sampling.py`
# checks the same thing with more draws and with negative controls; `tests/test_accept.py`
# checks `accept_one` and `accept_several` against their exact laws.

# %% [markdown]
# ## Exercises
#
# 1. Show that the acceptance rate of `accept_one` is Σ_x min(p(x), q(x)) = 1 - TV(p, q). Which q
#    maximises it, and what is the acceptance rate of section 1's q against a uniform q?
# 2. In `accept_several` the drafts are i.i.d., so a token may be drafted twice. Show that a
#    draft rejected in one round is rejected with certainty if it comes again later. Check it on
#    section 3's p and q with the drafts [3, 3].
# 3. Write the biased rule "every round tests its draft against p, never against the residual",
#    compute the exact law of its token for k = 2, and confirm with 5000 draws and `chi_square_p`
#    that it is not p. Why is the same rule correct for k = 1?
# 4. Section 4 says: with distinct deterministic drafts d_1, .., d_m, `SamplingChooser` accepts
#    some draft with probability p(d_1) + .. + p(d_m). Prove it, and check it with 5000 calls of
#    `SamplingChooser(Warp(), generator).choose((), p.log(), [0, 2])`.
# 5. Rerun section 5's lookahead runs with `temperature=0.5` and `temperature=1.5`, and compute the
#    mass that the first step's drafts (the tokens that follow 0 in the prompt: 7, 4, 5, 2) get
#    under the warped p after the prompt, `(tiny(torch.tensor([PROMPT])).logits[0, -1] / T).softmax(-1)`.
#    Does a lower temperature raise S here? When does it?
