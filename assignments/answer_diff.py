"""Compare a submission's answer with the reference's, and say where they first differ.

Answers are plain data (JSON: dicts, lists, strings, numbers, booleans, None). Integers, strings
and booleans must be equal; floats agree within ``RTOL``/``ATOL`` (the step's K/V gaps, logits).
"""

from __future__ import annotations

import json
import math

RTOL, ATOL = 1e-6, 1e-9
SHOWN = 400  # characters of an argument, an expected or a got value in feedback


def first_difference(expected, got, path: str = "") -> tuple[str, object, object] | None:
    """(path, expected part, got part) of the first place where `got` differs from `expected`, else None."""
    if isinstance(expected, float) or isinstance(got, float):
        if isinstance(expected, (int, float)) and isinstance(got, (int, float)) and not isinstance(got, bool) \
                and not isinstance(expected, bool) and math.isclose(expected, got, rel_tol=RTOL, abs_tol=ATOL):
            return None
        return path or "the answer", expected, got
    if type(expected) is not type(got):
        return path or "the answer", expected, got
    if isinstance(expected, dict):
        for key in expected:
            if key not in got:
                return f"{path}[{key!r}]", expected[key], "(missing)"
            found = first_difference(expected[key], got[key], f"{path}[{key!r}]")
            if found:
                return found
        extra = [key for key in got if key not in expected]
        return (f"{path}[{extra[0]!r}]", "(absent)", got[extra[0]]) if extra else None
    if isinstance(expected, list):
        for i, (a, b) in enumerate(zip(expected, got)):
            found = first_difference(a, b, f"{path}[{i}]")
            if found:
                return found
        if len(expected) != len(got):
            return f"{path} (length)", len(expected), len(got)
        return None
    return None if expected == got else (path or "the answer", expected, got)


def shown(value, limit: int = SHOWN) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= limit else text[: limit - 20] + f" ... ({len(text)} characters)"


def feedback(group: str, case: dict, expected, got=None, error: str | None = None) -> str:
    """What a student can act on: the call (the case's arguments), expected and got, the first difference."""
    arguments = {k: v for k, v in case.items() if k != "id"}
    lines = [f"{group}, case {case['id']}", f"  arguments: {shown(arguments)}"]
    if error is not None:
        lines += [f"  raised: {shown(error)}", f"  expected: {shown(expected)}"]
        return "\n".join(lines)
    lines += [f"  expected: {shown(expected)}", f"  got:      {shown(got)}"]
    where = first_difference(expected, got)
    if where is not None:
        path, a, b = where
        lines.append(f"  first difference at {path}: expected {shown(a, 160)}, got {shown(b, 160)}")
    return "\n".join(lines)
