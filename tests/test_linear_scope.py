"""The scoped linear layers of a few rows (`ladref.kernels.linear_scope`): W @ x^T equals F.linear,
and a forward pass enters the scope exactly when its B x q rows lie in `SMALL_ROWS`."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from strategies import tiny_model
from torch.overrides import _get_current_function_mode_stack

from ladref import greedy_decode, jacobi_decode
from ladref.kernels import SMALL_ROWS, SmallRowLinears, linear_scope, small_row_linear
from ladref.results import DecodeStats
from ladref.runner import ModelRunner

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("shape", [(2, 24), (1, 3, 24), (2, 4, 24), (5, 24), (12, 24), (1, 24), (0, 24)])
@pytest.mark.parametrize("bias", [True, False])
def test_small_rows_compute_what_f_linear_computes(shape, bias):
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(shape, generator=gen, dtype=torch.float64), torch.randn(40, 24, generator=gen, dtype=torch.float64)
    b = torch.randn(40, generator=gen, dtype=torch.float64) if bias else None
    out, expected = small_row_linear(x, w, b), F.linear(x, w, b)
    assert out.shape == expected.shape and out.is_contiguous()
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    with SmallRowLinears():  # the scope routes F.linear there; every other call passes through
        torch.testing.assert_close(F.linear(x, w, b), expected, rtol=0, atol=1e-12)
        assert torch.equal(torch.relu(x), x.clamp(min=0))
    rows = x.numel() // x.shape[-1]
    if rows not in SMALL_ROWS:  # outside its rows, F.linear itself: the same bits
        assert torch.equal(out, expected)


def test_the_scope_is_entered_only_for_its_rows():
    assert SMALL_ROWS[0] == 2  # one row is torch's: a matrix-vector product however it is written
    assert all(isinstance(linear_scope(rows, True), SmallRowLinears) for rows in (2, SMALL_ROWS[-1]))
    for rows, enabled in [(0, True), (1, True), (SMALL_ROWS[-1] + 1, True), (2, False), (4, False)]:
        assert not isinstance(linear_scope(rows, enabled), SmallRowLinears)


def test_a_pass_runs_its_linear_layers_in_the_scope_by_its_rows():
    model = tiny_model("llama", 32, 0)
    seen = []
    first = next(m for m in model.modules() if isinstance(m, torch.nn.Linear))
    handle = first.register_forward_hook(
        lambda module, args, out: seen.append((args[0].shape[:-1].numel(), any(isinstance(m, SmallRowLinears)
                                                                                for m in _get_current_function_mode_stack()))))
    try:
        runner = ModelRunner(model)
        runner.prefill(torch.arange(1, 13), DecodeStats())  # 11 rows: outside
        for q in (1, 2, SMALL_ROWS[-1], SMALL_ROWS[-1] + 1):
            runner.forward(torch.arange(1, q + 1))
    finally:
        handle.remove()
    assert seen == [(11, False), (1, False), (2, True), (SMALL_ROWS[-1], True), (SMALL_ROWS[-1] + 1, False)]


def test_decoding_in_the_scope_stays_greedy():
    model = tiny_model("llama", 64, 1)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    greedy = greedy_decode(model, prompt, 24).token_ids
    assert jacobi_decode(model, prompt, 24, block_size=3).token_ids == greedy  # its steps of 4 rows run in the scope
    assert greedy_decode(model, [prompt, prompt[:5]], 24).rows[0].token_ids == greedy  # a batch of two rows, too

