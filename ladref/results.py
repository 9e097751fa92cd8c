"""What every decoder returns: the tokens, the text and honest statistics."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class DecodeStats:
    """Per-call statistics.

    Attributes:
        steps: decoding forward passes after the prompt prefill (greedy: one per token).
        accepted_per_step: tokens committed by each step (the last one of a step is always the
            model's own token; the ones before it came from a verified n-gram or a converged guess).
        forward_tokens_per_step: tokens fed to the model by each step (its width q).
        prefill_tokens: prompt tokens processed before the first step.
        wall_time_s: wall-clock seconds of the whole call, prefill included.
    """

    steps: int = 0
    accepted_per_step: list[int] = field(default_factory=list)
    forward_tokens_per_step: list[int] = field(default_factory=list)
    prefill_tokens: int = 0
    wall_time_s: float = 0.0

    def record(self, accepted: int, forward_tokens: int) -> None:
        """Add one decoding step."""
        self.steps += 1
        self.accepted_per_step.append(accepted)
        self.forward_tokens_per_step.append(forward_tokens)

    @property
    def new_tokens(self) -> int:
        return sum(self.accepted_per_step)

    @property
    def compression(self) -> float:
        """S, the paper's compression ratio: generated tokens per decoding step."""
        return self.new_tokens / self.steps if self.steps else 0.0

    @property
    def mean_forward_tokens(self) -> float:
        """Mean tokens fed to the model per step (1 for greedy)."""
        return sum(self.forward_tokens_per_step) / self.steps if self.steps else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.wall_time_s if self.wall_time_s > 0 else 0.0

    def summary(self) -> str:
        """One readable line: "64 new tokens in 40 steps (S = 1.60), 25.3 tokens/s, 2.53 s"."""
        return (f"{self.new_tokens} new tokens in {self.steps} steps (S = {self.compression:.2f}), "
                f"{self.tokens_per_second:.1f} tokens/s, {self.wall_time_s:.2f} s")


@dataclass
class DecodeResult:
    """Output of `greedy_decode`, `jacobi_decode` and `lookahead_decode`.

    Attributes:
        token_ids: the generated token ids, prompt excluded; ends with EOS when EOS was produced.
        text: `token_ids` decoded with the tokenizer passed in, else None.
        stats: the `DecodeStats` of the call.
        method: "greedy", "jacobi", "lookahead", "sample" (`sample_decode`) or "plookup"
            (transformers' prompt lookup).
    """

    token_ids: list[int]
    text: str | None
    stats: DecodeStats
    method: str

    def summary(self, preview: int = 60) -> str:
        """One readable line: method, statistics and the start of the text (or of the ids).

        Example: ``lookahead: 64 new tokens in 40 steps (S = 1.60), 25.3 tokens/s, 2.53 s | 'def reverse(xs): ...'``
        """
        if self.text is not None:
            shown = repr(self.text if len(self.text) <= preview else self.text[:preview] + "...")
        else:
            ids = self.token_ids[:8]
            shown = f"ids {ids}"[:-1] + (", ...]" if len(self.token_ids) > len(ids) else "]")
        return f"{self.method}: {self.stats.summary()} | {shown}"

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        return f"DecodeResult({self.summary()})"
