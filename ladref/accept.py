"""The accept rules of speculative sampling: one draft (`accept_one`), several drafts (`accept_several`).

A draft source proposes a token d drawn from its distribution q; the target model's distribution
at that position is p. The emitted token y must be distributed exactly as p, however poor q is.
Notation: here p and q are distributions over the vocabulary, as in Leviathan et al.: p the
target's, q the draft's (the law d was drawn from). Elsewhere in ladref (docs/glossary.md) q is
the number of tokens a forward pass is fed and p a position; neither meaning is used here.

Accept rule for one draft d ~ q (Leviathan et al. 2023; Chen et al. 2023):
  # accept d with probability min(1, p(d) / q(d)): always when the target likes d at least as much;
  # on rejection, sample y from the residual norm(max(0, p - q)): the mass p has and q lacks;
  # jointly P(accept, y = x) = min(p(x), q(x)) and P(reject, y = x) = max(0, p(x) - q(x)): they add up to p(x).

Several drafts d_1, .., d_k drawn i.i.d. from q (the children of a tree node, SpecInfer's
multi-round rule) apply the one-draft rule in turn, each against the residual the previous
rejection left, and sample from the last residual if every draft is rejected.

Deterministic drafts, such as lookahead decoding's n-grams, are the case q = `point_mass` (d):
d is accepted with probability p(d) and the residual is p with d removed, renormalised.
`ladref.sampling.SamplingChooser` verifies with this rule: `accept_one` against the point mass of
the first of a position's distinct drafts emits y ~ p, and the tree walk keeps the draft equal to
y, which accepts each draft t with probability p(t), as the multi-round rule does. Probabilities
are float64 on the CPU and every draw comes from the optional CPU `torch.Generator` (None:
torch's default generator).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

TOLERANCE = 1e-6  # how far from 1 a probability vector's sum may be


def probabilities(x: object, name: str) -> torch.Tensor:
    """`x` as a float64 CPU probability vector, or a clear error.

    Args:
        x: (V,) floating tensor, non-negative, finite, summing to 1 (within `TOLERANCE`).
        name: how errors name it ("p", "q").

    Returns:
        (V,) float64 CPU tensor.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of probabilities, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if x.dim() != 1 or x.numel() == 0:
        raise ValueError(f"{name} must be a non-empty 1-D (V,) tensor, got shape {tuple(x.shape)}")
    x = x.detach().to("cpu", torch.float64)
    lowest, total = float(x.min()), float(x.sum())  # a NaN fails `lowest >= 0`, an inf fails the sum
    if not lowest >= 0 or not abs(total - 1) <= TOLERANCE:
        raise ValueError(f"{name} must be a probability vector (finite, >= 0, summing to 1), "
                         f"got min {lowest:.6g}, sum {total:.6g}")
    return x


def check_inputs(
    p: torch.Tensor, q: torch.Tensor, drafts: Sequence[int], generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Validate the arguments of the accept rules.

    Args:
        p: (V,) target probabilities.
        q: (V,) draft probabilities, the distribution the drafts were drawn from.
        drafts: the draft tokens, each an int in [0, V) with q[d] > 0 (a list, or a (k,) tensor).
        generator: None or a CPU `torch.Generator`.

    Returns:
        (p, q, drafts): p and q as (V,) float64 CPU tensors, the drafts as a list of ints.
    """
    p, q = probabilities(p, "p"), probabilities(q, "q")
    if p.shape != q.shape:
        raise ValueError(f"p and q must have the same vocabulary size, got {p.numel()} and {q.numel()}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be None or a torch.Generator, got {type(generator).__name__}")
    if generator is not None and generator.device.type != "cpu":
        raise ValueError(f"generator must be a CPU torch.Generator (draws are made on the CPU), got one on {generator.device}")
    if isinstance(drafts, torch.Tensor) and drafts.dim() == 1:
        drafts = list(drafts)
    if not isinstance(drafts, Sequence):
        raise TypeError(f"drafts must be a sequence of int token ids, got {type(drafts).__name__}")
    tokens = []
    for d in drafts:
        if isinstance(d, torch.Tensor) and d.dim() == 0 and not d.is_floating_point() and d.dtype != torch.bool:
            d = int(d)
        if isinstance(d, bool) or not isinstance(d, int):
            raise TypeError(f"a draft must be an int token id, got {type(d).__name__}")
        if not 0 <= d < p.numel():
            raise ValueError(f"draft {d} is outside the vocabulary [0, {p.numel()})")
        if not float(q[d]) > 0:
            raise ValueError(f"draft {d} has q[{d}] = 0: it cannot have been drawn from q")
        tokens.append(d)
    return p, q, tokens


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)): the distribution to sample from after a draft was rejected.

    Args:
        p: (V,) float64 target probabilities.
        q: (V,) float64 draft probabilities.

    Returns:
        (V,) float64 probabilities proportional to max(0, p - q).
    """
    mass = (p - q).clamp(min=0)
    total = mass.sum()
    if not total > 0:
        raise ValueError("the residual max(0, p - q) is empty: p <= q everywhere, so no draft can be rejected")
    return mass / total


def point_mass(token: int, size: int) -> torch.Tensor:
    """The draft distribution of a deterministic draft: one-hot(token).

    Args:
        token: the drafted token id, in [0, size).
        size: V, the vocabulary size.

    Returns:
        (V,) float64 tensor, 1 at `token` and 0 elsewhere.
    """
    if isinstance(token, bool) or not isinstance(token, int):
        raise TypeError(f"token must be an int token id, got {type(token).__name__}")
    if not 0 <= token < size:
        raise ValueError(f"token {token} is outside the vocabulary [0, {size})")
    return torch.nn.functional.one_hot(torch.tensor(token), size).to(torch.float64)


def accept_one(
    p: torch.Tensor, q: torch.Tensor, draft: int, generator: torch.Generator | None = None,
) -> tuple[int, bool]:
    """Accept or replace one draft so that the emitted token is distributed exactly as p.

    The draft d is accepted with probability min(1, p(d) / q(d)); on rejection the token is drawn
    from `residual` (p, q) = norm(max(0, p - q)). Jointly, P(accept, y = x) = min(p(x), q(x)) and
    P(reject, y = x) = max(0, p(x) - q(x)), so P(y = x) = p(x). With q = `point_mass` (d) (a
    deterministic draft) d is accepted with probability p(d) and the residual is p with d removed.

    Args:
        p: (V,) target probabilities: the target model's distribution at the draft's position.
        q: (V,) the draft distribution (not a count of tokens fed): the law `draft` was drawn from.
        draft: the draft token d, with q[d] > 0.
        generator: CPU generator for the draws (a uniform, then a multinomial on rejection); None
            uses torch's default generator.

    Returns:
        (token, accepted): the emitted token and whether it is the accepted draft.
    """
    # 1. Check the inputs (`check_inputs`): float64 probability vectors and a draft q can propose.
    p, q, (d,) = check_inputs(p, q, [draft], generator)
    # 2. Accept d with probability min(1, p(d) / q(d)): a uniform u in [0, 1) accepts when u q(d) < p(d).
    u = torch.rand((), dtype=torch.float64, generator=generator)
    if u * q[d] < p[d]:
        return d, True
    # 3. On rejection, draw the token from the residual norm(max(0, p - q)).
    return int(torch.multinomial(residual(p, q), 1, generator=generator)), False


def accept_several(
    p: torch.Tensor, q: torch.Tensor, drafts: Sequence[int], generator: torch.Generator | None = None,
) -> tuple[int, int | None]:
    """SpecInfer's multi-round rule: try k drafts drawn i.i.d. from q in turn; the token is ~ p exactly.

    With r_1 = p: draft d_i is accepted with probability min(1, r_i(d_i) / q(d_i)); on rejection
    r_{i+1} = norm(max(0, r_i - q)) and d_{i+1} is tried. If all k are rejected the token is drawn
    from r_{k+1}. Each round is `accept_one` with target r_i, so by induction from the last round
    the rounds from i on emit a token ~ r_i: P(y = x) = min(r_i(x), q(x)) + max(0, r_i(x) - q(x)).

    Args:
        p: (V,) target probabilities: the target model's distribution at the drafts' position.
        q: (V,) the draft distribution (not a count of tokens fed): the law each draft was drawn from.
        drafts: (k,) the draft tokens d_1, .., d_k (repeats allowed), each with q[d] > 0; k = 0
            samples from p.
        generator: CPU generator for the draws (a uniform per draft tried, then a multinomial if
            every draft is rejected); None uses torch's default generator.

    Returns:
        (token, index): the emitted token and the index i of the accepted draft, or None if every
        draft was rejected.
    """
    # 1. Check the inputs (`check_inputs`); the target starts as r = p.
    r, q, tokens = check_inputs(p, q, drafts, generator)
    for i, d in enumerate(tokens):
        # 2. Accept d_i with probability min(1, r(d_i) / q(d_i)).
        u = torch.rand((), dtype=torch.float64, generator=generator)
        if u * q[d] < r[d]:
            return d, i
        # 3. On rejection, the target of the remaining rounds is the residual norm(max(0, r - q)).
        r = residual(r, q)
    # 4. Every draft was rejected: draw the token from the last residual.
    return int(torch.multinomial(r, 1, generator=generator)), None
