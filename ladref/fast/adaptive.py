"""Adaptive decoding: every step feeds only the drafts this machine can afford.

The same loop as every other tree decoder (`ladref.step.run_drafting`), with its hook taken by
`PolicyChoice`: before the forward pass, `ladref.pricing.policy.DraftPolicy` picks which proposed draft nodes to verify
(from none, a plain greedy step, to all of them) and whether to feed the lookahead window, to
maximise expected tokens per second under the cost curve measured on this machine
(`ladref.pricing.cost.CostModel`) and the acceptance it has learned so far, per source and depth.
Greedy output is unchanged: drafts only decide how many tokens a step may accept.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from typing_extensions import Unpack

from ..batched.loop import decode_batch
from ..batched.policy import BatchPolicy
from ..batched.sample import BatchSampler
from ..batched.sources import batched_sources
from ..call import DecodeCall
from ..config import LookaheadConfig
from ..options import BatchCallOptions, DecodeOptions, accept
from ..proposer import MAX_DRAFT_DEPTH, Proposer, check_proposers, step_needs
from ..results import BatchResult, DecodeResult
from ..rows import decode_prompts
from ..facts import ModelFacts
from ..runner import Runner
from ..sampling import chooser_for
from ..sources.lookahead import LookaheadProposer
from ..sources.prompt_lookup import PromptLookupProposer
from ..sources.recycling import RecyclingProposer
from ..sources.suffix import SuffixProposer
from ..sources.suffix_trie import SuffixMemory
from ..step import run_drafting
from ..tree import DraftTree
from ..types import Budget, Prompts, TokenIds
from ..pricing.cost import DEFAULT_KV_LENGTHS, CostModel, default_widths
from ..pricing.cost_cache import CostCache
from ..pricing.policy import DraftPolicy, PolicySettings
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


class PolicyChoice:
    """The loop's `ladref.step.StepChoice` for adaptive decoding of one prompt: a `DraftPolicy` picks
    each step's nodes and window, learns acceptance from the accepted tokens and the cost from step
    times. (A batch's rows choose together: `ladref.batched.policy.BatchPolicy`.)"""

    def __init__(self, policy: DraftPolicy) -> None:
        self.policy, self.plain = policy, False

    def may_draft(self, kv: int, window_cells: int | None) -> bool:
        """False when no draft could pay (`DraftPolicy.may_draft`): none is proposed."""
        self.plain = not self.policy.may_draft(kv, window_cells)
        return not self.plain

    def choose(self, trees: Sequence[DraftTree], evidence: Sequence[int], kv: int, window_cells: int | None) -> tuple[DraftTree, bool]:
        """The nodes and window flag `DraftPolicy.choose` picks (nothing after `may_draft` said no)."""
        if self.plain:  # `may_draft` found no draft nor window could pay at this kv: a greedy step
            return DraftTree.empty(), False
        self.policy.propose(trees, evidence)  # every proposed node is checked against the accepted tokens
        choice = self.policy.choose(trees, kv, window_cells, evidence)
        self.policy.watch(choice.probe, choice.probe_expected)  # what drafting alone would feed: checked, fed or not
        return choice.tree, choice.window

    def observe(self, tokens: Sequence[int]) -> None:
        """Learn acceptance from the step's accepted tokens (`DraftPolicy.observe`)."""
        self.policy.observe(tokens)

    def timed(self, fed: int, kv: int, seconds: float) -> None:
        """Learn the cost from the step's time (`DraftPolicy.timed`)."""
        self.policy.timed(fed, kv, seconds)


class AdaptiveDecoder:
    """Adaptive decoding on one model, its cost curve measured once and its acceptance learned as it goes.

    Args:
        model: a transformers decoder-only model (eager or SDPA attention).
        cost: the step-cost curve (`CostModel`), or for batches the surface t(q, kv, B)
            (`ladref.pricing.surface.CostSurface`); default: taken from `cache` (`CostCache.get`),
            measured there the first time (for a batch of B: the batched passes up to B, once).
        cache: where to look for (and keep) a measured curve; ignored when `cost` is given.
            Default `CostCache.default()`: the user's cache file, so only the first decoder on a
            machine measures (17-30 s for SmolLM2-135M on 2 idle CPU cores); `CostCache()` keeps
            the curve in that object only.
        proposers: the draft sources; default `default_proposers(model, window)`.
        window: the lookahead window and pool of the default proposers (None: no window).
        runner: a runner to reuse across calls (e.g. a compiled static runner; one prompt per
            call); default a fresh `ModelRunner` per call. Its ``widths``, when it has them, are
            the only step widths used.
        keep_learning: keep the learned acceptance across calls (False: each call starts afresh).
        calibrate: correct the curve by the time every step actually takes (`DraftPolicy.timed`);
            None (default): on when the curve is measured here (`cost` omitted), off for a curve
            passed in, which is then taken as it is (a synthetic one means exactly what it says).
            Off for the rows of a batch (a row's step time includes waiting for the others).
        attention_backend: SDPA kernels of the default runner (`ladref.kernels.sdpa_backends`).

    Attributes:
        policy: the `DraftPolicy` of the last one-prompt call, or the `ladref.batched.policy.BatchPolicy`
            of the last batch.
        cost_cache: the `CostCache` the curve came from (None when `cost` was given).
    """

    def __init__(self, model: torch.nn.Module, *, cost: CostModel | CostSurface | None = None, cache: CostCache | None = None,
                 proposers: Sequence[Proposer] | None = None, window: LookaheadConfig | None = DEFAULT_WINDOW,
                 runner: Runner | None = None, keep_learning: bool = False, calibrate: bool | None = None,
                 attention_backend: str = "auto") -> None:
        if cost is not None and not isinstance(cost, (CostModel, CostSurface)):
            raise TypeError(f"cost must be a CostModel or a CostSurface, got {type(cost).__name__}")
        self.model, self.runner, self.attention_backend = model, runner, attention_backend
        self.proposers = check_proposers(list(proposers) if proposers is not None else default_proposers(model, window))
        self.calibrate = cost is None if calibrate is None else bool(calibrate)
        self.cost_cache: CostCache | None = None
        self.widths = None if runner is None else runner.widths
        if cache is not None:
            CostCache.given(cache)  # checked even when `cost` makes it unused
        self.surface = cost if isinstance(cost, CostSurface) else None
        if cost is None:  # measured at the runner's widths when it has them (the only ones it can take)
            self.cost_cache = CostCache.given(cache)
            cost = self.cost_cache.get(model, runner, widths=self.widths, kv_lengths=kv_lengths_for(model, runner),
                                       attention_backend=attention_backend)
        self.cost = cost.at(1) if isinstance(cost, CostSurface) else cost
        self.keep_learning = keep_learning
        self.policy = DraftPolicy(self.cost, self.widths, PolicySettings(calibrate=self.calibrate))

    def surface_for(self, rows: int) -> CostSurface:
        """The surface a batch of `rows` prices its steps with: the one given, or measured in the cache."""
        if self.surface is not None:
            return self.surface
        if self.cost_cache is None:
            raise ValueError("a CostModel prices one prompt's steps; for a batch pass cost=CostSurface(...) "
                             "(ladref.pricing.surface), or no cost to measure the batched passes")
        if self.runner is not None:
            raise ValueError("an AdaptiveDecoder with its own runner decodes one prompt per call")
        return cached_surface(self.cost_cache, self.model, batches_up_to(rows), kv_lengths=kv_lengths_for(self.model),
                              attention_backend=self.attention_backend)

    def __call__(self, input_ids: Prompts, max_new_tokens: Budget = 64, **options: Unpack[BatchCallOptions]) -> DecodeResult | BatchResult:
        """Decode one prompt, or a batch (arguments as `adaptive_decode`; the attention backend is the decoder's)."""
        options = {**accept("AdaptiveDecoder.__call__", options, BatchCallOptions), "attention_backend": self.attention_backend}
        reach = step_needs(self.proposers, MAX_DRAFT_DEPTH).reach

        def one(prompt: TokenIds, new_tokens: int, options: BatchCallOptions) -> DecodeResult:
            call = DecodeCall.begin(self.model, prompt, new_tokens, reach, options, self.runner)
            if not self.keep_learning:
                self.policy = DraftPolicy(self.cost, self.widths, PolicySettings(calibrate=self.calibrate))
            with torch.inference_mode():
                run_drafting(call.runner, call.prompt, self.proposers, call.sink, call.stats, chooser_for(options),
                             call.position_limit, PolicyChoice(self.policy))
            return call.finish("adaptive")

        def many(prompts: list[TokenIds], budgets: list[int], options: BatchCallOptions) -> BatchResult:
            chooser_for(options)  # the sampling keywords, checked before any forward pass
            surface, device = self.surface_for(len(prompts)), ModelFacts.of(self.model).device
            sources = batched_sources(self.proposers, MAX_DRAFT_DEPTH, ModelFacts.of(self.model).vocab_size)
            self.policy = BatchPolicy(surface, len(prompts), [s.name for s in sources], max(s.depth for s in sources),
                                      PolicySettings(), device)
            return decode_batch(self.model, prompts, budgets, options, "adaptive", sources, self.policy,
                                BatchSampler.from_options(options, device), reach)

        return decode_prompts(input_ids, max_new_tokens, options, one, many)


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
    per second under the measured cost curve and the acceptance learned so far (`DraftPolicy`).
    In a batch of B rows each row decides for itself, pricing its step on the curve of a pass of
    B rows (`ladref.pricing.surface.CostSurface.at`): where B rows already fill the machine's compute,
    a draft makes every pass dearer and the rows stop drafting by themselves.

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
            ``tokenizer``, ``streamer``, ``do_sample`` and its settings, ``attention_backend``.

    Returns:
        `DecodeResult` with method "adaptive" (a `BatchResult` of them for a batch).
    """
    options = dict(accept("adaptive_decode", options, DecodeOptions))
    backend = options.pop("attention_backend", "auto")  # the decoder's, for every call
    decoder = AdaptiveDecoder(model, cost=cost, cache=cache, proposers=proposers, window=window, attention_backend=backend)
    return decoder(input_ids, max_new_tokens, **options)
