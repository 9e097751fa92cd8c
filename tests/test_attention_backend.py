"""The scoped SDPA kernel choice: which kernels a forward may use, that it is scoped, and that
every choice a device allows decodes exactly like transformers' generate."""

from __future__ import annotations

import pytest
import torch
from strategies import hf_greedy, tiny_model
from torch.nn.attention import SDPBackend

from ladref import LookaheadConfig, greedy_decode, jacobi_decode, lookahead_decode
from ladref.kernels import sdpa_backends
from ladref.runner import ModelRunner

pytestmark = pytest.mark.usefixtures("one_thread")
CPU, CUDA = torch.device("cpu"), torch.device("cuda")  # a device object needs no GPU
PROMPT = [1, 2, 3, 1, 2, 3, 1, 2]


def sdp_flags() -> dict[str, bool]:
    """Which SDPA kernels torch may pick right now (the flags `sdpa_kernel` sets and restores)."""
    return {"flash": torch.backends.cuda.flash_sdp_enabled(), "efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
            "math": torch.backends.cuda.math_sdp_enabled(), "cudnn": torch.backends.cuda.cudnn_sdp_enabled()}


@pytest.mark.parametrize("device, choice, expected", [
    (CUDA, "auto", (SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH)),  # never cuDNN's per-shape plans
    (CPU, "auto", (SDPBackend.FLASH_ATTENTION, SDPBackend.MATH)),  # torch's CPU flash kernel takes masks
    (CUDA, "efficient", (SDPBackend.EFFICIENT_ATTENTION,)),
    (CUDA, "cudnn", (SDPBackend.CUDNN_ATTENTION,)),  # allowed on request, to reproduce the planning cost
    (CUDA, "math", (SDPBackend.MATH,)),
    (CPU, "flash", (SDPBackend.FLASH_ATTENTION,)),
    (CPU, "math", (SDPBackend.MATH,)),
    (CUDA, "torch", None),
    (CPU, "torch", None),
    (torch.device("mps"), "auto", None),  # no known-good choice there: torch decides
])
def test_kernel_choice_per_device(device, choice, expected):
    assert sdpa_backends(choice, device, "sdpa") == expected


@pytest.mark.parametrize("device, choice, message", [
    (CUDA, "flash", "SDPA flash attention takes no attention mask on cuda"),
    (CPU, "efficient", "SDPA efficient attention has no kernel on cpu"),
    (CPU, "cudnn", "SDPA cudnn attention has no kernel on cpu"),
    (CPU, "Efficient", "unknown attention_backend 'Efficient'"),
])
def test_kernels_that_cannot_take_the_mask_are_refused(device, choice, message):
    with pytest.raises(ValueError, match=message):
        sdpa_backends(choice, device, "sdpa")


def test_a_kernel_choice_needs_sdpa_attention():
    assert sdpa_backends("auto", CUDA, "eager") is None  # nothing to choose: eager attention is plain matmuls
    with pytest.raises(ValueError, match="picks an SDPA kernel, but the model uses 'eager' attention"):
        ModelRunner(tiny_model("llama", 16, 0, "eager"), attention_backend="math")


@pytest.mark.parametrize("choice, allowed", [
    ("auto", {"flash": True, "efficient": False, "math": True, "cudnn": False}),
    ("math", {"flash": False, "efficient": False, "math": True, "cudnn": False}),
    ("flash", {"flash": True, "efficient": False, "math": False, "cudnn": False}),
])
def test_every_forward_runs_inside_the_scoped_choice(choice, allowed):
    model = tiny_model("llama", 16, 0)
    before, seen = sdp_flags(), []
    handle = model.model.layers[0].self_attn.register_forward_pre_hook(lambda *_: seen.append(sdp_flags()))
    try:
        result = lookahead_decode(model, PROMPT, 12, config=LookaheadConfig(3, 3, 3), eos_token_id=[], attention_backend=choice)
    finally:
        handle.remove()
    assert len(seen) == result.stats.steps  # every step, the first with the prompt in its pass
    assert all(flags == allowed for flags in seen)
    assert sdp_flags() == before  # scoped: nothing global changed


def test_torch_choice_leaves_the_dispatch_alone():
    model = tiny_model("llama", 16, 0)
    before, seen = sdp_flags(), []
    handle = model.model.layers[0].self_attn.register_forward_pre_hook(lambda *_: seen.append(sdp_flags()))
    try:
        greedy_decode(model, PROMPT, 4, eos_token_id=[], attention_backend="torch")
    finally:
        handle.remove()
    assert seen and all(flags == before for flags in seen)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
@pytest.mark.parametrize("choice", ["auto", "torch", "flash", "math"])
def test_every_cpu_choice_decodes_exactly_like_generate(arch, choice):
    model = tiny_model(arch, 16, 1)
    runner = ModelRunner(model, attention_backend=choice)
    logits = runner.forward(torch.tensor(PROMPT))
    torch.testing.assert_close(logits, model(torch.tensor([PROMPT])).logits[0], rtol=1e-9, atol=1e-9)
    expected = hf_greedy(model, PROMPT, 24)
    assert greedy_decode(model, PROMPT, 24, eos_token_id=[], attention_backend=choice).token_ids == expected
    assert jacobi_decode(model, PROMPT, 24, block_size=4, eos_token_id=[], attention_backend=choice).token_ids == expected
    config = LookaheadConfig(4, 4, 4)
    assert lookahead_decode(model, PROMPT, 24, config=config, eos_token_id=[], attention_backend=choice).token_ids == expected
