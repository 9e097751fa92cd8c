"""Lookahead decoding: the combined step and the decoding loop (Fu et al., ICML 2024).

Each step runs ONE forward pass over ``[current | window (N-1, W) | g candidates (g, N-1)]``
under the mask of `ladref.masks`:
  * the lookahead branch makes one Jacobi iteration of the 2-D window: the newest row's
    predictions become a new row, and each column of (old window + new row) is an n-gram for
    the pool;
  * the verification branch checks up to G pool n-grams that start with the current token and
    accepts the longest one greedy decoding agrees with, plus the model's own next token.
The output is therefore exactly greedy's, with 1..N tokens per step.

With ``do_sample=True`` the verification branch instead samples along the candidates' prefix
tree, accepting drafts by rejection sampling (`ladref.sampling`): the output is then distributed
exactly as ordinary sampling. The lookahead branch stays greedy in both cases: it only proposes
drafts, and verification alone decides what is emitted (docs/sampling.md).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .call import DecodeCall, TokenSink
from .config import LookaheadConfig
from .masks import build_step_inputs, pad_candidates
from .ngram_pool import NGramPool
from .results import DecodeResult, DecodeStats
from .runner import Runner
from .sampling import GreedyChooser, SamplingChooser, make_chooser
from .types import EosIds, Streamer, TokenIds, Tokenizer
from .verify import verify_chosen, verify_greedy

Chooser = GreedyChooser | SamplingChooser


@dataclass
class LookaheadState:
    """Per-call state: the 2-D window, the pool and how many steps have run.

    Attributes:
        window: (N-1, W) past Jacobi iterations, oldest row first.
        pool: the `NGramPool`.
        steps: lookahead steps run so far.
    """

    window: torch.Tensor
    pool: NGramPool
    steps: int = 0

    @classmethod
    def start(cls, prompt: torch.Tensor, config: LookaheadConfig) -> "LookaheadState":
        """Fill the window with the prompt's last tokens (cycled) and seed the pool if asked."""
        W, N = config.window_size, config.ngram_size
        cells = (N - 1) * W
        window = prompt[-cells:].repeat(cells)[:cells].view(N - 1, W).clone()
        pool = NGramPool(N, config.capacity)
        if config.pool_from_prompt:
            pool.seed_from_tokens(prompt.tolist())
        return cls(window, pool)


def lookahead_step(
    runner: Runner,
    state: LookaheadState,
    current: int,
    config: LookaheadConfig,
    chooser: Chooser | None = None,
    context: list[int] | None = None,
) -> tuple[list[int], int]:
    """One combined lookahead + verification step.

    Args:
        runner: model and KV cache; the cache holds everything before `current`. A runner with
            ``constant_shapes`` (`ladref.runner.StaticRunner`) is fed G candidate rows always.
        state: window and pool, updated in place.
        current: the last accepted token.
        config: W, N, G.
        chooser: None for greedy verification, else picks each verified token (`verify_chosen`).
        context: the committed sequence ending with `current` (for the chooser's logits processors).

    Returns:
        (accepted tokens (1..N of them), tokens fed to the model).
    """
    past = runner.past_len
    # 1. Candidates: up to G pool n-grams that start with the current token; a constant-shape
    #    runner gets G rows always, the missing ones dummies (`pad_candidates`).
    candidates = state.pool.candidates(current, config.max_candidates)  # (g, N-1)
    g = candidates.shape[0]
    fed = pad_candidates(candidates, config.max_candidates, current) if runner.constant_shapes else candidates
    # 2. One forward pass over both branches under the combined mask.
    step = build_step_inputs(current, state.window, fed, past)
    last_row, cand_index = step.layout.last_row_index(), step.layout.candidate_index()[:g]  # (W,), (g, N-1)
    keep = torch.cat([torch.tensor([0]), last_row, step.layout.candidate_index().flatten()])
    logits = runner.forward(step.input_ids, step.position_ids, step.allowed, keep)  # (1 + W + rows*(N-1), V)
    preds = logits.argmax(dim=-1).cpu()
    W = config.window_size
    first, new_row, cand_preds = preds[0], preds[1 : W + 1], preds[W + 1 :].view_as(fed)[:g]
    # 3. Lookahead branch: harvest n-grams down the trajectory once the window holds model
    #    outputs, then slide the window by one row.
    window = step.input_ids[: step.layout.lookahead_len].view_as(state.window)  # cell (0, 0) = current
    if state.steps >= config.ngram_size - 2:
        state.pool.harvest(window, new_row)
    state.window = torch.cat([window[1:], new_row[None]])
    state.steps += 1
    # 4. Verification branch: longest candidate prefix that greedy agrees with, plus one token
    #    (or, with a chooser, the prefix its draws accept, plus one drawn token).
    if chooser is None:
        verdict = verify_greedy(candidates, first, cand_preds)
    else:
        cand_logits = logits[W + 1 :].reshape(*fed.shape, logits.shape[-1])[:g]  # (g, N-1, V)
        verdict = verify_chosen(candidates, logits[0], cand_logits, chooser.choose, context or [current])
    # 5. Commit the current token and the accepted candidate tokens to the KV cache.
    kept = torch.tensor([0]) if verdict.best is None else torch.cat([torch.tensor([0]), cand_index[verdict.best, : verdict.matched]])
    runner.commit(past, kept)
    return verdict.tokens.tolist(), step.layout.length


def run_lookahead(
    runner: Runner,
    prompt: torch.Tensor,
    config: LookaheadConfig,
    sink: TokenSink,
    stats: DecodeStats,
    chooser: Chooser | None = None,
) -> None:
    """Prefill, then run lookahead steps until `sink` is done (the loop shared with `ladref.generate`).

    Args:
        runner: a `ModelRunner` with an empty cache, or a `StaticRunner` (its prefill starts a new call).
        prompt: (L,) prompt ids.
        config: W, N, G.
        sink: collects the accepted tokens and decides when to stop.
        stats: filled in place.
        chooser: None for greedy decoding.
    """
    state = LookaheadState.start(prompt, config)
    current = runner.prefill(prompt, stats)
    context = prompt.tolist()
    while not sink.done:
        accepted, width = lookahead_step(runner, state, current, config, chooser, context)
        stats.record(sink.extend(accepted), width)
        context.extend(accepted)
        current = accepted[-1]


def reject_old_call_shape(decode: Callable) -> Callable:
    """Turn the pre-0.2 call ``lookahead_decode(model, ids, config, max_new_tokens)`` into a clear error.

    Every decoder now takes ``(model, input_ids, max_new_tokens, *, ...)``; lookahead's config is
    the keyword ``config=``. Without this guard the old call would fail inside Python's argument
    binding ("takes from 2 to 3 positional arguments") or pass a config as max_new_tokens.
    """

    @functools.wraps(decode)
    def checked(*args, **kwargs):
        if len(args) > 3 or (len(args) == 3 and isinstance(args[2], LookaheadConfig)):
            raise TypeError("lookahead_decode(model, input_ids, config, max_new_tokens) is the old call shape; "
                            "call lookahead_decode(model, input_ids, max_new_tokens, config=config)")
        return decode(*args, **kwargs)

    return checked


@reject_old_call_shape
@torch.inference_mode()
def lookahead_decode(
    model: torch.nn.Module,
    input_ids: TokenIds,
    max_new_tokens: int = 64,
    *,
    config: LookaheadConfig | None = None,
    eos_token_id: EosIds = None,
    tokenizer: Tokenizer | None = None,
    do_sample: bool = False,
    temperature: float | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    streamer: Streamer | None = None,
    attention_backend: str = "auto",
) -> DecodeResult:
    """Lookahead decoding; greedy output identical to `greedy_decode`, in fewer steps.

    Args:
        model: a transformers decoder-only model (eager or SDPA attention).
        input_ids: the prompt, (L,) or (1, L) ids or a list of ints.
        max_new_tokens: most tokens to generate.
        config: W, N, G and pool options; default `LookaheadConfig()`.
        eos_token_id: id(s) to stop at (kept in the output); default: the model's.
        tokenizer: optional, to decode the text.
        do_sample: sample instead of taking the argmax; the output is then distributed exactly as
            `ladref.sampling.sample_decode` (ordinary sampling with the same warp).
        temperature: sampling temperature (> 0; default 1).
        top_k: keep the k most likely tokens when sampling (None: all).
        top_p: nucleus sampling threshold in (0, 1] (None: off).
        generator: CPU `torch.Generator` making the draws reproducible.
        streamer: optional transformers streamer; gets the prompt, each accepted token in order,
            then `end()`.
        attention_backend: SDPA kernels the forward passes may use (`ladref.kernels.sdpa_backends`).

    Returns:
        `DecodeResult`; `stats.compression` is the paper's S (tokens per step).
    """
    config = LookaheadConfig() if config is None else config
    if not isinstance(config, LookaheadConfig):
        raise TypeError(f"config must be a LookaheadConfig, got {type(config).__name__}")
    chooser = make_chooser(do_sample, temperature, top_k, top_p, generator)
    extent = config.window_size + config.ngram_size
    call = DecodeCall.begin(model, input_ids, max_new_tokens, extent, eos_token_id, tokenizer, streamer, attention_backend)
    run_lookahead(call.runner, call.prompt, config, call.sink, call.stats, chooser)
    return call.finish(tokenizer, "lookahead")
