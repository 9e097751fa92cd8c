"""Task 2.1's grading (the accept rules of speculative sampling): the "law" judge and the probes.

The judge (``assignments/law.py``) tests a rule's outcome counts against the exact law with
Pearson's chi-square at each case's alpha (``hidden/task2_1.py``: ALPHA = FALSE_FAILURE /
(TAIL_FACTOR x LAW_CASES)). Checked here: its p-values are calibrated on counts drawn from the
exact law, and a correct rule fails at most at the stated rate; it rejects the counts of three plausible biased rules on
every case the probes draw; the closed-form laws of those rules are what their code produces;
and, through the whole grader, the reference scores full marks, an alternative correct rule
(other draws) too, untouched stubs 0 and each biased rule less than half.
"""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path

import pytest
import torch
import kit
from kit import load

ROOT = Path(__file__).resolve().parents[1]
law, answer_diff, autograde, make_student, tasks_mod, handouts = map(
    load, ("law", "answer_diff", "autograde", "make_student", "tasks", "handouts"))
sys.path.insert(0, str(ROOT / "assignments" / "hidden"))
probes = importlib.import_module("task2_1")

pytestmark = pytest.mark.usefixtures("one_thread")
TASK = tasks_mod.task_by_marker("task2_1")
SOURCE = (ROOT / TASK.module).read_text()
LAW_GROUPS = list(probes.SIZES)
REJECT_ONE = "    return int(torch.multinomial(residual(p, q), 1, generator=generator)), False\n"
REJECT_ALL = "    return int(torch.multinomial(r, 1, generator=generator)), None\n"
CHECKED = "    r, q, tokens = check_inputs(p, q, drafts, generator)\n"
# the biased rules (as the probes' BIASES name them): lines of the reference's ladref/accept.py and their wrong versions
BIASED = {
    "draws from p after a rejection": [
        (REJECT_ONE, REJECT_ONE.replace("residual(p, q)", "p")),
        (CHECKED, CHECKED + "    target = r\n"), (REJECT_ALL, REJECT_ALL.replace("(r,", "(target,"))],
    "accepts with p(d)": [("    if u * q[d] < p[d]:\n", "    if u < p[d]:\n"),
                          ("        if u * q[d] < r[d]:\n", "        if u < r[d]:\n")],
    "no residual update between drafts": [
        ("        r = residual(r, q)\n", "        pass\n"), (REJECT_ALL, REJECT_ALL.replace("(r,", "(residual(r, q),"))],
}
# a correct rule that draws differently from the reference: 1 - u for the uniform, and each round through accept_one
OTHER_DRAWS = [
    ("    u = torch.rand((), dtype=torch.float64, generator=generator)\n    if u * q[d] < p[d]:\n",
     "    u = 1 - torch.rand((), dtype=torch.float64, generator=generator)\n    if u < p[d] / q[d]:\n"),
    ("        u = torch.rand((), dtype=torch.float64, generator=generator)\n        if u * q[d] < r[d]:\n",
     "        if accept_one(r, q, d, generator)[1]:\n"),
]


def rewritten(changes: list[tuple[str, str]]) -> str:
    return kit.rewritten(SOURCE, changes, TASK.module)


def rules_of(text: str):
    """(accept_one, accept_several) of a module's source."""
    return kit.defined_in(text, "biased_accept.py", "accept_one", "accept_several")


def law_cases(seed: int) -> list[tuple[str, dict]]:
    drawn = probes.cases(seed)
    return [(group, case) for group in LAW_GROUPS for case in drawn[group]]


def laws(case: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The case's exact law and the laws of the biased rules that apply to it."""
    (p, q), k = (torch.tensor(case[key], dtype=torch.float64) for key in ("p", "q")), case["k"]
    return probes.rule_law(p, q, k), {name: probes.rule_law(p, q, k, **options)
                                      for name, (options, one) in probes.BIASES.items() if one or k > 1}


def drawn_counts(law_: torch.Tensor, n: int, times: int, generator: torch.Generator) -> torch.Tensor:
    """(times, *law.shape) multinomial counts of n draws from `law_`."""
    cells = torch.multinomial(law_.flatten(), n * times, replacement=True, generator=generator).view(times, n)
    counts = torch.zeros(times, law_.numel(), dtype=torch.long).scatter_add_(1, cells, torch.ones_like(cells))
    return counts.view(times, *law_.shape)


def answer(law_: torch.Tensor, counts: torch.Tensor, k: int) -> tuple[dict, dict]:
    rows = [f"draft {i} accepted" for i in range(k)] + ["all rejected"]
    return {"rows": rows, "law": law_.tolist()}, {"counts": counts.tolist()}


def test_the_law_judge_is_registered():
    assert answer_diff.judge("law").metric is None
    assert {probes.GROUPS[g].judge for g in LAW_GROUPS} == {"law"} and probes.GROUPS["the contract"].judge == "equal"
    assert probes.ALPHA * probes.TAIL_FACTOR * probes.LAW_CASES == pytest.approx(probes.FALSE_FAILURE)


def test_the_exact_law_is_lossless_and_each_biased_law_is_not():
    for _, case in law_cases(0):
        exact, biased = laws(case)
        assert torch.allclose(exact.sum(0), torch.tensor(case["p"], dtype=torch.float64), atol=1e-12)
        assert float(exact.sum()) == pytest.approx(1, abs=1e-12)
        for name, other in biased.items():
            assert float(other.sum()) == pytest.approx(1, abs=1e-12), name
            assert float((other.sum(0) - exact.sum(0)).abs().sum()) > 0.01, f"{name} emits p on {case['id']}"


def test_pooling_joins_the_small_cells_until_the_pool_is_large_enough():
    observed, expected = law.pooled(torch.tensor([1, 2, 3, 9, 21]), torch.tensor([1.0, 2.0, 3.0, 10.0, 20.0]))
    assert expected.tolist() == [10.0, 20.0, 6.0] and observed.tolist() == [9.0, 21.0, 6.0]
    observed, expected = law.pooled(torch.tensor([0, 3, 12, 9]), torch.tensor([1.0, 1.0, 10.0, 12.0]))
    assert expected.tolist() == [12.0, 12.0] and observed.tolist() == [9.0, 15.0]
    assert law.chi_square(torch.tensor([500, 300, 200]), torch.tensor([0.5, 0.3, 0.2]))[2] > 0.99
    statistic, df, p_value = law.chi_square(torch.tensor([400, 350, 250]), torch.tensor([0.5, 0.3, 0.2]))
    assert statistic == pytest.approx(20 + 2500 / 300 + 12.5) and df == 2
    assert p_value == pytest.approx(math.exp(-statistic / 2), rel=1e-9)  # two degrees of freedom: the tail is exp(-x / 2)


def test_the_judge_fails_answers_it_cannot_judge_and_impossible_outcomes():
    case = {"id": "c", "draws": 10, "alpha": 1e-3}
    expected = {"rows": ["accepted", "rejected"], "law": [[0.5, 0.0], [0.25, 0.25]]}
    judge = law.law_judge
    assert judge(case, expected, {"counts": [[5, 0], [2, 3]]})[0]
    for got, why in [([[5, 0], [2, 3]], "not {'counts'"), ({"counts": [[5, 0]]}, "not 2 rows of 2 cells"),
                     ({"counts": [[5, 0], [2, 2]]}, "add up to 9"), ({"counts": [[5.0, 0], [2, 3]]}, "non-negative ints"),
                     ({"counts": [[4, 1], [2, 3]]}, "(accepted, token 1) 1 times")]:
        passed, message, metric = judge(case, expected, got)
        assert not passed and why in message and metric is None, message


def test_the_judge_passes_draws_from_the_exact_law():
    generator = torch.Generator().manual_seed(0)
    for _, case in law_cases(0):
        exact, _ = laws(case)
        for counts in drawn_counts(exact, case["draws"], 10, generator):
            expected, got = answer(exact, counts, len(exact) - 1)
            passed, message, _ = law.law_judge(case, expected, got)
            assert passed and message.startswith("chi-square "), message


def binomial_counts(probs: torch.Tensor, n: int, times: int, generator: torch.Generator) -> torch.Tensor:
    """(times, C) multinomial counts of n draws from `probs`, cell after cell (a binomial of what is left)."""
    counts, rest = torch.zeros(times, len(probs), dtype=torch.float64), 1.0
    left = torch.full((times,), float(n), dtype=torch.float64)
    for j, p in enumerate(probs.tolist()[:-1]):
        share = torch.full((times,), min(1.0, p / rest) if rest > 0 else 0.0, dtype=torch.float64)
        counts[:, j] = torch.binomial(left, share, generator=generator)
        left, rest = left - counts[:, j], rest - p
    counts[:, -1] = left
    return counts


@pytest.mark.slow
def test_a_correct_rule_fails_at_most_the_stated_rate():
    """50000 count vectors from the exact law of each case of four grading seeds (6 million), tested as
    the judge does: the p-values hold their level at 1e-2, and the cases fail a correct rule no more than
    FALSE_FAILURE / LAW_CASES each (Pearson's tail, optimistic, stays within TAIL_FACTOR of the nominal alpha).
    The handout's figures are this measurement's (135 failures at torch 2.13's generator)."""
    generator, tried, failed, below = torch.Generator().manual_seed(123), 0, 0, 0
    for seed in (1, 2, 3, 4):
        for _, case in law_cases(seed):
            exact, _ = laws(case)
            probs = exact.flatten()[exact.flatten() > 0]
            counts = binomial_counts(probs, case["draws"], 50_000, generator)
            observed, expected = law.pooled(counts, probs * case["draws"])
            statistic = ((observed - expected) ** 2 / expected).sum(-1)
            p_values = torch.special.gammaincc(torch.tensor((len(expected) - 1) / 2, dtype=torch.float64), statistic / 2)
            assert float(p_values[0]) == pytest.approx(law.chi_square(counts[0], probs)[2], rel=1e-9)  # the judge's
            tried += len(p_values)
            failed, below = failed + int((p_values < case["alpha"]).sum()), below + int((p_values < 1e-2).sum())
    assert 0.9 * 1e-2 * tried <= below <= 1.15 * 1e-2 * tried
    print(f"{failed} of {tried} count vectors failed at alpha = {probes.ALPHA:.3g}: {failed / tried:.3g} per case")
    assert failed <= tried * probes.FALSE_FAILURE / probes.LAW_CASES, (failed, tried)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_every_biased_rule_fails_every_case_it_applies_to(seed):
    """On every case the probes draw, 30 count vectors from each biased rule's law all fail."""
    generator = torch.Generator().manual_seed(seed)
    for _, case in law_cases(seed):
        exact, biased = laws(case)
        for name, other in biased.items():
            for counts in drawn_counts(other, case["draws"], 30, generator):
                expected, got = answer(exact, counts, len(exact) - 1)
                assert not law.law_judge(case, expected, got)[0], f"{name} passes {case['id']}"


@pytest.mark.parametrize("name", list(BIASED))
def test_the_biased_laws_are_those_of_the_biased_rules(name, monkeypatch):
    """The code of each biased rule, run by the probe, fits its closed-form law and fails the exact one."""
    one, several = rules_of(rewritten(BIASED[name]))
    monkeypatch.setattr(probes, "accept_one", one)
    monkeypatch.setattr(probes, "accept_several", several)
    options, applies_to_one = probes.BIASES[name]
    group = "accept_one (small vocabularies)" if applies_to_one else "accept_several (small)"
    case = dict(probes.cases(3)[group][0], draws=3000, alpha=1e-3)
    got = probes.GROUPS[group].observe(case)
    p, q = (torch.tensor(case[key], dtype=torch.float64) for key in ("p", "q"))
    assert law.law_judge(case, {**got, "law": probes.rule_law(p, q, case["k"], **options).tolist()}, got)[0]
    assert not law.law_judge(case, {**got, "law": probes.rule_law(p, q, case["k"]).tolist()}, got)[0]


def test_the_contract_answers_are_the_certain_outcomes():
    case = probes.cases(0)["the contract"][0]
    x = case["x"]
    got = probes.contract(case)
    assert got["returned"]["accept_one(p, q, x)"] == [x, True, "int", "bool"]
    assert got["returned"]["accept_one(p, q, a)"] == [x, False, "int", "bool"]
    assert got["returned"]["accept_several(p, q, [a, a, x, b])"] == [x, 2, "int", "int"]
    assert got["returned"]["accept_several(p, q, [])"] == [x, None, "int", "NoneType"]
    assert got["same seed, same draws"] and got["arguments unchanged"]
    assert got["errors"] == {"p a list": "TypeError", "a draft with q = 0": "ValueError", "a draft outside the vocabulary":
                             "ValueError", "a float draft": "TypeError", "p of another size": "ValueError",
                             "p summing to 2": "ValueError", "generator not a torch.Generator": "TypeError"}


def sci(x: float) -> str:
    """3.3333e-05 -> "3.33e-5", 0.001 -> "1e-3" (as the handout writes them)."""
    mantissa, exponent = f"{x:.2e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def test_the_handout_states_how_the_task_is_graded():
    text = " ".join(handouts.render_handout(TASK).split())
    sizes = probes.SIZES.values()
    visible = sum(probes.SIZES[g][0] for g in LAW_GROUPS if probes.GROUPS[g].visible)
    assert f"There are {probes.LAW_CASES} such cases ({visible} visible, {probes.LAW_CASES - visible} hidden)" in text
    factor, cases = probes.TAIL_FACTOR, probes.LAW_CASES
    assert f"alpha = {sci(probes.FALSE_FAILURE)} / ({factor} × {cases}) = {sci(probes.ALPHA)}" in text
    assert f"at most {sci(probes.FALSE_FAILURE)} (the Bonferroni bound, {cases} × {factor} × alpha;" in text
    assert f"draws n ({min(s[3] for s in sizes)} to {max(s[3] for s in sizes)})" in text
    assert f"over {min(s[1][0] for s in sizes)} to {max(s[1][1] for s in sizes)} tokens" in text
    assert all(rule in text for rule in ("drawing from p after a rejection", "accepting with p(d)", "no residual update"))


@pytest.mark.slow
def test_grading_scores_right_rules_full_marks_and_wrong_ones_less_than_half(tmp_path):
    variants = {"reference": SOURCE, "other_draws": rewritten(OTHER_DRAWS),
                "stubs": make_student.stub_source(SOURCE, TASK.marker, TASK.functions),
                **{name.replace(" ", "_").replace("(", "").replace(")", ""): rewritten(changes)
                   for name, changes in BIASED.items()}}
    for name, text in variants.items():
        path = tmp_path / "submissions" / name / TASK.module
        path.parent.mkdir(parents=True)
        path.write_text(text)
    grades = {g.submission.name: g.tasks[0] for g in autograde.grade_folder(tmp_path / "submissions", tmp_path / "grades",
                                                                           [TASK.marker], seed=0)}
    scores = {name: float(t.score) for name, t in grades.items()}
    print(scores)
    assert scores["reference"] == scores["other_draws"] == TASK.points, scores
    assert scores["stubs"] == 0, scores
    for name in variants.keys() - {"reference", "other_draws", "stubs"}:
        assert scores[name] < TASK.points / 2, (name, scores)
        law_groups = [g for g in grades[name].groups if g.name in LAW_GROUPS and "several" in g.name]
        assert law_groups and all(g.fraction == 0 for g in law_groups), name  # every accept_several case fails


def test_the_references_point_mass_rule_is_ladrefs_sampling_chooser_draw_for_draw():
    """q = one-hot(d): the reference's `accept_one` accepts with p(d), else draws from p without d, with
    `SamplingChooser`'s draws one by one (a property of ladref's code; a student's rule may draw otherwise,
    and its public tests and the grader test only the law of its outcomes)."""
    from test_accept import P, one_law

    from ladref.accept import accept_one, point_mass
    from ladref.sampling import SamplingChooser, Warp

    law_ = one_law(P, point_mass(3, 6))
    assert law_[0].tolist() == [0, 0, 0, P[3].item(), 0, 0] and torch.equal(law_[1], P.index_fill(0, torch.tensor(3), 0))
    ours, theirs, logits = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5), torch.Generator().manual_seed(6)
    chooser = SamplingChooser(Warp(), theirs)
    for _ in range(500):
        scores = torch.randn(6, generator=logits, dtype=torch.float64) * 2
        p, d = chooser.probs((), scores), int(torch.randint(0, 6, (), generator=logits))
        token, accepted = accept_one(p, point_mass(d, 6), d, ours)
        assert token == chooser.choose((), scores, [d]) and accepted == (token == d)
