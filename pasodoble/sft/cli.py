"""The `pasodoble sft` and `pasodoble sft-data` commands; the layer that resolves `tiny:` model specs.

    pasodoble sft --model tiny:base --data sft_solver.jsonl --out out/sft-solver [--max-steps N ...]
    pasodoble sft --config recipes/cold-start-qwen3-1.7b-sft.yaml data=out/cold/solver.jsonl out=out/sft-solver
    pasodoble sft-data --config recipes/cold-start-qwen3-1.7b.yaml [key=value ...]

The trainer (`trainer.py`) takes a loaded model; resolving `tiny:` specs here keeps `sft/tiny.py` (which trains the
tiny world's models with the trainer) and the trainer free of an import circle.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pasodoble import accel
from pasodoble.config import load_config, save_config
from pasodoble.errors import ConfigError, UserError
from pasodoble.folders import check_folder, claim_folder
from pasodoble.grader import Grader
from pasodoble.reports.tracking import Tracker
from pasodoble.roles.models import check_model_spec
from pasodoble.sft.data import SFTDataConfig, SFTDataRun
from pasodoble.sft.teacher import TeacherConfig, build_teacher
from pasodoble.sft.tiny import TINY_PREFIX, ensure_sft_models, resolve_model
from pasodoble.sft.trainer import SFTConfig, load_examples, split_examples, train_sft
from pasodoble.update.precision import DTYPES
from pasodoble.world.build import WorldConfig


@dataclass
class SFTRunConfig:
    model: str | None = None  # model folder, Hugging Face id, or tiny:base / tiny:proposer / tiny:solver
    data: str | None = None  # JSONL of {"prompt", "completion"[, "system"]} (what sft-data writes)
    out: str | None = None  # output folder: HF checkpoint, metrics.jsonl, config.yaml
    eval_data: str | None = None  # held-out JSONL of the same form (None: eval_fraction of data)
    eval_fraction: float = 0.0  # share of data held out for the eval loss when eval_data is None (0: no eval)
    device: str | None = None  # torch device (None: cuda when available, else cpu)
    dtype: str = "float32"  # weights on load; float32 + sft.bf16 is bf16 compute over fp32 master weights
    sft: SFTConfig = field(default_factory=SFTConfig)  # the training loop

    def validate(self) -> None:
        for name in ("model", "data", "out"):
            if not getattr(self, name):
                raise ConfigError(name, f"is required (--{name} or {name}= in the recipe)")
        if not 0.0 <= self.eval_fraction < 1.0:
            raise ConfigError("eval_fraction", f"must be in [0, 1), got {self.eval_fraction}")
        if self.dtype not in DTYPES:
            raise ConfigError("dtype", f"must be one of {', '.join(DTYPES)}, got {self.dtype!r}")


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


def _local_path(cfg: TeacherConfig) -> str | None:
    return resolve_model(cfg.model) if cfg.kind == "local" else None


def run_sft_data(args: argparse.Namespace) -> int:
    cfg = load_config(SFTDataConfig, args.config, args.overrides)
    check_folder(Path(cfg.out_dir), "sft-data", "out_dir")  # before a local teacher loads
    if cfg.num_threads is not None:
        torch.set_num_threads(cfg.num_threads)
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
    if report["kept"] < cfg.target_kept:
        print(
            f"pasodoble sft-data: stopped at max_passages={cfg.passage_limit} with {report['kept']} of "
            f"{cfg.target_kept} kept; rerun with a larger max_passages to go on",
            file=sys.stderr,
        )
    return 0


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
    model_path = resolve_model(cfg.model)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if tokenizer.chat_template is None or tokenizer.pad_token_id is None or tokenizer.eos_token_id is None:
        raise UserError(f"model {cfg.model}: the tokenizer needs a chat template, an eos and a pad token")
    accelerator = _accelerator()
    main = accelerator is None or accelerator.is_main_process
    if accelerator is not None:
        device = accelerator.device
    else:
        device = cfg.device or ("cuda" if torch.cuda.is_available() else "cpu")
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=DTYPES[cfg.dtype]).to(device)
    accel.apply(model)  # the CPU fast paths a Role's model takes (each a no-op off the CPU)
    out = Path(cfg.out)
    if main:
        print(f"fine-tuning {cfg.model} -> {out} (metrics.jsonl, then the model)", flush=True)
    tracker = None
    if main:
        claim_folder(out, "sft", "--out")
        save_config(cfg, out / "config.yaml")
        tracker = Tracker(out)
    try:
        summary = train_sft(
            model,
            tokenizer,
            examples,
            cfg.sft,
            eval_examples=eval_examples,
            tracker=tracker,
            progress=main and not args.no_progress,
            accelerator=accelerator,
        )
    finally:
        if tracker is not None:
            tracker.close()
    if cfg.sft.gradient_checkpointing:
        model.config.use_cache = True  # the checkpoint is for generation
    if main:
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in summary.items()}))
        quoted = shlex.quote(str(out))
        print(
            f"wrote {out} (a Hugging Face model folder, with metrics.jsonl)\n"
            f"next: pasodoble train --config RECIPE solver.model={quoted}   # or proposer.model=; "
            f"pasodoble eval --model {quoted} --dataset FILE --out EVAL_DIR",
            flush=True,
        )
    if accelerator is not None:
        accelerator.wait_for_everyone()
        # the process group is torn down here, not by the interpreter's exit: left to exit, a rank of a gloo group
        # was once aborted there ("terminate called without an active exception") after the model was written
        accelerator.end_training()
    return 0


def _accelerator():
    """An `accelerate.Accelerator` when launched as several processes (`accelerate launch`, `torchrun`), else None."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    from accelerate import Accelerator

    return Accelerator(cpu=not torch.cuda.is_available())
