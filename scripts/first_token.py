"""How long a later process takes to decode its first token through packaged compiled steps, and its peak memory.

Run it after a benchmark has built the packages and measured the cost curves in COMPILE_DIR: the
process imports ladref, loads the model, loads every package of a `CompiledAdaptiveDecoder` over
the cache lengths given, reads the cost curves from ``COMPILE_DIR/cost.json``, and decodes one
token of the first Spec-Bench prompt; each phase is timed from the interpreter's start. With
``--prompts N`` it then decodes the first N Spec-Bench prompts per task (128 new tokens each, the
benchmark's), and prints the process's peak resident memory at the end.

    python scripts/first_token.py COMPILE_DIR 512 1468 --prompts 10
"""

import time

START = time.perf_counter()

import argparse  # noqa: E402
import resource  # noqa: E402

import torch  # noqa: E402

from ladref import CompiledAdaptiveDecoder, load_default_model  # noqa: E402
from ladref.bench.datasets import encode_prompts, load_prompts  # noqa: E402


def mark(what: str) -> None:
    print(f"{time.perf_counter() - START:6.1f} s  {what}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("compile_dir")
    parser.add_argument("max_lengths", type=int, nargs="+")
    parser.add_argument("--prompts", type=int, default=0, help="then decode this many Spec-Bench prompts per task")
    args = parser.parse_args()
    torch.set_num_threads(2)
    mark("imported torch, transformers and ladref")
    model, tokenizer = load_default_model()
    mark("model loaded")
    decoder = CompiledAdaptiveDecoder(model, max_lengths=tuple(args.max_lengths), compile_dir=args.compile_dir)
    decoder.warmup()
    found = all(all(r.from_disk.values()) for r in decoder.runners)
    mark(f"packages loaded (all from disk: {found}), cost curves read ({len(decoder.cost_cache)} in cost.json)")
    ids = encode_prompts(tokenizer, load_prompts("specbench", max(args.prompts, 1)))
    result = decoder(ids[0], 1)
    mark(f"first token decoded ({result.token_ids})")
    if args.prompts:
        tokens = sum(len(decoder(p, 128).token_ids) for p in ids)
        mark(f"{len(ids)} prompts decoded, {tokens} new tokens")
    print(f"peak resident memory {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")


if __name__ == "__main__":
    main()
