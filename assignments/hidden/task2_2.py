"""Probes of task 2.2: the decoding loop of the one-file decoder, judged by its tokens and its passes.

A case decodes a prompt with a tiny random float64 model (three families, vocabularies of 8 to 32
tokens, so that greedy text repeats and the n-gram pool gets hits) and random knobs (W, N, G),
some prompts periodic, some ending at an eos token. The answer is the tokens the submission's
`lookahead_decode_minimal` returns and the number of forward passes it made (the model's
``forward`` is wrapped and counted here, whatever calls it): both must equal the reference's, so a
loop that emits greedy's tokens in more steps than the paper's rule takes (one token a step, no
harvest, the last accepted token dropped) fails the cases where that matters, most of them.
Hidden cases decode longer with larger knobs. A small group checks that bad input gets the
errors of `check_inputs`.
"""

from __future__ import annotations

import functools
import operator
import random
from functools import cache

import torch
from probing import Group
from strategies import build_tiny

from ladref.minimal import lookahead_decode_minimal

MODELS = [("llama", 16, 0), ("qwen2", 8, 1), ("gpt2", 32, 2), ("llama", 8, 3)]  # (architecture, vocabulary, seed)


@cache
def model_of(arch: str, vocab: int, seed: int) -> torch.nn.Module:
    return build_tiny(arch, vocab, seed)


def counted(model: torch.nn.Module, call) -> tuple[object, int]:
    """What `call()` returns and how many times it ran `model.forward` (through ``model(...)`` or not)."""
    passes, forward = [0], model.forward

    @functools.wraps(forward)
    def wrapper(*args, **kwargs):
        passes[0] += 1
        return forward(*args, **kwargs)

    model.forward = wrapper
    try:
        return call(), passes[0]
    finally:
        del model.forward  # the class's forward again


def decode_case(rng: random.Random, k: int, longest: int, widest: int, largest: int) -> dict:
    """A prompt (periodic half the time), knobs W <= `widest`, N <= `largest`, G <= `widest`, up to `longest` tokens."""
    arch, vocab, seed = MODELS[k % len(MODELS)]
    if rng.random() < 0.5:
        period = [rng.randrange(vocab) for _ in range(rng.randint(1, 4))]
        prompt = (period * 12)[: rng.randint(2, 12)]
    else:
        prompt = [rng.randrange(vocab) for _ in range(rng.randint(1, 12))]
    W, N, G = rng.randint(1, widest), rng.randint(2, largest), rng.randint(1, widest) if k % 8 != 7 else 0
    return {"id": f"{arch}-V{vocab}-W{W}N{N}G{G}-{k}", "model": [arch, vocab, seed], "prompt": prompt,
            "max_new_tokens": rng.randint(longest // 2, longest), "W": W, "N": N, "G": G,
            "eos": rng.randrange(vocab) if k % 4 == 3 else None, "as tensor": k % 5 == 4}


def decode(case: dict) -> dict:
    """The tokens returned (as ints) and the forward passes made."""
    model = model_of(*case["model"])
    prompt = torch.tensor([case["prompt"]]) if case["as tensor"] else list(case["prompt"])
    with torch.inference_mode():
        out, passes = counted(model, lambda: lookahead_decode_minimal(
            model, prompt, case["max_new_tokens"], W=case["W"], N=case["N"], G=case["G"], eos_token_id=case["eos"]))
    return {"tokens": [operator.index(t) for t in out], "type": type(out).__name__, "forward passes": passes}


BAD = {  # name -> the arguments changed from a good call
    "N = 1": {"N": 1}, "W = 0": {"W": 0}, "G = -1": {"G": -1}, "max_new_tokens = 0": {"max_new_tokens": 0},
    "a float W": {"W": 2.0}, "an empty prompt": {"prompt": []}, "a token outside the vocabulary": {"prompt": [1, 99]},
}


def contract(case: dict) -> dict:
    """The error type of each bad call (the loop starts with `check_inputs`)."""
    model, found = model_of(*case["model"]), {}
    for name, change in BAD.items():
        args = {"prompt": case["prompt"], "max_new_tokens": 4, "W": 2, "N": 3, "G": 2, **change}
        try:
            lookahead_decode_minimal(model, args["prompt"], args["max_new_tokens"], W=args["W"], N=args["N"], G=args["G"])
            found[name] = "no error"
        except Exception as exc:  # noqa: BLE001 - the error's type is the answer
            found[name] = type(exc).__name__
    return found


GROUPS = {
    "decoding (short)": Group(decode, 3, visible=True),
    "bad input": Group(contract, 1, visible=True),
    "decoding": Group(decode, 6),
}


def cases(seed: int) -> dict[str, list[dict]]:
    rng = random.Random(seed)
    return {
        "decoding (short)": [decode_case(rng, k, 24, 4, 4) for k in range(8)],
        "bad input": [{"id": f"{arch}-{k}", "model": [arch, vocab, s], "prompt": [1, 2, 1, 2]}
                      for k, (arch, vocab, s) in enumerate(MODELS[:2])],
        "decoding": [decode_case(rng, k, 64, 7, 6) for k in range(16)],
    }


def warm_up() -> None:
    """Build the tiny models and run each once, before any case is timed."""
    for arch, vocab, seed in MODELS:
        model = model_of(arch, vocab, seed)
        with torch.inference_mode():
            model(torch.tensor([[1, 2]]))
