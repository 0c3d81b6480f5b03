"""The `pasodoble train` command line: its arguments, the recipe and the resume's checks, all before torch loads.

Why apart from `train.py`: a mistyped key, a bad value or a wrong `--resume` folder answers in a second, with one
line and exit code 2; `train.py` (torch, transformers, the roles and the loop) is imported only once the config is
read and checked (`TrainConfig`, `train_config.py`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pasodoble.config import load_config
from pasodoble.errors import UserError
from pasodoble.runs.train_config import TrainConfig, resume_changes


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "train", help="dual-play RL of a Proposer and a Solver (online/offline schedules)"
    )
    p.add_argument("--config", type=Path, help="YAML recipe, e.g. recipes/tiny-online.yaml")
    p.add_argument(
        "--resume", type=Path, metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint"
    )
    p.add_argument(
        "--strict-resume",
        action="store_true",
        help="with --resume: stop at a damaged checkpoint instead of falling back to the newest intact one",
    )
    p.add_argument(
        "overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. schedule.steps=20"
    )
    p.set_defaults(func=run_train_cmd)


def run_train_cmd(args: argparse.Namespace) -> int:
    if args.resume is not None:
        saved = args.resume / "config.yaml"
        if not saved.exists():
            raise UserError(
                f"--resume {args.resume}: no config.yaml there; pass the folder a train run wrote"
            )
        if args.config is not None:
            raise UserError("--resume reads RUN_DIR/config.yaml; give overrides instead of --config")
        cfg = load_config(TrainConfig, saved, args.overrides)
        refusal, notes = resume_changes(load_config(TrainConfig, saved), cfg)
        if refusal is not None:
            raise UserError(
                f"--resume {args.resume}: {refusal}; a checkpoint loads only into the shapes it was saved "
                "with: drop that override, or start a new run_dir"
            )
        for line in notes:
            print(line, file=sys.stderr, flush=True)
        cfg.run_dir = str(args.resume)
        # torch and transformers load here, after the config checks
        from pasodoble.runs.train import run_train

        run_train(cfg, resume=True, strict_resume=args.strict_resume)
        return 0
    if args.strict_resume:
        raise UserError("--strict-resume only applies with --resume RUN_DIR")
    if args.config is None:
        raise UserError("pass --config RECIPE (e.g. recipes/tiny-online.yaml) or --resume RUN_DIR")
    cfg = load_config(TrainConfig, args.config, args.overrides)
    from pasodoble.runs.train import run_train  # torch loads here, after the config checks

    run_train(cfg)
    return 0
