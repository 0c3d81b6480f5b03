"""SFT-warmed tiny models, built once and cached by config hash; `tiny:` model specs for recipes.

Why: every tiny-world run (demo, RL recipes, tests of the loop) starts from the same warmed-up Proposer and
Solver. Building them takes minutes on a CPU, so they are built once per (world, SFT) config and reused.

How: `ensure_sft_models` builds in `cache_dir/.tmp-<key>-<pid>/` and renames it to `cache_dir/<key>/` when done, so a
killed build never leaves a half cache entry and two concurrent builders cannot mix files (the loser's rename
fails and its copy is removed). A file lock per key (`build_lock`) makes concurrent processes wait for one builder,
with progress lines, instead of building twice. `<key>` hashes both configs and the world's format version.

Warm-up: with `sft.roles == "joint"` (the default) one model is fine-tuned on the union of both roles' SFT data and
both roles start from it (`proposer_dir == solver_dir`); with "separate" each role gets its own fine-tune of the
same base, as in the paper. Joint costs half the CPU time, and the arithmetic skill is shared: the Proposer's
answer part is a Solver completion. SFT losses are kept in `<entry>/sft_metrics.jsonl`.

Usage: `resolve_model("tiny:solver", cache_dir=None)` -> a local model directory; any other spec is returned as is.
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
from pasodoble.errors import UserError
from pasodoble.io import build_lock, default_cache_dir, make_build_dir, read_jsonl, write_json_atomic
from pasodoble.realmodels import is_pkg_spec, resolve_pkg
from pasodoble.reports.tracking import Tracker
from pasodoble.roles.models import TINY_PREFIX, TINY_ROLES
from pasodoble.sft import SFTConfig, train_sft
from pasodoble.sft.next_tier import NextTierStop
from pasodoble.world.build import FORMAT_VERSION, WorldConfig, WorldPaths, build_world

# SFT fields added after the cache format was fixed; at their defaults they change nothing in the trained weights, so
# they are left out of the key and caches built before they existed stay valid
_KEY_SKIPS_AT_DEFAULT = ("micro_batch_size", "eval_every", "bf16", "gradient_checkpointing", "packing")
_SFT_DEFAULTS = to_dict(SFTConfig())


@dataclass(frozen=True)
class TinyModels:
    proposer_dir: Path  # SFT-warmed Proposer (HF format, tokenizer included)
    solver_dir: Path  # SFT-warmed Solver (the same directory as proposer_dir when the warm-up is joint)
    world: WorldPaths  # the world the models were trained in
    sft_metrics: Path  # SFT loss rows (metrics.jsonl format)


def cache_key(world: WorldConfig, sft: SFTConfig) -> str:
    """Short hash of both configs and the world format version."""
    sft_fields = {
        k: v for k, v in to_dict(sft).items() if k not in _KEY_SKIPS_AT_DEFAULT or v != _SFT_DEFAULTS[k]
    }
    world_fields = to_dict(world)
    if not world.select.every:  # off trains as before the field existed: those cache entries stay valid
        world_fields.pop("select")
    if world.game == "math":  # likewise for the world's game at its default
        world_fields.pop("game")
    blob = json.dumps({"v": FORMAT_VERSION, "world": world_fields, "sft": sft_fields}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _entry(root: Path) -> TinyModels:
    joint = (root / "sft").is_dir()
    return TinyModels(
        proposer_dir=root / ("sft" if joint else "proposer"),
        solver_dir=root / ("sft" if joint else "solver"),
        world=WorldPaths.under(root / "world"),
        sft_metrics=root / "sft_metrics.jsonl",
    )


def warm_up(root: Path, world: WorldConfig, sft: SFTConfig, *, progress: bool = True) -> TinyModels:
    """Build the world under `root/world` and SFT the roles into `root/sft` (joint) or `root/{proposer,solver}`."""
    paths = build_world(root / "world", world)
    proposer_data, solver_data = read_jsonl(paths.sft_proposer), read_jsonl(paths.sft_solver)
    runs = (
        {"sft": proposer_data + solver_data}
        if sft.roles == "joint"
        else {"proposer": proposer_data, "solver": solver_data}
    )
    tracker = Tracker(root)
    try:
        for name, examples in runs.items():
            tokenizer = AutoTokenizer.from_pretrained(paths.tokenizer_dir)
            model = AutoModelForCausalLM.from_pretrained(paths.base_model_dir)
            stop = None
            if (
                world.select.every and name != "proposer"
            ):  # the Solver's skills decide when the start is ready
                sft_prompts = {e["prompt"] for e in solver_data}
                stop = NextTierStop(
                    model,
                    tokenizer,
                    world.select,
                    world.sft_tiers,
                    world.next_tier,
                    sft_prompts,
                    world.seed,
                    tracker,
                )
            train_sft(
                model,
                tokenizer,
                examples,
                sft,
                tracker=tracker,
                progress=progress,
                role="both" if name == "sft" else name,
                stop=stop,
            )
            if stop is not None:
                write_json_atomic(root / "select.json", stop.report(sft.max_steps))
            model.save_pretrained(root / name)
            tokenizer.save_pretrained(root / name)
    finally:
        tracker.close()
    os.replace(root / "metrics.jsonl", root / "sft_metrics.jsonl")
    return _entry(root)


def ensure_sft_models(
    cache_dir: Path | None, world: WorldConfig, sft: SFTConfig, *, progress: bool = True
) -> TinyModels:
    """The cached warm-up for these configs, built first if missing (see module docstring)."""
    world.validate()
    sft.validate()
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    final = cache_dir / cache_key(world, sft)
    if (final / "done").is_file():
        return _entry(final)
    cache_dir.mkdir(parents=True, exist_ok=True)
    with build_lock(cache_dir / f".lock-{final.name}", f"the tiny world {final.name}"):
        if (final / "done").is_file():  # another process built it while this one waited
            return _entry(final)
        return _build(final, world, sft, progress)


def _build(final: Path, world: WorldConfig, sft: SFTConfig, progress: bool) -> TinyModels:
    tmp = make_build_dir(final)
    try:
        warm_up(tmp, world, sft, progress=progress)
        (tmp / "done").write_text(json.dumps({"world": to_dict(world), "sft": to_dict(sft)}, indent=2) + "\n")
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / "done").is_file():  # neither a finished concurrent build nor ours: stale dir
                shutil.rmtree(final, ignore_errors=True)
                os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return _entry(final)


def resolve_model(spec: str, cache_dir: Path | None = None) -> str:
    """`tiny:proposer` / `tiny:solver` / `tiny:base` -> a local directory (default configs); `pkg:` specs -> their
    cached folder (`pasodoble.realmodels`); other specs unchanged."""
    if is_pkg_spec(spec):
        return resolve_pkg(spec, cache_dir)
    if not spec.startswith(TINY_PREFIX):
        return spec
    role = spec[len(TINY_PREFIX) :]
    if role not in TINY_ROLES:
        raise UserError(
            f"unknown tiny model {spec!r}; use one of {', '.join(TINY_PREFIX + r for r in TINY_ROLES)}"
        )
    models = ensure_sft_models(cache_dir, WorldConfig(), SFTConfig())
    if role == "base":
        return str(models.world.base_model_dir)
    return str(models.proposer_dir if role == "proposer" else models.solver_dir)
