"""A tensor source is one file: a reference `Proposer`, and its batch form naming it (`ladref.batched.forms`).

The toy source here is added exactly as a new source would be: the reference (one prompt) and its
twin for a batch, which names the reference in its class statement. Nothing else in the library
is told of it, and a batch of prompts, and a captured step, then draft with the twin.
"""

import pytest
import torch
from families import family_model

from ladref import CapturedBatchDecoder, draft_decode, greedy_decode
from ladref.batched.drafts import Drafts
from ladref.batched.forms import BatchForm, batch_form
from ladref.batched.sources import batched_source, fixed_shape_references
from ladref.batched.sources.rows import RowProposers
from ladref.proposer import DraftSource
from ladref.tree import DraftTree

pytestmark = pytest.mark.usefixtures("one_thread")
PROMPTS = [[1, 2, 3, 3, 3], [4, 5], [7, 7, 7, 7, 2, 7]]


class Echo(DraftSource):
    """The reference: drafts the current token k more times, as one chain."""

    name = "echo"

    def __init__(self, k: int = 3) -> None:
        self.k = k

    def begin(self, prompt):
        pass

    def propose(self, context):
        return DraftTree.from_paths([[int(context[-1])] * self.k], self.name)

    def learn(self, outcome):
        pass


class BatchEcho(BatchForm, reference=Echo, fixed_shape=True):
    """Its twin: every row's current token, k times, one (B, k) tensor."""

    name, topk, window = "echo", 0, None
    made: list[Echo] = []  # the proposers this form was made from (the test reads it)

    def __init__(self, k: int) -> None:
        self.depth, self.parents = k, torch.arange(-1, k - 1)

    @classmethod
    def from_proposer(cls, proposer, max_depth, vocab_size):
        cls.made.append(proposer)
        return cls(proposer.k)

    def begin(self, state):
        self.parents = self.parents.to(state.text.device)

    def propose(self, state):
        tokens = state.current[:, None].expand(-1, self.depth)
        return Drafts.of(tokens, self.parents, torch.ones_like(tokens, dtype=torch.bool))

    def learn(self, state, outcome, part):
        pass

    def select(self, keep):
        pass


class Murmur(Echo):
    """A variant of the reference: a subclass has no twin of its own unless it registers one."""


class Hush(Echo):
    """A source whose twin does not keep one shape: a captured step refuses it."""


class BatchHush(BatchEcho, reference=Hush, fixed_shape=False):
    pass


def greedy_rows(model, budget):
    return [greedy_decode(model, p, budget, eos_token_id=[]).token_ids for p in PROMPTS]


def test_a_registered_form_is_what_a_batch_drafts_with_and_the_output_is_greedys():
    model = family_model("llama", 8, 1)
    proposer = Echo(3)
    BatchEcho.made.clear()
    result = draft_decode(model, PROMPTS, 12, proposers=[proposer], eos_token_id=[])
    assert [row.token_ids for row in result.rows] == greedy_rows(model, 12)
    assert BatchEcho.made == [proposer]
    assert batch_form(proposer) is BatchEcho and Echo in fixed_shape_references()
    assert isinstance(batched_source(Murmur(), 4, 8), RowProposers)  # no twin: the host, row by row
    variant = draft_decode(model, PROMPTS, 12, proposers=[Murmur(2)], eos_token_id=[])
    assert [row.token_ids for row in variant.rows] == greedy_rows(model, 12)


def test_a_captured_step_takes_the_fixed_shape_forms_only():
    model = family_model("llama", 8, 1)
    decoder = CapturedBatchDecoder(model, [Echo(2)], max_length=64, mode=None, steps_per_read=2)
    assert [row.token_ids for row in decoder(PROMPTS, 10).rows] == greedy_rows(model, 10)
    for refused in (Hush(), Murmur()):
        with pytest.raises(TypeError, match=f"{type(refused).__name__} cannot be captured.*Echo"):
            CapturedBatchDecoder(model, [refused], max_length=64, mode=None)


def test_a_form_must_name_one_reference_of_its_own():
    with pytest.raises(TypeError, match="must name its reference proposer"):
        type("Nameless", (BatchForm,), {})
    with pytest.raises(ValueError, match="Echo already has a batch form, .*BatchEcho"):
        type("Rival", (BatchForm,), {}, reference=Echo)
    with pytest.raises(TypeError, match="fixed_shape must be a bool"):
        type("Vague", (BatchForm,), {}, reference=Murmur, fixed_shape="yes")
    with pytest.raises(TypeError, match="reference must be a proposer class"):
        type("Instance", (BatchForm,), {}, reference=Echo())
    assert batch_form(Murmur()) is None  # none of the refused forms was registered
