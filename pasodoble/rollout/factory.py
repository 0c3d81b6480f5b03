"""Build a role's rollout engine from its config: the one place that knows which engines exist.

`build_engine(name, role_cfg, model, tokenizer, model_path)` returns an object behind `RolloutEngine`: `HFEngine`
on the live model (`engine: hf`), `VLLMEngine` in process (`engine: vllm`), or `VLLMServerEngine` (`engine:
vllm_server`); `engine: auto` is resolved here, against the device the role's model sits on
(`settings.resolve_engine`), and `hf` on a GPU with long completions prints its one-line warning. A LoRA role (its model an `adapters.AdapterView`) gets the engine's view of its adapter, synced once
so the first rollout already samples it. `build_shared_engine` starts one vLLM engine for both adapters of a shared
base. Roles and the loop never test which engine they hold.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from pasodoble.errors import ConfigError
from pasodoble.rollout.hf import HFEngine
from pasodoble.rollout.placement import Placement
from pasodoble.rollout.settings import hf_on_gpu_warning, resolve_engine, validate_engine
from pasodoble.update.precision import DTYPES


def hf_engine(role_cfg, model: torch.nn.Module, tokenizer) -> HFEngine:
    """The `engine: hf` of a role: generation on its live module, in its batch size and compute dtype; it re-scores
    its samples only when later optimizer passes need the generating policy's log-probs (`num_iterations` > 1)."""
    return HFEngine(
        model,
        tokenizer,
        batch_size=role_cfg.generation_batch_size,
        autocast_dtype=DTYPES[role_cfg.dtype],
        rescore=role_cfg.num_iterations > 1,
        share_prefill=role_cfg.share_prompt_prefill,
    )


def on_cuda(model: torch.nn.Module | None) -> bool:
    """Whether `model` trains on CUDA; None (an engine that serves without the live module): whether CUDA is here."""
    if model is None:
        return torch.cuda.is_available()
    return any(p.is_cuda for p in model.parameters())


def chosen_engine(name: str, role_cfg, model: torch.nn.Module) -> str:
    """The engine `role_cfg.engine` resolves to for `model`'s device; warns (one line) for `hf` where it is slow."""
    cuda = on_cuda(model)
    engine = resolve_engine(role_cfg.engine, cuda=cuda)
    warning = hf_on_gpu_warning(
        role_cfg.engine, cuda=cuda, max_completion_length=role_cfg.max_completion_length, role=name
    )
    if warning is not None:
        print(warning, file=sys.stderr, flush=True)
    return engine


def build_engine(
    name: str,
    role_cfg,
    model: torch.nn.Module,
    tokenizer,
    model_path: str | Path,
    placement: Placement | None = None,
):
    """`placement` (`rollout.placement.Placement`): where a `vllm_server` role's server runs (None: one process)."""
    engine, lora = chosen_engine(name, role_cfg, model), role_cfg.lora
    if engine == "hf":
        return hf_engine(role_cfg, model, tokenizer)
    try:
        validate_engine(
            engine,
            role_cfg.vllm,
            model_dir=model_path,
            lora_rank=lora.rank if lora else None,
            on_cpu=not torch.cuda.is_available(),
        )
    except ConfigError as e:  # name the role: the model folder is only known once `tiny:` specs are resolved
        raise ConfigError(f"{name}.{e.where}", e.message) from None
    adapters = (name,) if lora is not None else ()  # a LoRA role's model is its adapter view
    if engine == "vllm":
        from pasodoble.rollout.vllm import VLLMEngine

        core = VLLMEngine(
            role_cfg.vllm,
            model_path,
            tokenizer,
            max_model_len=role_cfg.max_sequence_length,
            dtype=role_cfg.dtype,
            adapters=adapters,
            max_lora_rank=role_cfg.vllm.max_lora_rank,
        )
    else:
        core = (placement or Placement()).server_engine(
            name, role_cfg, model_path, tokenizer, adapters=adapters
        )
    if not adapters:
        return core
    view = core.for_adapter(name)
    view.update_weights(model)
    return view


def build_shared_engine(
    roles_cfgs: dict, models: dict, tokenizer, base_path: str | Path, placement: Placement | None = None
) -> dict:
    """One engine for the adapters of a shared base: {role name: engine view}; `hf` gives each an HFEngine."""
    first_name, first = next(iter(roles_cfgs.items()))
    engine = chosen_engine(first_name, first, models[first_name])
    if engine == "hf":
        return {n: hf_engine(c, models[n], tokenizer) for n, c in roles_cfgs.items()}
    for cfg in roles_cfgs.values():
        validate_engine(
            engine,
            first.vllm,
            model_dir=base_path,
            lora_rank=cfg.lora.rank,
            on_cpu=not torch.cuda.is_available(),
        )
    max_len = max(c.max_sequence_length for c in roles_cfgs.values())
    if engine == "vllm":
        from pasodoble.rollout.vllm import VLLMEngine

        core = VLLMEngine(
            first.vllm,
            base_path,
            tokenizer,
            max_model_len=max_len,
            dtype=first.dtype,
            adapters=tuple(roles_cfgs),
            max_lora_rank=first.vllm.max_lora_rank,
        )
    else:
        core = (placement or Placement()).server_engine(
            "shared base", first, base_path, tokenizer, adapters=tuple(roles_cfgs), max_len=max_len
        )
    views = {}
    for n in roles_cfgs:
        views[n] = core.for_adapter(n)
        views[n].update_weights(models[n])
    return views
