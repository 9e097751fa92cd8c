"""The course tasks: which reference functions each one asks the student to write.

Each task is graded by the library's own tests that carry its pytest marker (``task1_1`` ..
``task1_4``, registered in ``pyproject.toml``). A task may build on others: the combined step
(task 1.4) calls the mask builder, the pool and the verifier, so its tests cannot pass while
any of those is missing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Task:
    """One assignment task.

    Attributes:
        marker: the pytest marker of its tests, e.g. "task1_1".
        title: what the student builds.
        module: the file, relative to the repository root, that holds the functions.
        functions: qualified names ("func" or "Class.method") whose bodies are removed.
        requires: markers of the tasks whose code this task's tests also run.
    """

    marker: str
    title: str
    module: str
    functions: tuple[str, ...]
    requires: tuple[str, ...] = ()


TASKS: tuple[Task, ...] = (
    Task(
        "task1_1",
        "the attention mask builder",
        "ladref/masks.py",
        ("StepLayout.position_offsets", "StepLayout.allowed", "build_step_inputs", "to_additive"),
        requires=("task1_5",),
    ),
    Task(
        "task1_2",
        "the n-gram pool",
        "ladref/ngram_pool.py",
        ("NGramPool.add", "NGramPool.seed_from_tokens", "NGramPool.harvest", "NGramPool.candidates"),
    ),
    Task("task1_3", "greedy verification of a draft tree", "ladref/verify.py", ("verify_greedy",), requires=("task1_5",)),
    Task(
        "task1_4",
        "the combined step",
        "ladref/step.py",
        ("draft_step",),
        requires=("task1_1", "task1_2", "task1_3", "task1_5"),
    ),
    Task("task1_5", "the draft tree (a trie) and its mask", "ladref/tree.py", ("DraftTree.extend", "DraftTree.ancestors")),
)


def task_by_marker(marker: str) -> Task:
    """The `Task` whose marker is `marker` (ValueError for an unknown one)."""
    for task in TASKS:
        if task.marker == marker:
            return task
    raise ValueError(f"unknown task {marker!r}; known: {', '.join(t.marker for t in TASKS)}")


def expected_failures(removed: set[str]) -> set[str]:
    """Tasks that must fail when the tasks `removed` are left unimplemented.

    The removed tasks themselves plus every task that requires one of them.
    """
    return set(removed) | {t.marker for t in TASKS if set(t.requires) & set(removed)}
