"""The `pasodoble` command line: thin wrappers over each subsystem's `run_*` function.

Each subsystem module exposes `register(subparsers)`, which adds its subcommand(s) and sets `func` to a
`run_*(args) -> int`. This file only assembles them and turns a `UserError` (bad flag, config, path) into one line
on stderr with exit code 2, so a user mistake never ends in a traceback.

Most commands run torch and transformers (several seconds to import, more on a cold disk), so only the module of
the command named on the line is imported, and every command's module reads and checks its arguments and recipe
(config dataclasses defined without torch) before it imports what runs it: `--version`, `--help`, a mistyped
command, `config keys` / `config show` and every argument or config error answer before torch is imported. The
modules that register a command whose run needs torch import it only after the checks (`runs/train_cli.py`,
`runs/demo_cli.py` for the three demos, `runs/layout_cmd.py`, `runs/export.py`, `sft/cli.py`, `evals/cli.py`,
`code/cli.py`, `rollout/serve_cli.py`).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Collection, Sequence

from pasodoble import __version__, allocator
from pasodoble.errors import UserError
from pasodoble.progress import quiet_libraries

# (command, module that registers it, its line in `pasodoble --help`), in the order of `pasodoble --help`.
COMMANDS = (
    (
        "demo",
        "pasodoble.runs.demo_cli",
        "tiny world on CPU: build, SFT both roles, short dual-play run, evaluate the Solver per tier",
    ),
    (
        "demo-real",
        "pasodoble.runs.demo_cli",
        "real model (SmolLM2-135M) on CPU: cold-start SFT, dual-play, per-tier Solver table before/after",
    ),
    (
        "demo-qa",
        "pasodoble.runs.demo_cli",
        "tiny QA world on CPU: cold start, dual-play seeds (and a random-reward control), per-tier eval",
    ),
    (
        "train",
        "pasodoble.runs.train_cli",
        "dual-play RL of a Proposer and a Solver (online/offline schedules)",
    ),
    (
        "layout",
        "pasodoble.runs.layout_cmd",
        "check a recipe's multi-GPU layout and print its memory estimate",
    ),
    (
        "experiment",
        "pasodoble.runs.experiment",
        "tiny-world experiment: SFT vs dual-play vs controls vs oracle",
    ),
    (
        "sft",
        "pasodoble.sft.cli",
        "supervised fine-tuning on {prompt, completion} JSONL (completion-only loss)",
    ),
    (
        "sft-data",
        "pasodoble.sft.cli",
        "verified Proposer and Solver SFT sets from a teacher and a checker (resumable)",
    ),
    ("kb", "pasodoble.kb.cli", "knowledge-corpus tools: stats, dedup, sample"),
    ("eval", "pasodoble.evals.cli", "evaluate a model on math benchmarks or any JSONL/Parquet/Hub set"),
    ("eval-table", "pasodoble.evals.cli", "merge several eval runs into one Markdown table"),
    ("code-eval", "pasodoble.code.cli", "run code problems (HumanEval, any JSONL) in the sandbox: pass@k"),
    ("verify-answers", "pasodoble.grader.cli", "grade gold/pred pairs from a JSONL file"),
    ("plot", "pasodoble.reports.plotting", "render PNG plots of a run from its metrics.jsonl"),
    (
        "inspect",
        "pasodoble.reports.samples_html",
        "write a self-contained HTML page of a run's rollout samples",
    ),
    (
        "config",
        "pasodoble.runs.config_show",
        "print a recipe's resolved config with every key's default and comment",
    ),
    ("export", "pasodoble.runs.export", "write a run's last checkpoint as plain Hugging Face model folders"),
    (
        "serve",
        "pasodoble.rollout.serve_cli",
        "start a vLLM OpenAI-compatible server for a model (server mode)",
    ),
)
COMMAND_MODULES = tuple(dict.fromkeys(module for _, module, _ in COMMANDS))


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


def build_parser(load: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The whole parser; `load`: the commands whose modules are imported (None: all), the others listed by name."""
    parser = argparse.ArgumentParser(
        prog="pasodoble",
        description="Dual-play RL for LLM reasoning: train a Proposer and a Solver against each other.",
        epilog="Run 'pasodoble <command> --help' for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"pasodoble {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="<command>")
    modules = {module for name, module, _ in COMMANDS if load is None or name in load}
    for name, module, help_line in COMMANDS:
        if module in modules:
            importlib.import_module(module).register(subparsers)
            modules.discard(module)  # registers all its commands at once
        elif name not in subparsers.choices:
            subparsers.add_parser(name, help=help_line)
    _use_formatter(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    named = next((arg for arg in argv if not arg.startswith("-")), None)  # the top level has only options
    quiet_libraries()  # before a command module imports transformers, which reads the setting once
    parser = build_parser(load=[named] if named else [])
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
