"""Sampling for every row of a batch at once: plain draws, and the verification of fed draft nodes.

`BatchSampler.verify` gives every row the law that `ladref.verify.verify_chosen` walking its fed
nodes with `ladref.sampling.SamplingChooser.choose` gives, without a walk: every accept draw is made
at once, by the multi-round rule for deterministic drafts (the siblings tried in turn, each
against the residual the earlier rejections left).
  # draw u_i per fed node i; S_i: the mass, under q at i's parent, of i's earlier fed siblings;
  # i is chosen iff u_i (1 - S_i) < q(t_i) and no earlier sibling is (its parent's first accepted draft);
  # the path descends through chosen nodes; where it stops, y ~ q there with its children's tokens zeroed.
Sibling tokens are distinct (a trie), so 1 - S_i is the residual mass left when t_i is tried, and
each try reads its own independent uniform; drawing the uniforms of tries the multi-round walk
never reaches (later siblings, nodes off the path) changes nothing. So sibling i is chosen with
probability q(t_i), no sibling with 1 - sum_i q(t_i), and the token emitted at the node is ~ q:
the law of the chooser's walk, whose single `ladref.accept.accept_one` round against the first
sibling emits a token ~ q and descends into the sibling it equals (the same law, not the same
draws). Every emitted token is therefore distributed as ordinary sampling's (docs/sampling.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ..sampling import make_chooser
from .drafts import Fed
from .noise import KeyedNoise
from .verify import Verdict, path_verdict

def race(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """(...,) long, one draw per row of (..., V) unnormalised probabilities (argmax of q_v / E_v,
    E_v ~ Exp(1): the smallest of independent Exp(q_v) times is token v's with probability q_v / sum q).
    A row of zeros gives token 0 instead of an error (such a row's draw is never kept)."""
    times = torch.empty_like(probs).exponential_(generator=generator).clamp_min_(torch.finfo(probs.dtype).tiny)
    return (probs / times).argmax(-1)


def draft_parents(fed: Fed) -> torch.Tensor:
    """(B, w) long, the row of each fed node's parent in ``[root, fed nodes]`` (0: the current token;
    1 + j: fed node j), as `ladref.batched.verify.parent_preds` finds it."""
    up = fed.ancestors & (fed.depth[:, None, :] == fed.depth[:, :, None] - 1)  # (B, w, w): [i, j] = j is i's parent
    return (up * torch.arange(1, fed.width + 1, device=up.device)).sum(-1)  # a child of the root has none: 0


class BatchSampler:
    """Draws every row's tokens from softmax(warp(logits)), accepting fed drafts without bias.

    Args:
        device: the model's device (every draw is made there).
        do_sample, temperature, top_k, top_p, generator: the call's sampling keywords, checked as
            `ladref.sampling.make_chooser` checks them (do_sample must be True: greedy has no sampler).
            On a CPU model the given generator draws; on another device a generator there, seeded
            once from it (None: the device's default generator), so a seeded batch is reproducible.

    Attributes:
        warp: the `ladref.sampling.Warp` (temperature, top-k, top-p); device: the model's device;
        generator: the one that draws.
    """

    def __init__(self, device: torch.device | str, do_sample: bool = True, temperature: float | None = None,
                 top_k: int | None = None, top_p: float | None = None, generator: torch.Generator | None = None) -> None:
        chooser = make_chooser(do_sample, temperature, top_k, top_p, generator)
        if chooser is None:
            raise ValueError("BatchSampler samples: with do_sample=False a batch is verified greedily (no sampler)")
        self.warp, self.device = chooser.warp, torch.device(device)
        self.generator = generator
        if generator is not None and self.device.type != "cpu":
            seed = int(torch.randint(0, 2**62, (), generator=generator))
            self.generator = torch.Generator(self.device).manual_seed(seed)

    @classmethod
    def from_options(cls, options: Mapping[str, Any], device: torch.device | str) -> "BatchSampler | None":
        """The sampler a call's keywords ask for (`ladref.options.SamplingOptions`); None when do_sample is False.
        (A ``logits_processor`` is the step's, not the sampler's: `ladref.batched.loop.decode_batch` takes it.)

        Raises:
            ValueError: a sampling keyword without do_sample (`ladref.sampling.make_chooser`).
        """
        if not options.get("do_sample", False):
            make_chooser(options.get("do_sample", False), options.get("temperature"), options.get("top_k"),
                         options.get("top_p"), options.get("generator"))  # refuses sampling keywords without do_sample
            return None
        return cls(device, True, options.get("temperature"), options.get("top_k"), options.get("top_p"),
                   options.get("generator"))

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """(..., V) float64 softmax(warp(logits))."""
        return self.warp(logits.double()).softmax(-1)

    def uniform(self, rows: int, width: int) -> torch.Tensor:
        """(rows, width) float64 uniform draws in [0, 1) (the generator's)."""
        return torch.rand(rows, width, dtype=torch.float64, device=self.device, generator=self.generator)

    def race(self, probs: torch.Tensor) -> torch.Tensor:
        """(B,) long, one draw per row of (B, V) unnormalised probabilities (`race`, the generator's)."""
        return race(probs, self.generator)

    def sample(self, logits: torch.Tensor) -> torch.Tensor:
        """(B,) long, one draw per row from the (B, V) logits' warped distribution (a plain sampling step)."""
        return self.race(self.probs(logits))

    def accepts(self, u: torch.Tensor, q: torch.Tensor, before: torch.Tensor) -> torch.Tensor:
        """(B, w) bool, the accept test of each draft t_i tried: u_i < q(t_i) / (1 - S_i), the residual's
        probability of t_i once its earlier siblings are rejected (u, q, before: (B, w) float64)."""
        return u * (1 - before) < q

    def draw(self, probs: torch.Tensor, tokens: torch.Tensor, drafts: torch.Tensor) -> torch.Tensor:
        """(B,) long, the token drawn after every draft was rejected: from the (B, V) probabilities with
        the drafts' tokens zeroed (the residual; `tokens`: (B, w) long, `drafts`: (B, w) bool, which are drafts)."""
        return self.race(probs.scatter_reduce(1, tokens, (~drafts).to(probs.dtype), "prod"))

    def verify(self, root_logits: torch.Tensor, node_logits: torch.Tensor, fed: Fed, length: int, deepest: int) -> Verdict:
        """Every row's sampled walk of its fed nodes: the drafts it accepts, then one drawn token.

        Args:
            root_logits: (B, V) the logits after the current token.
            node_logits: (B, w, V) the logits after each fed node.
            fed: the fed nodes; length: L, the step position of the first one; deepest: the deepest a
                node can be (bounds the entries to keep).
        """
        rows = root_logits.shape[0]
        probs = self.probs(torch.cat([root_logits[:, None], node_logits], dim=1))  # (B, 1 + w, V): q at root, nodes
        if fed.width == 0:  # nothing drafted: one plain draw
            zero = torch.zeros(rows, dtype=torch.long, device=probs.device)
            return Verdict(self.race(probs[:, 0])[:, None], zero + 1, zero[:, None], zero, fed.valid)
        # 1. Each fed node's draft probability q(t_i) at its parent, and the mass of its earlier siblings.
        w, vocab = fed.width, probs.shape[-1]
        parent = draft_parents(fed)  # (B, w)
        q = probs.flatten(1).gather(1, parent * vocab + fed.tokens)  # (B, w)
        earlier = (parent[:, :, None] == parent[:, None, :]) & fed.valid[:, None, :]
        earlier &= torch.ones(w, w, dtype=torch.bool, device=q.device).tril(-1)  # (B, w, w): [i, j] = j < i, a sibling
        before = (earlier * q[:, None, :]).sum(-1)  # S_i
        # 2. The accept draws, all at once; a node is chosen when it is its parent's first accepted child.
        u = self.uniform(rows, w)
        accepted = fed.valid & self.accepts(u, q, before)
        chosen = accepted & ~(earlier & accepted[:, None, :]).any(-1)
        # 3. The walk's path: chosen nodes whose ancestors are all chosen; the deepest ends it.
        on_path = (fed.ancestors & chosen[:, None, :]).sum(-1) == fed.depth
        depth, end = (fed.depth * on_path).max(-1)
        # 4. The drawn token at the end: q there, every fed child's token zeroed (the residual).
        at = (1 + end) * (depth > 0)  # (B,) the end's row in probs
        children = fed.valid & (parent == at[:, None])
        drawn = self.draw(probs[torch.arange(rows, device=at.device), at], fed.tokens, children)
        # 5. The token chosen after the root and after each path node: its chosen child's, else the drawn one.
        after = drawn[:, None].repeat(1, w + 2).scatter_(1, torch.where(on_path, parent, w + 1), fed.tokens)
        return path_verdict(fed, end, depth, after[:, : w + 1], length, deepest)


class KeyedSampler(BatchSampler):
    """A `BatchSampler` drawing from `ladref.batched.noise.KeyedNoise`: no generator state, so a
    captured step (`ladref.batched.captured`) can sample, and compiled or not gives the same tokens.

    Args:
        device, do_sample, temperature, top_k, top_p: as `BatchSampler`'s.
        generator: the CPU generator the call's 32-bit seed is drawn from (None: torch's default RNG).

    Attributes:
        noise: the `KeyedNoise` every draw comes from.
    """

    def __init__(self, device: torch.device | str, do_sample: bool = True, temperature: float | None = None,
                 top_k: int | None = None, top_p: float | None = None, generator: torch.Generator | None = None) -> None:
        super().__init__(device, do_sample, temperature, top_k, top_p, generator)
        self.generator = None
        self.noise = KeyedNoise(int(torch.randint(0, 2**32, (), generator=generator)), self.device)

    def uniform(self, rows: int, width: int) -> torch.Tensor:
        return self.noise.uniform(rows, width)

    def race(self, probs: torch.Tensor) -> torch.Tensor:
        return (probs / self.noise.exponential(*probs.shape)).argmax(-1)
