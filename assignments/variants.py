"""Variants of the reference's task files: how the course kit checks that its self-check grades as the grader does.

Each `Variant` is the reference's file of one task (`tasks.Task.reference_file`) with a few exact text
replacements (old snippet -> new snippet, each old snippet found exactly once, so that a change
of the reference that moves a snippet fails loudly instead of testing something else). A WRONG
variant is a plausible mistake: it must score below full marks in the grader (the probes of
``hidden/``) and in the self-check (the public tests, `selfcheck.py`). An EQUIVALENT variant
differs from the reference only where the handout leaves a choice: it must score full marks in
both. The variants themselves are registered in ``variant_table.py`` (`variant_table.variants`).
``tests/test_course_rules.py`` grades every variant both ways and checks the two rules:

* rule 1: a submission the grader marks down, for a reason a public case can show, is marked
  down by the self-check too (the hidden probes add cases, not new kinds of checks);
* rule 2: a correct submission that differs from the reference only where the handout leaves a
  choice scores full marks in both.

Instructor side only: `make_student.py` does not ship this file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

WRONG, EQUIVALENT = "wrong", "equivalent"


@dataclass(frozen=True)
class Variant:
    """One variant of a task's reference file.

    Attributes:
        task: the task's marker ("task2_2").
        name: a short name, also the submission folder's name.
        kind: `WRONG` (below full marks in both graders) or `EQUIVALENT` (full marks in both).
        changes: (old, new) pairs of exact text; each old snippet occurs once in the reference.
        why: what the variant does, in a sentence.
    """

    task: str
    name: str
    kind: str
    changes: tuple[tuple[str, str], ...]
    why: str

    def __post_init__(self) -> None:
        """Check the fields (ValueError: an unknown kind or no change; TypeError: a change not a pair of str)."""
        if self.kind not in (WRONG, EQUIVALENT):
            raise ValueError(f"{self.name}: kind must be {WRONG!r} or {EQUIVALENT!r}, got {self.kind!r}")
        if not self.changes:
            raise ValueError(f"{self.name}: a variant changes at least one snippet")
        for change in self.changes:
            if not (isinstance(change, tuple) and len(change) == 2 and all(isinstance(s, str) for s in change)):
                raise TypeError(f"{self.name}: each change must be an (old, new) pair of str, got {change!r}")

    def source(self, reference: str) -> str:
        """The reference file's text `reference` with the changes applied.

        Raises:
            ValueError: an old snippet does not occur exactly once (the reference changed).
        """
        for old, new in self.changes:
            found = reference.count(old)
            if found != 1:
                raise ValueError(f"{self.task} variant {self.name!r}: the snippet {old!r} occurs {found} times in the "
                                 "reference, not once: the reference changed, update the variant")
            reference = reference.replace(old, new)
        return reference

    def write(self, reference: Path, module: str, folder: Path) -> Path:
        """Write the variant of the reference's file `reference` as a submission's task file ``folder / module``
        (`tasks.Task.reference_file` and `tasks.Task.module`: the same path but for a course answer the
        library does not hold); returns its path."""
        path = folder / module
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.source(reference.read_text()))
        return path
