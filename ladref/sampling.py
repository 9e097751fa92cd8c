"""Sampling that keeps the model's (warped) distribution: the choosers, and the warp of the logits.

A *chooser* picks the token at one verified position from the model's logits there and the
draft tokens the tree's children propose for it (see `ladref.verify.verify_chosen`):

* `SamplingChooser` accepts drafts by `ladref.accept.accept_one`'s rule, the draft a point mass,
  so every token is distributed exactly as in ordinary sampling (the argument is in
  docs/sampling.md);
* `GreedyChooser` takes the argmax after optional transformers logits processors (used by
  `ladref.decoders.generate` when, e.g., a repetition penalty changes greedy's choice).

Warping follows transformers' `TemperatureLogitsWarper`, `TopKLogitsWarper` and
`TopPLogitsWarper`, applied in that order, keeping at least one token.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from .accept import accept_one, point_mass


# transformers' LogitsProcessor call: (input_ids (1, L), scores (1, V)) -> scores (1, V)
Processor = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Warp:
    """Temperature, top-k and top-p, with transformers' semantics.

    Attributes:
        temperature: logits are divided by it (> 0).
        top_k: keep the k most likely tokens (ties at the k-th logit kept); None keeps all.
        top_p: keep the smallest most-likely set whose probability reaches top_p; None or 1.0 keeps all.
    """

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not t > 0 or t == float("inf"):
            raise ValueError(f"temperature must be a finite number > 0, got {t!r} (use do_sample=False for greedy)")
        if self.top_k is not None and (isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1):
            raise ValueError(f"top_k must be None or an int >= 1, got {self.top_k!r}")
        p = self.top_p
        if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1):
            raise ValueError(f"top_p must be None or a number in (0, 1], got {p!r}")

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        """Warp (..., V) logits; removed tokens get -inf."""
        scores = logits / self.temperature
        if self.top_k is not None:
            k = min(self.top_k, scores.shape[-1])
            kth = torch.topk(scores, k).values[..., -1:]
            scores = scores.masked_fill(scores < kth, -float("inf"))
        if self.top_p is not None and self.top_p < 1:
            ordered, order = torch.sort(scores, descending=False)
            drop = ordered.softmax(dim=-1).cumsum(dim=-1) <= 1 - self.top_p
            drop[..., -1] = False  # keep at least one token
            scores = scores.masked_fill(drop.scatter(-1, order, drop), -float("inf"))
        return scores


class Chooser(Protocol):
    """Picks the token at one verified position (`GreedyChooser`, `SamplingChooser`)."""

    def choose(self, context: Sequence[int], logits: torch.Tensor, proposals: Sequence[int]) -> int:
        """One token, from the (V,) logits after `context` and the drafts `proposals` for that position."""


def _processed(processor: Processor | None, context: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
    """(V,) float64 CPU scores after an optional transformers logits processor."""
    scores = logits.detach().to("cpu", torch.float64)
    if processor is None:
        return scores
    return processor(torch.tensor([list(context)], dtype=torch.long), scores[None])[0]


@dataclass
class GreedyChooser:
    """Argmax after an optional logits processor; drafts only matter through the tree walk."""

    processor: Processor | None = None

    def choose(self, context: Sequence[int], logits: torch.Tensor, proposals: Sequence[int]) -> int:
        return int(_processed(self.processor, context, logits).argmax())


@dataclass
class SamplingChooser:
    """Draws tokens from softmax(warp(processor(logits))), accepting drafts without bias.

    Attributes:
        warp: temperature / top-k / top-p.
        generator: CPU `torch.Generator` for reproducible draws; None uses torch's default one.
        processor: optional transformers `LogitsProcessorList`, applied before `warp`.
    """

    warp: Warp
    generator: torch.Generator | None = None
    processor: Processor | None = None

    def probs(self, context: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        """(V,) float64 probabilities of the next token after `context`."""
        return self.warp(_processed(self.processor, context, logits)).softmax(dim=-1)

    def choose(self, context: Sequence[int], logits: torch.Tensor, proposals: Sequence[int]) -> int:
        """One token distributed as `probs`, preferring the drafts in `proposals`.

        Accept rule, with p = `probs` and t_1, t_2, .. the distinct drafts in the order proposed:
          # no draft: draw the token from p;
          # else apply `ladref.accept.accept_one` with q = point_mass(t_1): accept t_1 with probability p(t_1),
          # on rejection draw the token from p with t_1 removed (the residual); either way it is ~ p.

        Why one round against t_1 decides among all the drafts: the token y is distributed as p
        whatever the drafts, and the tree walk (`ladref.verify.verify_chosen`) keeps the draft
        equal to y, if any (sibling tokens are distinct). So draft t_i is accepted with
        probability p(t_i), no draft with 1 - sum_i p(t_i), and y = x with probability p(x): the
        joint law of (token, accepted draft) of the multi-round rule, which tries t_1, t_2, .. in
        turn, each an `accept_one` round with q = point_mass(t_i) against the residual the
        previous rejection left (as `ladref.accept.accept_several`'s rounds do), here with one
        uniform and at most one multinomial instead of a uniform per draft tried. Probabilities
        are float64 on the CPU; the draws come from `generator`.
        """
        # 1. p: the (V,) float64 probabilities after the processor and the warp; the distinct drafts, in order.
        p = self.probs(context, logits)
        drafts = list(dict.fromkeys(int(t) for t in proposals))
        # 2. No draft: one multinomial from p (as `accept_several` (p, p, []) draws).
        if not drafts:
            return int(torch.multinomial(p, 1, generator=self.generator))
        # 3. Accept t_1 with probability p(t_1), else draw from p with t_1 removed: the token is ~ p.
        return accept_one(p, point_mass(drafts[0], p.numel()), drafts[0], self.generator)[0]


def check_generator(generator: object) -> None:
    """Raise unless `generator` is None or a CPU `torch.Generator` (ladref draws on the CPU)."""
    if generator is None:
        return
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    if generator.device.type != "cpu":
        raise ValueError(f"generator must be a CPU torch.Generator (ladref samples on the CPU), got one on {generator.device}")


def make_chooser(
    do_sample: bool,
    temperature: float | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> SamplingChooser | None:
    """Validate the sampling arguments; None means plain greedy decoding."""
    if not isinstance(do_sample, bool):
        raise TypeError(f"do_sample must be a bool, got {type(do_sample).__name__}")
    check_generator(generator)
    if not do_sample:
        given = [name for name, v in (("temperature", temperature), ("top_k", top_k), ("top_p", top_p), ("generator", generator)) if v is not None]
        if given:
            raise ValueError(f"{', '.join(given)} only apply when sampling; pass do_sample=True")
        return None
    return SamplingChooser(Warp(1.0 if temperature is None else temperature, top_k, top_p), generator)


def check_processor(processor: object) -> Processor | None:
    """`processor` if it is None or callable as ``processor(input_ids, scores)``, else a clear TypeError."""
    if processor is not None and not callable(processor):
        raise TypeError(f"logits_processor must be a transformers LogitsProcessorList or a callable "
                        f"(input_ids, scores) -> scores, got {type(processor).__name__}")
    return processor


def chooser_for(options: Mapping[str, Any]) -> Chooser | None:
    """The chooser a call's keywords ask for (`ladref.options.SamplingOptions`; `make_chooser`), with
    its ``logits_processor`` (`ladref.options.ProcessorOptions`): a `GreedyChooser` when not sampling."""
    chooser = make_chooser(options.get("do_sample", False), options.get("temperature"), options.get("top_k"),
                           options.get("top_p"), options.get("generator"))
    processor = check_processor(options.get("logits_processor"))
    if processor is None:
        return chooser
    return GreedyChooser(processor) if chooser is None else SamplingChooser(chooser.warp, chooser.generator, processor)
