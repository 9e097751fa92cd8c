"""One decoding call: its checked inputs, its stopping rules (`TokenSink`) and its result.

Every decoder begins with `DecodeCall.begin` (validate the prompt and the budget, resolve EOS,
make a fresh `ModelRunner`, send the prompt to the streamer) and ends with `DecodeCall.finish`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from .config import check_int
from .facts import ModelFacts, check_model, forward_choice
from .results import DecodeResult, DecodeStats
from .runner import ModelRunner, Runner
from .types import EosIds, Streamer, TokenIds, Tokenizer


def prompt_ids(facts: ModelFacts, input_ids: TokenIds) -> torch.Tensor:
    """Validate a prompt and return it as a 1-D long tensor on the CPU.

    Args:
        facts: the model's (its vocabulary size bounds the ids; its device is the one allowed
            besides the CPU).
        input_ids: a list of ints, a (L,) tensor or a (1, L) tensor, on the CPU or on the
            model's device (a tensor on another accelerator is refused, not silently moved). A
            batch never gets here from the decoder functions (`ladref.rows.decode_prompts` sends it
            to the batched step); the calls that take one prompt only (the compiled decoders,
            ``generate(custom_generate=...)``, the transformers baselines) refuse one, naming those that take it.

    Returns:
        (L,) long tensor.

    Raises:
        TypeError, ValueError: for a bad prompt (the model itself is checked by `check_model`).
    """
    if isinstance(input_ids, torch.Tensor):
        if input_ids.device.type != "cpu" and input_ids.device != facts.device:
            raise ValueError(f"input_ids are on {input_ids.device} but the model is on {facts.device}; move them with .to(model.device)")
        ids = input_ids.detach().cpu()
    elif isinstance(input_ids, (list, tuple)) and all(isinstance(t, int) and not isinstance(t, bool) for t in input_ids):
        ids = torch.tensor(input_ids, dtype=torch.long)
    else:
        raise TypeError(f"input_ids must be a list of ints or a LongTensor, got {type(input_ids).__name__}")
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise TypeError(f"input_ids must hold integer token ids, got dtype {ids.dtype}")
    if ids.dim() == 2:
        if ids.shape[0] != 1:
            raise ValueError(f"batch size {ids.shape[0]} > 1 is not supported by this call, which decodes one prompt; "
                             "the decoder functions (greedy_decode, lookahead_decode, draft_decode, adaptive_decode, ...) "
                             "and AdaptiveDecoder decode a batch")
        ids = ids[0]
    if ids.dim() != 1:
        raise ValueError(f"input_ids must have shape (L,) or (1, L), got {tuple(ids.shape)}")
    if ids.numel() == 0:
        raise ValueError("the prompt is empty: input_ids needs at least one token")
    if int(ids.min()) < 0 or int(ids.max()) >= facts.vocab_size:
        raise ValueError(f"input_ids hold ids outside the model's vocabulary [0, {facts.vocab_size})")
    return ids.long()


def check_budget(facts: ModelFacts, prompt_len: int, max_new_tokens: int, lookahead: int) -> None:
    """Check max_new_tokens and that prompt + output (+ speculative positions) fit the context.

    Args:
        facts: the model's (``facts.context``: its context length, None for none).
        lookahead: how many positions past the last committed token a step may touch.
    """
    check_int("max_new_tokens", max_new_tokens, 1)
    limit = facts.context
    if limit is not None and prompt_len >= limit:
        raise ValueError(f"the prompt ({prompt_len} tokens) leaves no room in the model's context of {limit} positions")
    need = prompt_len + max_new_tokens + lookahead
    if limit is not None and need > limit:
        raise ValueError(
            f"prompt ({prompt_len}) + max_new_tokens ({max_new_tokens}) + lookahead positions ({lookahead}) = "
            f"{need} exceeds the model's context of {limit} positions"
        )


def eos_ids(model: torch.nn.Module, vocab: int, eos_token_id: EosIds, tokenizer: Tokenizer | None = None) -> frozenset[int]:
    """EOS ids to stop at.

    Resolution order: the argument (an empty list means "no EOS, always generate max_new_tokens"),
    the model's generation config, the model's config, the tokenizer's `eos_token_id`. A model
    without any EOS is decoded to max_new_tokens; but passing a tokenizer (asking for text) whose
    EOS is unknown everywhere is an error, since the output would never stop where text ends.
    Each id must be in the vocabulary [0, `vocab`).
    """
    if eos_token_id is None:
        config = getattr(model, "generation_config", None)
        eos_token_id = getattr(config, "eos_token_id", None) if config is not None else None
        if eos_token_id is None:
            eos_token_id = getattr(model.config, "eos_token_id", None)
        if eos_token_id is None and tokenizer is not None:
            eos_token_id = getattr(tokenizer, "eos_token_id", None)
            if eos_token_id is None:
                raise ValueError(
                    f"the tokenizer ({type(tokenizer).__name__}) has no EOS token and neither has the model; pass "
                    "eos_token_id=<id>, or eos_token_id=[] to always generate max_new_tokens tokens"
                )
    if eos_token_id is None:
        return frozenset()
    ids = [eos_token_id] if isinstance(eos_token_id, int) else eos_token_id
    if isinstance(ids, torch.Tensor):
        ids = ids.flatten().tolist()
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
        raise TypeError(f"eos_token_id must be an int or a list of ints, got {type(eos_token_id).__name__}")
    ids = list(ids)
    for token in ids:
        if isinstance(token, bool) or not isinstance(token, int):
            raise TypeError(f"eos_token_id must hold ints, got {type(token).__name__}")
        if not 0 <= token < vocab:
            raise ValueError(f"eos_token_id {token} is outside the model's vocabulary [0, {vocab})")
    return frozenset(ids)


class TokenSink:
    """Collects generated tokens and applies greedy's stopping rules.

    Accepting stops right after an EOS token (which is kept, as transformers does) or at
    `max_new_tokens`, even when that falls inside a multi-token step.

    Args:
        max_new_tokens: most tokens kept.
        eos: ids that end the output.
        stop: optional extra rule, called with all tokens kept so far after each one (e.g.
            transformers stopping criteria); True stops right after that token.
        stream: optional callback receiving each kept token, in order (e.g. a streamer).
    """

    def __init__(
        self,
        max_new_tokens: int,
        eos: frozenset[int],
        stop: Callable[[list[int]], bool] | None = None,
        stream: Callable[[int], None] | None = None,
    ) -> None:
        self.max_new_tokens = max_new_tokens
        self.eos = eos
        self.stop = stop
        self.stream = stream
        self.tokens: list[int] = []
        self.done = False

    def extend(self, tokens: Iterable[int]) -> int:
        """Append tokens until a stop; returns how many were kept."""
        kept = 0
        for token in tokens:
            if self.done:
                break
            self.tokens.append(int(token))
            kept += 1
            if self.stream is not None:
                self.stream(int(token))
            self.done = int(token) in self.eos or len(self.tokens) >= self.max_new_tokens
            self.done = self.done or (self.stop is not None and bool(self.stop(self.tokens)))
        return kept


def streamer_callback(streamer: Streamer | None) -> Callable[[int], None] | None:
    """A per-token callback for `TokenSink` that feeds a streamer (`put` of a (1,) tensor), or None.

    Raises:
        TypeError: `streamer` lacks ``put`` / ``end``.
    """
    if streamer is None:
        return None
    if not callable(getattr(streamer, "put", None)) or not callable(getattr(streamer, "end", None)):
        raise TypeError(f"streamer must have put() and end() methods (a transformers BaseStreamer), got {type(streamer).__name__}")
    return lambda token: streamer.put(torch.tensor([token]))


def sync(device: torch.device) -> None:
    """Wait for queued GPU work so wall-clock timings are honest."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class DecodeCall:
    """What one decoding call owns: its validated prompt, model runner (fresh KV cache),
    statistics, token sink, streamer and start time. Nothing outlives the call.

    Every decoder starts with `begin` and ends with `finish`: ladref's own loops, the
    ``generate(custom_generate=...)`` adapter and the transformers baselines of `ladref.bench.hf`.

    Attributes:
        prompt: (L,) prompt ids on the CPU.
        runner: the model with an empty `DynamicCache` (or the static runner a compiled decoder
            reuses); None when transformers' own ``generate()`` runs the loop.
        stats: filled by the decoder.
        sink: collects accepted tokens and applies the stopping rules.
        start: `time.perf_counter()` when the call began.
        facts: the model's `ModelFacts` (device, vocabulary, context), read once.
        tokenizer: decodes the result's text (or None).
        streamer: receives the prompt, each kept token, then ``end()`` (or None).
    """

    prompt: torch.Tensor
    runner: Runner | None
    stats: DecodeStats
    sink: TokenSink
    start: float
    facts: ModelFacts
    tokenizer: Tokenizer | None = None
    streamer: Streamer | None = None

    @property
    def device(self) -> torch.device:
        """The model's device."""
        return self.facts.device

    @property
    def position_limit(self) -> int | None:
        """The model's context length (None: unbounded); drafts past it are dropped."""
        return self.facts.context

    @classmethod
    def begin(
        cls,
        model: torch.nn.Module,
        input_ids: TokenIds,
        max_new_tokens: int,
        extent: int,
        options: Mapping[str, Any] | None = None,
        runner: Runner | None = None,
        *,
        stop: Callable[[list[int]], bool] | None = None,
        put_prompt: bool = True,
        generate_loop: bool = False,
    ) -> "DecodeCall":
        """Start the clock, make the runner (it checks the model and reads its facts, once), check
        the prompt and budget against them, resolve EOS.

        Args:
            extent: positions past the last committed token a step may touch (`check_budget`).
            options: the call's shared keywords (`ladref.options.DecodeOptions`); read here:
                ``eos_token_id``, ``tokenizer``, ``streamer`` (gets the prompt now, unless
                `put_prompt` is False, as generate() does), ``attention_backend`` and ``kernels``
                (the new runner's kernels: `ladref.facts.forward_choice`). The sampling keywords
                are the chooser's (`ladref.sampling.chooser_for`).
            runner: use this runner (a compiled decoder's static runner) instead of a new one.
            stop: an extra stopping rule for the sink (e.g. transformers' stopping criteria).
            put_prompt: send the prompt to the streamer (False: the caller already did).
            generate_loop: transformers' ``generate()`` runs the loop: no runner is made.
        """
        start, options = time.perf_counter(), {} if options is None else options
        if runner is None and not generate_loop:
            facts, backend = forward_choice(model, options)  # ``kernels`` and ``attention_backend``
            runner = ModelRunner(model, backend, facts)
        facts = check_model(model) if runner is None else runner.facts
        prompt = prompt_ids(facts, input_ids)
        check_budget(facts, prompt.shape[0], max_new_tokens, extent)
        tokenizer, streamer = options.get("tokenizer"), options.get("streamer")
        eos = eos_ids(model, facts.vocab_size, options.get("eos_token_id"), tokenizer)
        sink = TokenSink(max_new_tokens, eos, stop=stop, stream=streamer_callback(streamer))
        if streamer is not None and put_prompt:
            streamer.put(prompt[None])
        return cls(prompt, runner, DecodeStats(), sink, start, facts, tokenizer, streamer)

    def finish(self, method: str) -> DecodeResult:
        """Close the streamer, stop the clock and package the result."""
        if self.streamer is not None:
            self.streamer.end()
        sync(self.device)
        self.stats.wall_time_s = time.perf_counter() - self.start
        tokens = self.sink.tokens
        text = self.tokenizer.decode(tokens, skip_special_tokens=True) if self.tokenizer is not None else None
        return DecodeResult(tokens, text, self.stats, method)
