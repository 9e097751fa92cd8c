"""What every decoder returns: the tokens, the text and honest statistics."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .tree import DraftTree


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
        window_tokens_per_step: of those, the lookahead branch's tokens besides the current one.
        draft_tokens_per_step: of those, the draft tree's tokens (the verification branch).
        accepted_by_source: per draft source, a histogram {k: steps} of how many of its drafted
            tokens a step accepted, over the steps in which it proposed something.
    """

    steps: int = 0
    accepted_per_step: list[int] = field(default_factory=list)
    forward_tokens_per_step: list[int] = field(default_factory=list)
    prefill_tokens: int = 0
    wall_time_s: float = 0.0
    window_tokens_per_step: list[int] = field(default_factory=list)
    draft_tokens_per_step: list[int] = field(default_factory=list)
    accepted_by_source: dict[str, Counter] = field(default_factory=dict)

    def record(self, accepted: int, forward_tokens: int, window_tokens: int = 0) -> None:
        """Add one decoding step (its drafts: the tokens fed besides the current one and the window)."""
        self.steps += 1
        self.accepted_per_step.append(accepted)
        self.forward_tokens_per_step.append(forward_tokens)
        self.window_tokens_per_step.append(window_tokens)
        self.draft_tokens_per_step.append(forward_tokens - 1 - window_tokens)

    def record_step(self, accepted: int, forward_tokens: int, window_tokens: int, tree: DraftTree, path: list[int]) -> None:
        """Add one draft step: `record`, plus whose drafts the accepted `path` of `tree` came from."""
        self.record(accepted, forward_tokens, window_tokens)
        credited = Counter(tree.sources[node] for node in path)
        for source in dict.fromkeys(tree.sources):
            self.accepted_by_source.setdefault(source, Counter())[credited[source]] += 1

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
    """Output of every decoder (`DecodeCall.finish` builds it).

    Attributes:
        token_ids: the generated token ids, prompt excluded; ends with EOS when EOS was produced.
        text: `token_ids` decoded with the tokenizer passed in, else None.
        stats: the `DecodeStats` of the call.
        method: the decoder: "greedy", "sample" (`sample_decode`), "jacobi", "lookahead",
            "prompt_lookup", "recycling", "suffix", "draft" (`draft_decode`) or "adaptive".
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


@dataclass
class BatchResult:
    """Output of a decoder given a batch of prompts: one `DecodeResult` per row, in the batch's order.

    It reads as the list of its rows (``len``, indexing, iteration); each row has its own tokens,
    text and stats (its steps are the passes it took part in). The batch's statistics are read
    from its rows, under the names `DecodeStats` uses for one call:

    * `new_tokens`: tokens generated over the batch;
    * `steps`: the most steps a row took (the passes, less the pass caching the prompts when one ran);
    * `compression`: S over the batch, tokens accepted per step of a row (every row's new
      tokens over every row's steps: 1 for greedy decoding);
    * `mean_forward_tokens`: tokens a row fed per step, over every row's steps;
    * `wall_time_s`: seconds from the call's start to its last row's stop (0 if none recorded);
    * `tokens_per_second`: `new_tokens` over `wall_time_s` (0 without a time).

    Attributes:
        rows: the rows' results.
        passes: the batch's forward passes (each row's step, all rows at once).
    """

    rows: list[DecodeResult]
    passes: int

    @property
    def token_ids(self) -> list[list[int]]:
        """Each row's generated ids."""
        return [row.token_ids for row in self.rows]

    @property
    def texts(self) -> list[str | None]:
        """Each row's text (None without a tokenizer)."""
        return [row.text for row in self.rows]

    @property
    def new_tokens(self) -> int:
        """Tokens generated over the batch."""
        return sum(len(row.token_ids) for row in self.rows)

    @property
    def steps(self) -> int:
        """The most steps a row took (each step of a row is one of the batch's passes)."""
        return max((row.stats.steps for row in self.rows), default=0)

    @property
    def compression(self) -> float:
        """S over the batch: tokens accepted per step of a row (new tokens over every row's steps)."""
        steps = sum(row.stats.steps for row in self.rows)
        return sum(row.stats.new_tokens for row in self.rows) / steps if steps else 0.0

    @property
    def mean_forward_tokens(self) -> float:
        """Mean tokens a row fed per step, over every row's steps (1 for greedy decoding)."""
        steps = sum(row.stats.steps for row in self.rows)
        return sum(sum(row.stats.forward_tokens_per_step) for row in self.rows) / steps if steps else 0.0

    @property
    def wall_time_s(self) -> float:
        """Seconds from the call's start to its last row's stop (each row's time runs to its own stop)."""
        return max((row.stats.wall_time_s for row in self.rows), default=0.0)

    @property
    def tokens_per_second(self) -> float:
        """Tokens generated over the batch per second of the call (0 without a recorded time)."""
        return self.new_tokens / self.wall_time_s if self.wall_time_s > 0 else 0.0

    def summary(self) -> str:
        """One readable line: "<B> rows: <new_tokens> new tokens in <passes> passes (S = <compression>),
        <tokens_per_second> tokens/s, <wall_time_s> s"."""
        return (f"{len(self.rows)} rows: {self.new_tokens} new tokens in {self.passes} passes (S = {self.compression:.2f}), "
                f"{self.tokens_per_second:.1f} tokens/s, {self.wall_time_s:.2f} s")

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> DecodeResult:
        return self.rows[index]

    def __iter__(self):
        return iter(self.rows)

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        return f"BatchResult({self.summary()})"


def batch_result(prompts: Sequence[Any], finished: dict, log: list, names: Sequence[str], start: float, tokenizer: Any, method: str,
                 passes: int) -> BatchResult:
    """A batch's `BatchResult`, each row's from its text and its rows of the engine's step log
    (`ladref.batched.loop.step_log`); prompts: (L,) tensors; finished: {row: (finish time, text)}; `passes`: the batch's."""
    results = []
    for b, prompt in enumerate(prompts):
        end, text = finished[b]
        stats = DecodeStats(prefill_tokens=prompt.shape[0] - 1, wall_time_s=end - start)
        # a row's steps: those in which it kept a token (a stopped row inside a run of steps keeps none)
        entries = [logged[b] for logged in log if logged[b][0] > 0] if log else [(1, 1, 0)] * (len(text) - prompt.shape[0])
        for entry in entries:
            kept, fed, window = entry[:3]
            stats.record(kept, fed, window)
            step: dict[str, list[int]] = {}  # sources of one name count as one (a tree's nodes are named)
            for source, credited, present in zip(names, entry[3 : 3 + len(names)], entry[3 + len(names):]):
                seen = step.setdefault(source, [0, 0])
                seen[0], seen[1] = seen[0] + credited, seen[1] or present
            for source, (credited, present) in step.items():
                if present:
                    stats.accepted_by_source.setdefault(source, Counter())[credited] += 1
        tokens = text[prompt.shape[0]:]
        results.append(DecodeResult(tokens, tokenizer.decode(tokens, skip_special_tokens=True) if tokenizer is not None else None,
                                    stats, method))
    return BatchResult(results, passes)
