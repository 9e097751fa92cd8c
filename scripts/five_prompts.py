"""Greedy vs lookahead on five hand-picked prompts (chat, code, math), same process, interleaved.

For each prompt and each config, greedy and lookahead are timed back to back, `--repeats` times,
and the fastest time of each is kept (CPU timings are noisy); S, the speedup and the output match
are printed per prompt and in total.

    python scripts/five_prompts.py --configs 4,4,4 2,3,2 --max-new-tokens 128 --threads 2
"""

from __future__ import annotations

import argparse

import torch

from ladref import (
    LookaheadConfig,
    chat_ids,
    greedy_decode,
    load_default_model,
    lookahead_decode,
)

PROMPTS = {
    "chat": "Give three tips for staying healthy.",
    "chat2": "Explain to a ten-year-old why the sky is blue.",
    "code": "Write a Python function that checks whether a string is a palindrome.",
    "code2": "Write a Python class for a stack with push, pop and peek methods.",
    "math": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?",
}


def fastest(decode, repeats: int):
    """The result of the fastest of `repeats` identical calls."""
    return min((decode() for _ in range(repeats)), key=lambda r: r.stats.wall_time_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=["4,4,4"], help="W,N,G triples")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    configs = [LookaheadConfig(*map(int, c.split(","))) for c in args.configs]
    model, tokenizer = load_default_model(device="cpu", dtype=torch.float32)
    print(f"SmolLM2-135M-Instruct float32, CPU, {torch.get_num_threads()} threads, {args.max_new_tokens} tokens")
    greedy_decode(model, chat_ids(tokenizer, "Hi"), 8)  # warm-up
    totals = {c: [0, 0, 0.0, 0.0, 0] for c in configs}  # tokens, steps, greedy s, lookahead s, matches
    for name, text in PROMPTS.items():
        ids = chat_ids(tokenizer, text)
        for c in configs:
            greedy = fastest(lambda: greedy_decode(model, ids, args.max_new_tokens), args.repeats)
            ahead = fastest(lambda: lookahead_decode(model, ids, args.max_new_tokens, config=c), args.repeats)
            g, a = greedy.stats, ahead.stats
            match = greedy.token_ids == ahead.token_ids
            t = totals[c]
            t[0] += a.new_tokens; t[1] += a.steps; t[2] += g.wall_time_s; t[3] += a.wall_time_s; t[4] += match
            print(f"{name:6s} W={c.window_size} N={c.ngram_size} G={c.max_candidates}: {a.new_tokens} tokens, "
                  f"S={a.compression:.2f}, greedy {g.wall_time_s:.2f} s, lookahead {a.wall_time_s:.2f} s, "
                  f"speedup {g.wall_time_s / a.wall_time_s:.2f}x, match {match}", flush=True)
    for c, (tokens, steps, gs, ls, matches) in totals.items():
        print(f"ALL    W={c.window_size} N={c.ngram_size} G={c.max_candidates}: S={tokens / steps:.2f}, "
              f"greedy {gs:.1f} s, lookahead {ls:.1f} s, speedup {gs / ls:.2f}x, match {matches}/{len(PROMPTS)}")


if __name__ == "__main__":
    main()
