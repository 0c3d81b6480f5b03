"""`pasodoble export RUN_DIR [--merge] --out DIR`: a run's last checkpoint as plain Hugging Face folders.

Each role of the newest checkpoint, verified against its manifest, becomes a model folder: merged into its base
for a LoRA role with --merge, the peft adapter folder without. Everything is written into a fresh folder beside
`--out` and swapped in whole, so a previous export leaves nothing behind. The folders and the checkpoint are
checked before torch is imported, so a wrong path answers in a second.

Tests: `tests/runs/test_export.py`, `tests/roles/test_adapters.py`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from pasodoble import checkpoint
from pasodoble.config import load_config
from pasodoble.errors import UserError
from pasodoble.folders import check_folder, mark_folder
from pasodoble.io import current_umask
from pasodoble.roles.config import ADAPTER_FILE
from pasodoble.runs.train_config import TrainConfig


def export_role(role_dir: Path, base: str | None, out: Path, *, merge: bool) -> str:
    """One role folder of a checkpoint -> a new Hugging Face folder at `out`; returns what was written."""
    src = role_dir / "model"
    if not (src / ADAPTER_FILE).is_file():
        shutil.copytree(src, out)
        return "full model"
    if not merge:
        shutil.copytree(src, out)
        return "LoRA adapter (peft format; --merge for a plain model)"
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if base is None:
        raise UserError(f"{role_dir}: cannot find the base model of this adapter")
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    merged = PeftModel.from_pretrained(model, str(src)).merge_and_unload()
    merged.save_pretrained(out)
    AutoTokenizer.from_pretrained(
        str(src) if (src / "tokenizer_config.json").is_file() else base
    ).save_pretrained(out)
    return "merged LoRA model"


def verified_latest(run_dir: Path) -> Path:
    """The run's newest checkpoint after the manifest check resume makes; a damaged one is one `UserError`."""

    ckpt = checkpoint.latest_checkpoint(run_dir)
    if ckpt is None:
        raise UserError(f"{run_dir}: no complete checkpoint to export")
    problem, verified = checkpoint.verify_checkpoint(ckpt)
    if problem is not None:
        raise UserError(
            f"checkpoint {ckpt} is damaged ({problem}); nothing exported: restore it from a copy, or let "
            f"`pasodoble train --resume {run_dir}` set it aside and export the intact one before it"
        )
    if not verified:
        print(
            f"warning: checkpoint {ckpt} has no {checkpoint.MANIFEST} (an older format); exported unverified",
            file=sys.stderr,
        )
    return ckpt


def _swap_in(tmp: Path, out: Path) -> None:
    """Put the finished folder `tmp` at `out`; a previous `out` is moved aside first and then removed."""
    if out.exists():
        old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".old"))
        os.replace(out, old / out.name)
        os.replace(tmp, out)
        shutil.rmtree(old)
    else:
        os.replace(tmp, out)


def export_run(run_dir: Path, out: Path, *, merge: bool) -> dict[str, str]:
    """Each role of the run's newest verified checkpoint as a folder under `out`, written into a fresh temporary
    folder beside it and swapped in whole: a previous export in `out` leaves nothing behind."""
    check_folder(out, "export", "--out")
    ckpt = verified_latest(run_dir)
    cfg = load_config(TrainConfig, run_dir / "config.yaml") if (run_dir / "config.yaml").is_file() else None
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    from pasodoble.runs.train import resolve  # torch loads here, after the folder and checkpoint checks

    try:
        written = {}
        for role in ("proposer", "solver"):
            if not (ckpt / role / "model").is_dir():
                continue
            spec = getattr(cfg, role).model if cfg is not None else None
            base = resolve(spec, cfg) if spec is not None else None
            written[role] = export_role(ckpt / role, base, tmp / role, merge=merge)
        mark_folder(tmp, "export")
        os.chmod(tmp, 0o777 & ~current_umask())  # mkdtemp's 0700 would make the export private to its writer
        _swap_in(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return written


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "export", help="write a run's last checkpoint as plain Hugging Face model folders"
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a folder `pasodoble train` wrote")
    p.add_argument("--merge", action="store_true", help="merge LoRA adapters into their base model")
    p.add_argument("--out", type=Path, required=True, help="output folder (one sub-folder per role)")
    p.set_defaults(func=run_export_cmd)


def run_export_cmd(args: argparse.Namespace) -> int:
    if not args.run_dir.is_dir():
        raise UserError(f"{args.run_dir}: not a folder; pass a run directory")
    for role, what in export_run(args.run_dir, args.out, merge=args.merge).items():
        print(f"{role}: {what} -> {args.out / role}")
    return 0
