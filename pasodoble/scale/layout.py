"""Layout: how a run spreads over processes and GPUs, checked before any model loads.

What: `DistributedConfig` (the `distributed:` section of a recipe, defined in `config.py`), `check_layout` (a pure
function of the config, the launch's world size, the visible GPUs and the models' config.json numbers) and `pasodoble layout` (prints the
resolved layout and the per-GPU memory table for a recipe without loading a model). A layout that cannot run
raises one `LayoutError` line naming the numbers (exit 2):
  - GPUs asked for (`distributed.gpus`) vs GPUs visible; training processes on a node vs training GPUs on it
    (visible minus `distributed.vllm_gpus`, the GPUs of dedicated vLLM servers);
  - vLLM tensor parallel size vs the models' attention and key/value heads, and vs the vLLM GPUs;
  - the memory estimate per GPU for both roles (they live in the same processes) plus their vLLM engines, vs the GPU.
The memory estimate (GB = 1e9 bytes) per role: weights (dtype bytes x parameters), gradients (same dtype),
AdamW states (two fp32 moments, plus an fp32 master copy when training in 16 bits: 12 or 8 bytes a parameter),
divided by the world size where the backend shards them (ZeRO-1: states; ZeRO-2: states and gradients; ZeRO-3:
states, gradients and the weights' shard AND their full copy, gathered for each generation phase; FSDP2: states,
the weights' shard and full copy, and full gradients, accumulated over micro-batches before one reduce-scatter), optimizer states at 0 on the GPU when offloaded (one rank: never sharded nor offloaded); activations for one micro-batch of
prompt + completion tokens (with gradient checkpointing one hidden state per layer plus one layer's working set,
else every layer's) plus the fp32 logits of the loss; a frozen reference model when beta > 0. Each role whose engine runs in process on the GPU (`engine: vllm`, or `auto`
where vLLM is installed) adds its `vllm.gpu_memory_utilization` of the GPU (`engine_memory_gb`); engines in sleep
mode are awake one at a time, so only the largest of them counts. It is an estimate
to catch impossible layouts early (a 4B model fully fine-tuned without offload on a 24 GB GPU), not a profiler.

Why: the reference code hard-codes GPU ids and ports and only works when the number of training GPUs divides 6; a
wrong layout there fails after minutes of loading, or hangs.

How: `pasodoble layout --config recipes/qwen3-4b-online.yaml --processes 8 --visible-gpus 8 --gpu-memory-gb 80`.
Tests: tests/runs/test_layout.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pasodoble.errors import UserError
from pasodoble.realmodels import entry_dir, is_pkg_spec
from pasodoble.rollout.placement import server_gpus, server_roles
from pasodoble.rollout.settings import resolve_engine, sleeps
from pasodoble.scale.collectives import share_sizes
from pasodoble.scale.config import (
    BACKENDS as BACKENDS,  # re-exported: the `distributed:` section, read without torch
)
from pasodoble.scale.config import DistributedConfig, ResolvedLayout, has_proposer
from pasodoble.update.token_budget import (
    auto_micro_batch_tokens,
    micro_batch_positions,
    needs_checkpointing,
)

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


class LayoutError(UserError):
    """A layout that cannot run or cannot fit; one line with the numbers."""


@dataclass
class Launch:
    """What the launcher and the machine provide."""

    world_size: int = 1  # ranks over all nodes
    local_world_size: int = 1  # ranks on this node
    visible_gpus: int = 0  # CUDA devices visible to this node
    gpu_memory_gb: float | None = None  # memory of one visible GPU


def parameter_count(arch: dict) -> int:
    """Parameters of a Llama/Qwen-style decoder from its config.json numbers."""
    h, layers, vocab = arch["hidden_size"], arch["num_hidden_layers"], arch["vocab_size"]
    heads = arch["num_attention_heads"]
    kv = arch.get("num_key_value_heads", heads)
    head_dim = arch.get("head_dim") or h // heads
    inter = arch["intermediate_size"]
    attn = h * heads * head_dim * 2 + h * kv * head_dim * 2  # q, o; k, v
    if arch.get("attention_bias", arch.get("model_type") == "qwen2"):
        attn += heads * head_dim + 2 * kv * head_dim
    per_layer = attn + 3 * h * inter + 2 * h + (2 * head_dim if arch.get("model_type") == "qwen3" else 0)
    embed = vocab * h * (1 if arch.get("tie_word_embeddings", False) else 2)
    return embed + layers * per_layer + h


def role_memory_gb(
    arch: dict, role, dist: DistributedConfig, world_size: int, gpu_gb: float | None = None
) -> dict[str, float]:
    """Per-GPU memory estimate of one role (see the module docstring for the terms) on GPUs of `gpu_gb`."""
    n = parameter_count(arch)
    b = DTYPE_BYTES[role.dtype]
    if world_size <= 1:  # one rank trains with plain PyTorch: nothing sharded, nothing offloaded
        dist = DistributedConfig(backend="ddp")
    fsdp2 = dist.backend == "fsdp2" and role.trainable  # a frozen role is not sharded
    zero3 = dist.backend == "deepspeed" and dist.zero_stage == 3 and role.trainable
    shard_grads = zero3 or (dist.backend == "deepspeed" and dist.zero_stage >= 2)
    shard_states = shard_grads or dist.backend == "deepspeed" or fsdp2
    ws = max(world_size, 1)
    # FSDP2 and ZeRO-3 hold their shard and, inside a generation phase, the gathered full copy (an upper bound:
    # one role at a time).
    weights = n * b * (1 + 1 / ws) if fsdp2 or zero3 else n * b
    grads = states = 0.0
    if role.trainable:
        grads = n * b / (ws if shard_grads else 1)
        states = (
            0.0 if dist.offload_optimizer else n * (8 + (4 if b < 4 else 0)) / (ws if shard_states else 1)
        )
    h, layers, vocab = arch["hidden_size"], arch["num_hidden_layers"], arch["vocab_size"]
    # activation bytes, as the Role counts them: autocast over float32 masters keeps float32 activations too
    a = 4 if role.trainable else b
    checkpointing = checkpointing_choice(arch, role, gpu_gb)
    tokens = _micro_batch_positions(arch, role, checkpointing, gpu_gb)
    layer_working = tokens * a * (10 * h + 4 * arch["intermediate_size"])
    kept = layers * tokens * a * h + layer_working if checkpointing else layers * layer_working
    activations = (kept + tokens * vocab * (b + 4)) if role.trainable else 0.0
    # the reference: sharded under FSDP2, a full copy under every other backend (DeepSpeed does not wrap it)
    reference = n * b / (ws if fsdp2 else 1) if role.trainable and role.beta > 0 else 0.0
    gb = {
        "weights": weights,
        "grads": grads,
        "optimizer": states,
        "activations": activations,
        "reference": reference,
    }
    return {k: v / 1e9 for k, v in gb.items()}


def _budget_terms(arch: dict, role, gpu_gb: float | None) -> dict:
    """What the Role's token budget and checkpointing rule read, from config.json (as the Role resolves them: the
    unsharded float32 master weights, gradients and AdamW moments)."""
    n, b = parameter_count(arch), DTYPE_BYTES[role.dtype]
    return {
        "hidden": arch["hidden_size"],
        "intermediate": arch["intermediate_size"],
        "layers": arch["num_hidden_layers"],
        "state_bytes": n * 16 if role.trainable else n * b,
        "value_bytes": 4 if role.trainable else b,
        "device_bytes": gpu_gb * 1e9 if gpu_gb else None,
    }


def _micro_batch_positions(arch: dict, role, checkpointing: bool, gpu_gb: float | None) -> int:
    budget = role.micro_batch_tokens
    if budget == "auto":
        budget = auto_micro_batch_tokens(**_budget_terms(arch, role, gpu_gb), checkpointing=checkpointing)
    return micro_batch_positions(budget, role.micro_batch_size, role.max_sequence_length)


def checkpointing_choice(arch: dict, role, gpu_gb: float | None) -> bool:
    """The role's gradient checkpointing, "auto" resolved by the Role's rule (`needs_checkpointing`) on a GPU of
    `gpu_gb` (None: this machine's memory, a CPU run)."""
    if role.gradient_checkpointing != "auto":
        return role.gradient_checkpointing
    if not role.trainable:
        return False
    tokens = _micro_batch_positions(arch, role, False, gpu_gb)
    return needs_checkpointing(**_budget_terms(arch, role, gpu_gb), tokens=tokens)


def read_architecture(model: str, cache_dir: str | None = None) -> dict | None:
    """config.json of a local model folder or of a `pkg:` spec's cached folder (None for hub ids, `tiny:` specs and
    `pkg:` specs not fetched yet: nothing is downloaded)."""
    if is_pkg_spec(model):
        model = str(entry_dir(model, Path(cache_dir) if cache_dir else None))
    path = Path(model) / "config.json"
    if model.startswith("tiny:") or not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return data.get("text_config", data)


def check_layout(cfg, launch: Launch, archs: dict[str, dict | None], show=None) -> ResolvedLayout:
    """Validate `cfg.distributed` for `launch`; `show(lines)` gets the memory table (before a memory error)."""
    d = cfg.distributed
    if d.gpus is not None and d.gpus > launch.visible_gpus:
        raise LayoutError(
            f"layout: {d.gpus} GPUs asked for (distributed.gpus) but {launch.visible_gpus} visible; "
            "check CUDA_VISIBLE_DEVICES or lower distributed.gpus"
        )
    train_gpus = launch.visible_gpus - d.vllm_gpus
    if launch.visible_gpus and launch.local_world_size > train_gpus:
        raise LayoutError(
            f"layout: {launch.local_world_size} training processes on this node but {train_gpus} training GPUs "
            f"({launch.visible_gpus} visible - {d.vllm_gpus} for vLLM); launch at most {max(train_gpus, 0)} processes"
        )
    for name, arch in archs.items():
        if arch is None:
            continue
        for key in ("num_attention_heads", "num_key_value_heads"):
            heads = arch.get(key, arch["num_attention_heads"])
            if heads % d.tensor_parallel_size:
                raise LayoutError(
                    f"layout: tensor_parallel_size {d.tensor_parallel_size} does not divide the {name}'s "
                    f"{heads} {key.replace('num_', '').replace('_', ' ')}; use a divisor of {heads}"
                )
    if d.vllm_gpus and d.tensor_parallel_size > d.vllm_gpus:
        raise LayoutError(
            f"layout: tensor_parallel_size {d.tensor_parallel_size} needs that many vLLM GPUs, "
            f"distributed.vllm_gpus is {d.vllm_gpus}"
        )
    servers = check_placement(cfg, launch)
    lines, overflow = memory_table(cfg, launch, archs)
    if show is not None:
        show(lines)
    if overflow:
        raise LayoutError(overflow)
    resolved = resolve_shares(cfg, launch.world_size)
    resolved.rollout, resolved.vllm_servers = d.rollout, servers
    return resolved


def check_placement(cfg, launch: Launch) -> dict[str, list[int]]:
    """The dedicated servers' GPUs (see `rollout.placement`); a placement that cannot run is a LayoutError."""
    d = cfg.distributed
    roles = generating_roles(cfg)
    if d.rollout == "colocated":
        if d.vllm_gpus:
            raise LayoutError(
                f"layout: distributed.vllm_gpus={d.vllm_gpus} sets GPUs aside for dedicated vLLM servers but "
                "distributed.rollout is colocated; set distributed.rollout=dedicated or vllm_gpus=0"
            )
        return {}
    names = server_roles(roles)
    if not names and not any(c.engine == "vllm_server" for c in roles.values()):
        raise LayoutError(
            "layout: distributed.rollout=dedicated serves rollouts from vLLM servers, but no role has engine "
            f"vllm_server; set {' and '.join(f'{n}.engine=vllm_server' for n in roles)} or rollout=colocated"
        )
    for n in names:
        tp = roles[n].vllm.tensor_parallel_size
        if d.tensor_parallel_size not in (1, tp):
            raise LayoutError(
                f"layout: distributed.tensor_parallel_size is {d.tensor_parallel_size} but the {n}'s server starts "
                f"with {n}.vllm.tensor_parallel_size={tp}; set both to the same value"
            )
    if launch.visible_gpus and not d.vllm_gpus and names:
        raise LayoutError(
            f"layout: distributed.rollout=dedicated needs GPUs for the {' and '.join(names)} vLLM server(s); "
            "set distributed.vllm_gpus (one per server and tensor-parallel rank, the paper: 2)"
        )
    try:
        return server_gpus(
            launch.visible_gpus, d.vllm_gpus, {n: roles[n].vllm.tensor_parallel_size for n in names}
        )
    except ValueError as e:
        raise LayoutError(f"layout: {e}; raise vllm_gpus or lower vllm.tensor_parallel_size") from None


def resolve_shares(cfg, world_size: int) -> ResolvedLayout:
    proposals = cfg.schedule.passages_per_step * cfg.proposer.num_generations
    answers = proposals * cfg.solver.num_generations
    if not has_proposer(cfg):
        proposals, answers = 0, cfg.schedule.oracle_questions * cfg.solver.num_generations
    return ResolvedLayout(
        world_size=world_size,
        backend=cfg.distributed.backend if world_size > 1 else "none",
        proposer_shares=share_sizes(proposals, world_size),
        solver_shares=share_sizes(answers, world_size),
    )


def memory_table(cfg, launch: Launch, archs: dict[str, dict | None]) -> tuple[list[str], str | None]:
    """Rows of the per-GPU memory estimate, and the error line when the total exceeds one GPU's memory."""
    d = cfg.distributed
    cols = ("weights", "grads", "optimizer", "activations", "reference")
    lines = [f"{'GB per GPU':<12}" + "".join(f"{c:>12}" for c in cols) + f"{'total':>10}"]
    total, parts, checkpointing = 0.0, [], []
    gpu_gb = d.gpu_memory_gb or launch.gpu_memory_gb
    for name, arch in archs.items():
        if arch is None:
            lines.append(f"{name:<12}  (no local config.json: not estimated)")
            continue
        role = getattr(cfg, name)
        mem = role_memory_gb(arch, role, d, launch.world_size, gpu_gb)
        on = "on" if checkpointing_choice(arch, role, gpu_gb) else "off"
        checkpointing.append(f"{name} {on}" + (" (auto)" if role.gradient_checkpointing == "auto" else ""))
        role_total = sum(mem.values())
        total += role_total
        parts.append(f"{name} {role_total:.1f}")
        lines.append(f"{name:<12}" + "".join(f"{mem[c]:>12.2f}" for c in cols) + f"{role_total:>10.2f}")
    if checkpointing:
        lines.append(f"gradient checkpointing: {', '.join(checkpointing)}")
    engines = engine_memory_gb(cfg, launch, gpu_gb)
    for name, gb in engines["rows"].items():
        lines.append(f"{'vllm ' + name:<12}{'':>60}{gb:>10.2f}")
    vllm = engines["peak"] + (d.vllm_memory_fraction * gpu_gb if gpu_gb else 0.0)
    total += vllm
    lines.append(
        f"{'vllm':<12}{'':>60}{vllm:>10.2f}" + ("  (asleep but one at a time)" if engines["sleep"] else "")
    )
    lines.append(f"{'total':<12}{'':>60}{total:>10.2f}" + (f"  of {gpu_gb:g} GB" if gpu_gb else ""))
    overflow = None
    how = (
        "one rank: nothing sharded or offloaded"
        if launch.world_size <= 1
        else f"backend {d.backend}, {launch.world_size} ranks, offload_optimizer={str(d.offload_optimizer).lower()}"
    )
    if gpu_gb and parts and total > gpu_gb:
        overflow = (
            f"layout: needs about {total:.1f} GB per GPU ({', '.join(parts)}, vLLM {vllm:.1f}; {how}) but a GPU "
            f"has {gpu_gb:g} GB; offload the optimizer, shard the weights (fsdp2), use more GPUs "
            "or shorter sequences / smaller micro batches"
        )
    return lines, overflow


def engine_memory_gb(cfg, launch: Launch, gpu_gb: float | None) -> dict:
    """Each colocated in-process engine's GB on a training GPU ({"rows": {role: GB}, "peak": GB counted, "sleep"}):
    `gpu_memory_utilization` of the GPU per engine (one for a shared base); with every engine in sleep mode only the
    largest counts, since one is awake at a time, else their sum."""
    cuda = launch.visible_gpus > 0
    rows, sleeping = {}, []
    if not gpu_gb or not cuda or cfg.distributed.rollout != "colocated":
        return {"rows": rows, "peak": 0.0, "sleep": False}
    for name, role in generating_roles(cfg).items():
        if resolve_engine(role.engine, cuda=cuda) != "vllm":
            continue
        rows[name] = role.vllm.gpu_memory_utilization * gpu_gb
        sleeping.append(sleeps(role.vllm, cuda=cuda))
    shared = getattr(getattr(cfg, "roles", None), "shared_base", False)
    if shared and rows:  # one engine serves both adapters
        rows = {"shared": max(rows.values())}
    sleep = bool(sleeping) and all(sleeping) and len(rows) > 1
    peak = max(rows.values(), default=0.0) if sleep else sum(rows.values())
    return {"rows": rows, "peak": peak, "sleep": sleep}


def launch_from_env(world_size: int) -> Launch:
    """The launch as this process sees it (LOCAL_WORLD_SIZE from the launcher, GPUs from torch)."""
    import os

    import torch

    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    memory = torch.cuda.get_device_properties(0).total_memory / 1e9 if visible else None
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    return Launch(world_size=world_size, local_world_size=local, visible_gpus=visible, gpu_memory_gb=memory)


def generating_roles(cfg) -> dict:
    """The roles a run builds, by name (oracle runs have no Proposer)."""
    if not has_proposer(cfg):
        return {"solver": cfg.solver}
    return {"proposer": cfg.proposer, "solver": cfg.solver}


def model_architectures(cfg) -> dict[str, dict | None]:
    return {
        name: read_architecture(role.model, cfg.cache_dir) for name, role in generating_roles(cfg).items()
    }


def describe(resolved: ResolvedLayout) -> str:
    servers = ""
    if resolved.rollout == "dedicated":
        where = [
            f"{n} on {'GPU ' + ','.join(map(str, g)) if g else 'the CPU'}"
            for n, g in resolved.vllm_servers.items()
        ]
        servers = f"; rollouts from dedicated vLLM servers ({', '.join(where) or 'given by vllm.server_url'})"
    return (
        f"layout: {resolved.world_size} rank(s), backend {resolved.backend}, Proposer completions per rank "
        f"{resolved.proposer_shares}, Solver answers per rank (all questions valid) {resolved.solver_shares}"
        f"{servers}"
    )
