"""The `pasodoble` command line: thin wrappers over each subsystem's `run_*` function.

Each subsystem module exposes `register(subparsers)`, which adds its subcommand(s) and sets `func` to a
`run_*(args) -> int`. This file only assembles them and turns a `UserError` (bad flag, config, path) into one line
on stderr with exit code 2, so a user mistake never ends in a traceback.

    pasodoble --help
    pasodoble <command> --help
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from pasodoble import __version__
from pasodoble.errors import UserError

# Order is the order of `pasodoble --help`.
COMMAND_MODULES = (
    "pasodoble.demo",
    "pasodoble.train",
    "pasodoble.experiment",
    "pasodoble.sft",
    "pasodoble.evals.cli",
    "pasodoble.grader.cli",
    "pasodoble.plotting",
    "pasodoble.adapters",
    "pasodoble.rollout.server",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pasodoble",
        description="Dual-play RL for LLM reasoning: train a Proposer and a Solver against each other.",
        epilog="Run 'pasodoble <command> --help' for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"pasodoble {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="<command>")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except UserError as e:
        print(f"pasodoble {args.command}: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"pasodoble {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
