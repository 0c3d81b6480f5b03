"""The `pasodoble sft` and `pasodoble sft-data` commands; the layer that resolves `tiny:` model specs.

    pasodoble sft --model tiny:base --data sft_solver.jsonl --out out/sft-solver [--max-steps N ...]
    pasodoble sft-data --config recipes/cold-start-qwen3-1.7b.yaml [key=value ...]

The trainer (`trainer.py`) takes a loaded model; resolving `tiny:` specs here keeps `world/cache.py` (which trains the
tiny world's models with the trainer) and the trainer free of an import circle.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer

from pasodoble.config import load_config
from pasodoble.errors import UserError
from pasodoble.grader import Grader
from pasodoble.sft.data import SFTDataConfig, SFTDataRun
from pasodoble.sft.teacher import TeacherConfig, build_teacher
from pasodoble.sft.trainer import SFTConfig, load_examples, train_sft
from pasodoble.tracking import Tracker
from pasodoble.world.build import WorldConfig
from pasodoble.world.cache import TINY_PREFIX, ensure_sft_models, resolve_model


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sft",
        help="supervised fine-tuning on {prompt, completion} JSONL (completion-only loss)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--model", required=True, help="model directory, Hugging Face id, or tiny:base / tiny:solver"
    )
    p.add_argument(
        "--data", required=True, type=Path, help="JSONL with 'prompt' (user message) and 'completion'"
    )
    p.add_argument("--out", required=True, type=Path, help="output directory (HF checkpoint + metrics.jsonl)")
    defaults = SFTConfig()
    p.add_argument("--max-steps", type=int, default=defaults.max_steps, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=defaults.batch_size, help="examples per step")
    p.add_argument("--lr", type=float, default=defaults.lr, help="peak learning rate")
    p.add_argument("--warmup-steps", type=int, default=defaults.warmup_steps, help="linear warm-up steps")
    p.add_argument("--seed", type=int, default=defaults.seed, help="data order")
    p.add_argument("--threads", type=int, default=defaults.num_threads, help="torch CPU threads")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
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


def _local_path(cfg: TeacherConfig) -> str | None:
    return resolve_model(cfg.model) if cfg.kind == "local" else None


def run_sft_data(args: argparse.Namespace) -> int:
    cfg = load_config(SFTDataConfig, args.config, args.overrides)
    models = [c.model for c in (cfg.teacher, cfg.checker) if c is not None and c.kind == "local"]
    if cfg.knowledge.path is None and any(m.startswith(TINY_PREFIX) for m in models):
        cfg.knowledge.path = str(ensure_sft_models(None, WorldConfig(), SFTConfig()).world.corpus)
    teacher = build_teacher(cfg.teacher, "teacher", model_path=_local_path(cfg.teacher))
    checker = teacher
    if cfg.checker is not None:
        checker = build_teacher(cfg.checker, "checker", model_path=_local_path(cfg.checker))
    with Grader(cfg.grader) as grader:
        report = SFTDataRun(cfg, teacher, checker, grader, progress=not args.no_progress).run()
    print(json.dumps({k: report[k] for k in ("kept", "target_kept", "candidates", "fates")}))
    print(f"wrote {cfg.out_dir}/proposer.jsonl, solver.jsonl, report.md")
    return 0


def run_sft(args: argparse.Namespace) -> int:
    config = SFTConfig(
        max_steps=args.max_steps,
        batch_size=args.batch_size,
        lr=args.lr,
        warmup_steps=args.warmup_steps,
        seed=args.seed,
        num_threads=args.threads,
    )
    config.validate()
    examples = load_examples(args.data)
    model_path = resolve_model(args.model)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if tokenizer.chat_template is None or tokenizer.pad_token_id is None or tokenizer.eos_token_id is None:
        raise UserError(f"--model {args.model}: the tokenizer needs a chat template, an eos and a pad token")
    model = AutoModelForCausalLM.from_pretrained(model_path)
    with Tracker(args.out) as tracker:
        summary = train_sft(
            model, tokenizer, examples, config, tracker=tracker, progress=not args.no_progress
        )
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in summary.items()}))
    return 0
