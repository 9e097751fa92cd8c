"""One row's streamer in the engine: the prompt, then the row's new tokens at each read, then ``end()``.

A transformers streamer follows one sequence, so the engine (`ladref.batched.loop.decode_batch`,
`ladref.batched.captured.CapturedBatchDecoder`) streams a batch of ONE row. It sends the streamer
what the one-prompt path does (`ladref.call.DecodeCall`, `ladref.call.TokenSink`): the prompt as a
(1, L) tensor, each kept token as a (1,) tensor, in order, then ``end()``. The tokens come with the
loop's one read: the read also brings the row's length and the text past the tokens already sent.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..call import streamer_callback
from ..types import Streamer
from .state import BatchState


class RowStream:
    """A batch's streamer (or none), fed at the loop's reads.

    Made right before the prompts are cached, it sends the prompt. The loop reads through `read`,
    which adds to the read the row's length and its text past the tokens already sent, `span`
    positions of it (the loop sets `span` after each read: the most tokens the row can keep before
    the next one), and sends the new tokens, none past EOS or the budget (they are past the row's
    length). Without a streamer the read is the same as without this object.

    Args:
        streamer: a transformers streamer (``put``, ``end``), or None.
        prompts: the batch's checked prompts ((L,) long on the CPU); one row with a streamer.

    Raises:
        ValueError: a streamer with a batch of several rows.
        TypeError: a streamer without ``put`` / ``end``.
    """

    def __init__(self, streamer: Streamer | None, prompts: Sequence[torch.Tensor]) -> None:
        if streamer is not None and len(prompts) != 1:
            raise ValueError(f"a streamer follows one sequence; decode a batch of {len(prompts)} rows without one "
                             "(a batch of one row streams its tokens)")
        self.streamer, self.send = streamer, streamer_callback(streamer)
        self.seen, self.span = int(prompts[0].shape[0]) if prompts else 0, 0  # the row's tokens sent (the prompt's), to read
        if streamer is not None:
            streamer.put(prompts[0][None])

    def read(self, parts: list[torch.Tensor], state: BatchState) -> list[int]:
        """The loop's ONE read: `parts` concatenated and read to the host, with the streamer's part (the row's
        length and its text's next `span` positions) at the end; sends the row's new tokens and returns
        the read without that part (without a streamer: the same read, nothing added)."""
        if self.streamer is None:
            return torch.cat(parts).tolist()
        text = state.text[0, self.seen : self.seen + self.span]  # (at most the text's width: known on the host)
        read = torch.cat(parts + [state.length[:1], text]).tolist()
        mine, read = read[len(read) - 1 - text.shape[0] :], read[: len(read) - 1 - text.shape[0]]
        for token in mine[1 : 1 + mine[0] - self.seen]:
            self.send(token)
        self.seen = mine[0]
        return read

    def end(self) -> None:
        """Close the streamer (once, when the call finishes)."""
        if self.streamer is not None:
            self.streamer.end()
