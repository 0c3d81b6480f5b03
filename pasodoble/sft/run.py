"""What `pasodoble sft` and `pasodoble sft-data` run once `cli.py` has checked their config, folders and data; the
layer that resolves `tiny:` model specs.

The trainer (`trainer.py`) takes a loaded model; resolving `tiny:` specs here keeps `sft/tiny.py` (which trains the
tiny world's models with the trainer) and the trainer free of an import circle.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pasodoble import accel
from pasodoble.config import save_config
from pasodoble.errors import UserError
from pasodoble.folders import claim_folder
from pasodoble.grader import Grader
from pasodoble.reports.tracking import Tracker
from pasodoble.sft.config import SFTConfig, SFTRunConfig
from pasodoble.sft.data import SFTDataConfig, SFTDataRun
from pasodoble.sft.teacher import TeacherConfig, build_teacher
from pasodoble.sft.tiny import TINY_PREFIX, ensure_sft_models, resolve_model
from pasodoble.sft.trainer import train_sft
from pasodoble.update.precision import DTYPES
from pasodoble.world.build import WorldConfig


def _local_path(cfg: TeacherConfig) -> str | None:
    return resolve_model(cfg.model) if cfg.kind == "local" else None


def make_sft_sets(cfg: SFTDataConfig, *, progress: bool) -> int:
    """`pasodoble sft-data` once its recipe and output folder are checked."""
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
        report = SFTDataRun(cfg, teacher, checker, grader, progress=progress).run()
    print(json.dumps({k: report[k] for k in ("kept", "target_kept", "candidates", "fates")}))
    print(f"wrote {cfg.out_dir}/proposer.jsonl, solver.jsonl, report.md")
    if report["kept"] < cfg.target_kept:
        print(
            f"pasodoble sft-data: stopped at max_passages={cfg.passage_limit} with {report['kept']} of "
            f"{cfg.target_kept} kept; rerun with a larger max_passages to go on",
            file=sys.stderr,
        )
    return 0


def fine_tune(
    cfg: SFTRunConfig, examples: list[dict], eval_examples: list[dict] | None, *, progress: bool
) -> int:
    """`pasodoble sft` once its config, model spec, output folder and data are checked."""
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
            progress=main and progress,
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
