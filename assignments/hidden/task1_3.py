"""Probes of task 1.3: verdicts on random draft tries, compared with the reference's.

A case is a trie (siblings carry distinct tokens, as every trie ladref builds), drawn in the
reference's run and recorded as tokens and parents, and the model's predictions after the current
token and after every node: along the nodes that spell greedy's own continuation the predictions
follow it, elsewhere they are random. Hidden tries go deeper (up to 14) and wider than any public
test's. `verify_chosen` gets logits instead of predictions and a chooser that takes their argmax
and records what it was shown.
"""

from __future__ import annotations

import random

import torch
from probing import Group, tree_of

from ladref.tree import DraftTree
from ladref.verify import verify_chosen, verify_greedy

VOCAB = 3  # few tokens, so that drafts often follow greedy's continuation for a while


def make_case(rng: random.Random, k: int, deepest: int, most: int) -> dict:
    """A trie of random drafts, some copying greedy's continuation for a random length."""
    depth = rng.randint(1, deepest)
    chain = [rng.randrange(VOCAB) for _ in range(depth + 1)]  # greedy's y_1 .. y_{depth+1}
    paths = []
    for _ in range(rng.randint(0, most)):
        keep = rng.randint(0, depth)
        paths.append(chain[:keep] + [rng.randrange(VOCAB) for _ in range(rng.randint(0 if keep else 1, depth - keep))])
    tree = DraftTree.from_paths(paths, "s")  # the reference's trie (`cases` runs only in its run)
    preds = []
    for node in range(len(tree)):  # after a node spelling chain[:d], greedy predicts chain[d]
        spelled = tree.path_tokens(node)
        on_chain = spelled == chain[: len(spelled)]
        preds.append(chain[len(spelled)] if on_chain and len(spelled) < len(chain) else rng.randrange(VOCAB))
    return {"id": f"depth{depth}-n{len(tree)}-{k}", "tokens": tree.tokens.tolist(), "parents": tree.parents.tolist(),
            "root_pred": chain[0], "node_preds": preds}


def greedy(case: dict) -> dict:
    verdict = verify_greedy(tree_of(case), case["root_pred"], torch.tensor(case["node_preds"], dtype=torch.long))
    return {"tokens": verdict.tokens.tolist(), "path": [int(node) for node in verdict.path],
            "tokens dtype": str(verdict.tokens.dtype), "tokens dim": verdict.tokens.dim()}


def one_hot(token: int, noise: list[float]) -> list[float]:
    """Logits whose argmax is `token` (noise below 1 elsewhere)."""
    return [2.0 if v == token else noise[v] for v in range(VOCAB)]


def chosen_case(rng: random.Random, k: int, deepest: int, most: int) -> dict:
    case = make_case(rng, k, deepest, most)
    case["root_logits"] = one_hot(case.pop("root_pred"), [rng.random() for _ in range(VOCAB)])
    case["node_logits"] = [one_hot(p, [rng.random() for _ in range(VOCAB)]) for p in case.pop("node_preds")]
    case["context"] = [rng.randrange(VOCAB) for _ in range(rng.randint(1, 4))]
    return case


def chosen(case: dict) -> dict:
    shown = []

    def choose(context, logits, drafts) -> int:
        shown.append({"context": [int(t) for t in context], "argmax": int(torch.as_tensor(logits).argmax()),
                      "drafts": sorted(int(d) for d in drafts)})
        return shown[-1]["argmax"]

    node_logits = torch.tensor(case["node_logits"], dtype=torch.float64).view(len(case["tokens"]), VOCAB)
    verdict = verify_chosen(tree_of(case), torch.tensor(case["root_logits"], dtype=torch.float64), node_logits, choose,
                            list(case["context"]))
    return {"tokens": verdict.tokens.tolist(), "path": [int(node) for node in verdict.path], "chooser saw": shown}


GROUPS = {
    "verify_greedy (small tries)": Group(greedy, 2, visible=True),
    "verify_greedy": Group(greedy, 3),
    "verify_chosen (small tries)": Group(chosen, 1, visible=True),
    "verify_chosen": Group(chosen, 2),
}


def cases(seed: int) -> dict[str, list[dict]]:
    rng = random.Random(seed)
    return {
        "verify_greedy (small tries)": [make_case(rng, k, 3, 3) for k in range(15)],
        "verify_greedy": [make_case(rng, k, 14, 12) for k in range(40)],
        "verify_chosen (small tries)": [chosen_case(rng, k, 3, 3) for k in range(10)],
        "verify_chosen": [chosen_case(rng, k, 14, 12) for k in range(25)],
    }
