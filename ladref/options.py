"""The keywords every decoder shares, said once.

Every decoder is ``decode(model, input_ids, max_new_tokens, *, <its own options>, **options)``:
its own options (W, N, G; a block size; proposers) are in its signature, and ``**options`` takes
the shared keywords below, by name, all optional. Each group is a `TypedDict`, so an editor or
type checker knows the keywords (`Unpack`); a keyword a decoder does not take is a `TypeError`
naming it (`accept`), as Python's own binding would be.

| group | keywords | taken by |
| --- | --- | --- |
| `InputOptions` | ``attention_mask`` | every decoder that takes a batch (`ladref.batched`) |
| `OutputOptions` | ``eos_token_id``, ``tokenizer``, ``streamer`` | every decoder and decoder call |
| `SamplingOptions` | ``do_sample``, ``temperature``, ``top_k``, ``top_p``, ``generator`` | every decoder but greedy's and the compiled ones (the captured batch's too) |
| `ProcessorOptions` | ``logits_processor`` | every function decoder and `AdaptiveDecoder` (eager steps); never a captured or compiled one |
| `BackendOptions` | ``attention_backend`` | every function decoder (a decoder object takes it when built) |
| `ForwardOptions` | ``kernels`` | every function decoder (`AdaptiveDecoder` takes it when built; the captured and compiled ones compile their own) |
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from typing_extensions import TypedDict

from .types import EosIds, Streamer, Tokenizer


class InputOptions(TypedDict, total=False):
    """Which tokens of a padded batch are prompt tokens.

    Attributes:
        attention_mask: (B, L) of 1 (a token) and 0 (padding, on the left or the right of each row)
            for a (B, L) tensor of prompts (`ladref.rows.batch_prompts`), or of the prompt's shape for
            one (L,) or (1, L) prompt, which is then decoded without its padding (`ladref.rows.one_prompt`);
            a list of prompts needs none.
    """

    attention_mask: torch.Tensor | None


class OutputOptions(TypedDict, total=False):
    """Where a call stops and where its tokens go.

    Attributes:
        eos_token_id: id(s) to stop at (kept in the output); default: the model's (its generation
            config, its config, then the tokenizer's). ``[]``: always generate max_new_tokens.
        tokenizer: decodes the tokens into `DecodeResult.text` (default: no text).
        streamer: a transformers streamer; gets the prompt, each accepted token in order, then ``end()``.
            It follows one sequence: one prompt, or a batch of one row, whose new tokens the engine
            puts at each read (`ladref.batched.stream.RowStream`); a batch of several rows is refused.
    """

    eos_token_id: EosIds
    tokenizer: Tokenizer | None
    streamer: Streamer | None


class SamplingOptions(TypedDict, total=False):
    """How tokens are chosen: the argmax (default), or drawn exactly as ordinary sampling (`ladref.sampling`).

    Attributes:
        do_sample: sample instead of taking the argmax (default False; `sample_decode` always samples).
        temperature: sampling temperature (> 0; default 1).
        top_k: keep the k most likely tokens when sampling (None: all).
        top_p: nucleus sampling threshold in (0, 1] (None: off).
        generator: CPU `torch.Generator` making the draws reproducible (None: torch's default RNG).
    """

    do_sample: bool
    temperature: float | None
    top_k: int | None
    top_p: float | None
    generator: torch.Generator | None


class ProcessorOptions(TypedDict, total=False):
    """transformers logits processors, applied before the argmax or the sampling warp (`ladref.batched.process`).

    Attributes:
        logits_processor: a `LogitsProcessorList` (or any ``(input_ids, scores) -> scores``), applied
            to the logits after every verified position with that position's own context (prompt,
            kept tokens, then the drafted ones down to it): by the choosers for one prompt
            (`ladref.sampling`), by the engine's step for a batch. A captured or compiled step runs
            no Python inside and refuses it.
    """

    logits_processor: object | None


class BackendOptions(TypedDict, total=False):
    """Which attention kernels the forward passes may use.

    Attributes:
        attention_backend: SDPA kernel choice (`ladref.kernels.sdpa_backends`); default "auto"
            ("torch" in `ladref.bench.hf`'s transformers baselines: transformers as its users run it).
    """

    attention_backend: str


class ForwardOptions(BackendOptions, total=False):
    """How the model's forward is computed: ladref's measured CPU choices, or exactly as transformers computes it.

    Attributes:
        kernels: "auto" (default): on a CPU, a pass of a few rows computes its linear layers as
            W @ x^T, a pass of several rows its output head, and a pass of several tokens attends
            with shared key/value heads (`ladref.head.forward_logits`, where measured faster);
            "transformers": none of that, and torch's own SDPA dispatch: the model's forward exactly
            as transformers runs it (`ladref.facts.forward_choice`).
    """

    kernels: str


class GreedyOptions(InputOptions, OutputOptions, ProcessorOptions, ForwardOptions, total=False):
    """The keywords of `greedy_decode`: `InputOptions`, `OutputOptions`, `ProcessorOptions`, `ForwardOptions`."""


class BaselineOptions(OutputOptions, BackendOptions, total=False):
    """The keywords of the transformers baselines (`ladref.bench.hf`): `OutputOptions`, `BackendOptions`."""


class CallOptions(OutputOptions, SamplingOptions, total=False):
    """The keywords of a decoder object's call (its backend is chosen when it is built):
    `OutputOptions`, `SamplingOptions`."""


class BatchCallOptions(InputOptions, CallOptions, ProcessorOptions, total=False):
    """The keywords of a call that takes a batch (`ladref.fast.adaptive.AdaptiveDecoder`): `InputOptions`,
    `CallOptions`, `ProcessorOptions`."""


class CapturedOptions(OutputOptions, SamplingOptions, BackendOptions, total=False):
    """The keywords of a captured batch's call (`ladref.CapturedBatchDecoder`): `OutputOptions`,
    `SamplingOptions`, `BackendOptions`."""


class DecodeOptions(InputOptions, OutputOptions, SamplingOptions, ProcessorOptions, ForwardOptions, total=False):
    """Every shared keyword: `InputOptions`, `OutputOptions`, `SamplingOptions`, `ProcessorOptions` and `ForwardOptions`
    (with `BackendOptions`)."""


def accept(caller: str, options: Mapping[str, object], allowed: type) -> Mapping[str, object]:
    """`options` if every keyword in it is one of `allowed`'s (a TypedDict above), else a clear error.

    Raises:
        TypeError: ``<caller>() got an unexpected keyword argument '<name>'`` (Python's own words);
            for ``max_length``, a pointer to ``max_new_tokens`` (ladref counts new tokens only); for
            ``logits_processor``, why a captured or compiled step refuses it.
    """
    known = allowed.__required_keys__ | allowed.__optional_keys__
    for name in options:
        if name == "max_length" and name not in known:
            raise TypeError(f"{caller}() takes max_new_tokens, not max_length: ladref counts the new tokens only, "
                            "as generate()'s max_new_tokens does, never prompt + new tokens; pass max_new_tokens=<n>")
        if name == "logits_processor" and name not in known and caller.startswith(("Captured", "Compiled")):
            raise TypeError(f"{caller}() got an unexpected keyword argument 'logits_processor': a captured or compiled "
                            "step runs no Python inside, so it cannot call a logits processor; decode with the eager "
                            "decoders (lookahead_decode, adaptive_decode, ...) instead")
        if name not in known:
            raise TypeError(f"{caller}() got an unexpected keyword argument {name!r}")
    return options
