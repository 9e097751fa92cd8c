"""Random numbers a captured step can draw: each one a hash of where it is drawn, no generator state.

A `torch.Generator` is host state that ``torch.compile`` does not trace (a graph break), and a
CUDA graph replays whatever it recorded. A counter-based generator (the idea of Philox, Salmon et
al. 2011) needs neither: draw i of row b at a step is a fixed function of (seed, step, b, i).
`KeyedNoise` holds the call's seed and a step counter, both tensors on the device; each draw
hashes the four numbers through a 32-bit mixing function (`mix32`) and moves the counter on, in
place. The same seed gives the same tokens eagerly and compiled, which no generator could.
"""

from __future__ import annotations

import torch

MASK = 0xFFFFFFFF
LOW = 0xFFFF


def times32(x: torch.Tensor, c: int) -> torch.Tensor:
    """x * c mod 2^32, for 0 <= x, c < 2^32 in int64 without overflow (c split in 16-bit halves)."""
    return (x * (c & LOW) + (((x * (c >> 16)) & LOW) << 16)) & MASK


def mix32(x: torch.Tensor) -> torch.Tensor:
    """A bijection of [0, 2^32) in which every input bit flips each output bit with probability ~1/2
    (Wellons' lowbias32: xorshift, multiply, xorshift, multiply, xorshift). x: int64, any shape."""
    x = x ^ (x >> 16)
    x = times32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = times32(x, 0x846CA68B)
    return x ^ (x >> 16)


class KeyedNoise:
    """Uniforms and exponentials for every row of a batch, each a hash of (seed, step, row, index).

    Args:
        seed: the call's seed, an int in [0, 2^32) (drawn from the call's generator by the decoder).
        device: where the counter lives and the draws are made.

    Attributes:
        seed, counter: () int64 tensors on the device; the counter moves on by one at every draw.
    """

    def __init__(self, seed: int, device: torch.device | str) -> None:
        if not 0 <= seed <= MASK:
            raise ValueError(f"seed must be in [0, 2^32), got {seed}")
        self.seed = torch.tensor(seed, dtype=torch.long, device=device)
        self.counter = torch.zeros((), dtype=torch.long, device=device)

    def bits(self, rows: int, width: int) -> torch.Tensor:
        """(rows, width) int64 in [0, 2^32): the current draw's hashes; the counter moves on."""
        device = self.seed.device
        row = torch.arange(rows, device=device)[:, None]
        index = torch.arange(width, device=device)[None, :]
        key = mix32(self.seed ^ mix32(self.counter & MASK))  # () the draw's key: every draw of a call its own
        self.counter.add_(1)  # in place: the same tensor at every step (a captured graph reads its address)
        return mix32(mix32(key ^ row) ^ index)

    def uniform(self, rows: int, width: int) -> torch.Tensor:
        """(rows, width) float64 in (0, 1), never 0 or 1: (bits + 1/2) / 2^32."""
        return (self.bits(rows, width).double() + 0.5) / 2.0**32

    def exponential(self, rows: int, width: int) -> torch.Tensor:
        """(rows, width) float64 Exp(1) draws, -log U (finite: U is never 0)."""
        return -self.uniform(rows, width).log()
