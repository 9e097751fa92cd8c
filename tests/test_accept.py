"""The accept rules of speculative sampling keep the target distribution exactly (ladref/accept.py).

q here is the draft distribution, the law the drafts were drawn from (as in Leviathan et al.),
not the number of tokens a forward pass is fed (the glossary's q, elsewhere in ladref).

The rules' tests check what the grader checks: the law of the outcomes, not the draws one by
one (the order and kind of random draws are the rule's own). Each law test draws drafts and
outcomes through a rule with a seeded `torch.Generator` and tests the counts of the emitted
token, and of (accepted, token) jointly, against the rule's *exact* law by Pearson's chi-square
test, as the grader's judge does: an outcome the law gives probability 0 fails outright, cells
expected fewer than 5 times are pooled. Every test is deterministic; the level ALPHA = 1e-6 of
each check is its false-failure rate, the chance that a correct rule fails it with an unlucky
seed (about twice that in Pearson's far tail: below 1e-4 for the checks of this file together).
With DRAWS = 3000 draws, a plausible wrong rule (drawing from p after a rejection, accepting
with p(d), no residual update between drafts) fails the checks it applies to with near certainty.
The other tests check what is certain: the outcomes when p has one token, the types returned,
the arguments left unchanged, the draws coming from the generator, and the errors of bad input.
"""

from __future__ import annotations

import pytest
import torch

from ladref.accept import accept_one, accept_several, check_inputs, point_mass, residual

pytestmark = pytest.mark.usefixtures("one_thread")
task2_1 = pytest.mark.task2_1  # only the tests of accept_one and accept_several: the self-check's score

ALPHA = 1e-6
MIN_EXPECTED = 5.0  # cells expected fewer times are pooled
P = torch.tensor([0.40, 0.25, 0.15, 0.10, 0.06, 0.04], dtype=torch.float64)  # target
Q = torch.tensor([0.10, 0.15, 0.30, 0.25, 0.05, 0.15], dtype=torch.float64)  # draft distribution
DRAWS = 3000


def chi_square_p(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """p-value of Pearson's chi-square goodness-of-fit test of `counts` against the law `probs` (any shape).

    An outcome of probability 0 that was seen gives 0. The cells expected fewer than `MIN_EXPECTED`
    times are pooled into one, joined by the smallest others while the pool is still short.
    """
    counts, probs = counts.flatten().double(), probs.flatten().double()
    if bool((counts[probs <= 0] > 0).any()):
        return 0.0  # a count where the law puts no mass
    order = torch.argsort(probs[probs > 0])
    observed, expected = counts[probs > 0][order], (probs[probs > 0] * counts.sum())[order]
    small = int((expected < MIN_EXPECTED).sum())
    if small:
        while small < len(expected) and expected[:small].sum() < MIN_EXPECTED:
            small += 1
        observed = torch.cat([observed[small:], observed[:small].sum()[None]])
        expected = torch.cat([expected[small:], expected[:small].sum()[None]])
    if len(expected) < 2:
        return 1.0
    stat = ((observed - expected) ** 2 / expected).sum()
    return float(torch.special.gammaincc(torch.tensor((len(expected) - 1) / 2, dtype=torch.float64), stat / 2))


def one_law(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """(2, V) exact law of `accept_one`: row 0 P(accept, y = x) = min(p, q), row 1 P(reject, y = x) = max(0, p - q)."""
    return torch.stack([torch.minimum(p, q), (p - q).clamp(min=0)])


def several_law(p: torch.Tensor, q: torch.Tensor, k: int) -> torch.Tensor:
    """(k + 1, V) exact law of `accept_several`: row i < k P(draft i accepted, y = x), row k P(all rejected, y = x)."""
    law, reach, r = torch.zeros(k + 1, len(p), dtype=torch.float64), 1.0, p
    for i in range(k):
        law[i] = reach * torch.minimum(r, q)  # round i is reached, then d_i ~ q is accepted as x
        left = (r - q).clamp(min=0)
        reach = reach * left.sum()
        if reach == 0:  # q covers r: no draft is ever rejected
            return law
        r = left / left.sum()
    law[k] = reach * r
    return law


def sample_one(rule, p: torch.Tensor, q: torch.Tensor, draws: int, seed: int) -> torch.Tensor:
    """(2, V) counts of (rejected, token) over `draws` drafts d ~ q passed to `rule` (accept_one's signature)."""
    generator, counts = torch.Generator().manual_seed(seed), torch.zeros(2, len(p), dtype=torch.long)
    for _ in range(draws):
        draft = int(torch.multinomial(q, 1, generator=generator))
        token, accepted = rule(p, q, draft, generator)
        counts[int(not accepted), token] += 1
    return counts


def sample_several(rule, p: torch.Tensor, q: torch.Tensor, k: int, draws: int, seed: int) -> torch.Tensor:
    """(k + 1, V) counts of (accepted index, or k when all rejected; token) over k i.i.d. drafts ~ q per draw."""
    generator, counts = torch.Generator().manual_seed(seed), torch.zeros(k + 1, len(p), dtype=torch.long)
    for _ in range(draws):
        drafts = torch.multinomial(q, k, replacement=True, generator=generator).tolist() if k else []
        token, index = rule(p, q, drafts, generator)
        counts[k if index is None else index, token] += 1
    return counts


def one_p_values(rule, q: torch.Tensor) -> tuple[float, float]:
    """(tokens, joint) p-values of `rule` (accept_one's signature) against accept_one's exact law, target P."""
    counts = sample_one(rule, P, q, DRAWS, seed=1)
    return chi_square_p(counts.sum(0), P), chi_square_p(counts, one_law(P, q))


def several_p_values(rule, k: int) -> tuple[float, float]:
    """(tokens, joint) p-values of `rule` (accept_several's signature) with k drafts against the exact law, P and Q."""
    counts = sample_several(rule, P, Q, k, DRAWS, seed=10 + k)
    return chi_square_p(counts.sum(0), P), chi_square_p(counts, several_law(P, Q, k))


def returned(result) -> list:
    """A rule's pair as [first, second, type name of first, type name of second]."""
    assert isinstance(result, tuple) and len(result) == 2, f"a rule returns a pair (a tuple of 2), got {result!r}"
    return [*result, *(type(v).__name__ for v in result)]


def test_chi_square_helper_detects_a_wrong_distribution():
    probs = torch.tensor([0.5, 0.3, 0.2])
    assert chi_square_p(torch.tensor([500, 300, 200]), probs) > 0.99
    assert chi_square_p(torch.tensor([400, 350, 250]), probs) < ALPHA
    assert chi_square_p(torch.tensor([5, 0, 5, 1]), torch.tensor([0.5, 0.0, 0.5, 0.0])) == 0.0  # impossible outcomes
    assert chi_square_p(torch.tensor([3, 2, 995]), torch.tensor([0.002, 0.003, 0.995])) > 0.5  # pooled: 5 against 5


def test_the_exact_laws_are_lossless():
    """Their token marginals are p whatever q is: the two-line proof, checked numerically."""
    for q in (Q, P, point_mass(2, 6), torch.full((6,), 1 / 6, dtype=torch.float64)):
        assert torch.allclose(one_law(P, q).sum(0), P, atol=1e-15)
        for k in range(5):
            assert torch.allclose(several_law(P, q, k).sum(0), P, atol=1e-15)


@task2_1
@pytest.mark.parametrize("q", [Q, point_mass(2, 6)], ids=["draft_distribution", "point_mass"])
def test_accept_one_has_the_exact_joint_law(q):
    """Over DRAWS drafts d ~ q, the emitted tokens are distributed as p and (accepted, token) as the joint law
    (chi-square at ALPHA), for a draft distribution q and for a deterministic draft (a point mass)."""
    tokens, joint = one_p_values(accept_one, q)
    assert tokens > ALPHA, f"accept_one's tokens are not distributed as p (p-value {tokens:.2e})"
    assert joint > ALPHA, f"accept_one's (accepted, token) counts deviate from the exact law (p-value {joint:.2e})"


@task2_1
@pytest.mark.parametrize("k", [0, 1, 2, 3, 4])
def test_accept_several_has_the_exact_law(k):
    """Over DRAWS draws of k drafts ~ q, the emitted tokens are distributed as p and (index of the accepted
    draft or all rejected, token) as the multi-round law (chi-square at ALPHA); k = 0 draws from p."""
    tokens, joint = several_p_values(accept_several, k)
    assert tokens > ALPHA, f"accept_several's tokens are not distributed as p (k = {k}, p-value {tokens:.2e})"
    assert joint > ALPHA, f"accept_several's (index, token) counts deviate from the exact law (k = {k}, p-value {joint:.2e})"


@task2_1
def test_certain_outcomes_types_and_unchanged_arguments():
    """A target with one token x: x is emitted whatever the drafts, accepted exactly when a draft is x.
    Tokens and indices are Python ints, `accepted` a bool; the arguments are left as they were."""
    x, a, b = 2, 0, 4
    p, q, generator = point_mass(x, 6), Q.clone(), torch.Generator().manual_seed(0)
    kept, drafts = (p.clone(), q.clone()), [a, a, x, b]
    assert returned(accept_one(p, q, x, generator)) == [x, True, "int", "bool"]
    assert returned(accept_one(p, q, a, generator)) == [x, False, "int", "bool"]
    assert returned(accept_one(p, q, x)) == [x, True, "int", "bool"]  # generator None
    assert returned(accept_several(p, q, drafts, generator)) == [x, 2, "int", "int"]
    assert returned(accept_several(p, q, [a, b], generator)) == [x, None, "int", "NoneType"]
    assert returned(accept_several(p, q, [], generator)) == [x, None, "int", "NoneType"]
    assert returned(accept_several(p, q, torch.tensor([b, x]), generator)) == [x, 1, "int", "int"]
    for _ in range(20):  # whatever p and q, a token is an int, an index an int or None
        token, accepted = accept_one(P, Q, 3, generator)
        assert type(token) is int and type(accepted) is bool and 0 <= token < 6
        token, index = accept_several(P, Q, [a, b, x], generator)
        assert type(token) is int and (index is None or type(index) is int) and 0 <= token < 6
    assert all(torch.equal(before, after) for before, after in zip(kept, (p, q))) and drafts == [a, a, x, b]


@task2_1
def test_draws_come_from_the_generator():
    def run(generator):
        return [accept_several(P, Q, [2, 3], generator) + accept_one(P, Q, 1, generator) for _ in range(50)]

    assert run(torch.Generator().manual_seed(3)) == run(torch.Generator().manual_seed(3))
    assert run(torch.Generator().manual_seed(3)) != run(torch.Generator().manual_seed(4))
    torch.manual_seed(8)
    first = [accept_one(P, Q, 2) for _ in range(50)]
    torch.manual_seed(8)
    assert [accept_one(P, Q, 2) for _ in range(50)] == first  # None: torch's default generator


@task2_1
@pytest.mark.parametrize("call, error, match", [
    (lambda: accept_one([0.5, 0.5], Q, 0), TypeError, "p must be a torch.Tensor"),
    (lambda: accept_one(P, torch.tensor([1, 0, 0, 0, 0, 0]), 0), TypeError, "q must be a floating-point tensor"),
    (lambda: accept_one(P[None], Q, 0), ValueError, r"p must be a non-empty 1-D \(V,\) tensor, got shape \(1, 6\)"),
    (lambda: accept_one(P, Q[:5] / Q[:5].sum(), 0), ValueError, "same vocabulary size, got 6 and 5"),
    (lambda: accept_one(P * 2, Q, 0), ValueError, "p must be a probability vector.*sum 2"),
    (lambda: accept_one(P, torch.tensor([1.2, -0.2, 0, 0, 0, 0], dtype=torch.float64), 0), ValueError,
     "q must be a probability vector.*min -0.2"),
    (lambda: accept_one(P.index_fill(0, torch.tensor(0), float("nan")), Q, 0), ValueError, "p must be a probability vector"),
    (lambda: accept_one(P, point_mass(1, 6), 2), ValueError, r"draft 2 has q\[2\] = 0: it cannot have been drawn from q"),
    (lambda: accept_one(P, Q, 6), ValueError, r"draft 6 is outside the vocabulary \[0, 6\)"),
    (lambda: accept_one(P, Q, 1.0), TypeError, "a draft must be an int token id, got float"),
    (lambda: accept_one(P, Q, True), TypeError, "a draft must be an int token id, got bool"),
    (lambda: accept_one(P, Q, 0, generator=0), TypeError, "generator must be None or a torch.Generator"),
    (lambda: accept_several(P, Q, [0, -1]), ValueError, r"draft -1 is outside the vocabulary"),
    (lambda: accept_several(P, point_mass(1, 6), [1, 2]), ValueError, r"draft 2 has q\[2\] = 0"),
    (lambda: accept_several(P, Q, 3), TypeError, "drafts must be a sequence of int token ids, got int"),
])
def test_bad_input_gets_a_clear_error(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize("call, match", [
    (lambda: residual(Q, Q), r"the residual max\(0, p - q\) is empty"),
    (lambda: point_mass(6, 6), r"token 6 is outside the vocabulary \[0, 6\)"),
])
def test_the_given_helpers_refuse_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_a_tensor_draft_is_accepted_as_an_int():
    assert check_inputs(P, Q, [torch.tensor(2)], None)[2] == [2]
    assert check_inputs(P, Q, torch.tensor([2, 3, 2]), None)[2] == [2, 3, 2]
