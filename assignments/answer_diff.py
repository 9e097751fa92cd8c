"""Judge a submission's answer against the reference's, and say why it fails.

Answers are plain data (JSON: dicts, lists, strings, numbers, booleans, None). A probe group names
its judge (`JUDGES`, by name; the reference's run records it with the group): "equal", most
groups', passes an answer equal to the reference's (integers, strings and booleans equal; floats
within ``RTOL``/``ATOL``: the step's K/V gaps, logits); "modelled_time", the open task's, passes
greedy's tokens fed at a modelled cost within the case's tolerance of the reference's, and
measures the speed-up over greedy decoding; "law", the sampling task's, passes counts of sampled
outcomes that a chi-square test does not reject against the exact law (`law.py`). The grader calls judges in its own process, on data
only: a judge never runs submitted code.

To add a judge: write ``decide(case, expected, got) -> (passed, message, metric)``, the message
saying why it failed (shown to the student with the case's arguments) and the metric a number
to rank submissions by (None: nothing measured), and register ``JUDGES[name] = Judge(decide,
metric=...)``; a probe group then names it (``Group(observe, judge=name)``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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


def feedback(group: str, case: dict, expected, got=None, error: str | None = None, verdict: str | None = None) -> str:
    """What a student can act on: the call (the case's arguments), expected and got, the first difference;
    or, from a judge other than "equal", its `verdict` (why the answer failed) in their place."""
    arguments = {k: v for k, v in case.items() if k != "id"}
    lines = [f"{group}, case {case['id']}", f"  arguments: {shown(arguments)}"]
    if error is not None:
        lines += [f"  raised: {shown(error)}", f"  expected: {shown(expected)}"]
        return "\n".join(lines)
    if verdict is not None:
        return "\n".join(lines + [f"  {line}" for line in verdict.splitlines()])
    lines += [f"  expected: {shown(expected)}", f"  got:      {shown(got)}"]
    where = first_difference(expected, got)
    if where is not None:
        path, a, b = where
        lines.append(f"  first difference at {path}: expected {shown(a, 160)}, got {shown(b, 160)}")
    return "\n".join(lines)


# --- judges ---


@dataclass(frozen=True)
class Judge:
    """How a group's answers are judged.

    Attributes:
        decide: ``(case, expected, got) -> (passed, message, metric)``: the verdict on one answer,
            why it failed ("" when it passed, or what it measured), and the measured number (None:
            nothing measured, e.g. an answer that could not be measured).
        metric: what `decide` measures, for the reports and the leaderboard (e.g. "modelled
            speed-up over greedy"); None for a judge that measures nothing.
    """

    decide: Callable[[dict, Any, Any], tuple[bool, str, float | None]]
    metric: str | None = None


def equal(case: dict, expected, got) -> tuple[bool, str, None]:
    """Passes an answer equal to the reference's (`first_difference`)."""
    where = first_difference(expected, got)
    if where is None:
        return True, "", None
    path, a, b = where
    return False, f"first difference at {path}: expected {shown(a, 160)}, got {shown(b, 160)}", None


def step_cost(surface: dict, q: int, kv: int) -> float:
    """The modelled seconds of one pass feeding `q` tokens at KV length `kv` on a cost surface:
    ``base + per_kv * kv + max(q - knee, 0) * (per_token + per_token_kv * kv)`` (knee 0: a CPU's
    surface, growing with q from the first token; a GPU's is flat up to its knee)."""
    over = max(q - surface["knee"], 0)
    return surface["base"] + surface["per_kv"] * kv + over * (surface["per_token"] + surface["per_token_kv"] * kv)


def trace_problem(case: dict, got) -> str | None:
    """Why `got` is not a decode's answer ``{"tokens": [...], "steps": [[fed, kv, accepted], ...]}``
    consistent with the case's prompt (each step's KV length is the last one's plus its accepted
    tokens; the tokens accepted add up to the tokens returned), else None."""
    if not isinstance(got, dict) or not isinstance(got.get("tokens"), list) or not isinstance(got.get("steps"), list):
        return "the answer is not {'tokens': [...], 'steps': [[fed, kv, accepted], ...]}"
    kv, steps = len(case["prompt"]) - 1, got["steps"]
    for i, step in enumerate(steps):
        if not (isinstance(step, list) and len(step) == 3 and all(isinstance(v, int) and not isinstance(v, bool) for v in step)):
            return f"step {i} is not [fed, kv, accepted] ints: {shown(step, 80)}"
        fed, at, accepted = step
        if fed < 1 or accepted < 1 or at != kv:
            return f"step {i} ({step}) is not a step of this decode: fed >= 1, accepted >= 1, kv = {kv} expected"
        kv += accepted
    accepted = sum(step[2] for step in steps)
    if not steps or accepted - steps[-1][2] >= len(got["tokens"]) or accepted < len(got["tokens"]):
        return f"the steps accept {accepted} tokens in all, which does not give the {len(got['tokens'])} tokens returned"
    return None


def modelled_time(case: dict, expected, got) -> tuple[bool, str, float | None]:
    """The open task's judge: greedy's tokens (the reference's), fed at a modelled cost within
    ``case["tolerance"]`` times the reference's, on the case's surface (`step_cost`). The metric:
    greedy decoding's modelled time (one token a step) over the answer's."""
    problem = trace_problem(case, got)
    if problem is not None:
        return False, problem, None
    if got["tokens"] != expected["tokens"]:
        path, a, b = first_difference(expected["tokens"], got["tokens"], "tokens") or ("tokens", "", "")
        return False, f"not greedy's tokens: first difference at {path}: expected {shown(a, 80)}, got {shown(b, 80)}", None
    surface, start = case["surface"], len(case["prompt"]) - 1
    spent = sum(step_cost(surface, fed, kv) for fed, kv, _ in got["steps"])
    reference = sum(step_cost(surface, fed, kv) for fed, kv, _ in expected["steps"])
    greedy = sum(step_cost(surface, 1, start + i) for i in range(len(expected["tokens"])))
    limit = case["tolerance"] * reference
    message = (f"modelled time {spent:.4g} s over {len(got['steps'])} steps: {greedy / spent:.2f}x greedy decoding's speed "
               f"({greedy:.4g} s); the reference's {reference:.4g} s ({greedy / reference:.2f}x); "
               f"passing needs at most {case['tolerance']:g} x the reference's = {limit:.4g} s")
    return spent <= limit * (1 + 1e-9), message, greedy / spent


def law(case: dict, expected, got) -> tuple[bool, str, None]:
    """The sampling task's judge: a chi-square test of the answer's counts against the reference's exact
    law, at the case's alpha (``assignments/law.py``, imported when first used: it needs torch)."""
    from law import law_judge

    return law_judge(case, expected, got)


JUDGES: dict[str, Judge] = {
    "equal": Judge(equal),
    "modelled_time": Judge(modelled_time, metric="modelled speed-up over greedy"),
    "law": Judge(law),
}


def judge(name: str) -> Judge:
    """The judge registered as `name` (ValueError naming the known ones otherwise)."""
    if name not in JUDGES:
        raise ValueError(f"unknown judge {name!r}; known: {', '.join(JUDGES)}")
    return JUDGES[name]
