"""transformers' own decoders as peer baselines, each returning a ladref `DecodeResult`.

* `generate_decode`: ``model.generate(do_sample=False)``, plain greedy decoding as a user of
  transformers runs it (with ``cache_implementation="static"``, transformers compiles the forward
  pass itself on CUDA: the compiled greedy baseline);
* `hf_prompt_lookup_decode`: ``generate(prompt_lookup_num_tokens=k)``, which drafts up to k tokens
  by matching the last n-gram of the text against the prompt (and the output so far) and
  verifies them in one forward pass; like lookahead decoding it reproduces greedy output (up to
  floating point ties), with no extra model.

Both run transformers' own attention dispatch by default (``attention_backend="torch"``): they
measure transformers as its users get it.

Step counting: generate's loop is not ours, so we count its forward calls with a forward
pre-hook on the model (public `torch.nn.Module` API, removed afterwards). The hook reads each
call's input width and the KV-cache length before it, which gives exactly what ladref's own
decoders record: the tokens fed per step and the tokens accepted per step. The first call
processes the whole prompt; we book its first L-1 tokens as prefill (as ladref does) and the
rest as step 1, so greedy-like generation counts one step per token. (A static cache is
counted as one step per token without a hook: its length cannot be read back exactly.)
"""

from __future__ import annotations

import torch
from typing_extensions import Unpack

from ..call import DecodeCall, streamer_callback
from ..config import check_int
from ..facts import check_model
from ..hf_internals import CACHE_ARGS
from ..kernels import attention_scope, sdpa_backends
from ..options import BaselineOptions, accept
from ..results import DecodeResult, DecodeStats
from ..types import Streamer, TokenIds


class _CallRecorder:
    """Forward pre-hook recording (cache length before the call, input width) per model call."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def __call__(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            raise ValueError("generate(): could not read the input ids of a forward call")
        cache = next((kwargs[name] for name in CACHE_ARGS if kwargs.get(name) is not None), None)
        past = int(cache.get_seq_length()) if cache is not None else 0
        self.calls.append((past, int(ids.shape[-1])))


def _stats_from_calls(calls: list[tuple[int, int]], prompt_len: int, generated: int) -> DecodeStats:
    """Turn (cache length, width) per forward call into ladref's per-step statistics."""
    stats = DecodeStats(prefill_tokens=prompt_len - 1)
    starts = [max(past, prompt_len - 1) for past, _ in calls]
    for i, (past, width) in enumerate(calls):
        end = starts[i + 1] if i + 1 < len(calls) else prompt_len - 1 + generated
        stats.record(end - starts[i], past + width - starts[i])
    return stats


class _PerToken:
    """Forwards generate()'s streamer calls as ladref's decoders make them: the (1, L) prompt,
    then one (1,) tensor per token (generate puts a (1, k) block per step), then ``end()``."""

    def __init__(self, streamer: Streamer) -> None:
        self.streamer, self.prompt_sent = streamer, False

    def put(self, value: torch.Tensor) -> None:
        if not self.prompt_sent:
            self.prompt_sent = True
            self.streamer.put(value.cpu())
            return
        for token in value.flatten().tolist():
            self.streamer.put(torch.tensor([token]))

    def end(self) -> None:
        self.streamer.end()


@torch.inference_mode()
def run_generate(
    model: torch.nn.Module,
    input_ids: TokenIds,
    max_new_tokens: int,
    method: str,
    extra: dict,
    options: BaselineOptions,
    extent: int = 0,
) -> DecodeResult:
    """Greedy ``model.generate(**extra)`` on one prompt, timed and counted like ladref's decoders.

    Args:
        method: the `DecodeResult.method` label.
        extra: generate() keyword arguments of the method (e.g. ``prompt_lookup_num_tokens``).
        options: the shared keywords (`ladref.options.BaselineOptions`), checked by the caller; the
            attention backend defaults to "torch" here: transformers' and torch's dispatch left alone.
        extent: positions past the last committed token a step may touch (`check_budget`).
    """
    streamer = options.get("streamer")
    call = DecodeCall.begin(model, input_ids, max_new_tokens, extent, {**options, "streamer": None}, generate_loop=True)
    streamer_callback(streamer)  # validates it; generate() itself puts the prompt and calls end()
    eos = sorted(call.sink.eos)
    kernels = sdpa_backends(options.get("attention_backend", "torch"), call.device, call.facts.attention)
    ids = call.prompt[None].to(call.device)
    recorder = None if extra.get("cache_implementation") == "static" else _CallRecorder()
    handle = model.register_forward_pre_hook(recorder, with_kwargs=True) if recorder else None
    try:
        with attention_scope(kernels):
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens, do_sample=False,
                                 eos_token_id=eos or None, pad_token_id=eos[0] if eos else 0,
                                 streamer=_PerToken(streamer) if streamer is not None else None, **extra)
    finally:
        if handle is not None:
            handle.remove()
    call.sink.extend(out[0, ids.shape[1]:].tolist())  # stops at the first EOS, as generate does (padding after it dropped)
    generated = len(call.sink.tokens)
    if recorder is not None:
        call.stats = _stats_from_calls(recorder.calls, ids.shape[1], generated)
    else:
        call.stats = DecodeStats(prefill_tokens=ids.shape[1] - 1)
        for _ in range(generated):
            call.stats.record(1, 1)
    return call.finish(method)


def generate_decode(
    model: torch.nn.Module,
    input_ids: TokenIds,
    max_new_tokens: int = 64,
    *,
    cache_implementation: str | None = None,
    compiled: bool = False,
    **options: Unpack[BaselineOptions],
) -> DecodeResult:
    """Greedy decoding by transformers' ``model.generate(do_sample=False)``.

    Args:
        model: a transformers causal LM.
        input_ids: the prompt, (L,) or (1, L) ids or a list of ints.
        max_new_tokens: most tokens to generate.
        cache_implementation: None (a `DynamicCache`) or "static" (a preallocated cache; on CUDA
            transformers then compiles the decoding step with ``torch.compile``).
        compiled: with a static cache, have transformers compile its decoding step on any device
            (its `CompileConfig`, told to compile off CUDA too; "reduce-overhead" on CUDA, Inductor's
            default mode elsewhere): transformers' own compiled greedy, the compiled rows' peer.
        **options: as `ladref.greedy_decode`'s (`ladref.options.BaselineOptions`), but the attention
            backend defaults to "torch": transformers as its users run it.

    Returns:
        `DecodeResult` with method "generate" ("generate_static" with a static cache, "generate_compiled" compiled).
    """
    if cache_implementation not in (None, "static"):
        raise ValueError(f"cache_implementation must be None or 'static', got {cache_implementation!r}")
    if compiled and cache_implementation != "static":
        raise ValueError("compiled=True needs cache_implementation='static': transformers compiles only over a static cache")
    check_model(model)
    extra = {} if cache_implementation is None else {"cache_implementation": cache_implementation}
    method = "generate" if cache_implementation is None else "generate_compiled" if compiled else "generate_static"
    if compiled:
        from transformers import CompileConfig  # noqa: PLC0415

        config = CompileConfig(mode="reduce-overhead" if next(model.parameters()).is_cuda else "default")
        config._compile_all_devices = True  # transformers' own switch for compiling off CUDA
        extra["compile_config"] = config
    return run_generate(model, input_ids, max_new_tokens, method, extra, accept("generate_decode", options, BaselineOptions))


def hf_prompt_lookup_decode(
    model: torch.nn.Module,
    input_ids: TokenIds,
    max_new_tokens: int = 64,
    *,
    prompt_lookup_num_tokens: int = 10,
    max_matching_ngram_size: int = 2,
    **options: Unpack[BaselineOptions],
) -> DecodeResult:
    """Greedy prompt-lookup decoding through transformers' ``model.generate`` (the peer baseline;
    ladref's own is `ladref.prompt_lookup_decode`).

    Args:
        model: a transformers causal LM.
        input_ids: the prompt, (L,) or (1, L) ids or a list of ints.
        max_new_tokens: most tokens to generate.
        prompt_lookup_num_tokens: k, most drafted tokens per step (transformers' own name).
        max_matching_ngram_size: longest n-gram of the text's tail looked up in the prompt.
        **options: as `generate_decode`'s (`ladref.options.BaselineOptions`, attention backend "torch").

    Returns:
        `DecodeResult` with method "hf_plookup"; steps are generate's forward calls (see module doc).
    """
    check_int("prompt_lookup_num_tokens", prompt_lookup_num_tokens, 1)
    check_int("max_matching_ngram_size", max_matching_ngram_size, 1)
    extra = {"prompt_lookup_num_tokens": prompt_lookup_num_tokens, "max_matching_ngram_size": max_matching_ngram_size}
    options = accept("hf_prompt_lookup_decode", options, BaselineOptions)
    return run_generate(model, input_ids, max_new_tokens, "hf_plookup", extra, options, prompt_lookup_num_tokens)
