"""``python -m ladref cache --list DIR`` / ``--clear DIR``: the compiled steps kept in a `compile_dir`.

`list_packages` reads each package's record (`ladref.fast.package_record.read_package_record`, from the
archive, nothing loaded): its size, model, cache length and width, mode and the torch it was built
with. `clear_packages` removes ladref's own files only: the packages (``step-w<widths>-<digest>.pt2``),
their lock files, partial builds a killed process left behind, and the cost curves file
(``cost.json``) when it is a ladref cost cache; any other file in the folder stays.
"""

from __future__ import annotations

import argparse
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..pricing.cost_cache import read_cache_file
from ..fast.package_record import PACKAGE_FILE, read_package_record
from ..fast.precompiled import COST_FILE

_STEM = PACKAGE_FILE.pattern[: -len(r"\.pt2")]
OWN_FILES = re.compile(rf"{_STEM}\.(pt2|lock)|\.{_STEM}\..+\.part\.pt2")
"""ladref's files in a compile_dir besides the cost curves: packages, their locks, partial builds."""


@dataclass(frozen=True)
class PackageInfo:
    """One package in a `compile_dir`.

    Attributes:
        path: the package file.
        size: its size in bytes.
        record: what it was built for (`ladref.fast.package_record.package_record`, plus ``name``);
            empty when it cannot be read.
        problem: why its record cannot be read (truncated, another format), or None.
    """

    path: Path
    size: int
    record: dict
    problem: str | None = None


def check_folder(directory: str | Path) -> Path:
    """`directory` as a Path, or a clear exit when it is not a folder."""
    path = Path(directory).expanduser()
    if not path.is_dir():
        raise SystemExit(f"{path} is not a folder of compiled steps")
    return path


def list_packages(directory: str | Path) -> list[PackageInfo]:
    """The packages in `directory`, by model, cache length and width; unreadable ones last."""
    found = []
    for path in sorted(check_folder(directory).iterdir()):
        if PACKAGE_FILE.fullmatch(path.name) and path.is_file():
            try:
                found.append(PackageInfo(path, path.stat().st_size, read_package_record(path)))
            except (OSError, zipfile.BadZipFile, ValueError, KeyError) as error:
                found.append(PackageInfo(path, path.stat().st_size, {}, f"unreadable: {error}"))
    return sorted(found, key=lambda p: (p.problem is not None, p.record.get("model", ""), p.record.get("config", ""),
                                        int(p.record.get("max_length", 0)), int(p.record.get("width", "0").split("-")[-1])))


def own_cost_file(directory: Path) -> Path | None:
    """The cost curves file in `directory` when it is a ladref cost cache, else None."""
    path = directory / COST_FILE
    try:
        read_cache_file(path)
    except ValueError:
        return None
    return path if path.is_file() else None


def clear_packages(directory: str | Path) -> list[Path]:
    """Remove ladref's files from `directory` (`OWN_FILES` and its cost curves file); returns them."""
    folder = check_folder(directory)
    removed = [p for p in sorted(folder.iterdir()) if OWN_FILES.fullmatch(p.name) and p.is_file()]
    cost = own_cost_file(folder)
    removed += [cost] if cost is not None else []
    for path in removed:
        path.unlink(missing_ok=True)
    return removed


def size_text(size: float) -> str:
    """Bytes for people: 1.2 GiB, 649.0 MiB, 12 B."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return ""


def describe_package(info: PackageInfo) -> str:
    """One line: size, model, cache length and width, mode, dtype, device, torch."""
    r = info.record
    if info.problem is not None:
        return f"{info.path.name}  {size_text(info.size):>10}  {info.problem}"
    model = r.get("name") or r.get("model", "?")
    return (f"{info.path.name}  {size_text(info.size):>10}  {model} (config {r.get('config', '?')[:8]})  "
            f"cache {r.get('max_length', '?')}  width {r.get('width', '?')}  {r.get('mode', '?')}  "
            f"{r.get('dtype', '?')}  {r.get('device', '?')}  {r.get('threads', '?')} threads  torch {r.get('torch', '?')}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the cache subcommand."""
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", metavar="DIR", help="show the compiled steps kept in DIR (a compile_dir)")
    action.add_argument("--clear", metavar="DIR", help="remove them (ladref's own files only)")


def run(args: argparse.Namespace) -> int:
    """List or clear a compile_dir; returns 0."""
    if args.clear is not None:
        removed = clear_packages(args.clear)
        print(f"removed {len(removed)} files from {check_folder(args.clear)}" + "".join(f"\n  {p.name}" for p in removed))
        return 0
    folder = check_folder(args.list)
    packages = list_packages(folder)
    print(f"{len(packages)} compiled step{'' if len(packages) == 1 else 's'} in {folder}, "
          f"{size_text(sum(p.size for p in packages))}")
    for info in packages:
        print("  " + describe_package(info))
    cost = own_cost_file(folder)
    if cost is not None:
        print(f"cost curves: {cost.name}, {len(read_cache_file(cost))} measured")
    return 0
