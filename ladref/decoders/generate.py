"""Lookahead decoding inside transformers: ``model.generate(..., custom_generate=lookahead_generator())``.

transformers 5.x calls a callable ``custom_generate`` in place of its own decoding loop, with the
prepared inputs: ``(model, input_ids, logits_processor, stopping_criteria, generation_config,
synced_gpus, streamer, **model_kwargs)``. `lookahead_generator` returns such a callable:

* the call runs the engine, a batch of one row (`ladref.batched.loop.decode_batch` with the
  lookahead batch source), when generate's stopping criteria are its max length and EOS alone:
  they are the engine's budget and EOS ids, cut token by token inside a step. Any other criterion
  (a user's, a stop string, a time limit) runs the reference loop (`ladref.step.run_drafting`),
  which checks the prepared `stopping_criteria` after every accepted token; either way a
  multi-token step stops exactly where one-token-per-step decoding would;
* the prepared `logits_processor` (repetition penalty, temperature, top-k, top-p, ...) is applied
  at every verified position with that position's own prefix (`ladref.batched.process` in the
  engine, the choosers in the reference loop); with ``do_sample=True`` the tokens are drawn by
  rejection sampling (`ladref.batched.sample.BatchSampler`, `ladref.sampling.SamplingChooser`),
  keeping generate's sampling distribution;
* a streamer gets the prompt, then every accepted token in order, then ``end()``. transformers
  5.x does not forward ``generate(streamer=...)`` to a callable ``custom_generate`` (it puts the
  prompt, then drops it), so give the streamer to ``lookahead_generator(streamer=...)`` instead:
  ladref then puts the prompt itself, exactly as generate would.

Returns the (1, L + n) sequences tensor, as generate does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ..batched.loop import decode_batch
from ..batched.sample import BatchSampler
from ..batched.sources import batched_sources
from ..call import DecodeCall, prompt_ids, streamer_callback
from ..config import LookaheadConfig
from ..facts import ModelFacts, check_model
from ..hf_internals import CACHE_ARGS
from ..kernels import check_attention_backend
from ..sampling import GreedyChooser, SamplingChooser, Warp, check_generator
from ..sources.lookahead import LookaheadProposer
from ..step import run_drafting
from ..types import Streamer

# model kwargs generate() prepares that ladref replaces with its own (mask, positions, cache)
IGNORED_KWARGS = frozenset({"attention_mask", "position_ids", *CACHE_ARGS, "use_cache", "logits_to_keep", "cache_position"})
UNSUPPORTED_OUTPUTS = ("output_scores", "output_logits", "output_attentions", "output_hidden_states")


def lookahead_generator(
    config: LookaheadConfig | None = None,
    generator: torch.Generator | None = None,
    streamer: Streamer | None = None,
    *,
    attention_backend: str = "auto",
) -> Callable:
    """A ``custom_generate`` callable running lookahead decoding with W, N, G from `config`.

    Args:
        config: W, N, G and pool options; default `LookaheadConfig()`.
        generator: CPU `torch.Generator` for reproducible sampling; None uses torch's default RNG
            (as generate does).
        streamer: a transformers streamer (`TextStreamer`, `TextIteratorStreamer`, ...); pass it
            here, not to generate() (see the module docstring).
        attention_backend: SDPA kernels the forward passes may use (`ladref.kernels.sdpa_backends`).

    Returns:
        ``fn(model, input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus, streamer, **model_kwargs)``.

    Example:
        >>> out = model.generate(ids, max_new_tokens=64, custom_generate=lookahead_generator(LookaheadConfig(4, 4, 4)))
    """
    config = LookaheadConfig() if config is None else config
    if not isinstance(config, LookaheadConfig):
        raise TypeError(f"config must be a LookaheadConfig, got {type(config).__name__}")
    check_generator(generator)
    streamer_callback(streamer)  # validates it
    check_attention_backend(attention_backend)
    own_streamer = streamer

    # The parameters mirror transformers' own `_sample`: generate() treats any other parameter
    # name as a custom keyword argument of the callable.
    def custom_generate(self, input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus=False,
                        streamer=None, **model_kwargs):
        return lookahead_in_generate(self, input_ids, logits_processor, stopping_criteria, generation_config, config,
                                     generator=generator, synced_gpus=synced_gpus,
                                     streamer=own_streamer if streamer is None else streamer, put_prompt=streamer is None, model_kwargs=model_kwargs,
                                     attention_backend=attention_backend)

    return custom_generate


def check_generate_call(generation_config: object, synced_gpus: bool, model_kwargs: dict) -> None:
    """Refuse generate() options this reference does not implement, before any work."""
    if synced_gpus:
        raise ValueError("synced_gpus=True (multi-GPU ZeRO-3 / FSDP generation) is not supported by ladref")
    if (generation_config.num_beams or 1) > 1:
        raise ValueError(f"num_beams={generation_config.num_beams}: ladref does greedy or sampled lookahead, not beam search")
    wanted = [name for name in UNSUPPORTED_OUTPUTS if getattr(generation_config, name, False)]
    if generation_config.return_dict_in_generate and wanted:
        raise ValueError(f"{', '.join(wanted)} are not supported by ladref's custom_generate; only sequences are returned")
    mask = model_kwargs.get("attention_mask")
    if mask is not None and not bool((mask == 1).all()):
        raise ValueError("attention_mask has padding (zeros); ladref decodes one unpadded prompt per call")
    caches = [model_kwargs.get(name) for name in CACHE_ARGS]
    if any(cache is not None and hasattr(cache, "get_seq_length") and cache.get_seq_length() > 0 for cache in caches):
        raise ValueError("a pre-filled KV cache (past_key_values) cannot be continued; ladref builds its own cache per call")
    extra = sorted(k for k, v in model_kwargs.items() if k not in IGNORED_KWARGS and v is not None)
    if extra:
        raise ValueError(f"model inputs {extra} are not supported by ladref's custom_generate (text-only decoder models)")


@torch.inference_mode()
def lookahead_in_generate(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    logits_processor: Callable,
    stopping_criteria: Callable,
    generation_config: object,
    config: LookaheadConfig,
    *,
    generator: torch.Generator | None = None,
    synced_gpus: bool = False,
    streamer: Streamer | None = None,
    put_prompt: bool = False,
    model_kwargs: dict | None = None,
    attention_backend: str = "auto",
) -> object:
    """The body of the ``custom_generate`` callable (see `lookahead_generator`).

    Args:
        input_ids: (1, L) prompt prepared by generate().
        logits_processor: generate()'s `LogitsProcessorList` (warpers included when sampling).
        stopping_criteria: generate()'s `StoppingCriteriaList` (max length and EOS included).
        generation_config: generate()'s resolved `GenerationConfig`.
        config: W, N, G.
        put_prompt: send the prompt to the streamer first (generate() did not).
        attention_backend: the runner's SDPA kernel choice.

    Returns:
        (1, L + n) long tensor of prompt + new tokens on `input_ids`' device, or a
        `GenerateDecoderOnlyOutput` holding it when ``return_dict_in_generate=True``.
    """
    # 1. Refuse what is not supported.
    check_generate_call(generation_config, synced_gpus, {} if model_kwargs is None else model_kwargs)
    head, device = input_ids[0].tolist(), input_ids.device
    processor = logits_processor if logits_processor is not None and len(logits_processor) else None
    # 2. Max length and EOS alone: the engine, one row, stops as generate does (its budget and EOS ids).
    facts = check_model(model)
    stops = engine_stops(stopping_criteria, generation_config.max_length, facts.vocab_size)
    if stops is not None:
        tokens = _engine(model, facts, input_ids, config, processor, stops, generation_config.do_sample, generator,
                         streamer, put_prompt, attention_backend)
        return _sequences(generation_config, head + tokens, device)
    # 3. Any other criterion: the reference loop, stopping token by token on generate's stopping criteria.

    def stop(tokens: list[int]) -> bool:
        return bool(stopping_criteria(torch.tensor([head + tokens], device=device), None).all())

    options = {"eos_token_id": [], "streamer": streamer, "attention_backend": attention_backend}  # EOS: a stopping criterion
    call = DecodeCall.begin(model, input_ids, generation_config.max_length - len(head), config.step_extent(), options,
                            stop=stop, put_prompt=put_prompt)
    # 4. The chooser: generate's processors, sampled or argmaxed (None: plain greedy verification); decode.
    if generation_config.do_sample:
        chooser = SamplingChooser(Warp(), generator, processor)
    else:
        chooser = GreedyChooser(processor) if processor is not None else None
    run_drafting(call.runner, call.prompt, [LookaheadProposer(config)], call.sink, call.stats, chooser, call.position_limit)
    return _sequences(generation_config, head + call.finish("lookahead").token_ids, device)


def engine_stops(stopping_criteria: Sequence[object], max_length: int, vocab: int) -> tuple[int, list[int]] | None:
    """(the max length, the EOS ids in the vocabulary) when generate's criteria are only `MaxLengthCriteria`
    and `EosTokenCriteria` (exactly those classes): the engine's budget and EOS stop a row token by
    token as they stop generate. None for any other criterion (the reference loop checks it)."""
    from transformers.generation import EosTokenCriteria, MaxLengthCriteria

    eos: set[int] = set()
    for criterion in stopping_criteria:
        if type(criterion) is MaxLengthCriteria:
            max_length = min(max_length, criterion.max_length)
        elif type(criterion) is EosTokenCriteria:
            eos.update(int(t) for t in torch.as_tensor(criterion.eos_token_id).flatten().tolist())
        else:
            return None
    return max_length, sorted(t for t in eos if 0 <= t < vocab)  # an id outside the vocabulary is never produced


class _AfterPrompt:
    """A streamer that drops the engine's first ``put`` (the prompt), when generate() has sent it already."""

    def __init__(self, streamer: Streamer) -> None:
        self.streamer, self.prompt_sent = streamer, False

    def put(self, value: torch.Tensor) -> None:
        if self.prompt_sent:
            self.streamer.put(value)
        self.prompt_sent = True

    def end(self) -> None:
        self.streamer.end()


def _engine(model: torch.nn.Module, facts: ModelFacts, input_ids: torch.Tensor, config: LookaheadConfig,
            processor: Callable | None, stops: tuple[int, list[int]], do_sample: bool, generator: torch.Generator | None, streamer: Streamer | None,
            put_prompt: bool, attention_backend: str) -> list[int]:
    """The new tokens of the (1, L) prompt, decoded by the engine as a batch of one row under generate's
    max length and EOS (`stops`), `processor` and sampling (generate's warpers are among its processors);
    `facts`: the model's, checked by the caller."""
    if streamer is not None and not put_prompt:
        streamer = _AfterPrompt(streamer)
    options = {"eos_token_id": stops[1], "streamer": streamer, "attention_backend": attention_backend}
    sampler = BatchSampler(facts.device, generator=generator) if do_sample else None
    sources = batched_sources([LookaheadProposer(config)], config.step_extent(), facts.vocab_size)
    prompt = prompt_ids(facts, input_ids)  # one prompt: a batch is refused as the reference loop refuses it
    result = decode_batch(model, [prompt], [stops[0] - prompt.shape[0]], options, "lookahead", sources,
                          sampler=sampler, extent=config.step_extent(), processor=processor)
    return result.rows[0].token_ids


def _sequences(generation_config: object, tokens: list[int], device: torch.device) -> object:
    """What generate returns: the (1, L + n) sequences, or a `GenerateDecoderOnlyOutput` holding them."""
    sequences = torch.tensor([tokens], dtype=torch.long, device=device)
    if generation_config.return_dict_in_generate:
        from transformers.generation import GenerateDecoderOnlyOutput

        return GenerateDecoderOnlyOutput(sequences=sequences)
    return sequences
