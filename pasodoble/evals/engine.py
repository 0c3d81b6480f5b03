"""The engine of `pasodoble eval`, built by the roles' own factory (`rollout.factory.build_engine`).

Why: evaluation and training must sample through the same engines with the same settings and checks, so there is
one list of engines. `engine_role(args, ...)` turns the eval flags into a `RoleConfig` holding what an engine reads
(engine, vLLM settings, dtype, batch size, prompt and completion budgets, LoRA rank) and validates it as a role's;
a bad value is one line naming the flag (`check_engine_flags`). `open_engine(...)` loads what the engine needs (the
Hugging Face model only for `hf` or an `--adapter`) and builds the engine. On several ranks each rank builds its
own engine on its own GPU (`LOCAL_RANK`); a given `--server-url` is shared by all of them.

Run: `pasodoble eval --model M --engine vllm --dataset set.jsonl --out DIR` (see `pasodoble.evals.cli`).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from pasodoble.errors import ConfigError, UserError
from pasodoble.roles.config import LoraConfig, RoleConfig
from pasodoble.rollout.settings import ENGINES, VLLMConfig
from pasodoble.update.dtype_names import DTYPE_NAMES

EVAL_GPU_MEMORY = 0.9  # vLLM's share of GPU memory when nothing trains beside it
ROLE_NAME = "eval"  # the name the factory gives the engine (error fields, the adapter's name in vLLM)
ADAPTER_NAME = "evaluated"  # the peft adapter's name (not "eval": a module attribute of that name exists)
FLAGS = {  # role config field -> the eval flag that sets it
    "engine": "--engine",
    "vllm.gpu_memory_utilization": "--gpu-memory-utilization",
    "vllm.tensor_parallel_size": "--tensor-parallel-size",
    "vllm.max_model_len": "--max-model-len",
    "vllm.dtype": "--dtype",
    "dtype": "--dtype",
    "device": "--device",
    "micro_batch_size": "--batch-size",
    "lora.rank": "--adapter",
    "max_prompt_length": "--max-prompt-length",
}


def add_engine_arguments(group) -> None:
    """The engine flags that `engine_role` and `open_engine` read, shared by `pasodoble eval` and `code-eval`."""
    vllm = VLLMConfig()
    group.add_argument(
        "--engine", choices=ENGINES, default="hf", help="rollout engine (see docs/ROLLOUTS.md)"
    )
    group.add_argument("--batch-size", type=int, default=64, help="hf: sequences per generate call")
    group.add_argument(
        "--device", default="auto", help="hf: auto (cuda when available), cpu, cuda, cuda:1, ..."
    )
    group.add_argument(
        "--dtype",
        default="auto",
        choices=("auto", "float32", "bfloat16", "float16"),
        help="weights' dtype (auto: the model's own)",
    )
    group.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=EVAL_GPU_MEMORY,
        help="vllm: share of GPU memory the engine may take (default: %(default)s; training's default is "
        f"{vllm.gpu_memory_utilization})",
    )
    group.add_argument(
        "--tensor-parallel-size",
        type=int,
        default=vllm.tensor_parallel_size,
        help="vllm, vllm_server: GPUs one engine spans (default: %(default)s)",
    )
    group.add_argument(
        "--max-model-len", type=int, help="vllm: longest prompt + completion (default: the two budgets added)"
    )
    group.add_argument("--server-url", help="vllm_server: an already running server (default: start one)")
    group.add_argument("--adapter", type=Path, help="a LoRA adapter folder (peft format) applied to --model")


def resolve_dtype(choice: str, model_config) -> str:
    """`--dtype auto`: the dtype the model's config names when it is one of ours, else float32."""
    if choice != "auto":
        return choice
    named = str(getattr(model_config, "dtype", None) or getattr(model_config, "torch_dtype", None) or "")
    name = named.removeprefix("torch.")
    return name if name in DTYPE_NAMES else "float32"


def adapter_rank(adapter: Path | None) -> int | None:
    """The LoRA rank an `--adapter` folder's adapter_config.json declares (read as JSON, nothing executed)."""
    if adapter is None:
        return None
    path = Path(adapter) / "adapter_config.json"
    if not path.is_file():
        raise UserError(f"--adapter: {path} not found; give a folder holding a peft LoRA adapter")
    rank = json.loads(path.read_text(encoding="utf-8")).get("r")
    if not isinstance(rank, int) or rank < 1:
        raise UserError(f"--adapter: {path} has no LoRA rank 'r'; give a folder holding a peft LoRA adapter")
    return rank


def engine_role(
    args: argparse.Namespace, *, dtype: str, max_prompt_length: int, max_completion_length: int
) -> RoleConfig:
    """The eval flags as the role settings an engine reads."""
    rank = adapter_rank(getattr(args, "adapter", None))
    vllm = VLLMConfig(
        gpu_memory_utilization=args.gpu_memory_utilization,
        tensor_parallel_size=args.tensor_parallel_size,
        max_model_len=args.max_model_len,
        server_url=args.server_url,
        max_lora_rank=max(VLLMConfig.max_lora_rank, rank or 0),
    )
    return RoleConfig(
        model=str(getattr(args, "model_path", None) or args.model),
        engine=args.engine,
        vllm=vllm,
        dtype=dtype,
        device=args.device,
        generation_batch_size=args.batch_size,
        micro_batch_size=1,
        max_prompt_length=max_prompt_length,
        max_completion_length=max_completion_length,
        trainable=False,
        lora=LoraConfig(rank=rank) if rank else None,
    )


def flag_error(error: ConfigError) -> UserError:
    """The role field an error names, as the eval flag that sets it."""
    where = error.where.removeprefix(f"{ROLE_NAME}.")
    return UserError(f"{FLAGS.get(where, where)}: {error.message}")


def check_engine_flags(args: argparse.Namespace) -> None:
    """The engine flags checked as a role's settings, before any problem or model is loaded."""
    if args.engine != "vllm_server" and args.server_url:
        raise UserError(
            "--server-url: only --engine vllm_server talks to a server; drop it or change --engine"
        )
    if args.distributed_timeout_s <= 0:
        raise UserError(f"--distributed-timeout-s: must be > 0, got {args.distributed_timeout_s}")
    dtype = "float32" if args.dtype == "auto" else args.dtype
    role = engine_role(args, dtype=dtype, max_prompt_length=1, max_completion_length=1)
    try:
        role.vllm.validate()
        role.validate()
        role.check_machine()
    except ConfigError as e:
        raise flag_error(e) from None


def local_device(choice: str, world_size: int) -> str:
    """`--device auto`: this rank's GPU (LOCAL_RANK) on several ranks, cuda on one, else cpu."""
    import torch

    if choice != "auto":
        return choice
    if not torch.cuda.is_available():
        return "cpu"
    return f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if world_size > 1 else "cuda"


def load_model(path: str, dtype: str, device: str, adapter: Path | None):
    """The Hugging Face model (with its LoRA adapter as an `adapters.AdapterView`), in eval mode on `device`."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
    except OSError as err:
        raise UserError(
            f"--model: cannot load {path!r} ({err}); give a local model directory or a Hub id"
        ) from err
    if device == "cpu":
        from pasodoble import accel

        accel.apply(model)  # the CPU fast paths a Role's model takes
    if adapter is not None:
        from peft import PeftModel

        from pasodoble.roles.adapters import AdapterView

        peft = PeftModel.from_pretrained(model, str(adapter), adapter_name=ADAPTER_NAME)
        model = AdapterView(peft, ADAPTER_NAME)
    return model.to(device).eval()


def open_engine(args: argparse.Namespace, role: RoleConfig, tokenizer, collective):
    """Build the eval engine through the training factory (one engine per rank; see module docstring)."""
    import torch

    from pasodoble.rollout.factory import build_engine
    from pasodoble.rollout.placement import Placement

    device = local_device(args.device, collective.world_size)
    model = None
    if role.engine in ("hf", "auto") or args.adapter is not None:
        model = load_model(role.model, role.dtype, device, args.adapter)
    gpu = (
        int(os.environ.get("LOCAL_RANK", "0"))
        if torch.cuda.is_available() and collective.world_size > 1
        else None
    )
    placement = Placement(
        collective=collective, local_gpu=gpu, log_dir=str(args.out)
    )  # server logs beside samples
    try:
        return build_engine(ROLE_NAME, role, model, tokenizer, role.model, placement=placement)
    except ConfigError as e:
        raise flag_error(e) from None
