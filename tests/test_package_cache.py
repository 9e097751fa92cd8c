"""The compiled steps' package cache (`compile_dir`, ladref.fast.precompiled) when it goes wrong.

A truncated package, a file of garbage or another model's package under a package's name, a folder
that cannot be written, a compile_dir that is a file, two processes building one package at once:
each is reported (or refused) and the decode goes on, its tokens those of `greedy_decode`. And
``python -m ladref cache --list/--clear``, and the cost curves kept beside the packages.

AOTInductor builds take tens of seconds on a small CPU even for a tiny model: one package (greedy,
width 1, 32 slots, mode "default") is built once for the module, and each test copies (and
spoils) it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest
import torch
from strategies import build_tiny

from ladref import CompiledAdaptiveDecoder, CompiledDecoder, greedy_decode
from ladref.bench.cli import main
from ladref.fast import precompiled
from ladref.pricing.cost import CostModel
from ladref.pricing.cost_cache import CostCache
from ladref.fast.package_record import package_name, package_problem, package_record, read_package_record, weights_digest
from ladref.fast.static import StaticRunner
from ladref.results import DecodeStats

PROMPTS = ([1, 2, 3, 1, 2, 3, 1, 2], [5, 4, 6, 5, 4])
NEW = 12
TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module", autouse=True)
def one_thread_for_the_module():
    """One thread for the whole module: the thread count is part of a package's name, and the
    module's package is built before any function-scoped fixture runs."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return build_tiny("llama", 16, 1).float()


@pytest.fixture(scope="module")
def expected(model) -> list[list[int]]:
    return [greedy_decode(model, p, NEW, eos_token_id=[]).token_ids for p in PROMPTS]


def make(model: torch.nn.Module, folder: Path) -> CompiledDecoder:
    """The decoder every test builds or loads: compiled greedy, one width (1), 32 slots."""
    return CompiledDecoder(model, max_length=32, mode="default", compile_dir=folder)


def decode_all(decoder) -> list[list[int]]:
    return [decoder(p, NEW, eos_token_id=[]).token_ids for p in PROMPTS]


def name_for(model: torch.nn.Module, folder: Path) -> str:
    """The package name `make(model, folder)` looks for."""
    return package_name(make(model, folder).runner, weights_digest(model))


@pytest.fixture(scope="module")
def built(model, tmp_path_factory) -> Path:
    """The module's one package, built once."""
    folder = tmp_path_factory.mktemp("built")
    with no_warning_of_ours():  # a clean build
        make(model, folder).warmup()
    (package,) = folder.glob("step-*.pt2")
    return package


@contextlib.contextmanager
def no_warning_of_ours():
    """Fail on a warning of the package cache's (torch's own warnings, e.g. export's, may come)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    ours = [str(w.message) for w in caught if "compiled step" in str(w.message)]
    assert not ours, ours


def spoiled(built: Path, folder: Path, content: bytes | None = None, name: str | None = None) -> Path:
    """A copy of the package in `folder` (under `name`), its bytes replaced by `content` if given."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (name or built.name)
    if content is None:
        shutil.copyfile(built, path)
    else:
        path.write_bytes(content)
    return path


def test_a_package_carries_its_record_and_loads_without_a_warning(built, model, expected, tmp_path):
    record = read_package_record(built)
    assert (record["width"], record["max_length"], record["mode"], record["threads"]) == ("1", "32", "default", "1")
    assert record["weights"] == weights_digest(model) and record["model"] == type(model).__name__
    spoiled(built, tmp_path)
    with no_warning_of_ours():
        decoder = make(model, tmp_path)
        assert decoder.warmup() > 0 and decoder.runner.from_disk == {1: True}
    assert decode_all(decoder) == expected


@pytest.mark.slow
def test_one_package_serves_every_width_of_a_runner(model, expected, tmp_path):
    """A runner of several widths builds one package, its width a dynamic dimension (one copy of
    the weights for all widths); a later runner loads it for every width; every width is exact."""
    first = CompiledAdaptiveDecoder(model, max_lengths=32, widths=(1, 2, 4), mode="default", compile_dir=tmp_path, cache=CostCache())
    assert [first(p, NEW, eos_token_id=[]).token_ids for p in PROMPTS] == expected
    (package,) = tmp_path.glob("step-*.pt2")
    assert package.name.startswith("step-w1-4-") and read_package_record(package)["width"] == "1-4"
    later = CompiledAdaptiveDecoder(model, max_lengths=32, widths=(1, 2, 4), mode="default", compile_dir=tmp_path,
                                    cache=first.cost_cache)
    with no_warning_of_ours():
        later.warmup()
    runner, eager = later.runners[0], StaticRunner(model, 32, widths=(1, 2, 4))
    assert runner.from_disk == {1: True, 2: True, 4: True}
    for q in (1, 2, 3, 4):  # widths 1, 2, 4, and 3 padded to 4
        for r in (runner, eager):
            r.prefill(torch.tensor(PROMPTS[0]), DecodeStats())
        ids = torch.tensor(PROMPTS[1][:q])
        torch.testing.assert_close(runner.forward(ids), eager.forward(ids))
    assert [later(p, NEW, eos_token_id=[]).token_ids for p in PROMPTS] == expected


def test_unusable_packages_are_named_for_what_is_wrong(built, model, tmp_path):
    runner = make(model, tmp_path).runner
    record = package_record(runner, weights_digest(model))
    assert package_problem(built, record) is None
    truncated = spoiled(built, tmp_path / "t", built.read_bytes()[: built.stat().st_size // 2])
    garbage = spoiled(built, tmp_path / "g", b"not a package at all\n" * 50)
    assert "not a readable package, truncated or another format" in package_problem(truncated, record)
    assert "not a readable package" in package_problem(garbage, record)
    other = dict(record, width="4", dtype="torch.float64")
    assert package_problem(built, other) == "built for something else: its dtype, width differ from this runner's"


@pytest.mark.slow
def test_a_truncated_package_is_reported_once_and_rebuilt(built, model, expected, tmp_path):
    """A file of garbage takes the same path (`test_unusable_packages_are_named_for_what_is_wrong`;
    end to end in `test_a_read_only_folder_with_a_spoiled_package_warns_and_compiles_in_process`)."""
    path = spoiled(built, tmp_path, built.read_bytes()[: built.stat().st_size * 2 // 3])
    decoder = make(model, tmp_path)
    with pytest.warns(UserWarning, match="cannot be used: not a readable package.*building it again") as caught:
        decoder.warmup()
    assert len([w for w in caught if "cannot be used" in str(w.message)]) == 1  # reported once
    assert str(path) in str(caught[0].message) and decoder.runner.from_disk == {1: False}
    assert decode_all(decoder) == expected
    assert package_problem(path, package_record(decoder.runner, weights_digest(model))) is None
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix != ".lock") == [path.name]  # rebuilt in place


@pytest.mark.slow
def test_another_models_package_under_the_name_is_detected_and_rebuilt(built, tmp_path):
    other = build_tiny("llama", 16, 2, width=48).float()  # another config, other weights
    path = spoiled(built, tmp_path, name=name_for(other, tmp_path))
    decoder = make(other, tmp_path)
    with pytest.warns(UserWarning, match="built for something else: its config, weights differ"):
        decoder.warmup()
    assert decoder.runner.from_disk == {1: False}
    assert decode_all(decoder) == [greedy_decode(other, p, NEW, eos_token_id=[]).token_ids for p in PROMPTS]
    assert read_package_record(path)["config"] != read_package_record(built)["config"]


def read_only(folder: Path, monkeypatch) -> None:
    """Make `folder` unwritable: chmod, or, as root (whom chmod does not stop), a package's
    temporary file that cannot be created."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(precompiled, "tempfile", types.SimpleNamespace(mkstemp=refuse))


def test_a_read_only_folder_still_serves_its_packages(built, model, expected, tmp_path, monkeypatch):
    spoiled(built, tmp_path / "shared")
    read_only(tmp_path / "shared", monkeypatch)
    try:
        with no_warning_of_ours():
            decoder = make(model, tmp_path / "shared")
            decoder.warmup()
    finally:
        (tmp_path / "shared").chmod(0o755)
    assert decoder.runner.from_disk == {1: True} and decode_all(decoder) == expected


@pytest.mark.slow
def test_a_read_only_folder_with_a_spoiled_package_warns_and_compiles_in_process(model, expected, tmp_path, monkeypatch):
    folder = tmp_path / "shared"
    garbage = spoiled(Path("unused"), folder, b"garbage", name=name_for(model, folder))
    read_only(folder, monkeypatch)
    decoder = make(model, folder)
    try:
        with pytest.warns(UserWarning) as caught:
            decoder.warmup()
    finally:
        folder.chmod(0o755)
    messages = [str(w.message) for w in caught]
    assert any("cannot be used: not a readable package" in m for m in messages)
    assert any(f"could not build or load a compiled step in {folder} (Permission denied); compiling it in this process" in m
               for m in messages)
    assert decoder.runner.from_disk == {1: False} and decode_all(decoder) == expected
    assert garbage.read_bytes() == b"garbage"


def test_a_compile_dir_that_is_a_file_is_refused(model, tmp_path):
    afile = tmp_path / "steps.txt"
    afile.write_text("mine")
    for build in (lambda: make(model, afile),
                  lambda: CompiledAdaptiveDecoder(model, max_lengths=32, widths=(1, 2), mode="default", compile_dir=afile)):
        with pytest.raises(ValueError, match=f"compile_dir '{afile}' is a file, not a folder"):
            build()
    assert afile.read_text() == "mine"


CHILD = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[3])
import torch
torch.set_num_threads(1)
from strategies import build_tiny
from ladref import CompiledDecoder, greedy_decode
folder, me, prompts = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[4])
model = build_tiny("llama", 16, 3).float()
expected = [greedy_decode(model, p, 12, eos_token_id=[]).token_ids for p in prompts]
(folder.parent / f"ready-{me}").touch()
while len(list(folder.parent.glob("ready-*"))) < 2:  # both start building together
    time.sleep(0.02)
decoder = CompiledDecoder(model, max_length=32, mode="default", compile_dir=folder)
decoder.warmup()
got = [decoder(p, 12, eos_token_id=[]).token_ids for p in prompts]
print(json.dumps({"exact": got == expected, "from_disk": decoder.runner.from_disk[1]}))
"""


@pytest.mark.slow
def test_two_processes_building_one_package_at_once_build_it_once(tmp_path):
    folder = tmp_path / "steps"
    children = [subprocess.Popen([sys.executable, "-c", CHILD, str(folder), str(i), str(TESTS), json.dumps(PROMPTS)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    outcomes = []
    for child in children:
        out, err = child.communicate(timeout=600)
        assert child.returncode == 0, err[-3000:]
        outcomes.append(json.loads(out.strip().splitlines()[-1]))
    assert all(o["exact"] for o in outcomes)
    assert sorted(o["from_disk"] for o in outcomes) == [False, True]  # one built it, the other waited and loaded it
    assert [p.suffix for p in sorted(folder.iterdir())] == [".lock", ".pt2"]  # no partial build left behind


def test_the_cache_command_lists_and_clears_only_its_own_files(built, tmp_path, capsys):
    spoiled(built, tmp_path)
    spoiled(built, tmp_path, b"truncated", name="step-w2-" + "0" * 32 + ".pt2")
    for name in (built.with_suffix(".lock").name, f".{built.stem}.x1y2.part.pt2"):
        (tmp_path / name).write_bytes(b"")
    for name in ("notes.txt", "step-mine.pt2"):  # not ladref's: left alone
        (tmp_path / name).write_text("mine")
    cache = CostCache(tmp_path / "cost.json")
    cache.remember("a curve", lambda: CostModel.from_times({1: 0.01, 2: 0.015}))
    assert main(["cache", "--list", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"2 compiled steps in {tmp_path}" in out and "cost curves: cost.json, 1 measured" in out
    assert "cache 32  width 1  default  torch.float32  cpu  1 threads" in out and ("KiB" in out or "MiB" in out)
    assert "step-w2-" in out and "unreadable" in out
    assert main(["cache", "--clear", str(tmp_path)]) == 0
    assert "removed 5 files" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "step-mine.pt2"]
    (tmp_path / "cost.json").write_text('{"someone": "else"}')  # a cost.json not ladref's stays too
    main(["cache", "--clear", str(tmp_path)])
    assert (tmp_path / "cost.json").read_text() == '{"someone": "else"}'
    with pytest.raises(SystemExit, match="is not a folder of compiled steps"):
        main(["cache", "--list", str(tmp_path / "notes.txt")])


def test_the_cost_curves_are_kept_beside_the_packages(built, model, expected, tmp_path, monkeypatch):
    """A CompiledAdaptiveDecoder with a compile_dir keeps its cost curves there: a later decoder
    loads the packages and reads the curves, and neither compiles nor measures."""
    spoiled(built, tmp_path)  # the adaptive runner of width 1 over 32 slots is the same step
    first = CompiledAdaptiveDecoder(model, max_lengths=32, widths=(1,), mode="default", compile_dir=tmp_path)
    assert first.cost_cache.path == tmp_path / "cost.json"
    assert first(PROMPTS[0], NEW, eos_token_id=[]).token_ids == expected[0]
    assert first.runners[0].from_disk == {1: True} and (tmp_path / "cost.json").exists()
    monkeypatch.setattr(CostModel, "measure", lambda *a, **k: pytest.fail("measured again"))
    later = CompiledAdaptiveDecoder(model, max_lengths=32, widths=(1,), mode="default", compile_dir=tmp_path)
    assert [later(p, NEW, eos_token_id=[]).token_ids for p in PROMPTS] == expected
    assert later.runners[0].from_disk == {1: True} and len(later.cost_cache) == 1
    given = CostCache()
    assert CompiledAdaptiveDecoder(model, max_lengths=32, widths=(1,), mode="default", compile_dir=tmp_path,
                                   cache=given).cost_cache is given
    (tmp_path / "cost.json").write_text("not json")
    with pytest.warns(UserWarning, match="cost.json is not a ladref.cost/1 cache file"):
        broken = CompiledAdaptiveDecoder(model, max_lengths=32, widths=(1,), mode="default", compile_dir=tmp_path)
    assert broken.cost_cache.path == tmp_path / "cost.json" and len(broken.cost_cache) == 0
