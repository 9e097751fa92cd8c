"""Calls in the shapes transformers users write: a tokenizer's (1, L) output with its mask, max_length,
a proposer class, a batch's statistics, drafts deeper than max_depth, a batch where one prompt is taken."""

from __future__ import annotations

import pytest
import torch
from strategies import tiny_model

from ladref import (AdaptiveDecoder, BatchResult, DecodeResult, DecodeStats, DraftSource, DraftTree, JacobiProposer,
                    LookaheadConfig, PromptLookupProposer, SuffixProposer, adaptive_decode, draft_decode, greedy_decode,
                    jacobi_decode, lookahead_decode, lookahead_generator, prompt_lookup_decode, recycling_decode,
                    sample_decode, suffix_decode)
from ladref.pricing.cost import CostModel

pytestmark = pytest.mark.usefixtures("one_thread")

DECODERS = {
    "greedy": lambda m, **kw: greedy_decode(m, **kw),
    "jacobi": lambda m, **kw: jacobi_decode(m, block_size=3, **kw),
    "lookahead": lambda m, **kw: lookahead_decode(m, config=LookaheadConfig(3, 3, 2), **kw),
    "prompt_lookup": lambda m, **kw: prompt_lookup_decode(m, draft_len=4, **kw),
    "recycling": lambda m, **kw: recycling_decode(m, **kw),
    "suffix": lambda m, **kw: suffix_decode(m, **kw),
    "draft": lambda m, **kw: draft_decode(m, proposers=[JacobiProposer(2), PromptLookupProposer(3)], **kw),
    "adaptive": lambda m, **kw: adaptive_decode(m, cost=CostModel.flat(256), **kw),
}
PROMPT = [5, 1, 2, 3, 5, 1, 2]


def padded(prompt: list[int], pad: int, left: bool) -> dict[str, torch.Tensor]:
    """What a tokenizer returns for one text, ``tok(text, return_tensors="pt")``, padded by `pad` positions."""
    ids = [0] * pad + prompt if left else prompt + [0] * pad
    keep = [0] * pad + [1] * len(prompt) if left else [1] * len(prompt) + [0] * pad
    return {"input_ids": torch.tensor([ids]), "attention_mask": torch.tensor([keep])}


@pytest.mark.parametrize("name", DECODERS)
def test_a_tokenized_prompt_with_its_mask_decodes_as_one_prompt(name):
    model = tiny_model("llama", 16, 0)
    expected = greedy_decode(model, PROMPT, 8, eos_token_id=[]).token_ids
    for encoding in (padded(PROMPT, 0, True), padded(PROMPT, 3, True), padded(PROMPT, 2, False)):
        out = DECODERS[name](model, **encoding, max_new_tokens=8, eos_token_id=[])
        assert isinstance(out, DecodeResult) and out.token_ids == expected
        assert out.stats.prefill_tokens + 1 == len(PROMPT)  # the padding was dropped, not decoded
    flat = {k: v[0] for k, v in padded(PROMPT, 2, True).items()}  # a (L,) prompt with its (L,) mask
    assert DECODERS[name](model, **flat, max_new_tokens=8, eos_token_id=[]).token_ids == expected


def test_a_masked_prompt_samples_as_the_unpadded_one():
    model = tiny_model("llama", 16, 0)
    plain = sample_decode(model, PROMPT, 8, eos_token_id=[], generator=torch.Generator().manual_seed(3))
    masked = sample_decode(model, **padded(PROMPT, 3, True), max_new_tokens=8, eos_token_id=[],
                           generator=torch.Generator().manual_seed(3))
    assert isinstance(masked, DecodeResult) and masked.token_ids == plain.token_ids


def test_a_padded_batch_with_its_mask_stays_a_batch_and_bad_masks_are_refused():
    model = tiny_model("llama", 16, 0)
    ids, mask = torch.tensor([[0, 0, 5, 1, 2], [7, 1, 2, 3, 4]]), torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    out = greedy_decode(model, ids, 4, attention_mask=mask, eos_token_id=[])
    assert isinstance(out, BatchResult) and out.token_ids == [greedy_decode(model, p, 4, eos_token_id=[]).token_ids
                                                              for p in ([5, 1, 2], [7, 1, 2, 3, 4])]
    with pytest.raises(ValueError, match="attention_mask has padding between tokens"):
        greedy_decode(model, torch.tensor([[5, 0, 2]]), 4, attention_mask=torch.tensor([[1, 0, 1]]))
    with pytest.raises(ValueError, match=r"attention_mask must be a tensor of input_ids' shape \(1, 3\)"):
        greedy_decode(model, torch.tensor([[5, 1, 2]]), 4, attention_mask=torch.tensor([1, 1, 1]))
    with pytest.raises(ValueError, match="the prompt is empty"):
        greedy_decode(model, torch.tensor([[0, 0]]), 4, attention_mask=torch.tensor([[0, 0]]))
    with pytest.raises(TypeError, match="a list of ints is one whole prompt and needs none"):
        greedy_decode(model, [5, 1, 2], 4, attention_mask=torch.tensor([1, 1, 1]))


def row(accepted: list[int], fed: list[int], seconds: float) -> DecodeResult:
    stats = DecodeStats(wall_time_s=seconds)
    for kept, width in zip(accepted, fed):
        stats.record(kept, width)
    return DecodeResult(list(range(sum(accepted))), None, stats, "lookahead")


def test_a_batch_result_sums_its_rows():
    result = BatchResult([row([1, 3, 2], [1, 5, 5], 0.5), row([1, 1], [1, 3], 1.0)], passes=4)
    assert result.new_tokens == 8 and result.steps == 3 and result.passes == 4
    assert result.compression == 8 / 5  # every row's tokens over every row's steps
    assert result.mean_forward_tokens == 15 / 5
    assert result.wall_time_s == 1.0 and result.tokens_per_second == 8.0  # the call ends with its last row
    assert result.summary() == "2 rows: 8 new tokens in 4 passes (S = 1.60), 8.0 tokens/s, 1.00 s"
    assert str(result) == result.summary() and repr(result) == f"BatchResult({result.summary()})"
    untimed = BatchResult([row([1], [1], 0.0)], passes=1)
    assert untimed.tokens_per_second == 0.0 and BatchResult([], passes=0).compression == 0.0


def test_a_decoded_batch_reports_the_stats_of_its_rows():
    model = tiny_model("llama", 16, 0)
    greedy = greedy_decode(model, [[1, 2, 3], [4, 5]], [6, 3], eos_token_id=[])
    assert (greedy.new_tokens, greedy.compression, greedy.mean_forward_tokens) == (9, 1.0, 1.0)
    assert greedy.steps == 6 and greedy.wall_time_s > 0 and greedy.tokens_per_second == 9 / greedy.wall_time_s
    drafted = lookahead_decode(model, [PROMPT * 2, [4, 5]], 12, config=LookaheadConfig(3, 3, 2), eos_token_id=[])
    steps = sum(r.stats.steps for r in drafted)
    assert drafted.compression == sum(r.stats.new_tokens for r in drafted) / steps
    assert drafted.steps == max(r.stats.steps for r in drafted) <= drafted.passes


@pytest.mark.parametrize("call", [
    lambda m: greedy_decode(m, [1, 2], max_length=10),
    lambda m: lookahead_decode(m, [1, 2], max_length=10),
    lambda m: draft_decode(m, [1, 2], proposers=[JacobiProposer(2)], max_length=10),
    lambda m: sample_decode(m, [[1, 2], [3]], max_length=10),
    lambda m: adaptive_decode(m, [1, 2], cost=CostModel.flat(256), max_length=10),
])
def test_max_length_points_to_max_new_tokens(call):
    with pytest.raises(TypeError, match="takes max_new_tokens, not max_length: ladref counts the new tokens only"):
        call(tiny_model("llama", 16, 0))


@pytest.mark.parametrize("call", [
    lambda m: draft_decode(m, [1, 2, 3], 8, proposers=[SuffixProposer]),
    lambda m: draft_decode(m, [1, 2, 3], 8, proposers=SuffixProposer),
    lambda m: draft_decode(m, [[1, 2, 3], [4, 5]], 8, proposers=[JacobiProposer(2), SuffixProposer]),
    lambda m: adaptive_decode(m, [1, 2, 3], 8, cost=CostModel.flat(256), proposers=[SuffixProposer]),
    lambda m: AdaptiveDecoder(m, cost=CostModel.flat(256), proposers=[PromptLookupProposer]),
])
def test_a_proposer_class_is_refused_with_a_pointer_to_an_instance(call):
    with pytest.raises(TypeError, match=r"Proposer is a class[;:] pass an instance of it"):
        call(tiny_model("llama", 16, 0))


class Oracle(DraftSource):
    """Drafts greedy's own continuation, `depth` deep, and a wrong branch beside it; records how deep each fed tree was."""

    name = "oracle"

    def __init__(self, texts: list[list[int]], depth: int, fed: list[int]):
        self.texts, self.depth, self.fed = texts, depth, fed

    def __deepcopy__(self, memo):  # stateless: a batch's rows share it (and its record)
        return self

    def begin(self, prompt):
        pass

    def propose(self, context):
        text = next(t for t in self.texts if t[: len(context)] == list(context))
        right = text[len(context): len(context) + self.depth]
        wrong = [(token + 1) % 16 for token in right]
        return DraftTree.from_paths([right, wrong], self.name)

    def learn(self, outcome):
        self.fed.append(int(outcome.tree.depths.max()) if len(outcome.tree) else 0)


@pytest.mark.parametrize("batch", [False, True])
def test_drafts_deeper_than_max_depth_are_cut(batch):
    model, prompts = tiny_model("llama", 16, 0), [PROMPT, [4, 5, 6]]
    expected = [greedy_decode(model, p, 30, eos_token_id=[]).token_ids for p in prompts]
    texts, fed = [p + e for p, e in zip(prompts, expected)], []
    oracle = Oracle(texts, 40, fed)
    if batch:
        out = draft_decode(model, prompts, 30, proposers=oracle, max_depth=4, eos_token_id=[])
        assert out.token_ids == expected
        accepted = [a for r in out for a in r.stats.accepted_per_step]
    else:
        out = draft_decode(model, PROMPT, 30, proposers=oracle, max_depth=4, eos_token_id=[])
        assert out.token_ids == expected[0]
        accepted = out.stats.accepted_per_step
    assert fed and max(fed) == 4  # the 40-deep drafts, cut to 4 at every step
    assert max(accepted) == 5  # the right branch accepted to the cut, plus the model's own token


def test_max_depth_zero_feeds_no_draft():
    model, fed = tiny_model("llama", 16, 0), []
    expected = greedy_decode(model, PROMPT, 10, eos_token_id=[]).token_ids
    out = draft_decode(model, PROMPT, 10, proposers=Oracle([PROMPT + expected], 40, fed), max_depth=0, eos_token_id=[])
    assert out.token_ids == expected and set(fed) == {0} and out.stats.steps == 10


def test_a_batch_refused_by_a_one_prompt_call_names_the_decoders_that_take_one():
    model = tiny_model("llama", 16, 0)
    with pytest.raises(ValueError, match=r"batch size 2 > 1 is not supported by this call.*greedy_decode.*AdaptiveDecoder"):
        model.generate(torch.tensor([[1, 2], [3, 4]]), max_new_tokens=3, pad_token_id=0, custom_generate=lookahead_generator())
    assert isinstance(greedy_decode(model, torch.tensor([[1, 2], [3, 4]]), 3), BatchResult)  # as the message says
