"""Run a task's probes on a submission in a confined process, from a copy of the reference held in memory.

`Snapshot` reads the reference once (``ladref/``, the course answers the library does not hold,
``assignments/reference/``, the probes in ``assignments/hidden/``, the test helpers the probes
import, the worker) and writes a fresh package from memory for every run (each course answer at
its task's file, ``pkg/ladref/course_choice.py``), so
nothing a submission changes on disk reaches the next run, and `Snapshot.changed` tells which of
the reference folder's own files changed while the submission ran (the grader reports them and
leaves them as they are: they may be the instructor's own edits, made while a long run goes on). `run_probes` starts ``worker.py`` through ``confine.py`` (time limit, every process it
started killed afterwards) as the unprivileged `sandbox_user` when the grader is root, and reads
back the worker's report: data only, which the grader compares with the reference's answers.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tasks import course_answers

HERE = Path(__file__).resolve().parent
CONFINE = HERE / "confine.py"
HELPERS = ("strategies.py", "families.py")  # test helpers the probes import (tiny models)
WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm")
# one torch thread: the probes' models are tiny, and more threads oversubscribe a small machine
WORKER_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@dataclass(frozen=True)
class Snapshot:
    """The reference's files that grading uses, read once into memory.

    Attributes:
        root: the reference folder they were read from.
        files: relative path -> bytes, for ``ladref/``, the course answers (`tasks.course_answers`),
            ``assignments/hidden/``, ``assignments/worker.py`` and ``tests/*.py`` (watched for changes;
            only the probes' helpers are written to runs).
        placed: a course answer's path -> its task's file in the package ("ladref/course_choice.py"),
            where runs get it.
    """

    root: Path
    files: dict[str, bytes]
    placed: dict[str, str]

    @classmethod
    def read(cls, root: Path) -> Snapshot:
        if not (root / "assignments" / "hidden").is_dir():
            raise FileNotFoundError(f"{root} has no assignments/hidden/: grading needs the reference repository")
        placed = {reference: module for module, reference in course_answers().items()}
        paths = [*sorted((root / "ladref").rglob("*.py")), *(root / reference for reference in placed),
                 *sorted((root / "assignments" / "hidden").glob("*.py")), *sorted((root / "tests").glob("*.py")),
                 root / "assignments" / "worker.py"]
        return cls(root, {p.relative_to(root).as_posix(): p.read_bytes() for p in paths}, placed)

    def probe_modules(self) -> list[str]:
        """The task markers that have a probe module (``assignments/hidden/task1_2.py`` -> "task1_2")."""
        return sorted(Path(p).stem for p in self.files if p.startswith("assignments/hidden/task"))

    def write(self, dest: Path, module: str | None = None, submitted: Path | None = None) -> None:
        """A fresh run folder: ``pkg/ladref`` (with `submitted` as `module`), ``probes/``, ``worker.py``."""
        for rel, data in self.files.items():
            if rel.startswith("ladref/"):
                target = dest / "pkg" / rel
            elif rel in self.placed:
                target = dest / "pkg" / self.placed[rel]
            elif rel == "assignments/worker.py":
                target = dest / "worker.py"
            elif rel.startswith("assignments/hidden/") or rel in {f"tests/{name}" for name in HELPERS}:
                target = dest / "probes" / Path(rel).name
            else:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        if submitted is not None:
            shutil.copyfile(submitted, dest / "pkg" / module)

    def changed(self) -> list[str]:
        """The snapshot's files that now differ from, or are missing in, the reference folder."""
        found = []
        for rel, data in self.files.items():
            try:
                if (self.root / rel).read_bytes() != data:
                    found.append(rel)
            except OSError:
                found.append(rel)
        return found


def default_sandbox_user() -> str | None:
    """"nobody" when the grader runs as root (as on Gradescope) and that account can run this
    Python with torch; else None, with a warning when root (submitted code then runs as root)."""
    if os.geteuid() != 0:
        return None
    try:
        account = pwd.getpwnam("nobody")
    except KeyError:
        account = None
    if account is not None:
        try:
            probe = subprocess.run([sys.executable, "-B", "-E", "-s", "-c", "import torch"], user=account.pw_uid, group=account.pw_gid,
                                   extra_groups=[], cwd="/", env={**os.environ, "HOME": "/nonexistent"}, capture_output=True)
        except OSError:  # the interpreter is in a folder that user cannot enter
            probe = None
        if probe is not None and probe.returncode == 0:
            return account.pw_name
    print(f"warning: submitted code will run as root: the user nobody {'does not exist' if account is None else 'cannot run ' + sys.executable + ' with torch'}"
          " (on Gradescope, setup.sh installs a Python every user can run)", file=sys.stderr)
    return None


def open_to(user: str | None, run: Path) -> Path | None:
    """Let `user` read the run folder (not write it) and give it a home of its own inside; its path."""
    if user is None:
        return None
    account = pwd.getpwnam(user)
    for folder in (run, *run.parents):
        if folder == Path(folder.anchor):
            break
        folder.chmod(folder.stat().st_mode | 0o011)  # traverse only, up to the root
    for path in run.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    run.chmod(0o755)
    home = run / "home"
    home.mkdir()
    os.chown(home, account.pw_uid, account.pw_gid)
    return home


def remove_owned(user: str) -> None:
    """Delete what `user` left in the world-writable folders (so no run can hand files to a later one)."""
    uid = pwd.getpwnam(user).pw_uid
    for folder in map(Path, WORLD_WRITABLE):
        if not folder.is_dir():
            continue
        for entry in folder.iterdir():
            try:
                if entry.lstat().st_uid == uid:
                    shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
            except OSError:
                pass


def run_probes(run: Path, module: str, request: dict, timeout: float, sandbox_user: str | None) -> tuple[list[dict], str, bool]:
    """Run the worker on the run folder `run` (made by `Snapshot.write`); (records, stderr tail, timed out).

    The report file is opened here and handed to the worker as its stdout, so the worker needs no
    right to open anything of the grader's; the records are parsed as JSON and nothing else.
    """
    (run / "request.json").write_text(json.dumps(request))
    home = open_to(sandbox_user, run)
    report, errors = run / "report.jsonl", run / "stderr.txt"
    command = [sys.executable, str(CONFINE), "--timeout", f"{timeout:g}",
               *(["--user", sandbox_user, "--home", str(home)] if sandbox_user else []), "--",
               sys.executable, "-B", "-E", "-s", str(run / "worker.py"), str(run / "pkg"), str(run / "probes"), module]
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}, **WORKER_ENV}
    with open(run / "request.json") as stdin, open(report, "wb") as stdout, open(errors, "wb") as stderr:
        supervisor = subprocess.Popen(command, stdin=stdin, stdout=stdout, stderr=stderr, env=env, cwd=run)
        try:
            code = supervisor.wait(timeout=timeout + 60)
        except subprocess.TimeoutExpired:  # confine.py always ends first; this is a last resort
            supervisor.kill()
            code = supervisor.wait()
        finally:  # the grader itself stopped (SIGTERM): confine.py kills what the submission started
            if supervisor.poll() is None:
                supervisor.terminate()
                supervisor.wait()
    if sandbox_user:
        remove_owned(sandbox_user)
    records = []
    for line in report.read_bytes()[: 64 * 2**20].decode(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    tail = errors.read_bytes()[-4000:].decode(errors="replace")
    return records, tail, code == 124
