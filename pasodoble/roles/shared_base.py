"""Proposer and Solver as two LoRA adapters of one frozen base (`roles.shared_base: true`).

Why: a shared base halves the memory of dual play, and one vLLM engine can serve both adapters (`max_loras=2`).
The adapters themselves (`AdapterView`, `wrap_lora`, `add_adapter`) are in `adapters.py`; this module builds the
two `Role`s on top of them, so the adapters never import the roles.

How to run: `pasodoble train --config recipes/tiny-online.yaml roles.shared_base=true proposer.lora.rank=8
solver.lora.rank=8`; tests in `tests/roles/test_adapters.py`.
"""

from __future__ import annotations

from transformers import AutoModelForCausalLM, AutoTokenizer

from pasodoble import accel
from pasodoble.errors import ConfigError
from pasodoble.roles.adapters import add_adapter, wrap_lora
from pasodoble.roles.config import check_shared_base as check_shared_base  # re-exported: read without torch
from pasodoble.roles.role import Role, RoleConfig, resolve_device
from pasodoble.rollout.factory import build_shared_engine
from pasodoble.rollout.placement import Placement
from pasodoble.scale.sharding.base import Sharding
from pasodoble.update.precision import DTYPES


def build_shared_roles(
    proposer_cfg: RoleConfig,
    solver_cfg: RoleConfig,
    base_path: str,
    *,
    updates: tuple[int, int],
    sharding: Sharding | None = None,
    placement: Placement | None = None,
):
    """Proposer and Solver as two adapters of one frozen base, each with its own optimizer; one engine for both.
    On several ranks `sharding` wraps each adapter view (DDP reduces only that adapter's gradients) and
    `placement` places the shared vLLM server."""
    check_shared_base(proposer_cfg, solver_cfg)
    for name in ("engine", "dtype", "device", "cpu_matmul"):
        if getattr(proposer_cfg, name) != getattr(solver_cfg, name):
            raise ConfigError(f"solver.{name}", f"roles.shared_base needs the same {name} for both roles")
    tokenizer = AutoTokenizer.from_pretrained(base_path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    base = AutoModelForCausalLM.from_pretrained(base_path, dtype=DTYPES[proposer_cfg.dtype])
    base = base.to(resolve_device(proposer_cfg.device))
    accel.apply(base, cpu_matmul=proposer_cfg.cpu_matmul)
    proposer_view = wrap_lora(base, "proposer", proposer_cfg.lora)
    solver_view = add_adapter(proposer_view, "solver", solver_cfg.lora)
    models = {"proposer": proposer_view, "solver": solver_view}
    engines = build_shared_engine(
        {"proposer": proposer_cfg, "solver": solver_cfg}, models, tokenizer, base_path, placement=placement
    )
    roles = []
    for n, c, u in (("proposer", proposer_cfg, updates[0]), ("solver", solver_cfg, updates[1])):
        models[
            n
        ].activate()  # only the active adapter is trainable, and the optimizer takes trainable weights
        roles.append(Role(n, c, models[n], tokenizer, engine=engines[n], total_updates=u, sharding=sharding))
    return tuple(roles)
