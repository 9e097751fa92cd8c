"""``python -m ladref demo``: greedy vs lookahead decoding on the embedded SmolLM2 model.

Prints both outputs, whether they match, the compression S and the wall-clock speedup, all
measured in this one run.
"""

from __future__ import annotations

import argparse

import torch

from .config import LookaheadConfig
from .greedy import greedy_decode
from .lookahead import lookahead_decode
from .models import chat_ids, load_default_model

DEFAULT_PROMPT = "Write a Python class for a stack with push, pop and peek methods."
CPU_CONFIG = LookaheadConfig(window_size=4, ngram_size=4, max_candidates=4)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the demo subcommand."""
    parser.add_argument("--prompt", default=DEFAULT_PROMPT, help="user message (sent through the chat template)")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="tokens to generate (default 128)")
    parser.add_argument("--window", type=int, default=CPU_CONFIG.window_size, help="W, lookahead window size")
    parser.add_argument("--ngram", type=int, default=CPU_CONFIG.ngram_size, help="N, n-gram size")
    parser.add_argument("--candidates", type=int, default=CPU_CONFIG.max_candidates, help="G, candidates verified per step")
    parser.add_argument("--device", default=None, help="cuda / cpu (default: cuda when available)")


def run(args: argparse.Namespace) -> int:
    """Load the model, decode the prompt both ways, print the comparison; 0 when outputs match."""
    config = LookaheadConfig(window_size=args.window, ngram_size=args.ngram, max_candidates=args.candidates)
    model, tokenizer = load_default_model(device=args.device)
    device = next(model.parameters()).device
    prompt = chat_ids(tokenizer, args.prompt)
    print(f"model: SmolLM2-135M-Instruct on {device} ({next(model.parameters()).dtype}), torch threads: {torch.get_num_threads()}")
    print(f"prompt: {args.prompt!r} ({prompt.shape[1]} tokens), W={config.window_size} N={config.ngram_size} G={config.max_candidates}")
    greedy_decode(model, prompt, 8, tokenizer=tokenizer)  # warm-up, so neither timing pays first-call costs
    greedy = greedy_decode(model, prompt, args.max_new_tokens, tokenizer=tokenizer)
    lookahead = lookahead_decode(model, prompt, config, args.max_new_tokens, tokenizer=tokenizer)
    for result in (greedy, lookahead):
        s = result.stats
        print(f"\n--- {result.method}: {s.new_tokens} tokens, {s.steps} steps, S = {s.compression:.2f}, "
              f"{s.wall_time_s:.2f} s, {s.tokens_per_second:.1f} tok/s, {s.mean_forward_tokens:.1f} tokens/forward")
        print(result.text)
    same = greedy.token_ids == lookahead.token_ids
    speedup = greedy.stats.wall_time_s / lookahead.stats.wall_time_s
    print(f"\noutputs identical: {same}; compression S = {lookahead.stats.compression:.2f}; "
          f"wall-clock speedup vs greedy = {speedup:.2f}x")
    return 0 if same else 1
