"""LADE's side of the comparison; runs inside build/peer_lade/venv (transformers 4.34.1 + lade 0.0.2).

It imports nothing from ladref. It loads the converted HF folder, applies LADE's monkey patches
(``lade.augment_all()``), then answers one JSON request per stdin line with one JSON line on
stdout:

    {"method": "greedy", "ids": [...], "max_new_tokens": 64}
    {"method": "lookahead", "ids": [...], "max_new_tokens": 64, "level": 5, "window": 7, "guess": 7}

LADE is driven the way its README says: ``USE_LADE=1`` in the environment, ``lade.config_lade``
(a module-level dict), then a plain ``model.generate``; with ``USE_LADE=0`` the patched
``greedy_search`` falls through to transformers' own, the LADE-side greedy baseline.

Steps are counted with a forward pre-hook on ``lm_head``: LADE's ``jforward_multilevel`` calls
``LlamaModeljforward`` as a plain method, so hooks on the model or its ``LlamaModel`` never fire,
while ``self.lm_head(...)`` runs exactly once per forward pass in both modes. Each answer carries
DEBUG's own printed step count too, to check the hook against it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import sys
import time

import torch

DEBUG_LINE = re.compile(r"Generated tokens:\s+(\d+)\s+Total steps:\s+(\d+)")


def load(model_dir: str, device: str, dtype: str) -> torch.nn.Module:
    """LADE-patched Llama from the converted folder (eager attention: 4.34 has no other in core)."""
    import lade
    from transformers import AutoModelForCausalLM

    lade.augment_all()
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=getattr(torch, dtype))
    return model.to(device).eval()


class ForwardCounter:
    """Tokens fed to each forward pass, recorded by a pre-hook on the output head."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.fed: list[int] = []
        model.get_output_embeddings().register_forward_pre_hook(self._hook)

    def _hook(self, module: torch.nn.Module, args: tuple) -> None:
        self.fed.append(int(args[0].shape[1]))  # hidden states (1, q, D)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def decode(model: torch.nn.Module, counter: ForwardCounter, request: dict) -> dict:
    """One ``generate`` call, LADE or transformers' greedy, with its step count and wall time."""
    import lade

    lookahead = request["method"] == "lookahead"
    os.environ["USE_LADE"] = "1" if lookahead else "0"
    if lookahead:
        lade.config_lade(LEVEL=request["level"], WINDOW_SIZE=request["window"], GUESS_SET_SIZE=request["guess"], DEBUG=1)
    device = next(model.parameters()).device
    ids = torch.tensor([request["ids"]], device=device)
    eos = request.get("eos_token_id", 2)
    counter.fed.clear()
    printed = io.StringIO()
    sync(device)
    start = time.perf_counter()
    with torch.inference_mode(), contextlib.redirect_stdout(printed):
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=request["max_new_tokens"],
                             do_sample=False, num_beams=1, eos_token_id=eos, pad_token_id=eos)
    sync(device)
    wall = time.perf_counter() - start
    match = DEBUG_LINE.search(printed.getvalue())
    return {"tokens": out[0, ids.shape[1]:].tolist(), "steps": len(counter.fed), "fed": list(counter.fed),
            "wall_s": wall, "debug_tokens": int(match[1]) if match else None, "debug_steps": int(match[2]) if match else None}


def main() -> None:
    parser = argparse.ArgumentParser(description="LADE worker (JSON lines on stdin/stdout)")
    parser.add_argument("--model", required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = load(args.model, args.device, args.dtype)
    counter = ForwardCounter(model)
    import transformers

    print(json.dumps({"ready": True, "transformers": transformers.__version__, "torch": torch.__version__,
                      "rope_theta": getattr(model.config, "rope_theta", None)}), flush=True)
    for line in sys.stdin:
        if line.strip():
            print(json.dumps(decode(model, counter, json.loads(line))), flush=True)


if __name__ == "__main__":
    main()
