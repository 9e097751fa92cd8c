"""Find near copies of the graded functions' reference code in a folder (a student copy).

    python assignments/near_copies.py COPY [--threshold 0.8] [--solved task1_1 ...]

A student copy must hold no solution: no function that is a graded function's reference with a
small change (a renamed variable, one expression changed, a docstring dropped), wherever it sits
(``ladref/``, ``tests/``, ``tutorials/``, ``assignments/``, and the ``python`` code blocks of
its Markdown pages: the top level, ``docs/`` and ``handouts/``). Each function is normalised before it
is compared: its docstring goes, its arguments and local names become placeholders in the order
they first appear (``v0``, ``v1``, ...), and its text is re-written from the syntax tree, which
drops comments and layout. Two normalised bodies are compared token by token (`difflib`'s ratio):
1.0 is the same code up to names; the default threshold, `THRESHOLD`, flags a copy with an
expression or a few lines changed. Bodies shorter than `MIN_TOKENS` tokens (one-line helpers) are not compared.

The graded functions are those of `tasks.TASKS` (``Task.functions``), read from the reference
repository; those of the tasks whose solutions the copy may show (``--solved``: shipped solved,
or an earlier assignment's, over by the copy's) are left out, since the copy holds them on purpose. Exit status 1 when a near copy is found.
"""

from __future__ import annotations

import argparse
import ast
import copy
import difflib
import io
import re
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from copy_plan import markers_of  # noqa: E402
from tasks import TASKS, Task  # noqa: E402

REPO = HERE.parent
THRESHOLD = 0.75  # a near copy: at least this share of the normalised tokens in common
MIN_TOKENS = 25  # shorter bodies are not compared (a one-line helper matches too much)
SEARCHED = ("ladref", "tests", "tutorials", "assignments")


@dataclass(frozen=True)
class NearCopy:
    """A function of the copy that is close to a graded function's reference."""

    graded: str  # "task2_1 ladref/accept.py:accept_one"
    found: str  # "tests/test_accept.py:resample_from_p"
    ratio: float

    def __str__(self) -> str:
        return f"{self.found} is {self.ratio:.0%} like {self.graded}"


class _Renamer(ast.NodeTransformer):
    """Arguments and names bound in the function become v0, v1, ... in order of first appearance."""

    def __init__(self, local: set[str]) -> None:
        self.local, self.names = local, {}

    def placeholder(self, name: str) -> str:
        if name not in self.local:
            return name
        return self.names.setdefault(name, f"v{len(self.names)}")

    def visit_Name(self, node: ast.Name) -> ast.Name:
        node.id = self.placeholder(node.id)
        return node

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.arg, node.annotation = self.placeholder(node.arg), None
        return node


def bound_names(func: ast.AST) -> set[str]:
    """The function's arguments and the names it assigns (its locals)."""
    names = {a.arg for a in ast.walk(func) if isinstance(a, ast.arg)}
    return names | {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}


def normalised_tokens(func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """The function as tokens: no docstring, decorators, annotations or comments, its name "f", its
    arguments and locals renamed (see the module docstring)."""
    node = copy.deepcopy(func)
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
        body = body[1:]
    node.body, node.decorator_list, node.returns, node.name = body or [ast.Pass()], [], None, "f"
    text = ast.unparse(_Renamer(bound_names(node)).visit(node))
    skip = {tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER, tokenize.COMMENT}
    return [tok.string for tok in tokenize.generate_tokens(io.StringIO(text).readline) if tok.type not in skip]


def functions(path: Path) -> list[tuple[str, ast.FunctionDef]]:
    """(qualified name, node) of every function and method in a Python file ([] if it does not parse)."""
    try:
        return functions_of(ast.parse(path.read_text(errors="replace")).body)
    except SyntaxError:
        return []


def functions_of(scope: list[ast.stmt], prefix: str = "") -> list[tuple[str, ast.FunctionDef]]:
    """(qualified name, node) of the functions and methods defined in `scope`, nested ones included."""
    found = []
    for node in scope:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found += [(prefix + node.name, node), *functions_of(node.body, prefix + node.name + ".")]
        elif isinstance(node, ast.ClassDef):
            found += functions_of(node.body, prefix + node.name + ".")
    return found


def code_blocks(path: Path) -> list[tuple[str, ast.FunctionDef]]:
    """Each ``python`` code block of a Markdown page as a function (its lines the body), named "block k"
    (blocks that do not parse are left out)."""
    found = []
    blocks = re.findall(r"^```(?:python|py)\n(.*?)^```", path.read_text(errors="replace"), flags=re.M | re.S)
    for k, block in enumerate(blocks, 1):
        try:
            body = ast.parse(block).body
        except SyntaxError:
            continue
        func = ast.FunctionDef(name="block", args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
                               body=body or [ast.Pass()], decorator_list=[], returns=None, type_params=[])
        found.append((f"block {k}", ast.fix_missing_locations(func)))
        found += [(f"block {k}: {name}", node) for name, node in functions_of(body)]
    return found


def graded_references(repo: Path = REPO, tasks: list[Task] | tuple[Task, ...] = TASKS) -> dict[str, list[str]]:
    """"task2_1 ladref/accept.py:accept_one" -> the reference body's normalised tokens, for each graded function."""
    refs = {}
    for task in tasks:
        found = dict(functions(repo / task.reference_file))  # the reference's answer, in the library or in assignments/
        for qualname in task.functions:
            if qualname not in found:
                raise LookupError(f"{task.marker}: {qualname} is not in {repo / task.reference_file}")
            refs[f"{task.marker} {task.module}:{qualname}"] = normalised_tokens(found[qualname])
    return refs


def similarity(a: list[str], b: list[str]) -> float:
    """The share of tokens the two sequences have in common, in order (`difflib.SequenceMatcher.ratio`)."""
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def pages(folder: Path) -> list[Path]:
    """The Markdown pages of `folder` whose code blocks are searched: its top level, docs/ and handouts/."""
    return sorted([*folder.glob("*.md"), *(folder / "docs").rglob("*.md"), *(folder / "handouts").rglob("*.md")])


def find_near_copies(folder: Path, solved: tuple[str, ...] = (), *, repo: Path = REPO,
                     threshold: float = THRESHOLD) -> list[NearCopy]:
    """The functions under `folder` (its `SEARCHED` sub-folders) close to a graded function's reference.

    Args:
        folder: a student copy (or any tree of Python files).
        solved: the tasks the copy ships solved (markers or assignment numbers): their functions are not looked for.
        repo: the reference repository whose task functions are the graded references.
        threshold: the ratio (`similarity`) from which a pair is a near copy.

    Returns:
        The near copies, most similar first.
    """
    solved = tuple(markers_of(solved, "solved"))  # markers and assignment numbers; ValueError for unknown ones
    refs = {name: tokens for name, tokens in graded_references(repo, [t for t in TASKS if t.marker not in solved]).items()
            if len(tokens) >= MIN_TOKENS}
    hits = []
    for path in sorted(p for sub in SEARCHED for p in (folder / sub).rglob("*.py")) + pages(folder):
        for qualname, node in functions(path) if path.suffix == ".py" else code_blocks(path):
            tokens = normalised_tokens(node)
            if len(tokens) < MIN_TOKENS:
                continue
            for graded, ref in refs.items():
                if 2 * min(len(ref), len(tokens)) / (len(ref) + len(tokens)) < threshold:
                    continue  # the ratio (2 x matches / both lengths) cannot reach the threshold
                ratio = similarity(ref, tokens)
                if ratio >= threshold:
                    hits.append(NearCopy(graded, f"{path.relative_to(folder).as_posix()}:{qualname}", ratio))
    return sorted(hits, key=lambda hit: -hit.ratio)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="the folder to search (a student copy)")
    parser.add_argument("--solved", nargs="+", default=[], metavar="MARKER", help="tasks the copy ships solved")
    parser.add_argument("--threshold", type=float, default=THRESHOLD, help="ratio of a near copy (default: %(default)s)")
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        parser.error(f"{args.folder} is not a folder")
    if not 0 < args.threshold <= 1:
        parser.error(f"--threshold must be in (0, 1], got {args.threshold}")
    hits = find_near_copies(args.folder, tuple(args.solved), threshold=args.threshold)
    print("\n".join(map(str, hits)) or f"no near copy of a graded function in {args.folder}")
    return 1 if hits else 0


if __name__ == "__main__":
    sys.exit(main())
