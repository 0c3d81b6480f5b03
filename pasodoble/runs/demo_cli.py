"""The `pasodoble demo` command line: its arguments and the recipe are read and checked before torch loads, so
that a bad key or value answers in a second; `demo.py` (the run itself) is imported afterwards.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from pasodoble.config import load_config
from pasodoble.runs.demo_config import DemoConfig


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "demo",
        help="tiny world on CPU: build, SFT both roles, short dual-play run, evaluate the Solver per tier",
    )
    p.add_argument(
        "--config", type=Path, help="YAML recipe (default: the built-in defaults, = recipes/demo.yaml)"
    )
    p.add_argument("--out", help="run directory (default: runs/demo-<date>-<time>)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars (log lines only)")
    p.add_argument(
        "overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. sft.max_steps=200"
    )
    p.set_defaults(func=run_demo_cmd)


def run_demo_cmd(args: argparse.Namespace) -> int:
    config = load_config(DemoConfig, args.config, args.overrides)
    if args.out:
        config.run_dir = args.out
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("pasodoble.runs.demo").setLevel(logging.INFO)
    from pasodoble.runs.demo import run_demo  # torch loads here, after the config checks

    run_demo(config, progress=not args.no_progress)
    return 0
