"""Do the decoders agree token for token, and where they do not, was it a near-tie?

In float32/float64 every ladref decoder reproduces greedy decoding exactly (the tests check it).
In float16 / bfloat16, two computations of the same logits (a different kernel, a different
number of tokens in the pass) round differently, so where the top two logits are within rounding
of each other the argmax can flip, and from there the texts part. This module measures that:

* ``greedy_decode`` against transformers' ``generate(do_sample=False)`` (the reference: generate),
* ``jacobi_decode`` and ``lookahead_decode`` against ``greedy_decode`` (the reference: greedy_decode),

and at each first divergence records the reference's top-2 logit gap at that position (from
generate's own logits, or by replaying greedy_decode's exact computation). A divergence is a
*near-tie* when that gap is at most `NEAR_TIE` for the dtype: a few units in the last place of
the logits' magnitude.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ..config import LookaheadConfig
from ..decoders.greedy import greedy_decode
from ..results import DecodeStats
from ..runner import ModelRunner
from ..decoders.methods import jacobi_decode
from ..decoders.methods import lookahead_decode

# top-2 logit gaps counted as near-ties, per dtype: logits of SmolLM2 are ~10-30 in magnitude,
# where a float16 ulp is 2^-6..2^-5 and a bfloat16 ulp 2^-3..2^-2, so these are ~4-8 ulps.
NEAR_TIE = {torch.float16: 0.125, torch.bfloat16: 1.0, torch.float32: 1e-4, torch.float64: 1e-9}


@dataclass(frozen=True)
class AgreementRecord:
    """One decoder against its reference on one prompt.

    Attributes:
        prompt_id: the dataset's id of the prompt.
        pair: "greedy_decode vs generate", "jacobi vs greedy_decode", "lookahead W/N/G vs greedy_decode".
        match: the two outputs are identical.
        position: index of the first differing token (None when identical).
        gap: the reference's top-1 minus top-2 logit at `position` (None when identical).
        near_tie: gap <= `NEAR_TIE` of the model's dtype (None when identical).
    """

    prompt_id: str
    pair: str
    match: bool
    position: int | None
    gap: float | None
    near_tie: bool | None


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first position where `a` and `b` differ (a length difference counts), or None."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def top2_gap(logits: torch.Tensor) -> float:
    """Top-1 minus top-2 of a (V,) logit vector."""
    top = torch.topk(logits.float(), 2).values
    return float(top[0] - top[1])


@torch.inference_mode()
def generate_with_gaps(model: torch.nn.Module, prompt: torch.Tensor, max_new_tokens: int, eos: list[int]) -> tuple[list[int], list[float]]:
    """generate(do_sample=False) on one prompt: its tokens and the top-2 gap of its logits at each."""
    ids = prompt[None].to(next(model.parameters()).device)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens, do_sample=False,
                         eos_token_id=eos or None, pad_token_id=eos[0] if eos else 0,
                         output_logits=True, return_dict_in_generate=True)
    tokens = out.sequences[0, prompt.shape[0]:].tolist()
    return tokens, [top2_gap(step[0]) for step in out.logits][: len(tokens)]


@torch.inference_mode()
def greedy_gap_at(model: torch.nn.Module, prompt: torch.Tensor, tokens: Sequence[int], position: int,
                  attention_backend: str = "auto") -> float:
    """The top-2 gap of greedy_decode's logits at `position`, by replaying its exact computation.

    Args:
        prompt: (L,) prompt ids.
        tokens: greedy_decode's output (at least `position` tokens long).
        position: index of the token whose logits are wanted.
    """
    runner = ModelRunner(model, attention_backend)
    logits = runner.prefill_whole(prompt, DecodeStats())  # (V,), the same passes greedy_decode made
    for token in tokens[:position]:
        logits = runner.forward(torch.tensor([token]))[-1]
    return top2_gap(logits)


def measure_agreement(
    model: torch.nn.Module,
    prompts: Sequence[torch.Tensor],
    *,
    max_new_tokens: int,
    configs: Sequence[LookaheadConfig] = (),
    block_size: int | None = None,
    eos: Sequence[int] = (),
    prompt_ids: Sequence[str] | None = None,
    attention_backend: str = "auto",
    on_prompt: Callable[[int], None] | None = None,
) -> list[AgreementRecord]:
    """Compare the decoders on every prompt (see the module docstring).

    Args:
        prompts: one (L,) or (1, L) id tensor per prompt.
        configs: lookahead configs to compare with greedy_decode (none: skip lookahead).
        block_size: Jacobi's m (None: skip Jacobi).
        eos: EOS ids for every decoder (empty: generate max_new_tokens tokens).
        attention_backend: ladref's SDPA kernel choice (generate keeps transformers' own).
        on_prompt: called with the prompt's index after each prompt (e.g. a progress bar).

    Returns:
        One `AgreementRecord` per (prompt, pair).
    """
    labels = list(prompt_ids) if prompt_ids is not None else [str(i) for i in range(len(prompts))]
    threshold = NEAR_TIE.get(next(model.parameters()).dtype, 0.0)
    records: list[AgreementRecord] = []

    def record(label: str, pair: str, out: list[int], ref: list[int], gap_at: Callable[[int], float]) -> None:
        position = first_divergence(out, ref)
        gap = None if position is None or position >= len(ref) else gap_at(position)
        near = None if position is None else (gap is not None and gap <= threshold)
        records.append(AgreementRecord(label, pair, position is None, position, gap, near))

    for index, (label, ids) in enumerate(zip(labels, prompts)):
        prompt = torch.as_tensor(ids).reshape(-1).cpu()
        reference, gaps = generate_with_gaps(model, prompt, max_new_tokens, list(eos))
        greedy = greedy_decode(model, prompt, max_new_tokens, eos_token_id=list(eos), attention_backend=attention_backend).token_ids
        record(label, "greedy_decode vs generate", greedy, reference, lambda i: gaps[i])

        def greedy_gap(i: int) -> float:
            return greedy_gap_at(model, prompt, greedy, i, attention_backend)

        if block_size is not None:
            out = jacobi_decode(model, prompt, max_new_tokens, block_size=block_size, eos_token_id=list(eos),
                                attention_backend=attention_backend)
            record(label, "jacobi vs greedy_decode", out.token_ids, greedy, greedy_gap)
        for config in configs:
            out = lookahead_decode(model, prompt, max_new_tokens, config=config, eos_token_id=list(eos),
                                   attention_backend=attention_backend)
            name = f"lookahead {config.window_size}/{config.ngram_size}/{config.max_candidates} vs greedy_decode"
            record(label, name, out.token_ids, greedy, greedy_gap)
        if on_prompt is not None:
            on_prompt(index)
    return records


@dataclass(frozen=True)
class AgreementSummary:
    """One pair over all prompts.

    Attributes:
        pair: as in `AgreementRecord`.
        prompts: prompts compared.
        identical: prompts with identical outputs.
        near_ties: divergences at a near-tie.
        other: divergences with a gap above the near-tie threshold.
        gaps: the reference's gap at every divergence, in prompt order.
    """

    pair: str
    prompts: int
    identical: int
    near_ties: int
    other: int
    gaps: tuple[float, ...]


def summarize_agreement(records: Sequence[AgreementRecord]) -> list[AgreementSummary]:
    """Per pair: identical outputs, near-tie divergences and the others (in first-seen order)."""
    out = []
    for pair in dict.fromkeys(r.pair for r in records):
        rows = [r for r in records if r.pair == pair]
        diverged = [r for r in rows if not r.match]
        out.append(AgreementSummary(pair, len(rows), len(rows) - len(diverged), sum(bool(r.near_tie) for r in diverged),
                                    sum(not r.near_tie for r in diverged), tuple(r.gap for r in diverged if r.gap is not None)))
    return out
