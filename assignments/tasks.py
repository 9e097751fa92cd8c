"""The course tasks: the one table the course kit is generated from.

Each task asks the student to write the bodies of some reference functions. Everything else is
derived from this table:

* `make_student.py` removes the listed bodies (keeping signatures, docstrings and the numbered
  step comments as TODOs, the stub's error naming the tasks that need it first), ships the
  public tests that carry the task's pytest marker and writes the file for the answers to the
  written questions (`answers_file`);
* `handouts.py` renders each task's handout from the facts below plus the prose of
  ``handouts/<marker>.md``;
* `autograde.py` grades each task with its probes, ``hidden/<marker>.py`` (never shipped),
  ``points`` split over their groups; in a student copy it runs the public tests that carry the
  task's marker instead (a self-check, `selfcheck.py`).

To add a task: add a `Task` here, register its marker in ``pyproject.toml``, mark its tests with
``pytest.mark.<marker>``, write ``handouts/<marker>.md`` (the sections `REQUIRED_SECTIONS` of
`handouts.py`) and, for grading, ``hidden/<marker>.py`` (``GROUPS`` and ``cases(seed)``, see
``hidden/probing.py``).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

QUESTIONS = 2  # written questions per task (each handout's prose has exactly two)


@dataclass(frozen=True)
class Task:
    """One assignment task.

    Attributes:
        marker: the pytest marker of its tests, e.g. "task1_1".
        title: what the student builds.
        module: the file, relative to the repository root, that holds the functions; the only
            file of a submission that is graded for this task.
        functions: qualified names ("func" or "Class.method") whose bodies are removed.
        requires: markers of the tasks whose code this task's public tests also run (a student
            checking their own copy must finish those first; the autograder grades each task
            with the reference's code for every other file, so nothing is lost twice).
        points: the task's share of its assignment's 100 autograded points.
        question_points: the points of the task's two written questions together, half each,
            graded by hand on top of `points`; the answers go in `answers_file(task)`.
        hours: a time estimate for a student who has read the concepts page, e.g. "2-3".
        solution_tutorials: tutorials that show what the task builds; hand them out only after
            the task's deadline.
        library_copies: functions of the library, outside `module`, that do the task's job
            ("path:qualname", e.g. the captured decoder's copy of the batch cache, or the one-file
            decoder's own n-gram pool); a student copy stubs them with the task's functions until
            the task's assignment is over (they ship whole in a later assignment's copy, and where
            the copy ships the task solved), so that no working solution sits beside the stubs.
        reference: where the reference's answer lives when the library does not hold it: a course
            answer that is no part of ladref (task 2.3's, ``assignments/reference/course_choice.py``).
            It is written at `module` wherever the task is worked on or graded: in a student copy
            (stubbed, or whole where the copy ships the task solved), in the grader's packages and,
            for the reference's own tests, by the repository's ``conftest.py`` (`course_answers`).
            Empty: the reference's answer is `module` itself.
    """

    marker: str
    title: str
    module: str
    functions: tuple[str, ...]
    requires: tuple[str, ...] = ()
    points: int = 25
    question_points: int = 4
    hours: str = "2-3"
    solution_tutorials: tuple[str, ...] = ()
    library_copies: tuple[str, ...] = ()
    reference: str = ""

    def __post_init__(self) -> None:
        """Check `question_points` (TypeError: not an int; ValueError: negative or odd) and `reference`
        (ValueError: inside the package, where the library would ship it)."""
        if self.reference.startswith("ladref/"):
            raise ValueError(f"{self.marker}: a course answer kept out of the library lives outside ladref/, got {self.reference!r}")
        qp = self.question_points
        if isinstance(qp, bool) or not isinstance(qp, int):
            raise TypeError(f"{self.marker}: question_points must be an int, got {type(qp).__name__}")
        if qp < 0 or qp % QUESTIONS:
            raise ValueError(f"{self.marker}: question_points must be >= 0 and split evenly over {QUESTIONS} questions, got {qp}")

    @property
    def reference_file(self) -> str:
        """The reference's answer, relative to the repository root: `reference`, else `module`."""
        return self.reference or self.module

    @property
    def number(self) -> str:
        """ "task1_4" -> "1.4" (the name students see)."""
        return self.marker.removeprefix("task").replace("_", ".")

    @property
    def assignment(self) -> int:
        """The assignment the task belongs to: its number's first part (1 for task 1.4)."""
        return int(self.number.split(".")[0])

    def library_functions(self) -> dict[str, tuple[str, ...]]:
        """`library_copies` by file: {"ladref/batched/static.py": ("StaticBatchCache.forward", ...)}."""
        by_file: dict[str, tuple[str, ...]] = {}
        for entry in self.library_copies:
            path, _, qualname = entry.partition(":")
            if not qualname:
                raise ValueError(f"{self.marker}: library copy {entry!r} is not 'path:qualname'")
            by_file[path] = (*by_file.get(path, ()), qualname)
        return by_file

    @property
    def short_title(self) -> str:
        """The title without its asides in parentheses: "the draft tree (a trie) and its mask" ->
        "the draft tree and its mask"."""
        return re.sub(r"\s*\([^()]*\)", "", self.title)


TASKS: tuple[Task, ...] = (
    Task(
        "task1_1",
        "the attention mask builder",
        "ladref/masks.py",
        ("StepLayout.position_offsets", "StepLayout.allowed", "build_step_inputs", "to_additive", "static_additive"),
        requires=("task1_5",),
        points=20,
        hours="3-4",
        solution_tutorials=("03_attention_mask",),
        library_copies=("ladref/minimal.py:step_mask", "ladref/minimal.py:build_step"),
    ),
    Task(
        "task1_2",
        "the n-gram pool",
        "ladref/sources/ngram_pool.py",
        ("NGramPool.add", "NGramPool.seed_from_tokens", "NGramPool.harvest", "NGramPool.candidates"),
        points=15,
        hours="1-2",
        solution_tutorials=("02_ngram_pool",),
        library_copies=tuple(f"ladref/minimal.py:{name}" for name in ("pool_add", "seed_pool", "harvest")),
    ),
    Task(
        "task1_3",
        "verification of a draft tree (greedy, and by a chooser)",
        "ladref/verify.py",
        ("verify_greedy", "verify_chosen"),
        requires=("task1_5",),
        points=15,
        hours="1-2",
        solution_tutorials=("04_combined_step",),
        library_copies=("ladref/minimal.py:verify",),
    ),
    Task(
        "task1_4",
        "the combined step",
        "ladref/step.py",
        ("kept_rows", "draft_step"),
        requires=("task1_1", "task1_2", "task1_3", "task1_5"),
        points=25,
        hours="3-4",
        solution_tutorials=("04_combined_step",),
    ),
    Task(
        "task1_5",
        "the draft tree (a trie) and its mask",
        "ladref/tree.py",
        ("DraftTree.extend", "DraftTree.path", "DraftTree.ancestors"),
        points=15,
        hours="1-2",
        solution_tutorials=("03_attention_mask", "07_draft_trees"),
    ),
    Task(
        "task1_6",
        "a batch's KV cache (one padded cache, each row's slots marked, ragged commits)",
        "ladref/batched/cache.py",
        ("ragged_commit_plan", "BatchCache.forward", "BatchCache.commit"),
        points=10,
        hours="2-3",
        library_copies=("ladref/batched/static.py:StaticBatchCache.forward", "ladref/batched/static.py:StaticBatchCache.commit"),
    ),
    Task(
        "task2_1",
        "the accept rules of speculative sampling (one draft, several drafts)",
        "ladref/accept.py",
        ("accept_one", "accept_several"),
        points=35,
        question_points=4,
        hours="2-3",
    ),
    Task(
        "task2_2",
        "the decoding loop of the one-file decoder",
        "ladref/minimal.py",
        ("lookahead_decode_minimal",),
        points=35,
        question_points=4,
        hours="2-3",
    ),
    Task(
        "task2_3",
        "a cost-aware step choice (open-ended: graded by modelled speed)",
        "ladref/course_choice.py",
        ("CostAwareChoice.__init__", "CostAwareChoice.best", "CostAwareChoice.choose", "CostAwareChoice.observe",
         "CostAwareChoice.timed"),
        requires=("task1_4",),
        points=30,
        question_points=6,
        hours="5-8",
        reference="assignments/reference/course_choice.py",
    ),
)


def course_answers(tasks: tuple[Task, ...] | list[Task] = TASKS) -> dict[str, str]:
    """{module: reference} of the tasks whose reference's answer the library does not hold (`Task.reference`):
    {"ladref/course_choice.py": "assignments/reference/course_choice.py"}."""
    return {task.module: task.reference for task in tasks if task.reference}


def task_by_marker(marker: str) -> Task:
    """The `Task` whose marker is `marker` (ValueError for an unknown one)."""
    for task in TASKS:
        if task.marker == marker:
            return task
    raise ValueError(f"unknown task {marker!r}; known: {', '.join(t.marker for t in TASKS)}")


def assignment_numbers() -> list[int]:
    """The assignments of the table, in order: [1, 2]."""
    return sorted({task.assignment for task in TASKS})


def tasks_of(assignment: int) -> list[Task]:
    """The tasks of `assignment`, in table order.

    Raises:
        TypeError: `assignment` is not an int; ValueError: no task belongs to it.
    """
    if isinstance(assignment, bool) or not isinstance(assignment, int):
        raise TypeError(f"an assignment is a number (1, 2, ...), got {assignment!r}")
    found = [task for task in TASKS if task.assignment == assignment]
    if not found:
        raise ValueError(f"no assignment {assignment}; the assignments are {', '.join(map(str, assignment_numbers()))}")
    return found


def answers_file(task: Task) -> str:
    """Where a student copy keeps the answers to `task`'s written questions: "answers/task1_1.md".

    Raises:
        TypeError: `task` is not a `Task`.
    """
    if not isinstance(task, Task):
        raise TypeError(f"answers_file takes a Task, got {type(task).__name__}")
    return f"answers/{task.marker}.md"


def answered(text: str) -> bool:
    """Whether the text of an answers file (`answers_file`) answers a question: a line that is not
    blank under one of its question headings (``## 1. ...``). The file a student copy starts with
    has none, so handing it in untouched is not an answer.

    Raises:
        TypeError: `text` is not a str.
    """
    if not isinstance(text, str):
        raise TypeError(f"answered takes the file's text (a str), got {type(text).__name__}")
    under_heading = re.split(r"^## .*$", text, flags=re.M)[1:]
    return any(chunk.strip() for chunk in under_heading)


def dependents(marker: str) -> list[Task]:
    """The tasks whose public tests run the code of task `marker`, directly or through another task
    (table order): a student must finish `marker` before those. Unknown markers have none."""
    needs: dict[str, set[str]] = {}

    def required(task: Task) -> set[str]:
        if task.marker not in needs:
            needs[task.marker] = set(task.requires)
            for other in TASKS:
                if other.marker in task.requires:
                    needs[task.marker] |= required(other)
        return needs[task.marker]

    return [task for task in TASKS if marker in required(task)]


def work_order(tasks: list[Task] | tuple[Task, ...] = TASKS) -> list[Task]:
    """`tasks` in table order, each task's required tasks moved before it (1.5, 1.1, 1.2, ...).

    A task's public tests run the student's code of the tasks it requires, so this is the order
    in which a student can check each task as they finish it.
    """
    chosen = {t.marker: t for t in tasks}
    order: list[Task] = []

    def visit(task: Task, path: tuple[str, ...]) -> None:
        if task.marker in path:
            raise ValueError(f"tasks that require each other: {' -> '.join((*path, task.marker))}")
        for marker in task.requires:
            if marker in chosen and chosen[marker] not in order:
                visit(chosen[marker], (*path, task.marker))
        if task not in order:
            order.append(task)

    for task in tasks:
        visit(task, ())
    return order


def expected_failures(removed: set[str]) -> set[str]:
    """Tasks whose public tests fail in a student's own copy when the tasks `removed` are missing.

    The removed tasks themselves plus every task that requires one of them (the autograder, which
    grades each task against the reference's other files, fails only the removed ones).
    """
    return set(removed) | {t.marker for t in TASKS if set(t.requires) & set(removed)}


def markers_used(path: Path) -> set[str]:
    """The pytest markers a test file applies (``pytest.mark.<name>`` anywhere in it)."""
    return {node.attr for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "mark"}


def marked_files(folder: Path, markers: list[str]) -> list[Path]:
    """The ``test_*.py`` files of `folder` that carry one of `markers` (read with `ast`, not imported)."""
    return [path for path in sorted(folder.glob("test_*.py")) if markers_used(path) & set(markers)]
