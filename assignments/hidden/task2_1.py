"""Probes of task 2.1: the accept rules of speculative sampling, judged by their law.

A law case holds a target p and a draft distribution q over 4 to 12 tokens (some tokens only the
target can emit, q = 0 there, and some the target never emits, p = 0), a number of drafts k, a
number of draws n and a seed. The probe draws the drafts from q with a generator of its own,
calls the submission's rule n times with a second generator, and returns the counts of the
outcomes, (accepted, token) for `accept_one` and (index of the accepted draft or "all rejected",
token) for `accept_several`, beside the rule's exact law (`rule_law`, computed here from p, q and
k without calling the submission). The grader's "law" judge (``assignments/law.py``) tests the
submission's counts against the reference's law, chi-square, at the nominal level `ALPHA` per
case: with `LAW_CASES` cases in the task, each failing a correct rule at most `TAIL_FACTOR` times
its nominal level (Pearson's approximation in the far tail, measured in
``tests/test_sampling_task.py``), a correct rule fails one or more with probability at most
`FALSE_FAILURE` (Bonferroni).

Cases are drawn so that three plausible biased rules (`BIASES`: drawing from p after a rejection,
accepting with p(d), no residual update between drafts) are each rejected with near certainty
(`detectable`). The contract group compares, by equality, the outcomes of calls whose result is
certain (a target with one token), the types returned, the arguments left unchanged and the
errors raised on bad inputs. Hidden cases have more tokens, more drafts and more draws.
"""

from __future__ import annotations

import math
import operator
import random
from functools import partial

import torch
from probing import Group

from ladref.accept import accept_one, accept_several

FALSE_FAILURE = 1e-3  # the chance that a correct submission fails one or more law cases
SIZES = {  # law group -> (cases, tokens, drafts, draws)
    "accept_one (small vocabularies)": (5, (4, 6), (1, 1), 1200),
    "accept_several (small)": (5, (4, 6), (2, 3), 1200),
    "accept_one": (10, (6, 12), (1, 1), 2000),
    "accept_several": (10, (6, 12), (3, 8), 2000),
}
LAW_CASES = sum(size[0] for size in SIZES.values())
# Pearson's p-value is optimistic this far in the tail: simulated from the exact laws of such cases, its
# actual level near 1e-5 is about twice the nominal one; the factor 3 keeps LAW_CASES actual levels under FALSE_FAILURE
TAIL_FACTOR = 3
ALPHA = FALSE_FAILURE / (TAIL_FACTOR * LAW_CASES)  # each law case's nominal level
SAFE_Z = 6.0  # a biased rule's expected statistic lies this many standard deviations past the critical value


def rule_law(p: torch.Tensor, q: torch.Tensor, k: int, accept: str = "ratio", update: bool = True,
             last: str = "residual") -> torch.Tensor:
    """(k + 1, V) law of the k-draft rule: row i < k P(round i accepts its draft and y = x), row k P(all rejected, y = x).

    The exact rule (the defaults) accepts with min(1, r(d) / q(d)) against the current target r,
    updates r to norm(max(0, r - q)) after each rejection and draws the last token from r. The
    biased variants: `accept` "p" accepts with r(d); `update` False keeps r = p (the last token
    then comes from norm(max(0, p - q))); `last` "p" draws the last token from p.
    """
    law, reach, r = torch.zeros(k + 1, len(p), dtype=torch.float64), 1.0, p
    for i in range(k):
        take = torch.minimum(r, q) if accept == "ratio" else q * r  # the draft is x and is accepted
        law[i] = reach * take
        reach = reach * float(1 - take.sum())
        if update:
            left = (r - q).clamp(min=0)
            if not float(left.sum()) > 0:  # q covers r: no draft is ever rejected
                return law
            r = left / left.sum()
    final = p if last == "p" else r if update or k == 0 else (p - q).clamp(min=0) / (p - q).clamp(min=0).sum()
    law[k] = reach * final
    return law


BIASES = {  # name -> (rule_law's options, applies to accept_one)
    "draws from p after a rejection": (dict(last="p"), True),
    "accepts with p(d)": (dict(accept="p"), True),
    "no residual update between drafts": (dict(update=False), False),
}


def critical(df: int, alpha: float) -> float:
    """The chi-square statistic whose upper tail on `df` degrees of freedom is `alpha` (bisection)."""
    low, high = 0.0, 20.0 * df + 400.0
    for _ in range(80):
        mid = (low + high) / 2
        tail = torch.special.gammaincc(*torch.tensor([df / 2, mid / 2], dtype=torch.float64))
        low, high = (mid, high) if float(tail) > alpha else (low, mid)
    return high


def detectable(law: torch.Tensor, other: torch.Tensor, n: int) -> bool:
    """Whether n draws from `other` fail the chi-square test against `law` with near certainty: outcomes
    `law` cannot emit seen about 20 times, or a noncentrality `SAFE_Z` deviations past the critical value."""
    if n * float(other[law == 0].sum()) >= 20:
        return True
    kept = law >= 5 / n
    df = max(int(kept.sum()), 1)
    shift = n * float(((other - law)[kept] ** 2 / law[kept]).sum())
    return df + shift - critical(df, ALPHA) >= SAFE_Z * math.sqrt(2 * (df + 2 * shift))


def distribution(rng: random.Random, size: int, zeros: set[int]) -> list[float]:
    """Probabilities in steps of 1e-4 (short in feedback), 0 on `zeros`, uneven elsewhere."""
    weights = [0.0 if x in zeros else rng.random() ** 2 + 0.02 for x in range(size)]
    scaled = [10_000 * w / sum(weights) for w in weights]
    units = [int(s) for s in scaled]
    for x in sorted(range(size), key=lambda x: units[x] - scaled[x])[: 10_000 - sum(units)]:
        units[x] += 1
    return [u / 10_000 for u in units]


def law_case(rng: random.Random, name: str, i: int, tokens: tuple[int, int], drafts: tuple[int, int], n: int) -> dict:
    """A (p, q, k) on which every biased rule that applies fails with near certainty."""
    for _ in range(1000):
        size, k = rng.randint(*tokens), rng.randint(*drafts)
        *only_p, only_q = rng.sample(range(size), 2 + (size >= 8))  # only the target emits them; only q proposes it
        p, q = distribution(rng, size, {only_q}), distribution(rng, size, set(only_p))
        P, Q = torch.tensor(p, dtype=torch.float64), torch.tensor(q, dtype=torch.float64)
        law = rule_law(P, Q, k)
        if all(detectable(law, rule_law(P, Q, k, **options), n) for options, one in BIASES.values() if one or k > 1):
            return {"id": f"{name}{i}-V{size}-k{k}", "p": p, "q": q, "k": k, "draws": n, "seed": rng.randrange(2**31),
                    "alpha": ALPHA}
    raise RuntimeError(f"no detectable case for {name}")  # never seen: most draws qualify


def token(value, size: int) -> int:
    """A returned token as an int in [0, size) (an int-like such as a 0-d tensor is read as its int)."""
    found = operator.index(value)
    if not 0 <= found < size:
        raise ValueError(f"returned token {found}, outside the vocabulary [0, {size})")
    return found


def outcomes(case: dict, rule) -> dict:
    """Counts of the outcomes of `rule` over the case's draws, beside the exact law."""
    p, q, k, n = (torch.tensor(case["p"], dtype=torch.float64), torch.tensor(case["q"], dtype=torch.float64),
                  case["k"], case["draws"])
    drafts = torch.multinomial(q, n * k, replacement=True, generator=torch.Generator().manual_seed(case["seed"]))
    drafts, generator = drafts.view(n, k).tolist(), torch.Generator().manual_seed(case["seed"] + 1)
    counts = [[0] * len(p) for _ in range(k + 1)]
    for draw in drafts:
        row, y = rule(p, q, draw, generator, len(p))
        counts[row][y] += 1
    rows = ["accepted", "rejected"] if rule is one_rule else [f"draft {i} accepted" for i in range(k)] + ["all rejected"]
    return {"rows": rows, "law": rule_law(p, q, k).tolist(), "counts": counts}


def one_rule(p, q, draw, generator, size) -> tuple[int, int]:
    y, accepted = accept_one(p, q, draw[0], generator)
    y = token(y, size)
    if accepted and y != draw[0]:
        raise ValueError(f"accept_one(p, q, {draw[0]}) returned ({y}, True): an accepted draft is the token returned")
    return (0 if accepted else 1), y


def several_rule(p, q, draw, generator, size) -> tuple[int, int]:
    y, index = accept_several(p, q, list(draw), generator)
    y = token(y, size)
    if index is None:
        return len(draw), y
    index = operator.index(index)
    if not 0 <= index < len(draw) or draw[index] != y:
        raise ValueError(f"accept_several(p, q, {draw}) returned ({y}, {index}): the index of an accepted draft, "
                         "whose token is returned, or None")
    return index, y


def described(result) -> list:
    """A rule's return value as plain data: its two values (int-likes as ints, others as text) and their type names."""
    if not isinstance(result, tuple) or len(result) != 2:
        return [f"not a pair: {type(result).__name__}"]
    values = []
    for v in result:
        try:
            values.append(v if v is None or isinstance(v, (bool, int)) else operator.index(v))
        except TypeError:
            values.append(str(v))
    return [*values, *(type(v).__name__ for v in result)]


def error_of(call) -> str:
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the error's type is the answer
        return type(exc).__name__
    return "no error"


def contract(case: dict) -> dict:
    """Certain outcomes (a target with one token x), the types returned, arguments unchanged, the errors raised."""
    size, x, (a, b), w = case["size"], case["x"], case["others"], case["absent"]
    p, q = torch.nn.functional.one_hot(torch.tensor(x), size).double(), torch.tensor(case["q"], dtype=torch.float64)
    P, Q = torch.tensor(case["p"], dtype=torch.float64), q
    kept, drafts = (p.clone(), q.clone(), P.clone()), [a, a, x, b]
    g = torch.Generator().manual_seed(case["seed"])
    returned = {
        "accept_one(p, q, x)": described(accept_one(p, q, x, g)),
        "accept_one(p, q, a)": described(accept_one(p, q, a, g)),
        "accept_one(p, q, x) with generator None": described(accept_one(p, q, x)),
        "accept_several(p, q, [a, a, x, b])": described(accept_several(p, q, drafts, g)),
        "accept_several(p, q, [a, b])": described(accept_several(p, q, [a, b], g)),
        "accept_several(p, q, [])": described(accept_several(p, q, [], g)),
        "accept_several(p, q, torch.tensor([b, x]))": described(accept_several(p, q, torch.tensor([b, x]), g)),
    }

    def run(seed: int) -> list:
        gen = torch.Generator().manual_seed(seed)
        return [described(accept_several(P, Q, [a, b, x], gen)) + described(accept_one(P, Q, b, gen)) for _ in range(20)]

    errors = {
        "p a list": error_of(lambda: accept_one(p.tolist(), q, x, g)),
        "a draft with q = 0": error_of(lambda: accept_one(p, q, w, g)),
        "a draft outside the vocabulary": error_of(lambda: accept_several(p, q, [a, size], g)),
        "a float draft": error_of(lambda: accept_one(p, q, float(x), g)),
        "p of another size": error_of(lambda: accept_one(torch.cat([p, p.new_zeros(1)]), q, x, g)),
        "p summing to 2": error_of(lambda: accept_several(2 * p, q, [x], g)),
        "generator not a torch.Generator": error_of(lambda: accept_one(p, q, x, 0)),
    }
    unchanged = all(torch.equal(before, after) for before, after in zip(kept, (p, q, P))) and drafts == [a, a, x, b]
    return {"returned": returned, "same seed, same draws": run(case["seed"]) == run(case["seed"]), "errors": errors,
            "arguments unchanged": unchanged}


def contract_case(rng: random.Random, i: int) -> dict:
    """A target with one token x, q proposing x and two other tokens a, b (never a token w)."""
    size = rng.randint(4, 8)
    x, a, b, w = rng.sample(range(size), 4)
    return {"id": f"contract{i}-V{size}", "size": size, "x": x, "others": [a, b], "absent": w,
            "q": distribution(rng, size, {w}), "p": distribution(rng, size, set()), "seed": rng.randrange(2**31)}


GROUPS = {
    "accept_one (small vocabularies)": Group(partial(outcomes, rule=one_rule), 3, visible=True, judge="law"),
    "accept_several (small)": Group(partial(outcomes, rule=several_rule), 4, visible=True, judge="law"),
    "the contract": Group(contract, 1, visible=True),
    "accept_one": Group(partial(outcomes, rule=one_rule), 4, judge="law"),
    "accept_several": Group(partial(outcomes, rule=several_rule), 8, judge="law"),
}


def cases(seed: int) -> dict[str, list[dict]]:
    rng = random.Random(seed)
    drawn = {name: [law_case(rng, name.split(" ")[0], i, tokens, drafts, n) for i in range(count)]
             for name, (count, tokens, drafts, n) in SIZES.items()}
    drawn["the contract"] = [contract_case(rng, i) for i in range(4)]
    return {name: drawn[name] for name in GROUPS}


def warm_up() -> None:
    """The draws' first calls (torch's sampling kernels), before any case is timed. Nothing here calls the
    submission: a rule that loops must fail its first case at the case's limit, not hang the warm-up."""
    generator = torch.Generator().manual_seed(0)
    p = torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64)
    torch.multinomial(p, 1, generator=generator), torch.rand((), dtype=torch.float64, generator=generator)
