"""A streamer on the engine (`ladref.batched.stream.RowStream`): a batch of ONE row streams its tokens at each read.

`decode_batch` (one read a step, or every k steps) and `CapturedBatchDecoder` (mode None: the same program,
uncompiled) send a streamer what the one-prompt path (`ladref.call.DecodeCall`) sends: the prompt as a
(1, L) tensor, each kept token as a (1,) tensor, in order, none past EOS or the budget, then ``end()``
once; a `TextStreamer` prints the same text. The read stays one read. A batch of several rows keeps its
ValueError. Float64 tiny models: the engine's greedy tokens are the reference's exactly.
"""

from __future__ import annotations

import pytest
import torch
from strategies import tiny_model
from test_batch import reads_and_ops
from test_steps_per_read import SOURCES
from transformers import TextStreamer
from transformers.generation.streamers import BaseStreamer

from ladref import (CapturedBatchDecoder, LookaheadConfig, LookaheadProposer, PromptLookupProposer, greedy_decode,
                    lookahead_decode, sample_decode)
from ladref.batched.loop import decode_batch
from ladref.pricing.cost import CostModel

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPT = [1, 2, 3, 1, 2, 3, 4, 5]
NAMES = ["greedy", "lookahead", "prompt_lookup", "adaptive"]
FLAT = CostModel.flat(64)  # every proposed node pays
PROPOSERS = {"greedy": [], "lookahead": [LookaheadProposer(LookaheadConfig(3, 3, 2))], "prompt_lookup": [PromptLookupProposer(4)]}


class Recorder(BaseStreamer):
    """Every put() as given (the tensor kept, not read: a ``tolist`` here would count as a read) and the end() calls."""

    def __init__(self) -> None:
        self.tensors: list[torch.Tensor] = []
        self.ended = 0

    def put(self, value: torch.Tensor) -> None:
        self.tensors.append(value.clone())

    def end(self) -> None:
        self.ended += 1

    @property
    def puts(self) -> list[tuple[tuple[int, ...], list]]:
        return [(tuple(t.shape), t.tolist()) for t in self.tensors]


def expected(prompt: list[int], tokens: list[int]) -> list[tuple[tuple[int, ...], list]]:
    """The prompt as a (1, L) tensor, then each token as a (1,) one."""
    return [((1, len(prompt)), [prompt])] + [((1,), [t]) for t in tokens]


class Words:
    """A tokenizer of words, some ending a line and some glued to the last, so `TextStreamer` holds text back."""

    def decode(self, ids: list[int] | int, **kwargs: object) -> str:
        return "".join("\n" if i % 4 == 3 else f"x{i}" if i % 5 == 0 else f" w{i}" for i in ([ids] if isinstance(ids, int) else ids))


class Printed(TextStreamer):
    """A `TextStreamer` (the prompt skipped) that keeps what it would print, and whether the stream ended."""

    def __init__(self) -> None:
        super().__init__(Words(), skip_prompt=True)
        self.printed: list[tuple[str, bool]] = []

    def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
        self.printed.append((text, stream_end))


def eos_inside_a_run(model: torch.nn.Module, every: int) -> list[int]:
    """An EOS that greedy keeps (at its first place, token i, kept at step i) with steps after it in its run of `every`."""
    tokens = greedy_decode(model, PROMPT, 16, eos_token_id=[]).token_ids
    return [next(t for i, t in enumerate(tokens) if tokens.index(t) == i and 2 <= i and i % every < every - 1)]


def engine(model, prompts, budget, eos, name, every, streamer):
    sources, choice = SOURCES[name](len(prompts), model.config.vocab_size)
    return decode_batch(model, prompts, budget, {"eos_token_id": eos, "streamer": streamer}, name, sources, choice, steps_per_read=every)


@pytest.mark.parametrize("every", [1, 4])
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("stop", ["budget", "eos"])
def test_one_row_streams_what_the_one_prompt_path_streams(name, every, stop):
    model = tiny_model("llama", 16, 0)
    eos = [] if stop == "budget" else eos_inside_a_run(model, 4)
    reference, ours = Recorder(), Recorder()
    tokens = greedy_decode(model, PROMPT, 15, eos_token_id=eos, streamer=reference).token_ids
    result = engine(model, [PROMPT], 15, eos, name, every, ours)
    assert result.token_ids == [tokens] and (len(tokens) < 15) == (stop == "eos")
    assert ours.puts == reference.puts == expected(PROMPT, tokens)  # none past EOS or the budget
    assert ours.ended == reference.ended == 1


@pytest.mark.parametrize("name", ["greedy", "lookahead", "prompt_lookup"])
@pytest.mark.parametrize("stop", ["budget", "eos"])
def test_a_captured_row_streams_what_the_one_prompt_path_streams(name, stop):
    model = tiny_model("llama", 16, 0)
    eos = [] if stop == "budget" else eos_inside_a_run(model, 4)
    reference, ours = Recorder(), Recorder()
    tokens = greedy_decode(model, PROMPT, 15, eos_token_id=eos, streamer=reference).token_ids
    decoder = CapturedBatchDecoder(model, PROPOSERS[name], max_length=64, mode=None, steps_per_read=4)
    assert decoder([PROMPT], 15, eos_token_id=eos, streamer=ours).token_ids == [tokens]
    assert ours.puts == reference.puts == expected(PROMPT, tokens) and ours.ended == 1


def test_a_text_streamer_prints_the_one_prompt_paths_text():
    model = tiny_model("llama", 16, 0)
    printed = {"reference": Printed(), "engine": Printed(), "decoder": Printed(), "captured": Printed()}
    greedy_decode(model, PROMPT, 20, eos_token_id=[], streamer=printed["reference"])
    engine(model, [PROMPT], 20, [], "lookahead", 4, printed["engine"])
    lookahead_decode(model, [PROMPT], 20, config=LookaheadConfig(3, 3, 2), eos_token_id=[], streamer=printed["decoder"])
    CapturedBatchDecoder(model, PROPOSERS["lookahead"], max_length=64, mode=None)([PROMPT], 20, eos_token_id=[],
                                                                                 streamer=printed["captured"])
    texts = {name: p.printed for name, p in printed.items()}
    assert len(texts["reference"]) > 2 and texts["reference"][-1][1]  # text held back, then flushed at the end
    assert texts["engine"] == texts["decoder"] == texts["captured"] == texts["reference"]


def test_a_sampled_row_streams_its_draws():
    model, seed = tiny_model("llama", 16, 0), lambda: torch.Generator().manual_seed(7)
    for call in (lambda s: sample_decode(model, [PROMPT], 12, generator=seed(), eos_token_id=[], streamer=s),
                 lambda s: lookahead_decode(model, [PROMPT], 12, config=LookaheadConfig(3, 3, 2), do_sample=True,
                                            generator=seed(), eos_token_id=[], streamer=s),
                 lambda s: CapturedBatchDecoder(model, PROPOSERS["lookahead"], max_length=64, mode=None)(
                     [PROMPT], 12, do_sample=True, generator=seed(), eos_token_id=[], streamer=s)):
        streamer = Recorder()
        tokens = call(streamer).token_ids[0]
        assert streamer.puts == expected(PROMPT, tokens) and len(tokens) == 12 and streamer.ended == 1


def test_a_row_that_stops_at_its_first_step_streams_one_token_and_ends_once():
    model = tiny_model("llama", 16, 0)
    first = greedy_decode(model, PROMPT, 1, eos_token_id=[]).token_ids
    for call in (lambda s: engine(model, [PROMPT], 1, [], "lookahead", 4, s),
                 lambda s: CapturedBatchDecoder(model, PROPOSERS["lookahead"], max_length=64, mode=None)(
                     [PROMPT], 1, eos_token_id=[], streamer=s)):
        streamer = Recorder()
        assert call(streamer).token_ids == [first] and streamer.puts == expected(PROMPT, first) and streamer.ended == 1


@pytest.mark.parametrize("every", [1, 4])
@pytest.mark.parametrize("name", ["greedy", "lookahead"])
def test_a_streamer_costs_no_read(name, every):
    model = tiny_model("llama", 16, 0)
    alone, streamed = [reads_and_ops(lambda: engine(model, [PROMPT], 15, [], name, every, s))[0] for s in (None, Recorder())]
    assert streamed == alone


def test_a_batch_of_several_rows_refuses_a_streamer_and_one_row_checks_it():
    model = tiny_model("llama", 16, 0)
    with pytest.raises(ValueError, match="a streamer follows one sequence; decode a batch of 2 rows without one"):
        engine(model, [PROMPT, [3, 4]], 4, [], "lookahead", 1, Recorder())
    with pytest.raises(ValueError, match="a streamer follows one sequence"):
        greedy_decode(model, [PROMPT, [3, 4]], 4, streamer=Recorder())
    with pytest.raises(ValueError, match="a streamer follows one sequence; decode a batch of 2 rows without one"):
        CapturedBatchDecoder(model, [], max_length=64, mode=None)([PROMPT, [3, 4]], 4, streamer=Recorder())
    with pytest.raises(TypeError, match="streamer must have put\\(\\) and end\\(\\) methods"):
        engine(model, [PROMPT], 4, [], "greedy", 1, print)


@pytest.mark.parametrize("config", [None, LookaheadConfig(3, 3, 2)], ids=["greedy", "lookahead"])
def test_the_compiled_decoders_stream_as_the_one_prompt_path(config):
    """`CompiledDecoder` and `CompiledAdaptiveDecoder` run the engine over their static runner (here
    uncompiled: the same padded steps): their streamers get what `greedy_decode`'s gets."""
    from ladref import CompiledAdaptiveDecoder, CompiledDecoder

    model = tiny_model("llama", 16, 0)
    reference = Recorder()
    tokens = greedy_decode(model, PROMPT, 20, eos_token_id=[], streamer=reference).token_ids
    decoders = [CompiledDecoder(model, config, max_length=96, mode=None),
                CompiledAdaptiveDecoder(model, max_lengths=96, widths=(1, 4, 8), mode=None, cost=FLAT)]
    for decoder in decoders:
        streamer = Recorder()
        assert decoder(PROMPT, 20, eos_token_id=[], streamer=streamer).token_ids == tokens
        assert streamer.puts == reference.puts == expected(PROMPT, tokens) and streamer.ended == 1
