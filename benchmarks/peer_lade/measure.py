"""Run LADE (in its own process and environment) and ladref on the same prompts, interleaved.

For each prompt every method runs once, the order rotated from prompt to prompt; LADE's calls go
to `lade_worker.py` in build/peer_lade/venv over a pipe (the worker sleeps on its stdin while
ladref runs, so the two never compete for the cores). One short warm-up call of each method
comes first and is not recorded.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import torch
from ladref_api import LookaheadConfig, greedy_decode, lookahead_decode
from mimic import LadeChoices, mimic_decode

WORKER = Path(__file__).with_name("lade_worker.py")
MIMICS = {"mimic-seed": LadeChoices(seed_window=True, cap_full_match=False),
          "mimic-cap": LadeChoices(seed_window=False, cap_full_match=True),
          "mimic-lade": LadeChoices(seed_window=True, cap_full_match=True)}


@dataclass(frozen=True)
class Method:
    """One decoder of the comparison.

    Attributes:
        stack: "lade" (transformers 4.34 + lade, in the worker) or "ladref".
        name: "greedy", "lookahead" (ladref: with the prompt pool, its default),
            "lookahead-nopool" (ladref, ``pool_from_prompt=False``) or one of `MIMICS`.
        config: (N, W, G), None for greedy.
    """

    stack: str
    name: str
    config: tuple[int, int, int] | None = None

    @property
    def label(self) -> str:
        return f"{self.stack}/{self.name}" + (f"@{','.join(map(str, self.config))}" if self.config else "")


def methods(configs: list[tuple[int, int, int]], mimic: bool = True) -> list[Method]:
    """Greedy on both stacks, then for each (N, W, G): LADE, ladref with and without the prompt pool, the mimics."""
    out = [Method("lade", "greedy"), Method("ladref", "greedy")]
    for cfg in configs:
        out += [Method("lade", "lookahead", cfg), Method("ladref", "lookahead-nopool", cfg), Method("ladref", "lookahead", cfg)]
        out += [Method("ladref", name, cfg) for name in MIMICS] if mimic else []
    return out


class LadeWorker:
    """The LADE worker process: one JSON request per line in, one JSON answer per line out.

    Args:
        python: the peer environment's interpreter.
        model_dir: the converted HF folder.
        device, dtype, threads: as for the ladref side.
        log: file receiving the worker's stderr.
    """

    def __init__(self, python: Path, model_dir: Path, device: str, dtype: str, threads: int, log: Path) -> None:
        cmd = [str(python), str(WORKER), "--model", str(model_dir), "--device", device, "--dtype", dtype, "--threads", str(threads)]
        self._log = open(log, "a", encoding="utf-8")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True)
        self.info = self._read()

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the LADE worker died (exit {self.proc.poll()}); see {self._log.name}")
        return json.loads(line)

    def run(self, request: dict) -> dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        self._log.close()


def ladref_config(cfg: tuple[int, int, int], pool_from_prompt: bool) -> LookaheadConfig:
    n, w, g = cfg
    return LookaheadConfig(window_size=w, ngram_size=n, max_candidates=g, pool_from_prompt=pool_from_prompt)


def run_method(method: Method, ids: list[int], max_new_tokens: int, model: torch.nn.Module, worker: LadeWorker, eos: int) -> dict:
    """One call of one method; returns tokens, steps, tokens fed per step and wall time."""
    if method.stack == "lade":
        request = {"method": method.name, "ids": ids, "max_new_tokens": max_new_tokens, "eos_token_id": eos}
        if method.config:
            request.update(level=method.config[0], window=method.config[1], guess=method.config[2])
        return worker.run(request)
    if method.name in MIMICS:
        r = mimic_decode(model, ids, max_new_tokens, ladref_config(method.config, False), MIMICS[method.name], eos)
        return {"tokens": r.token_ids, "steps": r.steps, "fed": r.fed, "wall_s": r.wall_time_s}
    if method.name == "greedy":
        r = greedy_decode(model, ids, max_new_tokens=max_new_tokens, eos_token_id=eos)
    else:
        r = lookahead_decode(model, ids, max_new_tokens=max_new_tokens, eos_token_id=eos,
                             config=ladref_config(method.config, method.name == "lookahead"))
    s = r.stats
    return {"tokens": list(r.token_ids), "steps": s.steps, "fed": list(s.forward_tokens_per_step), "wall_s": s.wall_time_s}


def record(method: Method, prompt, ids: list[int], out: dict) -> dict:
    """One per-prompt row (the CSV's columns, plus the token ids and the tokens fed per step).

    LADE's first forward pass takes the whole prompt (plus its first window row) and yields the
    first token; ladref caches the prompt's first L-1 tokens in a pass of its own (not a step).
    So LADE's first pass is booked like ladref's: L-1 prefill tokens, the rest fed to step 1.
    """
    n, steps, fed = len(out["tokens"]), out["steps"], list(out["fed"])
    if method.stack == "lade" and fed:
        fed[0] -= len(ids) - 1
    row = {"dataset": prompt.dataset, "prompt_id": prompt.prompt_id, "prompt_len": len(ids), "stack": method.stack,
           "method": method.name, "config": ",".join(map(str, method.config)) if method.config else "-",
           "new_tokens": n, "steps": steps, "S": n / steps if steps else 0.0, "wall_s": out["wall_s"],
           "tok_s": n / out["wall_s"] if out["wall_s"] else 0.0, "mean_fed": sum(fed) / max(len(fed), 1)}
    if "debug_steps" in out:
        row["debug_steps"] = out["debug_steps"]
    row["tokens"], row["fed"] = out["tokens"], fed
    return row


def measure(prompts: list, encoded: list[list[int]], todo: list[Method], model: torch.nn.Module, worker: LadeWorker,
            max_new_tokens: int, eos: int, warmup: int = 8, progress=print, checkpoint: Path | None = None) -> list[dict]:
    """Every method on every prompt, interleaved with a rotating order; returns the per-prompt rows.

    Args:
        checkpoint: optional JSON-lines file receiving each row as soon as it is measured (a long
            run cut short keeps what it measured).
    """
    for method in todo:
        run_method(method, encoded[0], warmup, model, worker, eos)
    rows = []
    for i, (prompt, ids) in enumerate(zip(prompts, encoded)):
        order = todo[i % len(todo):] + todo[: i % len(todo)]
        for method in order:
            rows.append(record(method, prompt, ids, run_method(method, ids, max_new_tokens, model, worker, eos)))
            if checkpoint is not None:
                with open(checkpoint, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps(rows[-1]) + "\n")
        progress(f"[peer_lade] {i + 1}/{len(prompts)} {prompt.dataset} {prompt.prompt_id}")
    return rows
