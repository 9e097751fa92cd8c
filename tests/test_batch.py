"""Decoding a batch: every row equals its own batch-1 greedy output, one forward pass and one read a step for the batch."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import architectures, prompts, seeds, tiny_model, vocab_sizes
from families import peaky_model
from test_sampling import ALPHA, PROMPT, chi_square_p, exact_joint, joint_counts

from ladref import (BatchResult, DecodeResult, DraftTree, JacobiProposer, LookaheadConfig, PromptLookupProposer, adaptive_decode,
                    draft_decode, greedy_decode, jacobi_decode, lookahead_decode, prompt_lookup_decode, recycling_decode,
                    sample_decode, suffix_decode)
from ladref.pricing.cost import CostModel
from oracle_policy import DraftPolicy, Load
from ladref.pricing.surface import CostSurface
from ladref.sampling import Warp

BATCHED = {
    "greedy": lambda m, ids, n, **kw: greedy_decode(m, ids, n, **kw),
    "jacobi": lambda m, ids, n, **kw: jacobi_decode(m, ids, n, block_size=3, **kw),
    "lookahead": lambda m, ids, n, **kw: lookahead_decode(m, ids, n, config=LookaheadConfig(3, 3, 2), **kw),
    "prompt_lookup": lambda m, ids, n, **kw: prompt_lookup_decode(m, ids, n, draft_len=4, **kw),
    "recycling": lambda m, ids, n, **kw: recycling_decode(m, ids, n, **kw),
    "draft": lambda m, ids, n, **kw: draft_decode(m, ids, n, proposers=[JacobiProposer(2), PromptLookupProposer(3)], **kw),
    "adaptive": lambda m, ids, n, **kw: adaptive_decode(m, ids, n, cost=CostSurface.roofline(0.01, 0.0001), **kw),
    "suffix": lambda m, ids, n, **kw: suffix_decode(m, ids, n, **kw),
}
CPU_LIKE = CostSurface.roofline(0.015, 0.004)  # ridge ~4 tokens: a batch of 8 greedy rows is compute-bound
GPU_LIKE = CostSurface.roofline(0.01, 0.00002)  # ridge ~500 tokens: flat for every batch here

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("name", BATCHED)
@settings(max_examples=6, deadline=None)
@given(architectures, vocab_sizes, seeds, st.data())
def test_every_row_equals_its_batch_1_greedy_output(name, arch, vocab, seed, data):
    model = tiny_model(arch, vocab, seed)
    batch = data.draw(st.lists(prompts(vocab), min_size=1, max_size=4))  # a batch of one, or prompts of different lengths
    budgets = data.draw(st.lists(st.integers(1, 14), min_size=len(batch), max_size=len(batch)))
    eos = data.draw(st.none() | st.integers(0, vocab - 1))  # EOS inside accepted paths, at different steps per row
    options = {} if eos is None else {"eos_token_id": eos}
    result = BATCHED[name](model, batch, budgets, **options)
    assert isinstance(result, BatchResult) and len(result) == len(batch)
    for prompt, budget, row in zip(batch, budgets, result):
        assert row.token_ids == greedy_decode(model, prompt, budget, **options).token_ids
        assert row.stats.new_tokens == len(row.token_ids) <= budget
    steps = max(row.stats.steps for row in result)  # one pass per step of the slowest row (+ a prefill), not per row
    assert steps <= result.passes <= steps + 1


def test_a_padded_tensor_batch_reads_its_attention_mask_and_batch_1_is_unchanged():
    model = tiny_model("qwen2", 16, 1)
    rows = [[5, 1, 2, 3], [4, 4], [7, 1, 9]]
    left = torch.tensor([[0] * (4 - len(r)) + r for r in rows])
    right = torch.tensor([r + [0] * (4 - len(r)) for r in rows])
    expected = [greedy_decode(model, r, 6, eos_token_id=[]).token_ids for r in rows]
    for ids in (left, right):
        mask = (torch.arange(4)[None] >= 4 - torch.tensor([len(r) for r in rows])[:, None]) if ids is left else \
            (torch.arange(4)[None] < torch.tensor([len(r) for r in rows])[:, None])
        out = lookahead_decode(model, ids, 6, attention_mask=mask.long(), eos_token_id=[])
        assert out.token_ids == expected
    single = lookahead_decode(model, torch.tensor([rows[0]]), 6, eos_token_id=[])  # a (1, L) tensor: today's call
    assert isinstance(single, DecodeResult) and single.token_ids == expected[0]


def test_finished_rows_leave_the_forward_passes():
    model = tiny_model("llama", 16, 0)
    widths = []
    handle = model.register_forward_pre_hook(lambda module, args, kwargs: widths.append(kwargs["input_ids"].shape[0]),
                                             with_kwargs=True)
    try:
        result = greedy_decode(model, [[1, 2], [3, 4, 5], [6]], [2, 5, 3], eos_token_id=[])
    finally:
        handle.remove()
    assert [len(t) for t in result.token_ids] == [2, 5, 3]
    # each prompt but its last token is cached alone (no padding to the longest; a one-token prompt has
    # nothing to cache); then every step is one pass of the rows still decoding: a row whose budget is
    # spent leaves, and the next pass runs without it
    assert widths == [1, 1, 3, 3, 2, 1, 1] and result.passes == 6


def in_forward() -> bool:
    """Whether the caller runs inside a forward pass (`ladref.head.forward_logits`: the model and its head)."""
    import sys

    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "forward_logits":
            return True
        frame = frame.f_back
    return False


def reads_and_ops(call) -> tuple[int, int]:
    """The device-to-host reads (``item``/``int``/``bool`` and ``tolist``) of `call`, and its torch ops
    outside the forward passes (whose kernels differ with the shape: `ladref.kernels.linear_scope`)."""
    import sys

    from torch.utils._python_dispatch import TorchDispatchMode

    counts = [0, 0]

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            counts[0] += "_local_scalar_dense" in func.__name__ or "nonzero" in func.__name__
            counts[1] += not in_forward()
            return func(*args, **(kwargs or {}))

    def tolist(frame, event, arg):
        if event == "c_call" and getattr(arg, "__name__", "") in ("tolist", "item"):
            counts[0] += 1

    sys.setprofile(tolist)
    try:
        with Count():
            call()
    finally:
        sys.setprofile(None)
    return counts[0], counts[1]


@pytest.mark.parametrize("name", ["greedy", "prompt_lookup", "jacobi", "recycling", "lookahead", "adaptive"])
def test_a_batch_reads_once_a_step_and_its_ops_do_not_grow_with_the_batch(name):
    model = tiny_model("llama", 16, 0)
    per_pass = {}
    for rows in (2, 7):  # (a batch of one indexes its cache with a few more views)
        batch = [[1, 2, 3, 1, 2]] * rows  # rows that finish together: no row leaves between the passes counted
        counts = [reads_and_ops(lambda: BATCHED[name](model, batch, n, eos_token_id=[])) for n in (3, 9)]
        result = BATCHED[name](model, batch, [9] * rows, eos_token_id=[])
        short = BATCHED[name](model, batch, [3] * rows, eos_token_id=[])
        steps = result.passes - short.passes
        per_pass[rows] = [(long - few) / steps for long, few in zip(counts[1], counts[0])]
    assert per_pass[2][0] == per_pass[7][0] == 1.0  # the loop's one read a step, whatever B
    assert per_pass[7][1] == per_pass[2][1]  # the same program for 2 rows or 7


class FailsOnRow(PromptLookupProposer):
    """Prompt lookup that fails once its row (the one whose prompt starts with 9) has 3 tokens past its prompt."""

    def begin(self, prompt):
        self.prompt_len, self.row = len(prompt), prompt[0] == 9
        super().begin(prompt)

    def propose(self, context):
        if self.row and len(context) >= self.prompt_len + 3:
            raise KeyError("this row's proposer failed")
        return super().propose(context)


def finishes(call):
    """Run `call` in a thread; what it raised, after checking that it ended (no row left waiting)."""
    import threading

    raised = []

    def run():
        try:
            call()
        except BaseException as err:  # noqa: BLE001
            raised.append(err)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the batch hung"
    return raised


def test_a_row_that_fails_stops_the_batch_and_its_error_reaches_the_caller():
    model = tiny_model("llama", 16, 0)
    raised = finishes(lambda: draft_decode(model, [[1, 2, 1], [9, 2, 3, 4], [5, 6]], 12, proposers=[FailsOnRow(2)],
                                           eos_token_id=[]))
    assert len(raised) == 1 and isinstance(raised[0], KeyError) and "this row's proposer failed" in str(raised[0])


def test_a_pass_that_fails_wakes_every_row_and_its_error_reaches_the_caller():
    model, passes = tiny_model("llama", 16, 0), []

    def fifth_fails(*args):  # the model's fifth call: the second batched pass (the first runs each prompt alone)
        passes.append(1)
        if len(passes) == 5:
            raise OverflowError("a pass failed")

    handle = model.register_forward_pre_hook(fifth_fails)
    try:
        raised = finishes(lambda: greedy_decode(model, [[1, 2], [3, 4, 5], [6]], 6, eos_token_id=[]))
    finally:
        handle.remove()
    assert len(raised) == 1 and isinstance(raised[0], OverflowError)


def test_sampling_a_batch_keeps_each_rows_distribution():
    model, k, draws = peaky_model(), 2, 300
    other = [3, 1, 3, 6, 3, 1]
    generator = torch.Generator().manual_seed(99)
    samples = [[], []]
    for _ in range(draws):
        result = lookahead_decode(model, [PROMPT, other], k, config=LookaheadConfig(2, 3, 4), do_sample=True,
                                  temperature=0.9, generator=generator)
        for row, out in zip(samples, result.token_ids):
            row.append(out)
    laws = [exact_joint(model, p, k, Warp(temperature=0.9)) for p in (PROMPT, other)]
    for row, law in zip(samples, laws):
        assert chi_square_p(joint_counts(row, 8, k), law) > ALPHA
    assert chi_square_p(joint_counts(samples[0], 8, k), laws[1]) < ALPHA  # negative control: the other row's law


def test_a_seeded_batch_samples_the_same_every_time():
    model = peaky_model()
    draw = [sample_decode(model, [PROMPT, [1, 2], [5]], 6, generator=torch.Generator().manual_seed(5)).token_ids
            for _ in range(3)]
    assert draw[0] == draw[1] == draw[2]


@pytest.fixture
def no_forward():
    model = tiny_model("llama", 16, 0)

    def hook(module, args):
        raise AssertionError("a forward pass ran before the input was rejected")

    handle = model.register_forward_pre_hook(hook)
    yield model
    handle.remove()


@pytest.mark.parametrize("ids, kwargs, error, message", [
    ([[1, 2], []], {}, ValueError, "the prompt is empty"),
    ([[1, 2], [3, 99]], {}, ValueError, "outside the model's vocabulary"),
    ([[1, 2], [3]], {"max_new_tokens": [4]}, ValueError, "max_new_tokens has 1 values for a batch of 2 prompts"),
    ([[1, 2], [3]], {"max_new_tokens": [4, 0]}, ValueError, "max_new_tokens must be >= 1, got 0"),
    (torch.tensor([[1, 2], [3, 4]]), {"attention_mask": torch.ones(2, 3)}, ValueError, "attention_mask must be a tensor of"),
    (torch.tensor([[1, 2, 3], [3, 4, 5]]), {"attention_mask": torch.tensor([[1, 0, 1], [1, 1, 1]])}, ValueError,
     "padding between tokens"),
    ([[1, 2], [3]], {"attention_mask": torch.ones(2, 2)}, ValueError, "a list of prompts needs none"),
    ([1, 2], {"attention_mask": torch.ones(1, 2)}, TypeError, "attention_mask goes with a \\(B, L\\) tensor"),
    ([[1, 2], [3]], {"streamer": object()}, ValueError, "a streamer follows one sequence"),
    ([], {}, ValueError, "the prompt is empty"),
])
@pytest.mark.parametrize("name", ["greedy", "lookahead"])
def test_bad_batches_are_refused_before_any_forward(no_forward, name, ids, kwargs, error, message):
    kwargs = {"max_new_tokens": 4, **kwargs}
    n = kwargs.pop("max_new_tokens")
    with pytest.raises(error, match=message):
        BATCHED[name](no_forward, ids, n, **kwargs)


def test_adaptive_needs_a_cost_surface_for_a_batch(no_forward):
    with pytest.raises(ValueError, match="a CostModel prices one prompt's steps; for a batch pass cost=CostSurface"):
        adaptive_decode(no_forward, [[1, 2], [3]], 4, cost=CostModel.flat(8))


def drafted(result: BatchResult) -> list[int]:
    """Each row's draft and window tokens fed, over the whole call."""
    return [sum(r.stats.draft_tokens_per_step) + sum(r.stats.window_tokens_per_step) for r in result]


def test_adaptive_on_a_batch_stops_drafting_where_the_batch_is_compute_bound():
    model = tiny_model("llama", 16, 0)  # its greedy texts cycle: prompt lookup's drafts are soon accepted
    batch = [[1, 2, 3], [4, 5], [7, 1], [9], [2, 2, 8], [11, 3], [6], [13, 14, 15]]
    alone = adaptive_decode(model, batch[0], 40, cost=CPU_LIKE, eos_token_id=[])
    assert sum(alone.stats.draft_tokens_per_step) > 0  # one row alone is weight-bound: drafts pay
    greedy = [greedy_decode(model, p, 40, eos_token_id=[]).token_ids for p in batch]
    cpu, gpu = (adaptive_decode(model, batch, 40, cost=surface, eos_token_id=[]) for surface in (CPU_LIKE, GPU_LIKE))
    assert [r.token_ids for r in cpu] == [r.token_ids for r in gpu] == greedy
    # a pass of 8 rows still costs one weight read: every row drafts, and the batch needs far fewer passes
    assert min(drafted(gpu)) / gpu.passes > 2 and gpu.passes < 30
    # 8 rows already fill the compute: a draft that widens the pass makes all 8 rows' passes dearer
    assert drafted(cpu) == [0] * len(batch) and cpu.passes == 41  # one per token, and the prompts' prefill


def test_a_row_prices_the_whole_pass_padding_included():
    cost = CostSurface.roofline(0.015, 0.004, batches=(1, 2, 4)).at(4)  # 4 rows: t(q) = 16 q ms, compute-bound
    policy = DraftPolicy(cost)
    tree = DraftTree.from_paths([[1, 2, 3, 4, 5]], "prompt_lookup")  # five nodes, each worth the prior rate 1/3 of its parent
    alone = policy.choose([tree], kv=0)
    assert len(alone.tree) == 0  # a wider pass costs every row: these drafts do not pay
    free = policy.choose([tree], kv=0, load=Load(others=3.0, floor=6))  # another row feeds 6 tokens for its own sake
    assert len(free.tree) == 5 and free.own_width == 1  # up to its width they cost nothing, but they are not this row's reason


def test_rows_that_finish_make_the_others_price_a_smaller_batch():
    model = tiny_model("llama", 16, 0)
    batch = [[1, 2, 3]] + [[4, 5]] * 7
    result = adaptive_decode(model, batch, [40] + [2] * 7, cost=CPU_LIKE, eos_token_id=[])
    fed = result[0].stats.forward_tokens_per_step
    assert fed[:2] == [1, 1] and max(fed[2:]) > 1  # alone after two passes, the long row drafts again
