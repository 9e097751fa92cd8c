"""Suffix decoding's S replayed from greedy's outputs, without a forward pass.

Greedy verification is deterministic: a step accepts the longest path of its draft tree that
greedy's output continues, plus one token. So the S of a draft source that reads only the text
(suffix decoding, with or without its memory) follows from the prompts and greedy's outputs
alone: `collect` decodes a multi-request workload once with greedy (`ladref.bench.multi`, the
same requests in the same order) and saves them; `replay` runs proposers over them, each step
proposing, accepting what greedy's output agrees with, and learning, as `ladref.step` does. It
reproduces the decoders' S up to the last step of a request (a decoder's last step may accept
past the budget, the replay's stops there): it is a tool for trying settings, the decoders'
runs are the measurement.

    python scripts/suffix_replay.py collect humaneval 24 /tmp/greedy_humaneval.json   # minutes
    python scripts/suffix_replay.py replay /tmp/greedy_humaneval.json                 # seconds
"""
import json
import sys
from collections.abc import Sequence

import torch

from ladref import SuffixMemory, SuffixProposer
from ladref.bench.multi import LATER

SETTINGS = [dict(max_nodes=16, spec_factor=1.0, max_depth=12, min_prob=0.1),
            dict(max_nodes=16, spec_factor=1.0, max_depth=12, min_prob=0.1, merge_matches=True),
            dict(max_nodes=80, spec_factor=8.0, max_depth=24, min_prob=0.1),
            dict(max_nodes=80, spec_factor=8.0, max_depth=24, min_prob=0.1, merge_matches=True),
            dict(max_nodes=80, spec_factor=80.0, max_depth=24, min_prob=0.02),
            dict(max_nodes=80, spec_factor=80.0, max_depth=24, min_prob=0.02, merge_matches=True)]
"""The `SuffixProposer` settings replayed, each with a `SuffixMemory` kept across the requests."""


class Committed:
    """What `SuffixProposer.learn` reads of a `ladref.StepOutcome`: the accepted tokens."""

    def __init__(self, tokens: list[int]) -> None:
        self.tokens = tokens


def collect(workload: str, limit: int, path: str) -> None:
    """Decode the workload's requests in order with greedy (`run_multi`); save [{"prompt": ids, "output": ids}, ...]."""
    from ladref import load_default_model
    from ladref.bench.multi import MultiRow, conversations, run_multi
    from ladref.decoders.greedy import greedy_decode

    model, tokenizer = load_default_model("cpu", torch.float32)
    requests = []

    def greedy(ids: torch.Tensor, n: int):
        result = greedy_decode(model, ids, n)
        requests.append({"prompt": ids[0].tolist(), "output": result.token_ids})
        return result

    run_multi(tokenizer, conversations(workload, limit), [MultiRow("greedy", greedy)], 96)
    with open(path, "w") as f:
        json.dump(requests, f)


def accepted(proposer: SuffixProposer, context: list[int], ahead: Sequence[int]) -> int:
    """How many of the proposed tree's nodes a step accepts: the longest path that `ahead` continues."""
    return len(proposer.propose(context).find_path(ahead))


def replay(requests: Sequence[dict], proposer: SuffixProposer) -> tuple[float, float]:
    """S over all requests and from request `LATER` on: new tokens over steps."""
    tokens, steps = [0, 0], [0, 0]
    for index, request in enumerate(requests):
        proposer.begin(request["prompt"])
        context, output, done = list(request["prompt"]), request["output"], 0
        while done < len(output):
            step = output[done : done + accepted(proposer, context, output[done:]) + 1]
            proposer.learn(Committed(step))
            context += step
            done += len(step)
            for part in ([0, 1] if index >= LATER - 1 else [0]):
                tokens[part], steps[part] = tokens[part] + len(step), steps[part] + 1
    return tokens[0] / steps[0], tokens[1] / steps[1]


def main() -> None:
    if sys.argv[1] == "collect":
        collect(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return
    with open(sys.argv[2]) as f:
        requests = json.load(f)
    print(f"| settings | S | S from request {LATER} on |\n|---|---|---|")
    for settings in SETTINGS:
        s, later = replay(requests, SuffixProposer(memory=SuffixMemory(8192), **settings))
        print(f"| {', '.join(f'{k} {v}' for k, v in settings.items())} | {s:.2f} | {later:.2f} |")


if __name__ == "__main__":
    main()
