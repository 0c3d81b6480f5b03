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

from pasodoble import __version__, allocator
from pasodoble.errors import UserError

# Order is the order of `pasodoble --help`.
COMMAND_MODULES = (
    "pasodoble.runs.demo",
    "pasodoble.runs.demo_real",
    "pasodoble.runs.demo_qa",
    "pasodoble.runs.train",
    "pasodoble.runs.layout_cmd",
    "pasodoble.runs.experiment",
    "pasodoble.sft.cli",
    "pasodoble.kb.cli",
    "pasodoble.evals.cli",
    "pasodoble.code.cli",
    "pasodoble.grader.cli",
    "pasodoble.reports.plotting",
    "pasodoble.reports.samples_html",
    "pasodoble.runs.config_show",
    "pasodoble.runs.export",
    "pasodoble.rollout.server",
)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """`--help` names every option's default, unless its help already does or it has none (None, a flag)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        off = action.default is None or action.default is False or action.default is argparse.SUPPRESS
        if "default" in text or not action.option_strings or off:
            return text
        return f"{text} (default: %(default)s)"


def _use_formatter(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = HelpFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _use_formatter(sub)


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
    _use_formatter(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        code = int(args.func(args) or 0)
    except UserError as e:
        print(f"pasodoble {args.command}: error: {e}", file=sys.stderr)
        code = e.exit_code
    except KeyboardInterrupt:
        print(f"pasodoble {args.command}: interrupted", file=sys.stderr)
        code = 130
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
        return 141
    collectives = sys.modules.get(
        "pasodoble.scale.collectives"
    )  # loaded only by commands that may run several ranks
    return (
        collectives.end_process(code) if collectives is not None else code
    )  # a rank ends here (end_process)


def run() -> None:
    """The `pasodoble` command: on the allocator `PASODOBLE_ALLOCATOR` asks for (`pasodoble.allocator`: TCMalloc when
    installed), then `main`."""
    allocator.relaunch()
    allocator.settle()  # the children of this process (vLLM, NCCL, sandboxes) start on glibc's malloc
    sys.exit(main())


if __name__ == "__main__":
    run()
