"""The open task (2.3, a cost-aware step choice) in the grader: judges looked up by name, the
modelled-time judge, the leaderboard, and the grading of plausible wrong policies (each below half
the task's points) against the reference (full marks) and untouched stubs (0)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
from kit import load

ROOT = Path(__file__).resolve().parents[1]
answer_diff, autograde, grades, report, tasks_mod, make_student = map(
    load, ("answer_diff", "autograde", "grades", "report", "tasks", "make_student"))
TASK = tasks_mod.task_by_marker("task2_3")
CPU = {"kind": "cpu", "base": 0.02, "per_token": 0.002, "knee": 0, "per_kv": 1e-5, "per_token_kv": 1e-6}


def probes():
    sys.path.insert(0, str(ROOT / "assignments" / "hidden"))
    return importlib.import_module("task2_3")


def test_the_judge_prices_steps_with_the_probes_formula():
    module = probes()
    import random

    rng = random.Random(0)
    surfaces = [module.cpu(rng, (6, 24), 0.01) for _ in range(5)] + [module.gpu(rng, (64, 256), 0.01) for _ in range(5)]
    for surface in surfaces:
        for q in (1, 2, 13, 64, 65, 200):
            for kv in (0, 7, 150):
                assert answer_diff.step_cost(surface, q, kv) == pytest.approx(module.step_cost(surface, q, kv), rel=1e-12)
    gpu = surfaces[-1]
    assert answer_diff.step_cost(gpu, 1, 10) == answer_diff.step_cost(gpu, gpu["knee"], 10) < answer_diff.step_cost(gpu, gpu["knee"] + 1, 10)


def test_modelled_time_passes_greedy_tokens_within_the_tolerance_and_measures_the_speed_up():
    case = {"id": "c", "prompt": [1, 2, 3], "surface": CPU, "tolerance": 1.1}
    reference = {"tokens": [5, 6, 7, 8], "steps": [[3, 2, 2], [3, 4, 2]]}
    passed, message, speedup = answer_diff.modelled_time(case, reference, reference)
    greedy = sum(answer_diff.step_cost(CPU, 1, kv) for kv in (2, 3, 4, 5))
    spent = answer_diff.step_cost(CPU, 3, 2) + answer_diff.step_cost(CPU, 3, 4)
    assert passed and speedup == pytest.approx(greedy / spent) and "reference's" in message
    slower = {"tokens": [5, 6, 7, 8], "steps": [[9, 2, 2], [9, 4, 2]]}
    passed, message, speedup = answer_diff.modelled_time(case, reference, slower)
    assert not passed and "at most 1.1 x the reference's" in message and speedup < greedy / spent
    wrong = {"tokens": [5, 6, 0, 8], "steps": reference["steps"]}
    assert answer_diff.modelled_time(case, reference, wrong)[::2] == (False, None)
    for forged, why in (({"tokens": [5, 6, 7, 8], "steps": [[1, 2, 4]]}, None),  # one step of 4 tokens: consistent
                        ({"tokens": [5, 6, 7, 8], "steps": [[1, 2, 2], [1, 9, 2]]}, "not a step of this decode"),
                        ({"tokens": [5, 6, 7, 8], "steps": [[1, 2, 1]]}, "does not give the 4 tokens"),
                        ({"tokens": [5, 6, 7, 8], "steps": [[0, 2, 4]]}, "not a step of this decode"),
                        ({"tokens": [5, 6, 7, 8], "steps": [[1.0, 2, 4]]}, "ints"),
                        ([5, 6, 7, 8], "is not {'tokens'")):
        problem = answer_diff.trace_problem(case, forged)
        assert (problem is None) if why is None else (why in problem), (forged, problem)


def group(judge: str, cases: list[dict], expected: dict) -> dict:
    return {"points": 1, "visible": True, "judge": judge, "cases": cases, "expected": expected}


def test_verdicts_use_each_groups_judge_and_keep_equal_as_it_was():
    with pytest.raises(ValueError, match="unknown judge 'closest'"):
        answer_diff.judge("closest")
    case = {"id": "c", "prompt": [1, 2, 3], "surface": CPU, "tolerance": 1.1}
    reference = {"tokens": [5, 6], "steps": [[3, 2, 2]]}
    groups = {"same": group("equal", [{"id": "a", "x": 1}, {"id": "b", "x": 2}], {"a": [1, 2], "b": [3]}),
              "speed": group("modelled_time", [case, {**case, "id": "d"}, {**case, "id": "e", "tolerance": None}],
                             {"c": reference, "d": reference, "e": reference})}
    records = [{"group": "same", "id": "a", "got": [1, 2]}, {"group": "same", "id": "b", "got": [4]},
               {"group": "speed", "id": "c", "got": reference}, {"group": "speed", "id": "d", "got": {"tokens": [5, 0], "steps": [[1, 2, 2]]}},
               {"group": "speed", "id": "e", "got": reference}]
    same, speed = autograde.verdicts(TASK, groups, records)
    assert same.outcomes["a"] == ("passed", "") and same.metric is None and not same.metrics
    assert same.outcomes["b"][0] == "failed" and "first difference at [0]: expected 3, got 4" in same.outcomes["b"][1]
    assert "expected: [3]" in same.outcomes["b"][1]  # "equal" shows expected and got, as before
    greedy = answer_diff.step_cost(CPU, 1, 2) + answer_diff.step_cost(CPU, 1, 3)
    assert speed.metric == "modelled speed-up over greedy"
    assert speed.metrics["c"] == pytest.approx(greedy / answer_diff.step_cost(CPU, 3, 2))
    assert speed.outcomes["c"][0] == "passed" and speed.outcomes["d"][0] == "failed" and "not greedy's tokens" in speed.outcomes["d"][1]
    assert speed.metrics["d"] is None and "could not be judged: TypeError" in speed.outcomes["e"][1]


def graded(name: str, metrics: list[float | None], score_groups: bool = True) -> object:
    g = grades.GroupGrade("speed", 1, False, {f"c{i}": ("passed", "") for i in range(len(metrics))},
                          metric="modelled speed-up over greedy", metrics={f"c{i}": v for i, v in enumerate(metrics)})
    task = grades.TaskGrade(TASK, [g] if score_groups else [], None if score_groups else "does not import")
    return grades.Grade(Path(name), [task], True)


def test_the_leaderboard_ranks_by_the_mean_metric_unmeasured_cases_counting_zero():
    board = report.leaderboard([graded("slow", [1.0, 1.2]), graded("fast", [2.0, None]), graded("broken", [], False)])
    csv, printed = board
    assert csv.splitlines() == ["task,rank,submission,metric,value,points", "task2_3,1,slow,modelled speed-up over greedy,1.1000,30",
                                "task2_3,2,fast,modelled speed-up over greedy,1.0000,30",
                                "task2_3,3,broken,modelled speed-up over greedy,0.0000,0"]
    assert "1. slow: 1.10 (30 / 30 points)" in printed and "3. broken: 0.00" in printed
    assert "modelled speed-up over greedy: 1.10 (the mean of 2 cases)" in report.summary(graded("slow", [1.0, 1.2]))
    assert report.gradescope(graded("slow", [1.0, 1.2]))["leaderboard"][0]["value"] == 1.1
    plain = grades.Grade(Path("x"), [grades.TaskGrade(TASK, [grades.GroupGrade("g", 1, False, {"a": ("passed", "")})])], True)
    assert report.leaderboard([plain]) is None and "leaderboard" not in report.gradescope(plain)


# plausible wrong policies: feed nothing (greedy decoding), feed everything, a fixed budget whatever the cost
WRAPPED = '''from ladref.step import DraftBudget


class CostAwareChoice:
    def __init__(self, cost):
        self.inner = DraftBudget({budget})

    def choose(self, trees, evidence, kv, window_cells):
        return self.inner.choose(trees, evidence, kv, window_cells)

    def observe(self, tokens):
        pass

    def timed(self, fed, kv, seconds):
        pass
'''
NOTHING = '''from ladref.tree import DraftTree


class CostAwareChoice:
    def __init__(self, cost):
        self.cost = cost

    def choose(self, trees, evidence, kv, window_cells):
        return DraftTree.empty(), False

    def observe(self, tokens):
        pass

    def timed(self, fed, kv, seconds):
        pass
'''


@pytest.mark.slow
def test_wrong_policies_score_below_half_the_reference_full_marks_and_stubs_zero(tmp_path):
    source = (ROOT / TASK.reference_file).read_text()  # assignments/reference/course_choice.py
    submissions = {"reference": source, "stub": make_student.stub_source(source, TASK.marker, TASK.functions),
                   "nothing": NOTHING, "everything": WRAPPED.format(budget=""), "budget8": WRAPPED.format(budget=8)}
    for name, text in submissions.items():
        (tmp_path / "in" / name).mkdir(parents=True)
        (tmp_path / "in" / name / "course_choice.py").write_text(text)
    results = autograde.grade_folder(tmp_path / "in", tmp_path / "out", [TASK.marker], seed=0)
    score = {g.submission.name: g.tasks[0].score for g in results}
    assert score["reference"] == TASK.points and score["stub"] == 0, score
    assert all(score[name] < TASK.points / 2 for name in ("nothing", "everything", "budget8")), score
    ranking = [row.split(",")[2] for row in (tmp_path / "out" / "leaderboard.csv").read_text().splitlines()[1:]]
    assert ranking[0] == "reference" and ranking[-1] == "stub" and set(ranking) == set(submissions)
    assert "modelled speed-up over greedy" in (tmp_path / "out" / "reference" / "summary.txt").read_text()
