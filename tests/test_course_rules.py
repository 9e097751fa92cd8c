"""The course kit's two rules, checked on the registered variants of the reference (``assignments/variants.py``).

* Rule 1: a submission the grader marks down, for a reason a public case can show, is marked
  down by the self-check too: every WRONG variant scores below full marks in both.
* Rule 2: a correct submission that differs from the reference only where the handout leaves a
  choice scores full marks in both: every EQUIVALENT variant does.

Each variant is written as a submission folder and graded twice: by the grader (the probes of
``assignments/hidden/``, `autograde.grade_folder`) and by the self-check (the public tests,
``autograde.py --public-only``, `autograde.grade` with ``hidden=False``). When a wrong variant
scores full marks in the self-check, the public tests are what must get stronger. Cheaper checks
come first: the registry's snippets still match the reference, the public law tests of task 2.1
reject every wrong rule and pass every equivalent one, and task 2.2's public cases are exactly
what the reference's loop records.
"""

from __future__ import annotations

import ast
from pathlib import Path

import kit
import pytest
import test_accept
from kit import load

ROOT = Path(__file__).resolve().parents[1]
autograde, tasks_mod, variants_mod, table, public_cases = map(load, ("autograde", "tasks", "variants", "variant_table", "public_cases"))
VARIANTS = table.variants()
COVERED = sorted({v.task for v in VARIANTS})
WRONG, EQUIVALENT = variants_mod.WRONG, variants_mod.EQUIVALENT


def reference_of(task: str) -> str:
    return (ROOT / tasks_mod.task_by_marker(task).reference_file).read_text()


def of(task: str, kind: str) -> list:
    return [v for v in VARIANTS if v.task == task and v.kind == kind]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"{v.task}-{v.name}")
def test_every_variant_applies_to_the_reference_and_changes_it(variant):
    source = variant.source(reference_of(variant.task))
    assert source != reference_of(variant.task)
    ast.parse(source)  # a variant is code that runs, not a syntax error


def test_a_snippet_the_reference_lost_fails_loudly():
    stale = variants_mod.Variant("task2_2", "stale", WRONG, (("no such line\n", "x\n"),), "a snippet that is gone")
    with pytest.raises(ValueError, match="occurs 0 times in the reference"):
        stale.source(reference_of("task2_2"))
    with pytest.raises(ValueError, match="kind must be"):
        variants_mod.Variant("task2_2", "odd", "maybe", (("a", "b"),), "an unknown kind")
    with pytest.raises(TypeError, match="pair of str"):
        variants_mod.Variant("task2_2", "odd", WRONG, (("a",),), "not a pair")


def test_every_task_has_a_wrong_variant():
    """Every task of the table, present and future, has a plausible mistake both graders must mark down;
    the tasks whose handouts leave choices (the draws of 2.1, how 2.2's loop is written) have correct variants too."""
    assert COVERED == sorted(t.marker for t in tasks_mod.TASKS)
    for task in COVERED:
        assert of(task, WRONG), f"{task} has no WRONG variant in assignments/variant_table.py"
        names = [v.name for v in VARIANTS if v.task == task]
        assert len(names) == len(set(names)) and "reference" not in names, f"{task}: variant names must be unique"
    assert of("task2_1", EQUIVALENT) and of("task2_2", EQUIVALENT)


def test_the_public_cases_of_the_loop_are_what_the_reference_records():
    """``tests/data/minimal_cases.json`` is exactly what ``python assignments/public_cases.py`` writes now."""
    assert public_cases.OUT.read_text() == public_cases.text(), "stale: run python assignments/public_cases.py"


def accept_rules(variant):
    """(accept_one, accept_several) of a task 2.1 variant."""
    return kit.defined_in(variant.source(reference_of("task2_1")), f"{variant.name}.py", "accept_one", "accept_several")


def law_p_values(variant) -> list[float]:
    """The p-values of every check of the public law tests (``tests/test_accept.py``), run on the variant's rules."""
    one, several = accept_rules(variant)
    values = [v for q in (test_accept.Q, test_accept.point_mass(2, 6)) for v in test_accept.one_p_values(one, q)]
    return values + [v for k in range(5) for v in test_accept.several_p_values(several, k)]


@pytest.mark.parametrize("variant", of("task2_1", EQUIVALENT), ids=lambda v: v.name)
def test_the_public_law_tests_pass_other_correct_rules(variant):
    assert min(law_p_values(variant)) > test_accept.ALPHA


# token_as_a_tensor keeps the law: the public contract test marks it down (checked by the whole self-check below)
@pytest.mark.parametrize("variant", [v for v in of("task2_1", WRONG) if v.name != "token_as_a_tensor"], ids=lambda v: v.name)
def test_the_public_law_tests_reject_each_wrong_rule(variant):
    """The negative controls of the law tests: each biased rule fails at least one of their checks."""
    assert min(law_p_values(variant)) < test_accept.ALPHA


def graded_both_ways(task, folder: Path) -> dict[str, tuple[float, float]]:
    """name -> (grader's score, self-check's score) of the reference and every variant of `task`."""
    submissions, marker = folder / "submissions", tasks_mod.task_by_marker(task)
    (submissions / "reference" / marker.module).parent.mkdir(parents=True)
    (submissions / "reference" / marker.module).write_text(reference_of(task))
    for variant in (v for v in VARIANTS if v.task == task):
        variant.write(ROOT / marker.reference_file, marker.module, submissions / variant.name)
    grader = {g.submission.name: float(g.tasks[0].score)
              for g in autograde.grade_folder(submissions, folder / "grades", [task], seed=0)}
    selfcheck = {sub.name: float(autograde.grade(sub, [task], hidden=False).tasks[0].score)
                 for sub in sorted(submissions.iterdir())}
    return {name: (grader[name], selfcheck[name]) for name in grader}


@pytest.mark.slow
@pytest.mark.parametrize("task", COVERED)
def test_the_grader_and_the_self_check_agree_on_every_variant(task, tmp_path):
    points = tasks_mod.task_by_marker(task).points
    scores = graded_both_ways(task, tmp_path)
    print(task, scores)
    assert scores["reference"] == (points, points), scores
    for variant in (v for v in VARIANTS if v.task == task):
        grader, selfcheck = scores[variant.name]
        if variant.kind == WRONG:  # rule 1
            assert grader < points and selfcheck < points, (variant.name, variant.why, scores[variant.name])
        else:  # rule 2
            assert grader == selfcheck == points, (variant.name, variant.why, scores[variant.name])
