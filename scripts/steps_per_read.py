"""What a read from the device a step costs a batch: `decode_batch` with one read a step against one
read every k steps (`steps_per_read`), interleaved, on a randomly initialised model of SmolLM2-135M's
shape (the same forward cost as the real model; its tokens are not text, so only ms a pass is meant
to carry over, not acceptance).

    python scripts/steps_per_read.py --device cuda --dtype float16 --rows 1,12 --every 1,8
    python scripts/steps_per_read.py --small --threads 1   (a tiny model: its forward nearly free, the host's work shows)

Prints, per (rows, source, k): passes, ms a pass (median of --repeats), tokens/s, and whether every
row equals the one-read-a-step run's.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from ladref import LookaheadConfig
from ladref.batched.loop import decode_batch
from ladref.bench.runinfo import git_commit
from ladref.batched.sources.lookahead import BatchLookahead
from ladref.batched.sources.lookup import BatchPromptLookup


def model_of(small: bool, device: str, dtype: torch.dtype) -> torch.nn.Module:
    """SmolLM2-135M's shape (30 layers, width 576, 9 heads, 3 KV heads, 49,152 tokens), random weights."""
    shape = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 vocab_size=256) if small else \
        dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
             vocab_size=49152)
    torch.manual_seed(0)
    config = LlamaConfig(**shape, max_position_embeddings=2048, tie_word_embeddings=True, attn_implementation="sdpa")
    return LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()


def sources(name: str, vocab: int) -> list:
    return {"greedy": lambda: [], "lookahead": lambda: [BatchLookahead(LookaheadConfig(4, 4, 4), vocab)],
            "prompt_lookup": lambda: [BatchPromptLookup(4)]}[name]()


def timed(model, batch, new_tokens, name, every) -> tuple[float, int, list]:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    result = decode_batch(model, batch, new_tokens, {"eos_token_id": []}, name, sources(name, model.config.vocab_size),
                          steps_per_read=every)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start, result.passes, result.token_ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--rows", default="1,12")
    parser.add_argument("--every", default="1,8")
    parser.add_argument("--methods", default="greedy,lookahead,prompt_lookup")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = model_of(args.small, args.device, getattr(torch, args.dtype))
    generator = torch.Generator().manual_seed(1)
    print(f"{args.device} {torch.cuda.get_device_name() if args.device == 'cuda' else ''} {args.dtype}, torch {torch.__version__}, "
          f"{args.threads} threads, random weights, {'tiny' if args.small else 'SmolLM2-135M'} shape, {args.new_tokens} new tokens, "
          f"medians of {args.repeats}; commit {git_commit()}")
    print("| rows | method | k | passes | ms a pass | tokens/s | rows equal to k = 1 |")
    print("|---|---|---|---|---|---|---|")
    everies = [int(k) for k in args.every.split(",")]
    for rows in (int(r) for r in args.rows.split(",")):
        period = torch.randint(0, model.config.vocab_size, (rows, 6), generator=generator)
        batch = [p.repeat(8).tolist() for p in period]  # repetitive prompts, each its own
        for name in args.methods.split(","):
            timed(model, batch, 8, name, 1)  # warm-up
            runs = {k: [] for k in everies}
            for _ in range(args.repeats):
                for k in everies:  # interleaved
                    runs[k].append(timed(model, batch, args.new_tokens, name, k))
            reference = runs[everies[0]][0][2]
            for k in everies:
                seconds = statistics.median(r[0] for r in runs[k])
                passes = runs[k][0][1]
                equal = sum(a == b for a, b in zip(runs[k][0][2], reference))
                print(f"| {rows} | {name} | {k} | {passes} | {1000 * seconds / passes:.2f} | "
                      f"{rows * args.new_tokens / seconds:.1f} | {equal}/{rows} |")


if __name__ == "__main__":
    main()
