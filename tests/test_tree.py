"""Draft trees: the trie of drafted paths, its mask and its bookkeeping."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ladref import DraftTree

pytestmark = pytest.mark.task1_5

paths_lists = st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=5), max_size=8)


def test_shared_prefixes_are_one_node():
    tree = DraftTree.from_paths([[1, 2, 3], [1, 2, 4], [5], [1, 6]], "pool")
    assert tree.tokens.tolist() == [1, 2, 3, 4, 5, 6]
    assert tree.parents.tolist() == [-1, 0, 1, 1, -1, 0]
    assert tree.depths.tolist() == [1, 2, 3, 3, 1, 2]
    assert tree.sources == ("pool",) * 6
    assert tree.children == {-1: [0, 4], 0: [1, 5], 1: [2, 3]}


def test_chains_repeat_a_prefix_the_trie_feeds_once():
    paths = [[1, 2], [1, 3]]
    chains, trie = DraftTree.chains(paths, "pool"), DraftTree.from_paths(paths, "pool")
    assert chains.tokens.tolist() == [1, 2, 1, 3] and chains.parents.tolist() == [-1, 0, -1, 2]
    assert trie.tokens.tolist() == [1, 2, 3] and trie.parents.tolist() == [-1, 0, 0]


@given(paths_lists)
def test_every_path_is_spelled_once_from_the_root(paths):
    tree = DraftTree.from_paths(paths, "s")
    for path in paths:
        nodes = tree.find_path(path)
        assert len(nodes) == len(path) and tree.path_tokens(nodes[-1]) == path
    prefixes = {tuple(p[: i + 1]) for p in paths for i in range(len(p))}
    assert len(tree) == len(prefixes)  # one node per distinct prefix: a trie
    assert sorted(tuple(tree.path_tokens(i)) for i in range(len(tree))) == sorted(prefixes)


@given(paths_lists)
def test_ancestor_mask_is_each_nodes_root_path(paths):
    tree = DraftTree.from_paths(paths, "s")
    seen = tree.ancestors()
    assert seen.shape == (len(tree), len(tree))
    for node in range(len(tree)):
        assert torch.nonzero(seen[node]).flatten().tolist() == tree.path(node)  # itself and its ancestors, in order
        assert int(tree.depths[node]) == len(tree.path(node))


@given(paths_lists, paths_lists)
def test_merge_is_the_trie_of_both(first, second):
    merged = DraftTree.from_paths(first, "a").merge(DraftTree.from_paths(second, "b"))
    assert merged.tokens.tolist() == DraftTree.from_paths(first + second, "x").tokens.tolist()
    for node in range(len(merged)):  # a node proposed by both keeps the first tree's source
        in_first = any(p[: len(merged.path(node))] == merged.path_tokens(node) for p in first)
        assert merged.sources[node] == ("a" if in_first else "b")


@given(paths_lists, paths_lists)
def test_locate_finds_each_node_of_a_merged_tree(first, second):
    own = DraftTree.from_paths(second, "b")
    merged = DraftTree.from_paths(first, "a").merge(own)
    at = merged.locate(own)
    assert len(at) == len(own) and len(set(at)) == len(at)
    for node, there in enumerate(at):  # the same path, spelled in the merged tree
        assert merged.path_tokens(there) == own.path_tokens(node) == [int(t) for t in own.tokens[own.path(node)]]
    with pytest.raises(ValueError, match=r"node 0 of the other tree \(path \[7\]\) is not in this tree"):
        merged.locate(DraftTree.from_paths([[7]], "c"))


def test_select_prune_and_depth_limit_keep_ancestors():
    tree = DraftTree.from_paths([[1, 2, 3], [4, 5]], "s")
    assert tree.prune(2).tokens.tolist() == [1, 2]
    sub = tree.select([0, 3, 4])
    assert sub.tokens.tolist() == [1, 4, 5] and sub.parents.tolist() == [-1, -1, 1]
    assert tree.within_depth(1).tokens.tolist() == [1, 4]
    with pytest.raises(ValueError, match="without its parent"):
        tree.select([1])


def test_bad_trees_are_refused():
    with pytest.raises(ValueError, match="parent index"):
        DraftTree(torch.tensor([1, 2]), torch.tensor([1, -1]), ("s", "s"))
    with pytest.raises(ValueError, match="n sources"):
        DraftTree(torch.tensor([1]), torch.tensor([-1]), ())
    with pytest.raises(TypeError, match="integer"):
        DraftTree(torch.tensor([1.0]), torch.tensor([-1]), ("s",))
    assert len(DraftTree.empty()) == 0 and DraftTree.empty().ancestors().shape == (0, 0)


@st.composite
def parent_lists(draw, most: int = 9) -> list[int]:
    """Any tree's parents: node i's parent is -1 (the root) or an earlier node."""
    return [draw(st.integers(-1, i - 1)) for i in range(draw(st.integers(0, most)))]


def tree_of(parents: list[int]) -> DraftTree:
    """A tree of the given shape (tokens do not matter to its mask)."""
    return DraftTree(torch.arange(len(parents)), torch.tensor(parents, dtype=torch.long), ("s",) * len(parents))


@given(parent_lists())
def test_ancestor_mask_is_the_closure_of_the_parent_relation(parents):
    """The mask of any tree (tries or not) is the reflexive transitive closure of "j is i's parent",
    and `path(i)` walks from a child of the root down to i, parent to child."""
    tree, n = tree_of(parents), len(parents)
    seen = tree.ancestors()
    assert seen.dtype == torch.bool and seen.shape == (n, n)
    assert seen.diagonal().all()  # reflexive
    assert all(seen[i, p] for i, p in enumerate(parents) if p >= 0)  # holds the parent relation
    assert not ((seen.long() @ seen.long() > 0) & ~seen).any()  # transitive
    for i, j in torch.nonzero(seen & ~torch.eye(n, dtype=torch.bool)).tolist():  # and nothing more
        assert parents[i] >= 0 and seen[parents[i], j], f"node {j} is not an ancestor of node {i}"
    for i in range(n):
        path = tree.path(i)
        assert path[-1] == i and parents[path[0]] == -1
        assert all(parents[child] == parent for parent, child in zip(path, path[1:]))
