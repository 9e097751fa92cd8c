"""The decoders a benchmark compares, each with its one-time set-up (compilation, capture, first call).

* ``greedy``, ``jacobi``, ``lookahead``: ladref's eager decoders (one row per lookahead config);
* ``compiled_greedy``, ``compiled_lookahead``: `ladref.CompiledDecoder`, constant-shape steps
  over a static cache, compiled once (CUDA graphs on CUDA, frozen max-autotune Inductor on a
  CPU); ``compiled_adaptive``: `ladref.CompiledAdaptiveDecoder`, adaptive decoding over static
  runners of the widths 1, 2, 4, ..., 64, each compiled once, each runner's cost curve measured
  through it (once per machine: kept in the user's cost cache, or with ``--compile-dir`` in that
  folder's ``cost.json``, beside the packages). Every compiled row keeps a
  static cache of `SHORT_CACHE` slots for the prompts that fit in it and one sized for the
  longest prompt (a step attends over all its slots where it cannot cut them to the slots it
  uses: `ladref.fast.static.StaticRunner.span`); ``compiled_adaptive_all``: the same over every
  source, each keeping what it can across the benchmark's prompts, and its learned acceptance
  (`ladref.fast.adaptive.remembering_proposers`: warm Token Recycling, suffix decoding with a
  memory of the earlier outputs, prompt lookup and the lookahead window; ``adaptive_all`` of
  `ladref.bench.multi`, compiled);
* ``prompt_lookup`` (native: up to 10 tokens after the most recent match of the last 1-3 tokens),
  ``prompt_lookup_rule`` (a fixed rule: up to 10 tokens, and only after a 3-token match),
  ``recycling`` (Token Recycling, cold: an empty matrix per prompt), ``recycling_warm`` (one
  matrix kept across the benchmark's prompts, the paper's warm start), ``suffix`` (suffix decoding,
  the prompt's own text), ``suffix_memory`` (suffix decoding with one memory of the earlier prompts'
  outputs kept across the benchmark's prompts), ``adaptive`` (a plain
  ``adaptive_decode`` call per prompt, as a user makes it: the cost curve comes from the user's
  cost cache, measured in the set-up when it is not there yet), ``draft_all``
  (`ladref.draft_decode` with adaptive decoding's sources, prompt lookup + lookahead 7/4/7 + Token Recycling, all fed every
  step: the tokens per step of every source together): the tree decoders of `ladref`;
* ``generate``, ``generate_static``, ``generate_compiled``, ``hf_plookup``: transformers' ``generate()``
  greedy, with a static cache (which transformers compiles itself on CUDA), with a static cache
  compiled by transformers on any device (its compiled greedy, the compiled rows' peer on a CPU
  too), and transformers' prompt lookup
  (`ladref.bench.hf`, matching up to `HF_LOOKUP_NGRAM` tokens as ``prompt_lookup`` does), run with
  transformers' own attention dispatch and the model's own linear layers: the plain forward pass. ``plookup`` is accepted as
  an alias of ``hf_plookup`` (`METHOD_ALIASES`).

A row's label is its method name, followed by its lookahead config for the lookahead rows
("lookahead 15/5/15"); `method_name` reads the method back from a label.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ..config import LookaheadConfig
from ..decoders.draft import draft_decode
from ..fast.adaptive import adaptive_decode, default_proposers, remembering_proposers
from ..fast.compiled import CompiledDecoder
from ..fast.compiled_adaptive import CompiledAdaptiveDecoder
from ..fast.static import DEFAULT_WIDTHS
from ..decoders.greedy import greedy_decode
from ..results import DecodeResult
from ..decoders.methods import jacobi_decode
from ..decoders.methods import lookahead_decode
from ..decoders.methods import prompt_lookup_decode
from ..sources.recycling import RecyclingProposer
from ..decoders.methods import recycling_decode
from ..sources.suffix import SuffixProposer
from ..decoders.methods import suffix_decode
from ..sources.suffix_trie import SuffixMemory
from .hf import generate_decode, hf_prompt_lookup_decode
from .state import checkpoint, learned

METHODS = ("greedy", "generate", "generate_static", "generate_compiled", "hf_plookup", "jacobi", "lookahead", "prompt_lookup", "prompt_lookup_rule",
           "recycling", "recycling_warm", "suffix", "suffix_memory", "adaptive", "draft_all", "compiled_greedy", "compiled_lookahead",
           "compiled_adaptive", "compiled_adaptive_all")
METHOD_ALIASES = {"plookup": "hf_plookup"}
"""Former method names still accepted (and read from results files written under them)."""
Decoder = Callable[[torch.nn.Module, torch.Tensor, int], DecodeResult]
HF_LOOKUP_NGRAM = 3
"""``max_matching_ngram_size`` of the ``hf_plookup`` row: 3, as ``prompt_lookup`` matches 1- to 3-grams
(transformers' default is 2), so the two prompt-lookup rows draft from the same n-grams."""
SHORT_CACHE = 512
"""Slots of the compiled rows' short static cache (most Spec-Bench prompts fit in it with 128 new tokens)."""


def config_label(config: LookaheadConfig) -> str:
    """"W/N/G", e.g. "15/5/15"."""
    return f"{config.window_size}/{config.ngram_size}/{config.max_candidates}"


def one_of(name: str, choices: Sequence[str], what: str = "method {!r}", note: str = "") -> str:
    """`name` if it is one of `choices`; else a ValueError "unknown <what>; choose from <choices><note>",
    `what` formatted with the name (e.g. "method {!r} for --batch")."""
    if name not in choices:
        raise ValueError(f"unknown {what.format(name)}; choose from {', '.join(choices)}{note}")
    return name


def canonical_method(name: str) -> str:
    """The method's name for `name` ("plookup" -> "hf_plookup").

    Raises:
        ValueError: an unknown method, listing the valid names.
    """
    aliases = ", ".join(f"{a} = {m}" for a, m in METHOD_ALIASES.items())
    return one_of(METHOD_ALIASES.get(name, name), METHODS, note=f" (aliases: {aliases})")


def method_name(label: str) -> str:
    """The method of a row label, aliases resolved: "lookahead 15/5/15" -> "lookahead", "plookup" -> "hf_plookup"."""
    name = label.split(" ", 1)[0]
    return METHOD_ALIASES.get(name, name)


def canonical_label(label: str) -> str:
    """A row label with its method's alias resolved ("plookup" -> "hf_plookup"; configs kept)."""
    name, sep, rest = label.partition(" ")
    return METHOD_ALIASES.get(name, name) + sep + rest


@dataclass(frozen=True)
class BenchMethod:
    """One row of a benchmark.

    Attributes:
        label: the row's name ("lookahead 15/5/15", "compiled_greedy", ...).
        flops_kind: how `ladref.bench.flops.decode_flops` charges its steps.
        config: its lookahead config, or None.
        run: decodes one prompt: ``run(model, ids, max_new_tokens)``.
        warm: the one-time set-up, timed apart from decoding: ``warm(model, prompts, max_new_tokens)``.
        stateful: it learns across calls (a warm matrix, a memory of earlier outputs).
        checkpoint: for a stateful row, saves what it learned so far and returns a function
            that puts it back (a round of a prompt is timed from the state the first began with).
    """

    label: str
    flops_kind: str
    config: LookaheadConfig | None
    run: Decoder
    warm: Callable[[torch.nn.Module, Sequence[torch.Tensor], int], None]
    stateful: bool = False
    checkpoint: Callable[[], Callable[[], None]] | None = None


def _learning_row(label: str, source: object, decode: Callable) -> BenchMethod:
    """A row whose draft source learns across calls: ``decode(model, ids, n, source)``, with a checkpoint
    that copies the source (outside the timed call) and restores it in place (`ladref.bench.state.checkpoint`)."""
    run = lambda m, ids, n: decode(m, ids, n, source)  # noqa: E731
    return BenchMethod(label, "tree", None, run, _first_call(run), stateful=True, checkpoint=checkpoint(*learned(source)))


def _first_call(run: Decoder) -> Callable:
    return lambda model, prompts, n: run(model, prompts[0], min(8, n))


def _longest_call(run: Decoder) -> Callable:
    """transformers' static cache is sized by each call: compile for the longest and the shortest prompt
    before timing (after a second size, torch.compile makes the size dynamic, so no timed call recompiles)."""
    def warm(model, prompts, n):
        ends = dict.fromkeys([max(prompts, key=lambda p: p.numel()), min(prompts, key=lambda p: p.numel())])
        for prompt in ends:
            for _ in range(2):
                run(model, prompt, n)
    return warm


def cache_lengths(max_length: int) -> tuple[int, ...]:
    """The compiled rows' static cache lengths: `SHORT_CACHE` and `max_length` (the longest call), or one."""
    return (SHORT_CACHE, max_length) if max_length > SHORT_CACHE else (max_length,)


def _compiled(model, config, max_length, mode, backend, compile_dir=None) -> BenchMethod:
    """A compiled greedy or lookahead row: one decoder per cache length; a call uses the shortest that fits."""
    decoders = [CompiledDecoder(model, config, max_length=m, mode=mode, attention_backend=backend, compile_dir=compile_dir)
                for m in cache_lengths(max_length)]
    label = "compiled_greedy" if config is None else f"compiled_lookahead {config_label(config)}"
    kind = "greedy" if config is None else "lookahead"

    def run(m, ids, n):
        return next((d for d in decoders if d.fits(ids.numel(), n)), decoders[-1])(ids, n)

    return BenchMethod(label, kind, config, run, lambda m, prompts, n: [d.warmup() for d in decoders])


def _compiled_adaptive(model, max_length, mode, backend, compile_dir=None, remembering: bool = False) -> BenchMethod:
    """Adaptive decoding over static runners of fixed widths (`remembering`: over every source, each
    keeping what it can across prompts); compiling them (and measuring their curves into the
    user's cost cache, when it lacks them) is its set-up."""
    lengths = cache_lengths(max_length + DEFAULT_WIDTHS[-1])  # room for the widest step
    sources = remembering_proposers(model) if remembering else None
    decoder = CompiledAdaptiveDecoder(model, max_lengths=lengths, mode=mode, attention_backend=backend, compile_dir=compile_dir,
                                      proposers=sources, keep_learning=remembering)

    def setup(m, prompts, n):
        decoder.warmup()
        decoder(prompts[0], min(8, n))

    label = "compiled_adaptive_all" if remembering else "compiled_adaptive"
    return BenchMethod(label, "tree", None, lambda m, ids, n: decoder(ids, n), setup, stateful=remembering)


def _tree_rows(method: str, model: torch.nn.Module, lookup_tokens: int, backend: str) -> BenchMethod:
    """A row of one of ladref's tree decoders (every fed token's logits read: FLOPs kind "tree")."""
    if method == "prompt_lookup":
        run = lambda m, ids, n: prompt_lookup_decode(m, ids, n, draft_len=lookup_tokens, attention_backend=backend)  # noqa: E731
    elif method == "prompt_lookup_rule":
        run = lambda m, ids, n: prompt_lookup_decode(m, ids, n, draft_len=lookup_tokens, min_ngram=3, max_ngram=3,  # noqa: E731
                                                     attention_backend=backend)
    elif method == "recycling":
        run = lambda m, ids, n: recycling_decode(m, ids, n, attention_backend=backend)  # noqa: E731
    elif method == "draft_all":
        run = lambda m, ids, n: draft_decode(m, ids, n, proposers=default_proposers(m), attention_backend=backend)  # noqa: E731
    elif method == "recycling_warm":
        return _learning_row(method, RecyclingProposer.for_model(model, warm=True),
                             lambda m, ids, n, p: recycling_decode(m, ids, n, proposer=p, attention_backend=backend))
    elif method == "suffix":
        run = lambda m, ids, n: suffix_decode(m, ids, n, attention_backend=backend)  # noqa: E731
    elif method == "suffix_memory":
        return _learning_row(method, SuffixProposer.for_model(model, memory=SuffixMemory()),
                             lambda m, ids, n, p: suffix_decode(m, ids, n, proposer=p, attention_backend=backend))
    else:  # the call a user makes: the curve from the user's cost cache (measured there once, in the set-up if new)
        run = lambda m, ids, n: adaptive_decode(m, ids, n, attention_backend=backend)  # noqa: E731
    return BenchMethod(method, "tree", None, run, _first_call(run))


def bench_methods(methods: Sequence[str], configs: Sequence[LookaheadConfig], model: torch.nn.Module, max_length: int, *,
                  block_size: int, lookup_tokens: int, attention_backend: str, compile_mode: str | None,
                  compile_dir: str | None = None) -> list[BenchMethod]:
    """The rows for `methods` (lookahead ones once per config), in order; aliases are accepted."""
    backend, rows = attention_backend, []
    for method in map(canonical_method, methods):
        if method == "greedy":
            run = lambda m, ids, n: greedy_decode(m, ids, n, attention_backend=backend)  # noqa: E731
            rows.append(BenchMethod("greedy", "greedy", None, run, _first_call(run)))
        elif method in ("generate", "generate_static", "generate_compiled"):
            cache_kind = None if method == "generate" else "static"
            run = lambda m, ids, n, c=cache_kind, k=method == "generate_compiled": generate_decode(  # noqa: E731
                m, ids, n, cache_implementation=c, compiled=k)
            rows.append(BenchMethod(method, "greedy", None, run, _longest_call(run) if cache_kind else _first_call(run)))
        elif method == "hf_plookup":
            run = lambda m, ids, n: hf_prompt_lookup_decode(m, ids, n, prompt_lookup_num_tokens=lookup_tokens,  # noqa: E731
                                                            max_matching_ngram_size=HF_LOOKUP_NGRAM)
            rows.append(BenchMethod("hf_plookup", "plookup", None, run, _first_call(run)))
        elif method == "jacobi":
            run = lambda m, ids, n: jacobi_decode(m, ids, n, block_size=block_size, attention_backend=backend)  # noqa: E731
            rows.append(BenchMethod("jacobi", "jacobi", None, run, _first_call(run)))
        elif method == "lookahead":
            for c in configs:
                run = lambda m, ids, n, c=c: lookahead_decode(m, ids, n, config=c, attention_backend=backend)  # noqa: E731
                rows.append(BenchMethod(f"lookahead {config_label(c)}", "lookahead", c, run, _first_call(run)))
        elif method in ("prompt_lookup", "prompt_lookup_rule", "recycling", "recycling_warm", "suffix", "suffix_memory", "adaptive",
                        "draft_all"):
            rows.append(_tree_rows(method, model, lookup_tokens, backend))
        elif method == "compiled_greedy":
            rows.append(_compiled(model, None, max_length, compile_mode, backend, compile_dir))
        elif method in ("compiled_adaptive", "compiled_adaptive_all"):
            rows.append(_compiled_adaptive(model, max_length, compile_mode, backend, compile_dir, method == "compiled_adaptive_all"))
        else:  # compiled_lookahead
            rows += [_compiled(model, c, max_length, compile_mode, backend, compile_dir) for c in configs]
    return rows
