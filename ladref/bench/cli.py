"""Command line: ``python -m ladref demo`` (and the other subcommands listed by ``--help``).

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and ``run(args)``;
this file only wires them together.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> (module, one-line help)
COMMANDS = {
    "demo": ("ladref.bench.demo", "greedy vs lookahead decoding on the embedded SmolLM2 model"),
    "bench": ("ladref.bench.benchmark", "benchmark greedy / jacobi / lookahead / prompt lookup on real prompts"),
    "cache": ("ladref.bench.cache_cli", "list or clear the compiled steps kept in a compile_dir"),
}


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run one subcommand; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m ladref", description="Jacobi and Lookahead Decoding, by the book.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules = {}
    for name, (module_name, help_text) in COMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name != module_name:
                raise
            continue
        modules[name] = module
        module.add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    args = parser.parse_args(argv)
    return int(modules[args.command].run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
