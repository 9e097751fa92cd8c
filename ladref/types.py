"""The types of ladref's public inputs: token ids, EOS ids, tokenizers and streamers.

Tokenizers and streamers are `typing.Protocol`s: any object with the named methods works (a
transformers tokenizer, a `TextStreamer`, or a class of your own); nothing is imported from
transformers here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, Union, runtime_checkable

import torch

TokenIds = Union[Sequence[int], torch.Tensor]
"""A prompt: a list of ints, a (L,) tensor or a (1, L) tensor of token ids."""

Prompts = Union[TokenIds, Sequence[TokenIds]]
"""One prompt (`TokenIds`), or a batch: a list of prompts of any lengths, or a (B, L) tensor (with
an ``attention_mask`` when its rows are padded)."""

Budget = Union[int, Sequence[int]]
"""Most new tokens: one number, or for a batch one per row."""

EosIds = Union[int, Iterable[int], None]
"""EOS id(s): one id, several, an empty list (never stop early), or None (the model's own)."""


@runtime_checkable
class Tokenizer(Protocol):
    """What ladref uses of a tokenizer: ``decode`` for the result's text, ``eos_token_id`` as the
    last fallback for EOS (`ladref.call.eos_ids`)."""

    eos_token_id: int | None

    def decode(self, token_ids: list[int], skip_special_tokens: bool = ...) -> str: ...


@runtime_checkable
class Streamer(Protocol):
    """A transformers streamer (`TextStreamer`, `TextIteratorStreamer`, ...): ``put`` receives the
    (1, L) prompt first, then each accepted token as a (1,) tensor, in order; ``end`` closes it."""

    def put(self, value: torch.Tensor) -> None: ...

    def end(self) -> None: ...
