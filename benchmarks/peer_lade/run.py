"""Side by side with the original: hao-ai-lab's LADE 0.0.2 against ladref, same model, prompts and configs.

One command builds LADE's environment (build/peer_lade/venv), converts the embedded model to an HF
folder both stacks read (build/peer_lade/smollm2-135m-instruct), runs greedy and lookahead on both
stacks plus ladref's LADE mimics (`mimic.py`), compares every output with greedy and writes
results (JSON, CSV, Markdown) to --out:

    python benchmarks/peer_lade/run.py                                    # CPU, float32, 10 prompts of each of DATASETS
    python benchmarks/peer_lade/run.py --limit 1 --max-new-tokens 32      # a quick check
    python benchmarks/peer_lade/run.py --device cuda --dtype float16      # on a GPU

(N, W, G) configs are given LADE's way round: LEVEL, WINDOW_SIZE, GUESS_SET_SIZE.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from convert import EOS_ID, MODEL_DIR, convert  # noqa: E402
from ladref_api import canonical_dataset, encode_prompts, load_prompts  # noqa: E402
from measure import LadeWorker, measure, methods  # noqa: E402
from peer_env import BUILD, LADE_PIN, PEER_PINS, build  # noqa: E402
from peer_report import annotate, markdown, write  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DATASETS = ("humaneval", "mtbench", "gsm8k")  # the committed run's (there named "math", GSM8K's former name)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default=",".join(DATASETS),
                        help="comma-separated: humaneval, mtbench, gsm8k (alias math), specbench, specbench:<task>")
    parser.add_argument("--limit", type=int, default=10, help="first K prompts of each dataset")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--configs", nargs="+", default=["5,7,7", "5,15,15"], help="N,W,G triples (LEVEL,WINDOW_SIZE,GUESS_SET_SIZE)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--dtype", default=None, help="default float32 on cpu, float16 on cuda")
    parser.add_argument("--threads", type=int, default=2, help="torch threads on both sides")
    parser.add_argument("--attn", default="eager", choices=("eager", "sdpa"), help="ladref's attention (LADE's 4.34 Llama is eager)")
    parser.add_argument("--no-mimic", action="store_true", help="skip ladref's LADE mimics (mimic-seed, -cap, -lade)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args(argv)
    args.dtype = args.dtype or ("float16" if args.device.startswith("cuda") else "float32")
    args.configs = [tuple(int(x) for x in c.split(",")) for c in args.configs]
    try:
        args.datasets = list(dict.fromkeys(canonical_dataset(d) for d in args.datasets.split(",")))
    except ValueError as error:
        parser.error(str(error))
    return args


def load_ladref_side(model_dir: Path, device: str, dtype: str, attn: str):
    """The converted folder through transformers 5 (the stack ladref runs on)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype), attn_implementation=attn)
    return model.to(device).eval(), AutoTokenizer.from_pretrained(model_dir)


def meta(args: argparse.Namespace, worker_info: dict, started: float, load_start: tuple) -> dict:
    """Settings and machine of the run (saved with the results)."""
    import transformers

    return {
        "command": "python benchmarks/peer_lade/run.py " + " ".join(sys.argv[1:]), "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)),
        "minutes": round((time.time() - started) / 60, 1), "datasets": args.datasets, "limit": args.limit,
        "max_new_tokens": args.max_new_tokens, "configs_NWG": [list(c) for c in args.configs], "device": args.device, "dtype": args.dtype,
        "threads": args.threads, "ladref_attn": args.attn, "eos_token_id": EOS_ID, "machine": platform.platform(),
        "processor": platform.processor(), "cpus": os.cpu_count(), "loadavg_start": load_start, "loadavg_end": os.getloadavg(),
        "ladref_side": {"torch": torch.__version__, "transformers": transformers.__version__},
        "lade_side": {**{k: v for k, v in worker_info.items() if k != "ready"}, "pins": [*PEER_PINS, LADE_PIN]},
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started, load_start = time.time(), os.getloadavg()
    torch.set_num_threads(args.threads)
    python = build()
    model_dir = convert(MODEL_DIR)
    model, tokenizer = load_ladref_side(model_dir, args.device, args.dtype, args.attn)
    prompts = [p for d in args.datasets for p in load_prompts(d, args.limit)]
    encoded = [t[0].tolist() for t in encode_prompts(tokenizer, prompts)]
    worker = LadeWorker(python, model_dir, args.device, args.dtype, args.threads, BUILD / "worker.log")
    try:
        rows = measure(prompts, encoded, methods(args.configs, not args.no_mimic), model, worker, args.max_new_tokens, EOS_ID,
                       checkpoint=BUILD / f"rows_{time.strftime('%Y%m%d_%H%M%S')}.jsonl")
    finally:
        worker.close()
    annotate(rows, {(p.dataset, p.prompt_id): ids for p, ids in zip(prompts, encoded)}, model)
    datasets = list(dict.fromkeys(p.dataset for p in prompts))  # as the rows name them (specbench:<task> -> specbench)
    summary = write(args.out, meta(args, worker.info, started, load_start), rows, datasets)
    print(markdown(summary))
    print(f"[peer_lade] results in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
