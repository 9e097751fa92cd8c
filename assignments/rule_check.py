"""Check task 2.3's rules in a submission: a checklist for "breaking the rules scores 0".

    python assignments/rule_check.py SUBMISSION            # a folder, or the file itself
    python assignments/rule_check.py SUBMISSION --task task2_3

The handout of task 2.3 allows only what the step-choice protocol gives (the trees, the evidence,
kv, the window's size, the accepted tokens, the times and ``cost``): no reaching the model, the
runner, the proposers or the grading code through ``gc``, globals, stack frames or module state,
and no importing adaptive decoding's policy (``ladref.fast``, ``ladref.pricing``,
``ladref.batched.policy``). This script reads the submission's
task file with `ast` (it never runs it) and prints each rule with "pass" or "FLAG" and the lines
that raised it, then the checks that remain by hand (`HAND_CHECKS`). A flag is a place to read,
not a verdict: decide with the code and the written answers in front of you. Exit status 1 when a
rule is flagged, 2 when the file is missing or does not parse.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from selfcheck import task_file  # noqa: E402
from tasks import task_by_marker  # noqa: E402

FRAME_NAMES = {"_getframe", "currentframe", "stack", "getouterframes", "getinnerframes", "trace", "f_back", "f_globals",
               "f_locals", "f_builtins", "tb_frame", "gi_frame", "cr_frame", "__closure__", "__globals__"}
STATE_CALLS = {"globals", "vars", "locals", "__import__", "exec", "eval", "compile", "getattr", "setattr", "breakpoint"}
OUTSIDE_MODULES = {"os", "pathlib", "io", "shutil", "tempfile", "subprocess", "multiprocessing", "threading", "signal",
                   "socket", "ctypes", "pickle", "marshal", "importlib", "runpy", "assignments", "sandbox", "worker"}
ALLOWED_MODULES = {"__future__", "math", "collections", "collections.abc", "typing", "dataclasses", "functools", "itertools",
                   "heapq", "bisect", "statistics", "ladref.proposer", "ladref.tree", "ladref.types"}
HAND_CHECKS = (
    "The written answers describe the code handed in (the policy, its score of a step, how it learns).",
    "A flagged line: read it in context; a rule is broken when it reaches the model, the runner, the proposers "
    "or the grading code, or uses adaptive decoding's policy, whatever the route.",
    "A suspiciously fast submission (a speed-up well above the reference's): read the whole file; the grader checks "
    "that the steps hang together, not that a consistent trace was computed from the protocol alone.",
    "Code that builds names at run time (strings passed to getattr or importlib, encoded text): read what it builds.",
)


@dataclass(frozen=True)
class Rule:
    """One rule of the handout and the `ast` check that flags the lines that may break it."""

    name: str
    check: Callable[[ast.Module], list[ast.AST]]


def imported(node: ast.AST) -> list[str]:
    """The modules an import statement names ("ladref.fast.policy"; a relative one as ".fast")."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        base = "." * node.level + (node.module or "")
        return [base] + [f"{base.rstrip('.')}.{alias.name}" if node.module else base + alias.name for alias in node.names]
    return []


def called_name(node: ast.AST) -> str | None:
    """The name a call calls: "globals" for globals(), "_getframe" for sys._getframe(...)."""
    if isinstance(node, ast.Call):
        func = node.func
        return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    return None


def uses_gc(tree: ast.Module) -> list[ast.AST]:
    return [n for n in ast.walk(tree) if any(m == "gc" or m.startswith("gc.") for m in imported(n))
            or (isinstance(n, ast.Name) and n.id == "gc") or (isinstance(n, ast.Attribute) and n.attr == "get_objects")]


# adaptive decoding's policy, under ladref. The task file is a module of ladref wherever it runs (`tasks.Task.module`,
# ladref/course_choice.py: in a copy, in a submission, in the grader's packages; the reference's answer, kept in
# assignments/reference/, is put there too), so a relative import (".fast") names a module of ladref ("ladref.fast").
POLICY_PACKAGES = ("fast", "pricing", "batched.policy", "batched.acceptance")


def imports_policy(tree: ast.Module) -> list[ast.AST]:
    def policy(module: str) -> bool:  # ladref.fast..., ladref.pricing..., or relative to ladref/: .fast...
        name = module.lstrip(".").removeprefix("ladref.") if module.startswith(("ladref.", ".")) else ""
        return any(name == p or name.startswith(p + ".") for p in POLICY_PACKAGES)
    strings = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
               and any(f"ladref.{p}" in n.value or n.value.startswith(f".{p}") for p in POLICY_PACKAGES)]  # importlib, __import__
    return [n for n in ast.walk(tree) if any(policy(m) for m in imported(n))] + strings


def uses_frames(tree: ast.Module) -> list[ast.AST]:
    return [n for n in ast.walk(tree) if any(m.split(".")[0] in ("inspect", "traceback") for m in imported(n))
            or (isinstance(n, ast.Attribute) and n.attr in FRAME_NAMES) or (isinstance(n, ast.Name) and n.id in FRAME_NAMES)]


def uses_module_state(tree: ast.Module) -> list[ast.AST]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Global, ast.Nonlocal)) or called_name(n) in STATE_CALLS
            or (isinstance(n, ast.Attribute) and n.attr in ("modules", "__dict__", "__subclasses__", "__mro__"))]


def uses_files_or_processes(tree: ast.Module) -> list[ast.AST]:
    return [n for n in ast.walk(tree) if called_name(n) in ("open", "system", "popen")
            or any(m.lstrip(".").split(".")[0] in OUTSIDE_MODULES for m in imported(n))]


def imports_beyond_the_protocol(tree: ast.Module) -> list[ast.AST]:
    def allowed(module: str) -> bool:
        return module in ALLOWED_MODULES or module.lstrip(".") in {m.removeprefix("ladref.") for m in ALLOWED_MODULES
                                                                   if m.startswith("ladref.")}
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
            and not all(allowed(m) or allowed(m.rsplit(".", 1)[0]) for m in imported(n))]


RULES = (
    Rule("no gc (the garbage collector's objects: the model, the runner)", uses_gc),
    Rule("no importing adaptive decoding's policy (ladref.fast, ladref.pricing, ladref.batched.policy)", imports_policy),
    Rule("no stack frames (inspect, sys._getframe, f_back, f_globals, ...)", uses_frames),
    Rule("no globals or module state (global, globals(), vars(), sys.modules, exec, getattr, ...)", uses_module_state),
    Rule("no files, processes or the grading code (open(), os, subprocess, importlib, assignments, ...)",
         uses_files_or_processes),
    Rule("imports only the protocol's own helpers and the standard library's plain ones", imports_beyond_the_protocol),
)


def check_source(source: str) -> list[tuple[Rule, list[tuple[int, str]]]]:
    """Each rule with the (line, text) of the places that flag it (none: the rule passes).

    Raises:
        SyntaxError: the source does not parse.
    """
    tree, lines = ast.parse(source), source.splitlines()
    results = []
    for rule in RULES:
        rows = sorted({node.lineno for node in rule.check(tree) if hasattr(node, "lineno")})
        results.append((rule, [(row, lines[row - 1].strip()) for row in rows]))
    return results


def report(path: Path, results: list[tuple[Rule, list[tuple[int, str]]]]) -> str:
    """The checklist: each rule, pass or FLAG with its lines, then the hand checks."""
    out = [f"rules of the task, checked in {path}:"]
    for rule, flags in results:
        out.append(f"  [{'FLAG' if flags else 'pass'}] {rule.name}")
        out += [f"         {path.name}:{row}: {text}" for row, text in flags]
    out.append("by hand:")
    out += [f"  [ ] {item}" for item in HAND_CHECKS]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("submission", type=Path, help="the submission folder, or its task file")
    parser.add_argument("--task", default="task2_3", help="the task whose file is checked (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        task = task_by_marker(args.task)
    except ValueError as err:
        parser.error(str(err))
    path = args.submission if args.submission.is_file() else task_file(args.submission, task, HERE.parent)
    if path is None:
        print(f"no {task.module} in {args.submission}", file=sys.stderr)
        return 2
    try:
        results = check_source(path.read_text(errors="replace"))
    except SyntaxError as err:
        print(f"{path} does not parse: {err}", file=sys.stderr)
        return 2
    print(report(path, results), end="")
    return 1 if any(flags for _, flags in results) else 0


if __name__ == "__main__":
    sys.exit(main())
