"""The `pasodoble sft` and `pasodoble sft-data` command lines: their flags, recipes, folders and data checked before
torch is imported (a mistake answers in a second, one line and exit code 2); `run.py` runs them.

    pasodoble sft --model tiny:base --data sft_solver.jsonl --out out/sft-solver [--max-steps N ...]
    pasodoble sft --config recipes/cold-start-qwen3-1.7b-sft.yaml data=out/cold/solver.jsonl out=out/sft-solver
    pasodoble sft-data --config recipes/cold-start-qwen3-1.7b.yaml [key=value ...]

"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pasodoble.config import load_config
from pasodoble.folders import check_folder
from pasodoble.roles.models import check_model_spec
from pasodoble.sft.config import SFTConfig, SFTRunConfig
from pasodoble.sft.data import SFTDataConfig
from pasodoble.sft.examples import load_examples, split_examples

# flag -> dotted config field; a flag given on the command line overrides the recipe
FLAGS = {
    "model": "model",
    "data": "data",
    "out": "out",
    "eval_data": "eval_data",
    "max_steps": "sft.max_steps",
    "batch_size": "sft.batch_size",
    "lr": "sft.lr",
    "warmup_steps": "sft.warmup_steps",
    "seed": "sft.seed",
    "threads": "sft.num_threads",
}


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sft",
        help="supervised fine-tuning on {prompt, completion} JSONL (completion-only loss)",
        description="Flags override the recipe; defaults in brackets are SFTConfig's (see docs/COLD_START.md).",
    )
    d = SFTConfig()
    p.add_argument("--config", type=Path, help="YAML recipe of SFTRunConfig fields (model, data, out, sft.*)")
    p.add_argument("--model", help="model directory, Hugging Face id, or tiny:base / tiny:solver")
    p.add_argument("--data", help="JSONL with 'prompt' (user message), 'completion' and optional 'system'")
    p.add_argument("--out", help="output directory (HF checkpoint + metrics.jsonl)")
    p.add_argument(
        "--eval-data", help="held-out JSONL for the eval loss [eval_fraction of --data, default 0]"
    )
    p.add_argument("--max-steps", type=int, help=f"optimizer steps [{d.max_steps}]")
    p.add_argument("--batch-size", type=int, help=f"examples per step [{d.batch_size}]")
    p.add_argument("--lr", type=float, help=f"peak learning rate [{d.lr}]")
    p.add_argument("--warmup-steps", type=int, help=f"linear warm-up steps [{d.warmup_steps}]")
    p.add_argument("--seed", type=int, help=f"data order [{d.seed}]")
    p.add_argument("--threads", type=int, help=f"torch CPU threads [{d.num_threads}]")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. sft.bf16=true")
    p.set_defaults(func=run_sft)
    register_data(subparsers)


def register_data(subparsers) -> None:
    p = subparsers.add_parser(
        "sft-data",
        help="verified Proposer and Solver SFT sets from a teacher and a checker (resumable)",
        description="Rerun with the same out_dir to resume. See docs/COLD_START.md.",
    )
    p.add_argument(
        "--config", type=Path, required=True, help="YAML recipe, e.g. recipes/cold-start-qwen3-1.7b.yaml"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. target_kept=100")
    p.set_defaults(func=run_sft_data)


def run_sft_data(args: argparse.Namespace) -> int:
    cfg = load_config(SFTDataConfig, args.config, args.overrides)
    check_folder(Path(cfg.out_dir), "sft-data", "out_dir")  # before a local teacher loads
    from pasodoble.sft.run import make_sft_sets  # torch loads here, after the checks

    return make_sft_sets(cfg, progress=not args.no_progress)


def run_sft(args: argparse.Namespace) -> int:
    flags = [
        f"{key}={json.dumps(getattr(args, flag))}"
        for flag, key in FLAGS.items()
        if getattr(args, flag) is not None
    ]
    cfg = load_config(SFTRunConfig, args.config, [*args.overrides, *flags])
    check_model_spec(cfg.model, "model")
    check_folder(Path(cfg.out), "sft", "--out")  # every process, before the rendezvous of `_accelerator`
    examples = load_examples(Path(cfg.data))
    eval_examples = None
    if cfg.eval_data:
        eval_examples = load_examples(Path(cfg.eval_data))
    elif cfg.eval_fraction > 0:
        examples, eval_examples = split_examples(examples, cfg.eval_fraction, cfg.sft.seed)
    from pasodoble.sft.run import fine_tune  # torch loads here, after the checks

    return fine_tune(cfg, examples, eval_examples, progress=not args.no_progress)
