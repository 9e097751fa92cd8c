"""The Gradescope autograder zip (assignments/make_gradescope.py and assignments/gradescope/).

The fast tests check the zip's listing, its modes and the two scripts' text, and run
``run_autograder``'s fallbacks (the grader cannot start, runs out of time, or the interpreter is
broken). The slow test unpacks the zip into a Gradescope-like layout in a temporary root
(``ROOT/source`` the unzipped reference, made root-only as setup.sh does; ``ROOT/run_autograder``;
``ROOT/submission``) and grades the reference's task file and a stub through ``bash
ROOT/run_autograder``, with this interpreter first on PATH in place of setup.sh's venv (setup.sh
itself needs the network and is not run here).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from kit import load

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENTS = ROOT / "assignments"
FAST_TASK = "task1_2"  # the quickest task to grade: the end-to-end runs grade it alone


make_gradescope = load("make_gradescope")
tasks_mod = load("tasks")


def unpack(archive: Path, dest: Path) -> None:
    """Unzip with the entries' Unix modes, as Gradescope's unpacking does (zipfile drops them)."""
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            path = Path(zf.extract(info, dest))
            if info.external_attr >> 16:
                path.chmod((info.external_attr >> 16) & 0o777)


def gradescope_root(tmp_path: Path, archive: Path) -> Path:
    """ROOT/source (the zip, root-only as after setup.sh) and ROOT/run_autograder copied from it."""
    root = tmp_path / "autograder"
    unpack(archive, root / "source")
    shutil.copy2(root / "source" / "run_autograder", root / "run_autograder")
    subprocess.run(["chmod", "-R", "go-rwx", str(root / "source")], check=True)  # setup.sh's last steps
    return root


def run_autograder(root: Path, script: str = "run_autograder", timeout: float = 900) -> subprocess.CompletedProcess:
    """``bash ROOT/<script>`` with this interpreter's folder first on PATH (in place of ROOT/venv)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return subprocess.run(["bash", str(root / script)], cwd=root, env=env, capture_output=True, text=True, timeout=timeout)


def results(root: Path) -> dict:
    return json.loads((root / "results" / "results.json").read_text())


def check_layout(found: dict) -> None:
    """Gradescope's results.json layout: a numeric score and a list of tests with their fields."""
    assert isinstance(found["score"], (int, float)) and isinstance(found["tests"], list)
    for test in found["tests"]:
        assert {"name", "score", "max_score", "visibility"} <= set(test), test
        assert 0 <= test["score"] <= test["max_score"] + 1e-9
        assert test["visibility"] in ("visible", "hidden", "after_due_date", "after_published")


@pytest.fixture
def archive(tmp_path):
    """The autograder zip of assignment 1."""
    out = tmp_path / "autograder.zip"
    make_gradescope.make_gradescope(out, assignment=1)
    return out


def test_zip_holds_the_scripts_on_top_and_the_reference(archive):
    with zipfile.ZipFile(archive) as zf:
        infos = {info.filename: info for info in zf.infolist()}
    names = list(infos)
    assert names[:2] == ["setup.sh", "run_autograder"]
    for script in ("setup.sh", "run_autograder"):
        assert infos[script].external_attr >> 16 & 0o777 == 0o755, script
    assert all(infos[n].external_attr >> 16 & 0o777 == 0o644 for n in names[2:])
    for needed in ("ladref/__init__.py", "assignments/autograde.py", "tests/conftest.py", "tests/strategies.py",
                   "README.md", "pyproject.toml", "constraints.txt"):
        assert needed in infos, needed
    assert any(n.startswith("assignments/hidden/") for n in names)
    assert all(t.reference_file in infos for t in tasks_mod.TASKS)  # the course answer the library does not hold too
    assert any(n.startswith("tests/data/") for n in names)
    public = tasks_mod.marked_files(ROOT / "tests", [t.marker for t in tasks_mod.TASKS])
    assert public and all(f"tests/{p.name}" in infos for p in public)
    assert "tests/test_gradescope.py" not in infos
    assert {"assignments/gradescope_tasks.txt", "assignments/gradescope_budget.txt"} <= set(infos)
    assert not any(n.startswith(("docs/", "tutorials/", "benchmarks/", "assignments/gradescope/")) for n in names)
    assert not any("__pycache__" in n or n.endswith(".pyc") or ".hypothesis" in n for n in names)
    assert names[2:] == sorted(names[2:])


def test_zip_is_reproducible_and_refuses_bad_outputs(tmp_path, archive, capsys):
    again = tmp_path / "again.zip"
    assert make_gradescope.main([str(again), "--tasks", FAST_TASK]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {again}" in printed and "KiB" in printed and "ladref/ (" in printed and FAST_TASK in printed
    with zipfile.ZipFile(again) as zf:
        assert zf.read("assignments/gradescope_tasks.txt").decode().split() == [FAST_TASK]
    make_gradescope.make_gradescope(again, assignment=1, force=True)
    assert again.read_bytes() == archive.read_bytes()  # same reference, same bytes
    with pytest.raises(FileExistsError, match="--force"):
        make_gradescope.make_gradescope(archive, assignment=1)
    with pytest.raises(ValueError, match=r"\.zip"):
        make_gradescope.make_gradescope(tmp_path / "autograder.tar")
    with pytest.raises(ValueError, match="unknown task"):
        make_gradescope.make_gradescope(tmp_path / "x.zip", ["task9_9"])
    with pytest.raises(FileNotFoundError):
        make_gradescope.make_gradescope(tmp_path / "missing" / "x.zip", assignment=1)
    with pytest.raises(SystemExit):
        make_gradescope.main([str(archive), "--assignment", "1"])
    assert "exists" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.part"))


def test_setup_installs_cpu_torch_under_the_pins_then_the_student_extra(archive):
    with zipfile.ZipFile(archive) as zf:
        setup = zf.read("setup.sh").decode()
        constraints = zf.read("constraints.txt").decode()
    assert any(line.startswith("torch==") for line in constraints.splitlines())  # the pin setup.sh follows
    torch = setup.index('--index-url "$TORCH_INDEX" -c constraints.txt torch')
    assert 'TORCH_INDEX="https://download.pytorch.org/whl/cpu"' in setup
    assert torch < setup.index('install -c constraints.txt -e ".[student]"')  # the CPU build first, then kept
    assert "apt-get install" in setup and "python3-venv" in setup
    assert 'chmod -R go-rwx "$SOURCE"' in setup and 'chmod -R go+rX "$VENV"' in setup
    for script in ("setup.sh", "run_autograder"):
        check = subprocess.run(["bash", "-n", str(ASSIGNMENTS / "gradescope" / script)], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr


def test_fallback_results_when_the_grader_cannot_finish(tmp_path, archive):
    root = gradescope_root(tmp_path, archive)  # no ROOT/submission: the grader stops with an error
    proc = run_autograder(root, timeout=300)
    assert proc.returncode == 0, proc.stderr
    found = results(root)
    check_layout(found)
    assert found["score"] == 0 and "without writing the results" in found["output"]
    assert "last lines" in found["output"]  # the end of the grader's output
    # past the whole-run limit (a copy of the script with a 1 s limit)
    (root / "submission").mkdir()
    text = (root / "run_autograder").read_text()
    assert "\nLIMIT_S=1500 " in text
    (root / "limited").write_text(text.replace("\nLIMIT_S=1500 ", "\nLIMIT_S=1 ", 1))
    assert run_autograder(root, "limited", timeout=120).returncode == 0
    assert results(root)["score"] == 0 and "1 s limit" in results(root)["output"]
    # an interpreter that does not run: the script still leaves a valid results.json
    (root / "venv" / "bin").mkdir(parents=True)
    (root / "venv" / "bin" / "python").write_text("#!/bin/sh\nexit 3\n")
    (root / "venv" / "bin" / "python").chmod(0o755)
    assert run_autograder(root, timeout=60).returncode == 0
    found = results(root)
    check_layout(found)
    assert found["score"] == 0 and "could not run" in found["output"]


def submit(submission: Path, folder: Path, reference: bool) -> None:
    """Copy the task files of `folder` (the reference repository, or a student copy) into submission/, at
    their paths (ladref/masks.py, ...); the reference's from where it keeps them (`Task.reference_file`)."""
    for task in tasks_mod.TASKS:
        (submission / task.module).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(folder / (task.reference_file if reference else task.module), submission / task.module)


def reference_and_stubs(tmp_path: Path, archive: Path, copy_options: list[str], full: float):
    """Grade the reference and a student copy's stubs (`make_student.py` with `copy_options`) through
    `archive`'s `run_autograder` in Gradescope-like folders; for each, after checking the run and the
    results' layout: (name, the score expected, results.json's content, the run)."""
    student = tmp_path / "student"
    made = subprocess.run([sys.executable, str(ASSIGNMENTS / "make_student.py"), str(student), *copy_options],
                          capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    for name, folder, expected in (("reference", ROOT, full), ("stubs", student, 0)):
        root = gradescope_root(tmp_path / name, archive)
        submit(root / "submission", folder, reference=name == "reference")
        proc = run_autograder(root)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        found = results(root)
        check_layout(found)
        yield name, expected, found, proc


@pytest.mark.slow
def test_run_autograder_grades_the_reference_and_the_stubs(tmp_path):
    archive = tmp_path / "autograder.zip"
    make_gradescope.make_gradescope(archive, [FAST_TASK])
    points = tasks_mod.task_by_marker(FAST_TASK).points
    for name, expected, found, proc in reference_and_stubs(tmp_path, archive, [], points):
        assert found["score"] == expected, f"{name}: {found.get('output', '')[-3000:]}\n{proc.stdout[-3000:]}"
        assert found["tests"] and abs(sum(t["max_score"] for t in found["tests"]) - points) < 0.05  # that task alone
        assert all(t["score"] == (t["max_score"] if expected else 0) for t in found["tests"]), name


@pytest.mark.slow
@pytest.mark.parametrize("number", [1, 2])
def test_each_assignments_zip_grades_the_reference_to_full_marks_and_stubs_to_0(tmp_path, number):
    archive = tmp_path / f"assignment{number}.zip"
    make_gradescope.make_gradescope(archive, assignment=number)
    tasks = tasks_mod.tasks_of(number)
    full = sum(t.points for t in tasks)
    for name, expected, found, proc in reference_and_stubs(tmp_path, archive, ["--assignment", str(number)], full):
        assert abs(found["score"] - expected) < 1e-6, f"{name}: {found.get('output', '')[-3000:]}\n{proc.stdout[-3000:]}"
        assert abs(sum(t["max_score"] for t in found["tests"]) - full) < 0.05  # this assignment's tasks, every one graded
        assert "not graded" not in json.dumps(found), name
