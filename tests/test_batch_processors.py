"""Logits processors in the engine (`ladref.batched.process`): each row as the reference processes its one prompt.

Greedy: every row of a ragged batch decoded by the engine with transformers processors equals the
reference loop's one-prompt output with the same processors, token for token (float64), for a
plain batch, Jacobi, lookahead, prompt lookup and adaptive decoding. Sampling: the engine's first
two tokens follow the processed law (chi-square), and not the unprocessed one (negative control).
A captured or compiled step refuses a processor.
"""

from __future__ import annotations

import pytest
import torch
from families import family_model, peaky_model
from test_sampling import ALPHA, chi_square_p, joint_counts
from transformers import (
    LogitsProcessorList,
    MinLengthLogitsProcessor,
    NoRepeatNGramLogitsProcessor,
    NoBadWordsLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
)

from ladref import (
    AdaptiveDecoder,
    CapturedBatchDecoder,
    CompiledDecoder,
    CostModel,
    CostSurface,
    LookaheadConfig,
    adaptive_decode,
    greedy_decode,
    jacobi_decode,
    lookahead_decode,
    prompt_lookup_decode,
    sample_decode,
)
from ladref.batched.drafts import Drafts, ancestor_table, compact, merge
from ladref.batched.process import process
from ladref.sources.jacobi import JacobiProposer

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPTS = [[1, 2, 3, 4, 5, 6, 7, 1, 2, 3], [4, 4, 9], [9, 1, 9, 1, 9, 1, 2, 3, 9, 11, 12, 9, 1, 9]]  # ragged


def penalties(eos: int | None = None) -> LogitsProcessorList:
    """A repetition penalty, a banned word and a banned bigram, no repeated trigram; with `eos`, EOS banned
    before 16 tokens."""
    processors = [RepetitionPenaltyLogitsProcessor(2.0), NoBadWordsLogitsProcessor([[3], [5, 6]], eos_token_id=[]),
                  NoRepeatNGramLogitsProcessor(3)]
    return LogitsProcessorList(processors + ([] if eos is None else [MinLengthLogitsProcessor(16, eos)]))


DECODERS = {
    "greedy": (greedy_decode, {}),
    "jacobi": (jacobi_decode, {"block_size": 4}),
    "lookahead": (lookahead_decode, {"config": LookaheadConfig(3, 3, 3)}),
    "prompt_lookup": (prompt_lookup_decode, {"draft_len": 4, "max_ngram": 2}),
    "adaptive": (adaptive_decode, {"cost": CostSurface((1, 4), (CostModel.flat(16),) * 2)}),
}


@pytest.mark.parametrize("name", sorted(DECODERS))
def test_each_row_of_a_processed_batch_equals_its_one_prompt_reference(name):
    decode, own = DECODERS[name]
    model, budgets = family_model("llama", 16), [24, 9, 30]
    for processor, eos in [(penalties(), []), (penalties(eos=7), [7])]:
        batch = decode(model, PROMPTS, budgets, eos_token_id=eos, logits_processor=processor, **own)
        # the reference: the decoder's own one-prompt loop (adaptive decoding runs the engine at every B: greedy's)
        one = greedy_decode if name == "adaptive" else decode
        ones = [one(model, p, n, eos_token_id=eos, logits_processor=processor, **({} if name == "adaptive" else own)).token_ids
                for p, n in zip(PROMPTS, budgets)]
        assert [row.token_ids for row in batch.rows] == ones
        assert ones == [greedy_decode(model, p, n, eos_token_id=eos, logits_processor=processor).token_ids
                        for p, n in zip(PROMPTS, budgets)]
        plain = [greedy_decode(model, p, n, eos_token_id=eos).token_ids for p, n in zip(PROMPTS, budgets)]
        assert ones != plain  # the processors change the output
        assert not any(3 in tokens for tokens in ones)  # the banned word never comes
    if name != "greedy":
        assert sum(r.stats.steps for r in batch.rows) < sum(r.stats.new_tokens for r in batch.rows)  # drafts accepted


def test_one_call_per_context_length_and_each_entry_its_own_context():
    """`process` against the processor called entry by entry, each with its context spelled out."""
    rows, vocab = 3, 16
    tokens = torch.tensor([[1, 2, 1, 3, 4, 5], [6, 2, 6, 7, 8, 0], [1, 1, 2, 2, 3, 3]])
    parents = torch.tensor([-1, 0, -1, 2, 3, -1])  # chains [1, 2], [1, 3, 4], [5]
    drafts = Drafts(tokens, parents, torch.ones(rows, 6, dtype=torch.bool), torch.zeros(6, dtype=torch.long),
                    torch.zeros(rows, 1, dtype=torch.long))
    merged = merge(drafts, ancestor_table(parents.expand(rows, 6), 3))
    fed = compact(merged, merged.kept & torch.tensor([[True] * 6, [True, True, False, False, False, True], [True] * 6]), 6)
    text = torch.tensor([[9, 8, 7, 6, 0, 0, 0, 0, 0, 0], [5, 5, 0, 0, 0, 0, 0, 0, 0, 0], [4, 3, 2, 1, 0, 9, 0, 0, 0, 0]])
    length = torch.tensor([4, 2, 6])
    logits = torch.randn(rows, 1 + fed.width, vocab, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    calls = []
    processor = LogitsProcessorList([RepetitionPenaltyLogitsProcessor(1.7), MinLengthLogitsProcessor(6, 9)])

    def counted(ids, scores):
        calls.append(ids.shape)
        return processor(ids, scores)

    root, nodes = process(counted, text, length, logits[:, 0], logits[:, 1:], fed)
    for b in range(rows):
        own = text[b, : length[b]].tolist()
        assert torch.equal(root[b], processor(torch.tensor([own]), logits[b, :1])[0])
        for i in range(fed.width):
            if not fed.valid[b, i]:
                assert torch.equal(nodes[b, i], logits[b, 1 + i])  # padding keeps its logits
                continue
            path = [int(fed.tokens[b, j]) for j in fed.ancestors[b, i].nonzero().flatten().tolist()]  # ancestors in node order
            assert torch.equal(nodes[b, i], processor(torch.tensor([own + path]), logits[b, 1 + i : 2 + i])[0])
    sizes = {int(length[b]) + int(d) for b in range(rows) for d, v in zip([0] + fed.depth[b].tolist(), [True] + fed.valid[b].tolist()) if v}
    assert len(calls) == len(sizes) and sorted(shape[1] for shape in calls) == sorted(sizes)


def processed_joint(model: torch.nn.Module, prompt: list[int], processor) -> tuple[torch.Tensor, torch.Tensor]:
    """(V * V,) the exact law of two sampled tokens, with and without `processor` (temperature 1)."""
    vocab = model.config.vocab_size
    with torch.no_grad():
        seqs = torch.tensor([prompt + [t] for t in range(vocab)])
        logits = model(seqs).logits.double()  # (V, L + 1, V)
    laws = []
    for process_ in (processor, None):
        first = logits[0, len(prompt) - 1]
        first = first if process_ is None else process_(torch.tensor([prompt]), first[None])[0]
        second = logits[:, len(prompt)]
        second = second if process_ is None else process_(seqs, second)
        laws.append((first.softmax(-1)[:, None] * second.softmax(-1)).flatten())
    return laws[0], laws[1]


@pytest.mark.parametrize("drafting", [False, True])
def test_sampled_rows_follow_the_processed_law(drafting):
    model, prompts, vocab = peaky_model(), [[0, 7, 6, 1, 6, 5, 7, 0], [3, 1, 3, 6]], 8
    processor = LogitsProcessorList([RepetitionPenaltyLogitsProcessor(4.0), NoBadWordsLogitsProcessor([[2]], eos_token_id=[])])
    generator = torch.Generator().manual_seed(5)
    decode = (lambda *a, **k: jacobi_decode(*a, block_size=2, do_sample=True, **k)) if drafting else sample_decode
    result = decode(model, prompts * 300, 2, eos_token_id=[], logits_processor=processor, generator=generator)
    for i, prompt in enumerate(prompts):
        counts = joint_counts([row.token_ids for row in result.rows[i :: len(prompts)]], vocab, 2)
        processed, raw = processed_joint(model, prompt, processor)
        assert chi_square_p(counts, processed) > ALPHA, "a row's samples deviate from its processed law"
        assert chi_square_p(counts, raw) < ALPHA  # negative control: the unprocessed law is rejected


def test_a_captured_or_compiled_step_refuses_a_processor_and_an_adaptive_one_takes_it():
    model = family_model("llama", 16)
    captured = CapturedBatchDecoder(model, [JacobiProposer(3)], max_length=32, mode=None)
    with pytest.raises(TypeError, match="logits_processor'.*cannot call a logits processor"):
        captured([[1, 2, 3]], 3, logits_processor=penalties())
    compiled = CompiledDecoder(model, max_length=32, mode=None)
    with pytest.raises(TypeError, match="logits_processor'.*cannot call a logits processor"):
        compiled([1, 2, 3], 3, logits_processor=penalties())
    adaptive = AdaptiveDecoder(model, cost=CostModel.flat(8))
    assert adaptive([1, 2, 3], 12, eos_token_id=[], logits_processor=penalties()).token_ids == \
        greedy_decode(model, [1, 2, 3], 12, eos_token_id=[], logits_processor=penalties()).token_ids
    with pytest.raises(TypeError, match="logits_processor must be"):
        greedy_decode(model, [[1, 2], [3]], 3, logits_processor=3)
