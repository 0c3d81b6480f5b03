"""The tiny QA world made trainable: its tokenizer, a tiny base model, and the cold start, cached by config hash.

What: `ensure_qa_models(cache_dir, QAWarmUp())` writes the QA world's files (`qa/world.py`: corpus.jsonl,
sft_proposer.jsonl, sft_solver.jsonl, heldout.jsonl), trains a byte-level BPE tokenizer on them (the math world's
`build_tokenizer`, plus the QA tags `<question>`, `<alias>` as single tokens), builds a tiny Qwen3 base
(`world/model.py`) and fine-tunes it on the teacher's records. With `sft.roles: joint` (the default) one model
learns Solver Q&A and Proposer records of `sft`-tier facts together and starts both roles; with `sft.roles:
separate` each role gets its own fine-tune of the same base on its own records (`role_records`). The Solver's
records are `sft`-tier only either way; a grounded Proposer (`world.proposer_facts: all`, records about every fact
of a passage) requires `separate`, so no `corpus` or `multihop` fact reaches the Solver's start.

How: the same cache discipline as `sft/tiny.py`: built in a temporary folder under a lock and renamed to
`<cache>/qa-world/<key>/` when done; `<key>` hashes every config and `FORMAT_VERSION` (a field added later is left
out at its default, so older entries stay valid). SFT losses of both roles are kept in `<entry>/sft_metrics.jsonl`.

Usage: `models = ensure_qa_models(None, QAWarmUp())`; `models.proposer_dir`, `models.solver_dir` are Hugging Face
folders (the same one, `models.model_dir`, for a joint warm-up).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer

from pasodoble.config import to_dict
from pasodoble.io import build_lock, default_cache_dir, make_build_dir, read_jsonl
from pasodoble.qa.world import make_world, write_world
from pasodoble.reports.tracking import Tracker
from pasodoble.sft import train_sft
from pasodoble.sft.config import QAWarmUp as QAWarmUp  # re-exported: read without torch
from pasodoble.world.model import build_model
from pasodoble.world.tokenizer import build_tokenizer

FORMAT_VERSION = 1  # bump when the files change for the same configs, so caches rebuild
QA_TOKENS = ["<question>", "</question>", "<alias>", "</alias>"]


@dataclass(frozen=True)
class QAModels:
    proposer_dir: Path  # the SFT-warmed Proposer (HF format, tokenizer included)
    solver_dir: Path  # the SFT-warmed Solver (the same folder as proposer_dir for a joint warm-up)
    base_dir: Path  # the random-init base both started from
    world_dir: Path  # corpus.jsonl, sft_proposer.jsonl, sft_solver.jsonl, heldout.jsonl
    sft_metrics: Path  # SFT loss rows of every role (metrics.jsonl format)

    @classmethod
    def under(cls, root: Path, roles: str = "joint") -> QAModels:
        names = ("sft", "sft") if roles == "joint" else ("proposer", "solver")
        return cls(
            *(root / n for n in names), root / "base_model", root / "world", root / "sft_metrics.jsonl"
        )

    @property
    def model_dir(self) -> Path:
        """The joint model of both roles; a separate warm-up has none."""
        if self.proposer_dir != self.solver_dir:
            raise ValueError("a separate warm-up has no joint model: use proposer_dir and solver_dir")
        return self.solver_dir


def cache_key(cfg: QAWarmUp) -> str:
    fields = to_dict(cfg)
    if cfg.world.proposer_facts == "sft":  # at its default the world is as before the field: keys stay valid
        fields["world"].pop("proposer_facts")
    blob = json.dumps({"v": FORMAT_VERSION, "cfg": fields}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def role_records(proposer: list[dict], solver: list[dict], roles: str) -> dict[str, list[dict]]:
    """The SFT data of each model the warm-up trains, by its folder name: `sft` (joint: both roles' records) or
    `proposer` and `solver` (separate: each role's own)."""
    if roles == "joint":
        return {"sft": proposer + solver}
    return {"proposer": proposer, "solver": solver}


def qa_tokenizer(texts: list[str], vocab_size: int):
    """The math world's byte-level BPE on QA texts, with the QA tags as single (non-special) tokens."""
    tokenizer = build_tokenizer(texts, vocab_size)
    tokenizer.add_tokens(QA_TOKENS)
    return tokenizer


def warm_up(root: Path, cfg: QAWarmUp, *, progress: bool = True) -> QAModels:
    """Write the world, tokenizer and base under `root`, then SFT the base into each folder of `role_records`."""
    models = QAModels.under(root, cfg.sft.roles)
    paths = write_world(make_world(cfg.world), models.world_dir)
    runs = role_records(read_jsonl(paths["sft_proposer"]), read_jsonl(paths["sft_solver"]), cfg.sft.roles)
    texts = [f"user\n{r['prompt']}\nassistant\n{r['completion']}" for rows in runs.values() for r in rows]
    texts += [row["text"] for row in read_jsonl(paths["corpus"])]
    texts += [row["question"] for row in read_jsonl(paths["heldout"])]
    tokenizer = qa_tokenizer(texts, cfg.vocab_size)
    base = build_model(cfg.model, tokenizer, cfg.world.seed)
    base.save_pretrained(models.base_dir)
    tokenizer.save_pretrained(models.base_dir)
    tokenizer = AutoTokenizer.from_pretrained(models.base_dir)  # the folder's, as later runs read it
    with Tracker(root) as tracker:
        for name, records in runs.items():
            model = base if len(runs) == 1 else AutoModelForCausalLM.from_pretrained(models.base_dir)
            role = "both" if name == "sft" else name
            train_sft(model, tokenizer, records, cfg.sft, tracker=tracker, progress=progress, role=role)
            model.save_pretrained(root / name)
            tokenizer.save_pretrained(root / name)
    os.replace(root / "metrics.jsonl", models.sft_metrics)
    return models


def ensure_qa_models(cache_dir: Path | None, cfg: QAWarmUp, *, progress: bool = True) -> QAModels:
    """The cached warm-up for `cfg`, built first if missing (see the module docstring)."""
    cfg.world.validate()
    cfg.sft.validate()
    cfg.validate()
    parent = (Path(cache_dir) if cache_dir is not None else default_cache_dir()) / "qa-world"
    final = parent / cache_key(cfg)
    if (final / "done").is_file():
        return QAModels.under(final, cfg.sft.roles)
    parent.mkdir(parents=True, exist_ok=True)
    with build_lock(parent / f".lock-{final.name}", f"the tiny QA world {final.name}"):
        if not (final / "done").is_file():  # else another process built it while this one waited
            tmp = make_build_dir(final)
            try:
                warm_up(tmp, cfg, progress=progress)
                (tmp / "done").write_text(json.dumps(to_dict(cfg), indent=2) + "\n")
                shutil.rmtree(final, ignore_errors=True)  # a stale folder without `done`
                os.rename(tmp, final)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return QAModels.under(final, cfg.sft.roles)
