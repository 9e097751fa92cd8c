"""Clear errors for call shapes of earlier ladref versions (kept out of the decoders' own files)."""

from __future__ import annotations

import functools
from collections.abc import Callable

from .config import LookaheadConfig


def reject_old_call_shape(decode: Callable) -> Callable:
    """Turn the pre-0.2 call ``lookahead_decode(model, ids, config, max_new_tokens)`` into a clear error.

    Every decoder now takes ``(model, input_ids, max_new_tokens, *, ...)``; lookahead's config is
    the keyword ``config=``. Without this guard the old call would fail inside Python's argument
    binding ("takes from 2 to 3 positional arguments") or pass a config as max_new_tokens.
    """

    @functools.wraps(decode)
    def checked(*args, **kwargs):
        if len(args) > 3 or (len(args) == 3 and isinstance(args[2], LookaheadConfig)):
            raise TypeError("lookahead_decode(model, input_ids, config, max_new_tokens) is the old call shape; "
                            "call lookahead_decode(model, input_ids, max_new_tokens, config=config)")
        return decode(*args, **kwargs)

    return checked
