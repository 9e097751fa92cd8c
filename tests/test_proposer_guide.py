"""The proposer written in docs/proposers.md runs as printed, under 50 lines, and decodes exactly greedy.

The example brings its own imports: the test gives it only a model and a prompt (``model``, ``ids``),
the names every documentation example continues from.
"""

import re
from pathlib import Path

import pytest
from strategies import tiny_model

GUIDE = Path(__file__).parents[1] / "docs" / "proposers.md"


def example() -> str:
    section = GUIDE.read_text().split("## Writing your own", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_example_proposer_is_short():
    code = example()
    body = code.split("class BigramProposer", 1)[1].split("\n\n\nresult =", 1)[0]
    assert len(("class BigramProposer" + body).splitlines()) < 50


@pytest.mark.usefixtures("one_thread")
def test_the_example_proposer_runs_and_is_exact():
    model = tiny_model("llama", 16, 0)  # its greedy text cycles with period 5: bigrams get accepted
    namespace = {"model": model, "ids": [1, 2, 3]}  # nothing imported for it: the example's own imports must do
    exec(compile(example(), str(GUIDE), "exec"), namespace)  # noqa: S102 (the documentation's own code)
    result = namespace["result"]
    assert result.stats.compression > 1.5 and max(result.stats.accepted_by_source["bigram"]) >= 2
