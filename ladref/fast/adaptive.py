"""Adaptive decoding: every step feeds only the drafts this machine can afford.

Every call, one prompt or a batch, runs the batched engine (`ladref.batched.loop.decode_batch`)
with its choice taken by `ladref.batched.policy.BatchPolicy`: before each pass, every row picks which
proposed draft nodes to verify (from none, a plain greedy step, to all of them) and whether to feed
the lookahead window, to maximise the pass's expected tokens per second under the cost surface
measured on this machine (`ladref.pricing.surface.CostSurface`) and the acceptance it has learned
so far, per source and depth. Greedy output is unchanged: drafts only decide how many tokens a step
may accept. (The same rule for one prompt, written to be read, is the tests' oracle.)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from typing_extensions import Unpack

from ..batched.loop import decode_batch
from ..batched.policy import BatchPolicy
from ..batched.sample import BatchSampler
from ..batched.sources import batched_sources
from ..config import LookaheadConfig
from ..options import BatchCallOptions, DecodeOptions, accept
from ..proposer import MAX_DRAFT_DEPTH, Proposer, check_proposers, step_needs
from ..results import BatchResult, DecodeResult
from ..rows import decode_prompts
from ..facts import ModelFacts, check_kernels
from ..runner import Runner
from ..sampling import chooser_for
from ..sources.lookahead import LookaheadProposer
from ..sources.prompt_lookup import PromptLookupProposer
from ..sources.recycling import RecyclingProposer
from ..sources.suffix import SuffixProposer
from ..sources.suffix_trie import SuffixMemory
from ..types import Budget, Prompts, TokenIds
from ..pricing.cost import DEFAULT_KV_LENGTHS, CostModel, default_widths
from ..pricing.cost_cache import CostCache
from ..pricing.policy import PolicySettings
from ..pricing.surface import CostSurface, batches_up_to, cached_surface

DEFAULT_WINDOW = LookaheadConfig(window_size=7, ngram_size=4, max_candidates=7)


def default_proposers(model: torch.nn.Module, window: LookaheadConfig | None = DEFAULT_WINDOW) -> list[Proposer]:
    """Prompt lookup, the lookahead window and pool (unless `window` is None) and Token Recycling."""
    sources: list[Proposer] = [PromptLookupProposer()]
    if window is not None:
        sources.append(LookaheadProposer(window))
    return sources + [RecyclingProposer.for_model(model)]


def remembering_proposers(model: torch.nn.Module, suffix: SuffixProposer | None = None) -> list[Proposer]:
    """Every source, each keeping what it can across calls: prompt lookup, the lookahead window and
    pool, Token Recycling with its matrix kept warm, and suffix decoding with a memory of the
    earlier outputs (`suffix`; default a `SuffixProposer` with a fresh `SuffixMemory`). Keep the
    list and pass it to every call (an `AdaptiveDecoder` or `CompiledAdaptiveDecoder` keeps it)."""
    suffix = SuffixProposer.for_model(model, memory=SuffixMemory()) if suffix is None else suffix
    return [PromptLookupProposer(), LookaheadProposer(DEFAULT_WINDOW), RecyclingProposer.for_model(model, warm=True), suffix]


def kv_lengths_for(model: torch.nn.Module, runner: Runner | None = None) -> tuple[int, ...]:
    """The default KV lengths to measure at that fit the model's context and the runner's static
    cache, if it has one (with the widest step)."""
    facts = ModelFacts.of(model) if runner is None else runner.facts
    limits = [limit for limit in (facts.context, None if runner is None else runner.max_length) if limit is not None]
    if not limits:
        return DEFAULT_KV_LENGTHS
    widest = (runner is not None and runner.step_width) or max(default_widths(facts.device))
    room = min(limits) - widest - 8
    return tuple(kv for kv in DEFAULT_KV_LENGTHS if kv <= room) or (max(room // 2, 1),)


class AdaptiveDecoder:
    """Adaptive decoding on one model, its cost measured once and its acceptance learned as it goes.

    Every call, one prompt or a batch, runs the batched engine (`ladref.batched.loop.decode_batch`)
    under one policy, `ladref.batched.policy.BatchPolicy`: one prompt is a batch of one. (The same
    engine over compiled static caches: `ladref.fast.compiled_adaptive.CompiledAdaptiveDecoder`.)

    Args:
        model: a transformers decoder-only model (eager or SDPA attention).
        cost: the cost surface t(q, kv, B) (`ladref.pricing.surface.CostSurface`), or a curve t(q, kv)
            (`CostModel`: one prompt's passes, for calls of one prompt only); default: measured in
            `cache`, once: the batched passes up to the call's B (`ladref.pricing.surface.cached_surface`).
        cache: where to look for (and keep) a measured surface; ignored when `cost` is given.
            Default `CostCache.default()`: the user's cache file, so only the first decoder on a
            machine measures (17-30 s for SmolLM2-135M on 2 idle CPU cores); `CostCache()` keeps
            it in that object only.
        proposers: the draft sources; default `default_proposers(model, window)`.
        window: the lookahead window and pool of the default proposers (None: no window).
        keep_learning: keep the learned acceptance across calls of one prompt each (False: each
            call starts afresh).
        calibrate: correct the cost by the time every pass actually takes (`PolicySettings.calibrate`);
            None (default): on when the cost is measured here (`cost` omitted), off for a cost
            passed in, which is then taken as it is (a synthetic one means exactly what it says).
        attention_backend: SDPA kernels (`ladref.kernels.sdpa_backends`).
        kernels: "auto", or "transformers": every call's passes run the model exactly as transformers
            does (`ladref.facts.forward_choice`); a measured cost is measured with ladref's own kernels.

    Attributes:
        policy: the last call's `ladref.batched.policy.BatchPolicy`.
        cost_cache: the `CostCache` the cost came from (None when `cost` was given).
    """

    def __init__(self, model: torch.nn.Module, *, cost: CostModel | CostSurface | None = None, cache: CostCache | None = None,
                 proposers: Sequence[Proposer] | None = None, window: LookaheadConfig | None = DEFAULT_WINDOW,
                 keep_learning: bool = False, calibrate: bool | None = None, attention_backend: str = "auto",
                 kernels: str = "auto", **retired: object) -> None:
        if "runner" in retired:
            raise TypeError("AdaptiveDecoder takes no runner: every call runs the batched engine; for compiled steps over "
                            "static caches use CompiledAdaptiveDecoder(model, max_lengths=...)")
        if retired:
            raise TypeError(f"AdaptiveDecoder() got an unexpected keyword argument {next(iter(retired))!r}")
        if cost is not None and not isinstance(cost, (CostModel, CostSurface)):
            raise TypeError(f"cost must be a CostModel or a CostSurface, got {type(cost).__name__}")
        self.model, self.attention_backend, self.kernels = model, attention_backend, check_kernels(kernels)
        self.proposers = check_proposers(list(proposers) if proposers is not None else default_proposers(model, window))
        self.calibrate = cost is None if calibrate is None else bool(calibrate)
        if cache is not None:
            CostCache.given(cache)  # checked even when `cost` makes it unused
        self.surface = CostSurface.of(cost) if isinstance(cost, CostModel) else cost
        self.one_curve = isinstance(cost, CostModel)  # t(q, kv) of one row's passes: no batch's
        self.cost_cache = CostCache.given(cache) if cost is None else None
        self.keep_learning = keep_learning
        self.policy: BatchPolicy | None = None

    @property
    def cost(self) -> CostModel:
        """t(q, kv) of one prompt's passes: the surface at B = 1 (measured in the cache at its first use)."""
        return self.surface_for(1).at(1)

    def surface_for(self, rows: int) -> CostSurface:
        """The surface a batch of `rows` prices its steps with: the one given, or measured in the cache."""
        if self.one_curve and rows > 1:
            raise ValueError("a CostModel prices one prompt's steps; for a batch pass cost=CostSurface(...) "
                             "(ladref.pricing.surface), or no cost to measure the batched passes")
        if self.surface is not None:
            return self.surface
        return cached_surface(self.cost_cache, self.model, batches_up_to(rows), kv_lengths=kv_lengths_for(self.model),
                              attention_backend=self.attention_backend)

    def __call__(self, input_ids: Prompts, max_new_tokens: Budget = 64, **options: Unpack[BatchCallOptions]) -> DecodeResult | BatchResult:
        """Decode one prompt, or a batch (arguments as `adaptive_decode`; the attention backend is the decoder's)."""
        options = {**accept("AdaptiveDecoder.__call__", options, BatchCallOptions), "attention_backend": self.attention_backend,
                   "kernels": self.kernels}
        return decode_prompts(input_ids, max_new_tokens, options, lambda prompt, budget, opts: self._batch([prompt], [budget], opts)[0],
                              self._batch)

    def _batch(self, prompts: list[TokenIds], budgets: list[int], options: BatchCallOptions) -> BatchResult:
        """Every prompt through the batched engine, its rows' steps chosen together by a `BatchPolicy`."""
        chooser_for(options)  # the sampling keywords, checked before any forward pass (before measuring a surface, too)
        result, self.policy = decode_adaptively(self.model, prompts, budgets, options, self.proposers, self.surface_for(len(prompts)),
                                                self.calibrate, self.policy if self.keep_learning else None)
        return result


def decode_adaptively(model: torch.nn.Module, prompts: list[TokenIds], budgets: list[int], options: BatchCallOptions,
                      proposers: Sequence[Proposer], surface: CostSurface, calibrate: bool, learned: BatchPolicy | None = None,
                      span: int | None = None, runner: Runner | None = None) -> tuple[BatchResult, BatchPolicy]:
    """The engine (`ladref.batched.loop.decode_batch`) under a fresh `BatchPolicy` priced on `surface`:
    what `AdaptiveDecoder` and `ladref.fast.compiled_adaptive.CompiledAdaptiveDecoder` run.

    Args:
        proposers: the draft sources (their batch forms run); calibrate: `PolicySettings.calibrate`.
        learned: the last call's policy, whose acceptance the new one starts from (`carry`); None: afresh.
        span, runner: the policy's widths priced and the one-prompt runner (`decode_batch`'s), for a static cache.

    Returns:
        The batch's result, and the policy that chose its steps. (The caller checks the sampling
        keywords first, `ladref.sampling.chooser_for`: before a surface is measured or a step compiled.)
    """
    facts = ModelFacts.of(model)
    sources = batched_sources(proposers, MAX_DRAFT_DEPTH, facts.vocab_size)
    policy = BatchPolicy(surface, len(prompts), [s.name for s in sources], max(s.depth for s in sources),
                         PolicySettings(calibrate=calibrate), facts.device, span=span)
    if learned is not None:
        carry(learned, policy)
    result = decode_batch(model, prompts, budgets, options, "adaptive", sources, policy, BatchSampler.from_options(options, facts.device),
                          step_needs(proposers, MAX_DRAFT_DEPTH).reach, runner=runner,
                          processor=options.get("logits_processor"))
    return result, policy


def carry(learned: BatchPolicy, fresh: BatchPolicy) -> None:
    """What `learned` knows of acceptance, carried into `fresh` when their rows and rates line up
    (one prompt after another: B = 1 both); nothing else (a call's pending proposals stay its own)."""
    old, new = learned.acceptance, fresh.acceptance
    if old.accepted.shape != new.accepted.shape:
        return
    for name in ("accepted", "reached", "expected", "matched", "window_value"):
        getattr(new, name).copy_(getattr(old, name))
    fresh.tokens.copy_(learned.tokens)


def adaptive_decode(
    model: torch.nn.Module,
    input_ids: Prompts,
    max_new_tokens: Budget = 64,
    *,
    cost: CostModel | CostSurface | None = None,
    cache: CostCache | None = None,
    proposers: Sequence[Proposer] | None = None,
    window: LookaheadConfig | None = DEFAULT_WINDOW,
    **options: Unpack[DecodeOptions],
) -> DecodeResult | BatchResult:
    """Decoding that drafts only what this machine can afford; greedy output identical to `greedy_decode`.

    Each step proposes drafts from every source (prompt lookup, the lookahead window's n-gram pool,
    Token Recycling), then feeds the subset, and the window or not, that maximises expected tokens
    per second under the measured cost surface and the acceptance learned so far (`BatchPolicy`).
    In a batch of B rows each row decides for itself, pricing its step on the curve of a pass of
    B rows (`ladref.pricing.surface.CostSurface.at`): where B rows already fill the machine's compute,
    a draft makes every pass dearer and the rows stop drafting by themselves; where no draft can pay
    at all, a step proposes and prices nothing (`ladref.batched.gate.Gate`).

    Args:
        model: a transformers decoder-only model (eager or SDPA attention).
        input_ids: the prompt, (L,) or (1, L) ids or a list of ints; or a batch (`ladref.types.Prompts`).
        max_new_tokens: most tokens to generate (for a batch: one budget, or one per row).
        cost: the step-cost curve of this machine (`CostModel`; for a batch, a `CostSurface`);
            default: from `cache`.
        cache: the `ladref.pricing.cost_cache.CostCache` to take the curve from, measured there once per model,
            runner and machine. Default `CostCache.default()`, a file in the user's cache folder
            (`ladref.pricing.cost_cache.default_cache_path`): the first call on a machine measures the curve
            (17-30 s for SmolLM2-135M on 2 idle CPU cores), every later call and process reads it;
            a batch's first call on a machine measures the batched passes up to its size, once.
        proposers: the draft sources; default `default_proposers(model, window)`.
        window: the lookahead window and pool of the default proposers (None: no window).
        **options: the shared keywords (`ladref.options.DecodeOptions`): ``eos_token_id``,
            ``tokenizer``, ``streamer``, ``do_sample`` and its settings, ``logits_processor``, ``attention_backend``,
            ``kernels``.

    Returns:
        `DecodeResult` with method "adaptive" (a `BatchResult` of them for a batch).
    """
    options = dict(accept("adaptive_decode", options, DecodeOptions))
    backend, kernels = options.pop("attention_backend", "auto"), options.pop("kernels", "auto")  # the decoder's, for every call
    decoder = AdaptiveDecoder(model, cost=cost, cache=cache, proposers=proposers, window=window, attention_backend=backend,
                              kernels=kernels)
    return decoder(input_ids, max_new_tokens, **options)
