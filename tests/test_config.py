"""LookaheadConfig validation and its cost model."""

import pytest

from ladref import LookaheadConfig


def test_defaults_and_cost():
    config = LookaheadConfig(window_size=5, ngram_size=4, max_candidates=2)
    assert config.capacity == 2
    assert config.max_step_tokens() == (4 - 1) * (5 + 2)  # the paper's Fig. 5 step: 21 tokens


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"window_size": 0}, ValueError, "window_size"),
        ({"ngram_size": 1}, ValueError, "ngram_size"),
        ({"max_candidates": -1}, ValueError, "max_candidates"),
        ({"pool_capacity": 0}, ValueError, "pool_capacity"),
        ({"window_size": 2.0}, TypeError, "window_size"),
        ({"ngram_size": True}, TypeError, "ngram_size"),
        ({"pool_from_prompt": "yes"}, TypeError, "pool_from_prompt"),
    ],
)
def test_invalid_config_names_the_field(kwargs, error, message):
    with pytest.raises(error, match=message):
        LookaheadConfig(**kwargs)


def test_config_is_frozen():
    config = LookaheadConfig()
    with pytest.raises(AttributeError):
        config.window_size = 3
