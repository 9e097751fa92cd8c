"""Compare outputs, find first divergences, summarise and write JSON, CSV and a Markdown table.

Reference output: ladref's greedy (transformers 5). Each row is compared with it, with its own
stack's greedy and (for ladref rows with a config) with LADE's output at the same config. Where an
output differs from the reference, the first differing position gets the reference model's top-2
logit gap there (one forward over prompt + common prefix): a gap near zero is a near-tie that any
change in the arithmetic (kernel shapes, batch layout, library version) may flip.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path

import torch
from ladref_api import DATASET_ALIASES, first_divergence

CSV_COLUMNS = ("dataset", "prompt_id", "prompt_len", "stack", "method", "config", "new_tokens", "steps", "S", "wall_s",
               "tok_s", "mean_fed", "debug_steps", "same_as_ref", "same_as_own_greedy", "same_as_lade", "same_schedule_as_lade", "diverge_at",
               "ref_gap", "ref_token", "got_token", "got_rank")


@torch.inference_mode()
def reference_logits(model: torch.nn.Module, prompt: list[int], prefix: list[int]) -> torch.Tensor:
    """(V,) the model's next-token logits after prompt + prefix (a plain causal forward)."""
    device = next(model.parameters()).device
    ids = torch.tensor([prompt + prefix], device=device)
    return model(input_ids=ids).logits[0, -1].float().cpu()


def divergence(model: torch.nn.Module, prompt: list[int], ref: list[int], got: list[int]) -> dict:
    """Where `got` leaves the reference, with the reference's top-2 gap and the rank of `got`'s token."""
    i = first_divergence(ref, got)
    if i is None:
        return {}
    logits = reference_logits(model, prompt, ref[:i])
    top = logits.topk(2)
    out = {"diverge_at": i, "ref_gap": float(top.values[0] - top.values[1]), "ref_token": ref[i] if i < len(ref) else None}
    if i < len(got):
        out["got_token"] = got[i]
        out["got_rank"] = int((logits > logits[got[i]]).sum()) + 1
    return out


def annotate(rows: list[dict], prompts_ids: dict[tuple[str, str], list[int]], model: torch.nn.Module) -> None:
    """Add the equality flags and the divergence fields to every row, in place."""
    by = {(r["dataset"], r["prompt_id"], r["stack"], r["method"], r["config"]): r for r in rows}
    for r in rows:
        key = (r["dataset"], r["prompt_id"])
        ref = by[(*key, "ladref", "greedy", "-")]["tokens"]
        r["same_as_ref"] = r["tokens"] == ref
        r["same_as_own_greedy"] = r["tokens"] == by[(*key, r["stack"], "greedy", "-")]["tokens"]
        lade = by.get((*key, "lade", "lookahead", r["config"])) if r["stack"] == "ladref" else None
        r["same_as_lade"] = None if lade is None else r["tokens"] == lade["tokens"]
        r["same_schedule_as_lade"] = None if lade is None else r["fed"] == lade["fed"]
        r.update(divergence(model, prompts_ids[key], ref, r["tokens"]) if not r["same_as_ref"] else {})


METHOD_ORDER = ("greedy", "lookahead", "lookahead-nopool", "mimic-seed", "mimic-cap", "mimic-lade")


def group_key(r: dict) -> tuple[str, str, str]:
    return r["stack"], r["method"], r["config"]


def table_order(key: tuple[str, str, str]) -> tuple:
    """Greedy rows first, then per config: LADE, ladref with / without the pool, the mimics."""
    stack, method, config = key
    sizes = tuple(int(x) for x in config.split(",")) if config != "-" else ()
    return (config != "-", sizes, stack != "lade", METHOD_ORDER.index(method) if method in METHOD_ORDER else 99)


def summarise(rows: list[dict], dataset: str) -> list[dict]:
    """Per-method totals on one dataset ("all" pools them): S, tok/s, speedup, identical counts."""
    rows = [r for r in rows if dataset == "all" or r["dataset"] == dataset]
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[group_key(r)].append(r)
    wall = {k: sum(r["wall_s"] for r in g) for k, g in groups.items()}
    out = []
    for (stack, method, config), g in sorted(groups.items(), key=lambda item: table_order(item[0])):
        tokens, steps = sum(r["new_tokens"] for r in g), sum(r["steps"] for r in g)
        lade = groups.get(("lade", "lookahead", config))
        lade_s = sum(r["new_tokens"] for r in lade) / sum(r["steps"] for r in lade) if lade else None
        s = tokens / steps
        out.append({
            "dataset": dataset, "stack": stack, "method": method, "config": config, "prompts": len(g), "tokens": tokens,
            "steps": steps, "S": s, "S_vs_lade": s / lade_s if lade_s and config != "-" else None,
            "tok_s": tokens / wall[(stack, method, config)], "speedup": wall[(stack, "greedy", "-")] / wall[(stack, method, config)],
            "same_as_own_greedy": sum(r["same_as_own_greedy"] for r in g), "same_as_ref": sum(r["same_as_ref"] for r in g),
            "same_as_lade": None if lade is None or stack == "lade" else sum(bool(r["same_as_lade"]) for r in g),
            "same_schedule_as_lade": None if lade is None or stack == "lade" else sum(bool(r["same_schedule_as_lade"]) for r in g),
            "debug_steps_agree": sum(r["debug_steps"] == r["steps"] for r in g) if method == "lookahead" and stack == "lade" else None,
        })
    return out


def markdown(summary: list[dict]) -> str:
    """The docs table: one line per dataset and method."""
    head = ("| dataset | stack | method | N,W,G | prompts | tokens | steps | S | S / LADE's | tok/s | speedup vs own greedy "
            "| = own greedy | = ladref greedy | = LADE | LADE's steps |")
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for s in summary:
        ratio = f"{s['S_vs_lade']:.3f}" if s["S_vs_lade"] is not None else ""
        lade = f"{s['same_as_lade']}/{s['prompts']}" if s["same_as_lade"] is not None else ""
        sched = f"{s['same_schedule_as_lade']}/{s['prompts']}" if s["same_schedule_as_lade"] is not None else ""
        lines.append(f"| {s['dataset']} | {s['stack']} | {s['method']} | {s['config']} | {s['prompts']} | {s['tokens']} "
                     f"| {s['steps']} | {s['S']:.3f} | {ratio} | {s['tok_s']:.1f} | {s['speedup']:.2f}x "
                     f"| {s['same_as_own_greedy']}/{s['prompts']} | {s['same_as_ref']}/{s['prompts']} | {lade} | {sched} |")
    return "\n".join(lines)


def write(out_dir: Path, meta: dict, rows: list[dict], datasets: list[str]) -> list[dict]:
    """peer_lade.json (meta, summary, rows with tokens), records.csv, summary.csv and summary.md."""
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = [s for d in [*datasets, "all"] for s in summarise(rows, d)]
    payload = {"meta": meta, "summary": summary, "records": rows}
    (out_dir / "peer_lade.json").write_text(json.dumps(payload, indent=1), encoding="utf-8")
    with open(out_dir / "records.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    with open(out_dir / "summary.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(summary[0]))
        writer.writeheader()
        writer.writerows(summary)
    (out_dir / "summary.md").write_text(markdown(summary) + "\n", encoding="utf-8")
    return summary


def read_results(out_dir: Path) -> tuple[dict, list[dict]]:
    """(meta, rows) of a results folder's peer_lade.json, datasets under their current names.

    Runs written before GSM8K was renamed call it "math" (the committed one does); its rows are
    read as "gsm8k", so that they line up with a new run's.
    """
    payload = json.loads((Path(out_dir) / "peer_lade.json").read_text(encoding="utf-8"))
    rows = [{**r, "dataset": DATASET_ALIASES.get(r["dataset"], r["dataset"])} for r in payload["records"]]
    return payload["meta"], rows
