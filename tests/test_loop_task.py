"""Task 2.2's grading (the decoding loop of ladref/minimal.py): its probes count forward passes.

Checked here: the probes' pass count is the library's step count; three plausible wrong loops,
edited copies of the reference's (greedy's tokens one a step, no harvest into the pool, the
model's own next token dropped after an accepted candidate), each emit greedy's tokens yet
differ from the reference on most cases; and, through the whole grader, the reference scores full
marks, the untouched stub 0 and each wrong loop less than half.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch
import kit
from kit import load

from ladref import LookaheadConfig, greedy_decode, lookahead_decode

ROOT = Path(__file__).resolve().parents[1]
autograde, make_student, tasks_mod = map(load, ("autograde", "make_student", "tasks"))
sys.path.insert(0, str(ROOT / "assignments" / "hidden"))
probes = importlib.import_module("task2_2")

pytestmark = pytest.mark.usefixtures("one_thread")
TASK = tasks_mod.task_by_marker("task2_2")
SOURCE = (ROOT / TASK.module).read_text()
ACCEPT = "        accepted = verify(candidates, int(preds[0]), preds[L:].view(len(candidates), N - 1))\n"
WRONG = {  # lines of the reference's loop and their wrong versions
    "greedy": [("        candidates = pool.get(pending[-1], [])[:G]\n", "        candidates = []\n")],
    "no_harvest": [("            harvest(pool, window, new_row, G)\n", "            pass\n")],
    "drops_the_next_token": [(ACCEPT, ACCEPT + "        accepted = accepted[:-1] or accepted\n")],
}


def rewritten(changes: list[tuple[str, str]]) -> str:
    return kit.rewritten(SOURCE, changes, TASK.module)


def loop_of(text: str):
    return kit.defined_in(text, "wrong_minimal.py", "lookahead_decode_minimal")[0]


def test_the_probes_count_the_library_steps():
    for case in probes.cases(0)["decoding (short)"]:
        got = probes.decode(case)
        model = probes.model_of(*case["model"])
        eos = [] if case["eos"] is None else case["eos"]
        result = lookahead_decode(model, case["prompt"], case["max_new_tokens"], eos_token_id=eos,
                                  config=LookaheadConfig(case["W"], case["N"], case["G"]))
        assert got == {"tokens": result.token_ids, "type": "list", "forward passes": result.stats.steps}, case["id"]
    assert probes.counted(model, lambda: model(torch.tensor([[1, 2]])))[1] == 1 and "forward" not in vars(model)


@pytest.mark.parametrize("name", list(WRONG))
def test_each_wrong_loop_emits_greedy_tokens_in_other_steps(name, monkeypatch):
    drawn = probes.cases(0)["decoding (short)"]
    expected = [probes.decode(case) for case in drawn]
    monkeypatch.setattr(probes, "lookahead_decode_minimal", loop_of(rewritten(WRONG[name])))
    got = [probes.decode(case) for case in drawn]
    for case, answer in zip(drawn, got):
        eos = [] if case["eos"] is None else case["eos"]
        greedy = greedy_decode(probes.model_of(*case["model"]), case["prompt"], case["max_new_tokens"], eos_token_id=eos)
        assert answer["tokens"] == greedy.token_ids, case["id"]
    differ = sum(a != b for a, b in zip(got, expected))
    assert differ > len(drawn) / 2 and all(a["forward passes"] >= b["forward passes"] for a, b in zip(got, expected))


@pytest.mark.slow
def test_grading_scores_the_reference_full_marks_and_wrong_loops_less_than_half(tmp_path):
    variants = {"reference": SOURCE, "stubs": make_student.stub_source(SOURCE, TASK.marker, TASK.functions),
                **{name: rewritten(changes) for name, changes in WRONG.items()}}
    for name, text in variants.items():
        path = tmp_path / "submissions" / name / TASK.module
        path.parent.mkdir(parents=True)
        path.write_text(text)
    grades = autograde.grade_folder(tmp_path / "submissions", tmp_path / "grades", [TASK.marker], seed=0)
    scores = {g.submission.name: float(g.tasks[0].score) for g in grades}
    print(scores)
    assert scores["reference"] == TASK.points and scores["stubs"] == 0, scores
    for name in WRONG:
        assert scores[name] < TASK.points / 2, (name, scores)
