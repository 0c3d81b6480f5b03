"""The command lines of the demos (`pasodoble demo`, `demo-real`, `demo-qa`): the arguments and the recipe are read
and checked before torch loads, so that a bad key, value or flag answers in a second with one line and exit code 2;
the run itself (`demo.py`, `demo_real.py`, `demo_qa.py`) is imported afterwards.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from pasodoble.config import load_config
from pasodoble.errors import ConfigError
from pasodoble.runs.demo_config import QUICK_RECIPE, REPO, DemoConfig, QADemoConfig, RealDemoConfig


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
    register_real(subparsers)
    register_qa(subparsers)


def run_demo_cmd(args: argparse.Namespace) -> int:
    config = load_config(DemoConfig, args.config, args.overrides)
    if args.out:
        config.run_dir = args.out
    _log_to_console("pasodoble.runs.demo")
    from pasodoble.runs.demo import run_demo  # torch loads here, after the config checks

    run_demo(config, progress=not args.no_progress)
    return 0


def register_real(subparsers) -> None:
    p = subparsers.add_parser(
        "demo-real",
        help="real model (SmolLM2-135M) on CPU: cold-start SFT, dual-play, per-tier Solver table before/after",
    )
    p.add_argument("--config", type=Path, help="YAML recipe (default: the built-in defaults)")
    p.add_argument(
        "--quick", action="store_true", help=f"smoke run: a few steps on small sets ({QUICK_RECIPE})"
    )
    p.add_argument("--out", help="run directory (default: runs/demo-real-<date>-<time>)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars (log lines only)")
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="dotted overrides, e.g. dualplay.steps=4, or seeds=[0,1,2] conditions=[dualplay,random_reward] "
        "for seeds and the random-reward control, sft_from=DIR to reuse a cold start",
    )
    p.set_defaults(func=run_demo_real_cmd)


def run_demo_real_cmd(args: argparse.Namespace) -> int:
    if args.quick and args.config:
        raise ConfigError("--quick", "give either --quick or --config, not both")
    recipe = REPO / QUICK_RECIPE if args.quick else args.config
    config = load_config(RealDemoConfig, recipe, args.overrides)
    if args.out:
        config.run_dir = args.out
    _log_to_console("pasodoble.runs.demo_real")
    from pasodoble.runs.demo_real import run_demo_real  # torch loads here, after the config checks

    run_demo_real(config, progress=not args.no_progress)
    return 0


def register_qa(subparsers) -> None:
    p = subparsers.add_parser(
        "demo-qa",
        help="tiny QA world on CPU: cold start, dual-play seeds (and a random-reward control), per-tier eval",
    )
    p.add_argument("--config", type=Path, help="YAML recipe, e.g. recipes/tiny-qa.yaml (default: built-ins)")
    p.add_argument("--out", help="run directory (default: runs/demo-qa-<date>-<time>)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars (log lines only)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. seeds=[0,1,2]")
    p.set_defaults(func=run_demo_qa_cmd)


def run_demo_qa_cmd(args: argparse.Namespace) -> int:
    cfg = load_config(QADemoConfig, args.config, args.overrides)
    if args.out:
        cfg.run_dir = args.out
    _log_to_console("pasodoble.runs.demo_qa")
    from pasodoble.runs.demo_qa import run_demo_qa  # torch loads here, after the config checks

    run_demo_qa(cfg, progress=not args.no_progress)
    return 0


def _log_to_console(logger: str) -> None:
    """The run's INFO lines on the console (a plain format, unless the caller set logging up)."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger(logger).setLevel(logging.INFO)
