"""Importing the course kit's scripts in the tests (``assignments/`` is a folder of scripts, not a package)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENTS = ROOT / "assignments"


def load(name: str):
    """Import assignments/<name>.py, with the folder on the path as the scripts themselves have it."""
    if str(ASSIGNMENTS) not in sys.path:
        sys.path.insert(0, str(ASSIGNMENTS))
    return importlib.import_module(name)
