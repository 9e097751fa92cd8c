"""Task 1.3: greedy verification of a draft tree accepts exactly greedy's tokens, as many as it can."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ladref import DraftTree
from ladref.verify import verify_chosen, verify_greedy

pytestmark = pytest.mark.task1_3

tries = st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=5), max_size=8).map(lambda p: DraftTree.from_paths(p, "s"))


def test_full_match_accepts_the_path_plus_one():
    tree = DraftTree.from_paths([[7, 8, 9]], "s")  # N = 4
    verdict = verify_greedy(tree, 7, torch.tensor([8, 9, 3]))
    assert verdict.tokens.tolist() == [7, 8, 9, 3] and verdict.path == [0, 1, 2] and verdict.matched == 3


def test_no_match_accepts_the_models_own_token():
    verdict = verify_greedy(DraftTree.from_paths([[1, 2], [3, 4]], "s"), 5, torch.tensor([2, 0, 4, 0]))
    assert verdict.tokens.tolist() == [5] and verdict.path == [] and verdict.matched == 0


def test_the_branch_greedy_takes_wins():
    tree = DraftTree.from_paths([[5, 1, 1], [5, 6, 1], [9, 6, 7]], "s")  # nodes 5, 1, 1, 6, 1, 9, 6, 7
    preds = torch.tensor([6, 0, 0, 2, 0, 6, 7, 8])  # argmax after each node
    verdict = verify_greedy(tree, 5, preds)
    assert verdict.tokens.tolist() == [5, 6, 2] and verdict.path == [0, 3]


def test_no_drafts_is_one_greedy_step():
    verdict = verify_greedy(DraftTree.empty(), 4, torch.empty(0, dtype=torch.long))
    assert verdict.tokens.tolist() == [4] and verdict.path == []


@given(st.data(), st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=5), max_size=7))
def test_accepted_tokens_follow_the_greedy_chain(data, paths):
    # a fixed "model": the argmax after token t is next_of[t]; greedy from y_1 is the chain
    next_of = data.draw(st.lists(st.integers(0, 4), min_size=5, max_size=5))
    first = data.draw(st.integers(0, 4))
    tree = DraftTree.from_paths(paths, "s")
    verdict = verify_greedy(tree, first, torch.tensor(next_of)[tree.tokens])
    chain = [first]
    while len(chain) < 7:
        chain.append(next_of[chain[-1]])
    k = verdict.matched
    assert verdict.tokens.tolist() == chain[: k + 1]  # exactly greedy's tokens
    assert verdict.path == tree.find_path(chain[:k])  # along the tree
    assert len(tree.find_path(chain[: k + 1])) == k  # and no further: the next greedy token is not a child there


def predictions(data, tree: DraftTree) -> tuple[int, list[int]]:
    """Any y_1 and any (n,) predictions after the nodes (not a model's: the rule must hold for all)."""
    return data.draw(st.integers(0, 3)), data.draw(st.lists(st.integers(0, 3), min_size=len(tree), max_size=len(tree)))


def check_walk(tree: DraftTree, root_pred: int, preds: list[int], tokens: list[int], path: list[int]) -> None:
    """The verdict (tokens, path) is the walk the rule prescribes for these predictions."""
    own, parents = tree.tokens.tolist(), tree.parents.tolist()
    targets = [root_pred] + [preds[node] for node in path]  # y_1 .. y_{k+1}
    assert [parents[node] for node in path] == [-1, *path][: len(path)]  # a walk down from the root
    assert [own[node] for node in path] == targets[:-1]  # each node carries the prediction before it
    assert tokens == targets  # the path's tokens, then the next prediction
    last = path[-1] if path else -1
    assert targets[-1] not in [own[i] for i in range(len(tree)) if parents[i] == last]  # it stops only where it must


@given(st.data(), tries)
def test_a_verdict_follows_any_predictions_as_far_as_the_trie_goes(data, tree):
    """For any trie and any predictions: each path node carries the prediction before it (y_1 first), the
    accepted tokens are the path's tokens plus the next prediction, and no child of the last node carries it."""
    root_pred, preds = predictions(data, tree)
    verdict = verify_greedy(tree, root_pred, torch.tensor(preds, dtype=torch.long))
    assert verdict.tokens.dtype == torch.long and verdict.matched == len(verdict.path)
    check_walk(tree, root_pred, preds, verdict.tokens.tolist(), verdict.path)


@given(st.data(), tries)
def test_a_chooser_picks_each_token_from_what_it_is_shown(data, tree):
    """`verify_chosen` asks the chooser once per accepted token, with the sequence so far, the logits
    after the node reached (the root's first) and the tokens of that node's children; with a chooser
    that takes the argmax it walks as the greedy rule does."""
    root_pred, preds = predictions(data, tree)
    root_logits = torch.nn.functional.one_hot(torch.tensor(root_pred), 4).double()
    node_logits = torch.nn.functional.one_hot(torch.tensor(preds, dtype=torch.long), 4).double().view(len(tree), 4)
    shown = []

    def choose(context, logits, drafts):
        shown.append((list(context), logits, list(drafts)))
        return int(logits.argmax())

    verdict = verify_chosen(tree, root_logits, node_logits, choose, [9, 8])
    tokens = verdict.tokens.tolist()
    assert verdict.tokens.dtype == torch.long
    check_walk(tree, root_pred, preds, tokens, verdict.path)
    parents, own = tree.parents.tolist(), tree.tokens.tolist()
    nodes = [-1, *verdict.path]  # where each token was picked
    assert [context for context, _, _ in shown] == [[9, 8, *tokens[:k]] for k in range(len(nodes))]
    assert [drafts for _, _, drafts in shown] == [[own[i] for i in range(len(tree)) if parents[i] == node] for node in nodes]
    assert all(torch.equal(logits, root_logits if node < 0 else node_logits[node]) for (_, logits, _), node in zip(shown, nodes))


def test_a_chooser_that_refuses_every_draft_accepts_its_own_token():
    tree = DraftTree.from_paths([[1, 2], [3]], "s")
    verdict = verify_chosen(tree, torch.zeros(5), torch.zeros(3, 5), lambda context, logits, drafts: 4, [0])
    assert verdict.tokens.tolist() == [4] and verdict.path == []
    leaf = verify_chosen(tree, torch.zeros(5), torch.zeros(3, 5), lambda context, logits, drafts: 3 if 3 in drafts else 2, [0])
    assert leaf.tokens.tolist() == [3, 2] and leaf.path == [2]  # node 3 is a leaf: the walk stops after the token picked there
