"""``python -m ladref bench --dataset specbench --batch 1,2,4,8,16``: speculation under load.

For each batch size B the prompts are decoded B at a time by every method, in whole batches (a
last batch that B prompts would not fill is left out, unless it is the only one: the row's
``rows`` says how many were decoded), interleaved batch by batch in the rounds of the measurement
protocol (`ladref.bench.protocol`: each batch timed at least ``--rounds`` times (default 3), the
methods' order rotated, a disturbed round measured again and a batch that never settles flagged;
each batch's figure is its median round, and every round is kept). Throughput is the new tokens
of all rows over the seconds of all batches; a request's latency is its row's own wall time
(ladref's rows finish when they finish; transformers' ``generate`` returns every row at once).

Every row is checked: a draft decoder's rows against batched greedy's rows of the same batch
(exact: the same passes decide both), batched greedy's and ``generate``'s rows against batch-1
greedy (a batch may round differently in float32: each such row is reported with the logit gap
at its first differing token, never hidden).

The methods: ``greedy`` (batched), ``generate`` (transformers, left padding), ``lookahead``,
``prompt_lookup``, ``prompt_lookup_rule`` (the fixed rule: a 3-token match only), ``threshold``
and ``chain`` (the engines' rules, `ladref.bench.engines`) and ``adaptive`` (`ladref.adaptive_decode`
on the measured surface). `predict` turns a method's measured S and step width into the speedup a
cost surface implies, to set what was measured beside what a GPU-shaped surface would give.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace

import torch

from ..config import LookaheadConfig
from ..fast.adaptive import AdaptiveDecoder
from ..pricing.surface import CostSurface
from ..decoders.greedy import greedy_decode
from ..results import DecodeResult, DecodeStats
from ..decoders.methods import lookahead_decode
from ..decoders.methods import prompt_lookup_decode
from .engines import chain_decode, threshold_decode
from .measure import device_protocol
from .methods import one_of
from .protocol import Protocol, Sample, disturbed, figure, rounds, settled, speedup, timed

LOAD_METHODS = ("greedy", "generate", "lookahead", "prompt_lookup", "prompt_lookup_rule", "threshold", "chain", "adaptive")
BatchDecoder = Callable[[torch.nn.Module, list, int], list[DecodeResult]]


def canonical_load_method(name: str) -> str:
    """`name` if it is one of `LOAD_METHODS`, else a ValueError listing them."""
    return one_of(name, LOAD_METHODS, "method {!r} for --batch")


@dataclass(frozen=True)
class LoadSettings:
    """What `run_load` compares: batch sizes, methods and their settings."""

    batches: tuple[int, ...] = (1, 2, 4, 8, 16)
    methods: tuple[str, ...] = LOAD_METHODS
    max_new_tokens: int = 64
    config: LookaheadConfig = LookaheadConfig(4, 4, 4)
    lookup_tokens: int = 4
    threshold: int = 4
    protocol: Protocol = Protocol()

    def __post_init__(self) -> None:
        if not self.methods or self.methods[0] != "greedy":
            raise ValueError(f"the methods must start with greedy, the baseline of every speedup; got {self.methods}")


@dataclass
class LoadRow:
    """One method at one batch size, over every prompt.

    `seconds` sums each batch's figure (its median undisturbed round); `speedup` is the pooled
    throughput over batched greedy's, `vs_greedy` the geometric mean of per-batch speedups with its
    95% bootstrap interval over batches (`ladref.bench.protocol.Speedup` as a dict); `rounds` counts the timed
    calls, `disturbed` those the protocol judged disturbed, `flagged` the batches that never
    settled; `batches` keeps every round of every batch (wall seconds, CPU shares, load averages).
    """

    batch: int
    method: str
    seconds: float
    new_tokens: int
    tokens_per_s: float
    latency_s: float
    compression: float
    fed_per_step: float
    rows: int
    rows_equal_batched_greedy: int
    rows_apart_from_batch_1: list[dict]
    speedup: float = 0.0
    vs_greedy: dict | None = None
    rounds: int = 0
    disturbed: int = 0
    flagged: int = 0
    batches: list[dict] = field(default_factory=list)


def load_decoders(settings: LoadSettings, surface: CostSurface, eos: list[int]) -> dict[str, BatchDecoder]:
    """Each method as ``decode(model, prompts, max_new_tokens) -> one DecodeResult per row``."""
    k, adaptive = settings.lookup_tokens, None

    def rows(result) -> list[DecodeResult]:
        return [result] if isinstance(result, DecodeResult) else list(result)

    def one_or_batch(prompts: list) -> object:
        return prompts[0] if len(prompts) == 1 else prompts

    def run_adaptive(m, p, n):
        nonlocal adaptive
        adaptive = adaptive or AdaptiveDecoder(m, cost=surface)
        return rows(adaptive(one_or_batch(p), n, eos_token_id=eos))

    table = {
        "greedy": lambda m, p, n: rows(greedy_decode(m, one_or_batch(p), n, eos_token_id=eos)),
        "generate": lambda m, p, n: generate_rows(m, p, n, eos),
        "lookahead": lambda m, p, n: rows(lookahead_decode(m, one_or_batch(p), n, config=settings.config, eos_token_id=eos)),
        "prompt_lookup": lambda m, p, n: rows(prompt_lookup_decode(m, one_or_batch(p), n, draft_len=k, eos_token_id=eos)),
        "prompt_lookup_rule": lambda m, p, n: rows(prompt_lookup_decode(m, one_or_batch(p), n, draft_len=k, min_ngram=3,
                                                                        max_ngram=3, eos_token_id=eos)),
        "threshold": lambda m, p, n: rows(threshold_decode(m, one_or_batch(p), n, draft_len=k, threshold=settings.threshold,
                                                           eos_token_id=eos)),
        "chain": lambda m, p, n: rows(chain_decode(m, one_or_batch(p), n, surface=surface, max_len=k, eos_token_id=eos)),
        "adaptive": run_adaptive,
    }
    return {name: table[name] for name in settings.methods}


@torch.inference_mode()
def generate_rows(model: torch.nn.Module, prompts: Sequence[torch.Tensor], max_new_tokens: int, eos: list[int]) -> list[DecodeResult]:
    """transformers' batched greedy ``generate``, prompts padded on the left; each row cut after its first EOS."""
    width, pad = max(len(p) for p in prompts), (eos[0] if eos else 0)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, prompt in enumerate(prompts):
        ids[b, width - len(prompt):], mask[b, width - len(prompt):] = torch.as_tensor(prompt), 1
    start = time.perf_counter()
    out = model.generate(ids.to(model.device), attention_mask=mask.to(model.device), max_new_tokens=max_new_tokens,
                         do_sample=False, eos_token_id=eos or None, pad_token_id=pad)
    seconds, results = time.perf_counter() - start, []
    for row in out[:, width:].tolist():
        cut = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
        results.append(DecodeResult(row[:cut], None, _stats(cut, seconds), "generate"))
    return results


def _stats(tokens: int, seconds: float) -> DecodeStats:
    """generate()'s row as ladref counts it: one token per step (its passes are not counted here)."""
    stats = DecodeStats(steps=tokens, wall_time_s=seconds)
    stats.accepted_per_step, stats.forward_tokens_per_step = [1] * tokens, [1] * tokens
    return stats


def first_gap(model: torch.nn.Module, prompt: torch.Tensor, ours: list[int], theirs: list[int]) -> dict:
    """Where two outputs of a prompt part: the index and |logit(ours) - logit(theirs)| there (batch-1 forward)."""
    at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    if at == min(len(ours), len(theirs)):
        return {"at": at, "logit_gap": None}
    with torch.inference_mode():
        logits = model(torch.cat([torch.as_tensor(prompt), torch.tensor(ours[:at], dtype=torch.long)])[None].to(model.device)).logits[0, -1]
    return {"at": at, "logit_gap": float(abs(logits[ours[at]] - logits[theirs[at]]))}


def _timed_batch(model: torch.nn.Module, decoders: dict[str, BatchDecoder], chunk: list, max_new_tokens: int,
                 protocol: Protocol, shift: int) -> dict[str, tuple[list[DecodeResult], list[Sample]]]:
    """Every method on one batch in protocol rounds: the results of its figure's round and its samples.
    A batch steps in lockstep, so a round's steps (what rounds are compared by) are its longest row's."""
    results: dict[str, list[list[DecodeResult]]] = {name: [] for name in decoders}

    def measure(name: str) -> Sample:
        done, sample = timed(lambda: decoders[name](model, chunk, max_new_tokens))
        results[name].append(done)
        return replace(sample, steps=max(1, max(r.stats.steps for r in done)))

    samples = rounds(list(decoders), measure, protocol, shift=shift)
    return {name: (results[name][samples[name].index(figure(samples[name], protocol))], samples[name]) for name in decoders}


def _batch_record(samples: Sequence[Sample], protocol: Protocol) -> dict:
    """One batch's rounds as a row keeps them."""
    return {"rounds_s": [round(s.wall_s, 4) for s in samples], "cpu_shares": [round(s.share(protocol.threads), 3) for s in samples],
            "loads": [round(s.load, 2) for s in samples], "disturbed": disturbed(samples, protocol),
            "flagged": not settled(samples, protocol)}


def run_load(model: torch.nn.Module, prompts: Sequence[torch.Tensor], settings: LoadSettings, surface: CostSurface,
             eos: list[int], on_batch: Callable[[int, str], None] | None = None,
             on_size: Callable[[list[LoadRow]], None] | None = None) -> list[LoadRow]:
    """Decode `prompts` at every batch size with every method (interleaved batch by batch); a `LoadRow` each.

    Args:
        on_batch: called after every batch with (B, "prompts done/all").
        on_size: called with the rows so far after every batch size (to save a long run as it goes).
    """
    decoders = load_decoders(settings, surface, eos)
    protocol = device_protocol(settings.protocol, next(model.parameters()).device)
    decoders["greedy"](model, [prompts[0]], 2)  # warm-up
    alone, out = None, []
    if settings.batches[0] != 1:  # batch-1 greedy, the reference of every row (else: the first batch size's greedy rows)
        alone = [decoders["greedy"](model, [p], settings.max_new_tokens)[0].token_ids for p in prompts]
    for b in settings.batches:
        results: dict[str, list[DecodeResult]] = {name: [] for name in decoders}
        kept: dict[str, list[list[Sample]]] = {name: [] for name in decoders}
        for start in range(0, max(1, len(prompts) // b) * b, b):  # whole batches only (or all the prompts, fewer than B)
            chunk = list(prompts[start:start + b])
            for name, (done, samples) in _timed_batch(model, decoders, chunk, settings.max_new_tokens, protocol, start // b).items():
                results[name] += done
                kept[name].append(samples)
            if on_batch is not None:
                on_batch(b, f"{start + len(chunk)}/{len(prompts)}")
        greedy = [r.token_ids for r in results["greedy"]]
        alone = alone or greedy
        rows = [_row(model, prompts, b, name, results[name], kept[name], greedy, alone, protocol) for name in decoders]
        for row in rows:
            row.speedup = round(row.tokens_per_s / rows[0].tokens_per_s, 3)  # rows[0]: batched greedy
            row.vs_greedy = asdict(speedup(_per_batch(results[row.method], kept[row.method], b, protocol),
                                           _per_batch(results["greedy"], kept["greedy"], b, protocol)))
        out += rows
        if on_size is not None:
            on_size(out)
    return out


def _per_batch(results: list[DecodeResult], kept: list[list[Sample]], batch: int, protocol: Protocol) -> list[tuple[int, float]]:
    """(new tokens, figure seconds) of each batch, in order."""
    return [(sum(len(r.token_ids) for r in results[i * batch:(i + 1) * batch]), figure(samples, protocol).wall_s)
            for i, samples in enumerate(kept)]


def _row(model, prompts, batch: int, name: str, results: list[DecodeResult], kept: list[list[Sample]], greedy: list, alone: list,
         protocol: Protocol) -> LoadRow:
    seconds, tokens = sum(figure(samples, protocol).wall_s for samples in kept), sum(len(r.token_ids) for r in results)
    record = [_batch_record(samples, protocol) for samples in kept]
    steps = sum(r.stats.steps for r in results)
    apart = [dict(row=i, **first_gap(model, prompts[i], r.token_ids, a))
             for i, (r, a) in enumerate(zip(results, alone)) if r.token_ids != a and name in ("greedy", "generate")]
    return LoadRow(batch, name, round(seconds, 3), tokens, round(tokens / seconds, 2),
                   round(sum(r.stats.wall_time_s for r in results) / len(results), 3), round(tokens / max(steps, 1), 3),
                   round(sum(sum(r.stats.forward_tokens_per_step) for r in results) / max(steps, 1), 3), len(results),
                   sum(r.token_ids == g for r, g in zip(results, greedy)), apart, rounds=sum(len(r["rounds_s"]) for r in record),
                   disturbed=sum(sum(r["disturbed"]) for r in record), flagged=sum(r["flagged"] for r in record), batches=record)


def predict(rows: Sequence[LoadRow], surface: CostSurface, kv: float) -> dict[str, dict[int, float]]:
    """{method: {B: speedup over batched greedy}} a surface implies for the measured S and step widths:
    S x t(1, kv, B) / t(q, kv, B), q the method's mean tokens fed per row per step (a model, not a measurement)."""
    top, out = surface.widths[-1], {}
    for r in rows:
        if r.method != "generate":  # its passes are not counted
            q = min(r.fed_per_step, top)
            out.setdefault(r.method, {})[r.batch] = round(r.compression / surface.relative(q, kv, r.batch), 3)
    return out


def load_dicts(rows: Sequence[LoadRow]) -> list[dict]:
    return [asdict(r) for r in rows]
