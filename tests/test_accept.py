"""The accept rules of speculative sampling keep the target distribution exactly (ladref/accept.py).

Each law test draws tokens through a rule with a seeded `torch.Generator` and compares the counts
with the rule's *exact* law by a chi-square goodness-of-fit test (cells with expected count < 5
pooled). Every test is deterministic; the level ALPHA = 1e-3 of each check is its false-failure
rate: the chance that a correct rule fails it with an unlucky seed (at most 1e-2 for the ten
checks of this file together). Each law test has a negative control, a plausible biased rule that
the same test, same seed and same number of draws must reject; at DRAWS = 1500 every control
differs from the exact law by a total variation of 0.136 or more, and each check rejects it
with probability above 0.999.
"""

from __future__ import annotations

import pytest
import torch

from ladref.accept import accept_one, accept_several, check_inputs, point_mass, residual

pytestmark = pytest.mark.usefixtures("one_thread")
task2_1 = pytest.mark.task2_1  # only the tests of accept_one and accept_several: the self-check's score

ALPHA = 1e-3
P = torch.tensor([0.40, 0.25, 0.15, 0.10, 0.06, 0.04], dtype=torch.float64)  # target
Q = torch.tensor([0.10, 0.15, 0.30, 0.25, 0.05, 0.15], dtype=torch.float64)  # draft
DRAWS = 1500


def chi_square_p(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """p-value of a chi-square goodness-of-fit test, cells with expected count < 5 pooled."""
    counts, probs = counts.flatten().double(), probs.flatten().double()
    expected = probs * counts.sum()
    small = expected < 5
    obs = torch.cat([counts[~small], counts[small].sum()[None]])
    exp = torch.cat([expected[~small], expected[small].sum()[None]])
    if exp[-1] == 0 and obs[-1] > 0:
        return 0.0  # a count where the law puts no mass
    keep = exp > 0
    stat = ((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum()
    return float(torch.special.gammaincc(torch.tensor((int(keep.sum()) - 1) / 2, dtype=torch.float64), stat / 2))


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
        drafts = torch.multinomial(q, k, replacement=True, generator=generator).tolist()
        token, index = rule(p, q, drafts, generator)
        counts[k if index is None else index, token] += 1
    return counts


# The negative controls: plausible bugs, each drawing from the same generator as the real rule.

def resample_from_p(p, q, draft, generator):
    """Biased: on rejection draw from p itself instead of the residual (mass min(p, q) is counted twice)."""
    if torch.rand((), dtype=torch.float64, generator=generator) * q[draft] < p[draft]:
        return draft, True
    return int(torch.multinomial(p, 1, generator=generator)), False


def accept_with_p(p, q, draft, generator):
    """Biased: the deterministic-draft rule (accept with p(d)) applied to a draft drawn from q."""
    if torch.rand((), dtype=torch.float64, generator=generator) < p[draft]:
        return draft, True
    return int(torch.multinomial(residual(p, q), 1, generator=generator)), False


def no_update(p, q, drafts, generator):
    """Biased: every round tests its draft against p, never against the residual of the rejections before."""
    for i, d in enumerate(drafts):
        if torch.rand((), dtype=torch.float64, generator=generator) * q[d] < p[d]:
            return d, i
    return int(torch.multinomial(residual(p, q), 1, generator=generator)), None


def last_from_p(p, q, drafts, generator):
    """Biased: the rounds are right, but when every draft is rejected the token is drawn from p."""
    r = p
    for i, d in enumerate(drafts):
        if torch.rand((), dtype=torch.float64, generator=generator) * q[d] < r[d]:
            return d, i
        r = residual(r, q)
    return int(torch.multinomial(p, 1, generator=generator)), None


def test_chi_square_helper_detects_a_wrong_distribution():
    probs = torch.tensor([0.5, 0.3, 0.2])
    assert chi_square_p(torch.tensor([500, 300, 200]), probs) > 0.99
    assert chi_square_p(torch.tensor([400, 350, 250]), probs) < ALPHA


def test_the_exact_laws_are_lossless():
    """Their token marginals are p whatever q is: the two-line proof, checked numerically."""
    for q in (Q, P, point_mass(2, 6), torch.full((6,), 1 / 6, dtype=torch.float64)):
        assert torch.allclose(one_law(P, q).sum(0), P, atol=1e-15)
        for k in range(5):
            assert torch.allclose(several_law(P, q, k).sum(0), P, atol=1e-15)


@task2_1
@pytest.mark.parametrize("q", [Q, point_mass(2, 6)], ids=["draft_distribution", "point_mass"])
def test_accept_one_has_the_exact_joint_law(q):
    counts = sample_one(accept_one, P, q, DRAWS, seed=1)
    p = chi_square_p(counts, one_law(P, q))
    assert p > ALPHA, f"accept_one's (accepted, token) counts deviate from the exact law (p = {p:.2e})"


@pytest.mark.parametrize("biased", [resample_from_p, accept_with_p])
def test_the_joint_law_test_rejects_a_biased_rule(biased):
    assert chi_square_p(sample_one(biased, P, Q, DRAWS, seed=1), one_law(P, Q)) < ALPHA


@task2_1
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_accept_several_has_the_exact_law(k):
    counts = sample_several(accept_several, P, Q, k, DRAWS, seed=10 + k)
    tokens = chi_square_p(counts.sum(0), P)
    assert tokens > ALPHA, f"accept_several's tokens are not distributed as p (k = {k}, p = {tokens:.2e})"
    joint = chi_square_p(counts, several_law(P, Q, k))  # which draft was accepted, too
    assert joint > ALPHA, f"accept_several's (index, token) counts deviate from the exact law (k = {k}, p = {joint:.2e})"


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_the_token_law_test_rejects_a_biased_multi_draft_rule(k):
    biased = last_from_p if k == 1 else no_update  # with one draft, no_update is the correct rule
    assert chi_square_p(sample_several(biased, P, Q, k, DRAWS, seed=10 + k).sum(0), P) < ALPHA


@task2_1
def test_a_point_mass_draft_is_ladrefs_sampling_chooser_draw_for_draw():
    """q = one-hot(d): accepted with p(d), else drawn from p without d: `SamplingChooser`'s rule."""
    from ladref.sampling import SamplingChooser, Warp  # (imports transformers: only this test needs it)

    law = one_law(P, point_mass(3, 6))
    assert law[0].tolist() == [0, 0, 0, P[3].item(), 0, 0] and torch.equal(law[1], P.index_fill(0, torch.tensor(3), 0))
    ours, theirs, logits = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5), torch.Generator().manual_seed(6)
    chooser = SamplingChooser(Warp(), theirs)
    for _ in range(500):
        scores = torch.randn(6, generator=logits, dtype=torch.float64) * 2
        p, d = chooser.probs((), scores), int(torch.randint(0, 6, (), generator=logits))
        token, accepted = accept_one(p, point_mass(d, 6), d, ours)
        assert token == chooser.choose((), scores, [d]) and accepted == (token == d)


@task2_1
def test_draws_come_from_the_generator():
    def run(generator):
        return [accept_several(P, Q, [2, 3], generator) for _ in range(50)]

    assert run(torch.Generator().manual_seed(3)) == run(torch.Generator().manual_seed(3))
    assert run(torch.Generator().manual_seed(3)) != run(torch.Generator().manual_seed(4))
    torch.manual_seed(8)
    first = [accept_one(P, Q, 2) for _ in range(50)]
    torch.manual_seed(8)
    assert [accept_one(P, Q, 2) for _ in range(50)] == first  # None: torch's default generator
    assert accept_several(P, Q, [], torch.Generator().manual_seed(0))[1] is None  # no drafts: a draw from p


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
