"""Engine settings: which rollout engine a role uses and the vLLM engine's knobs, checked before anything loads.

`RoleConfig.engine` is `auto` (the default: `vllm` where CUDA and vLLM are both present, else `hf`; `resolve_engine`),
`hf` (Hugging Face `generate` on the live model), `vllm` (an in-process vLLM engine) or `vllm_server` (a vLLM
OpenAI-compatible server, started by the project or given by URL); `RoleConfig.vllm` holds the `VLLMConfig` below.
Defaults work on one GPU shared with training (30% of its memory for vLLM, asleep between rollouts) and on a CPU.
`hf` on a GPU with completions of `LONG_COMPLETION_TOKENS` or more is honoured but warned about in one line
(`hf_on_gpu_warning`): the eager decode loop is several times slower than vLLM there.

`validate_engine(role_cfg, model_dir)` turns each bad setting into one line naming the field and the fix: vLLM not
importable, a memory share out of (0, 1], a tensor-parallel size that does not divide the model's attention heads
(read from its config.json), a LoRA rank above `max_lora_rank` (which would kill the whole engine), a head size
the CPU build cannot run (unless the server is given by URL: it runs elsewhere), sleep mode on a CPU, a `weight_sync`
the engine or the machine cannot use (`check_sync`: nccl without CUDA, shm to a server on another machine).
"""

from __future__ import annotations

import importlib.util
import json
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from pasodoble.errors import ConfigError
from pasodoble.rollout.server_auth import is_loopback

ENGINES = ("auto", "hf", "vllm", "vllm_server")
PLACEMENTS = ("colocated", "dedicated")  # distributed.rollout: where rollouts are generated (`placement`)
WEIGHT_SYNCS = ("auto", "direct", "shm", "nccl", "gloo")
# vLLM weight-transfer backends of the `weight_sync` choices that use one (`rollout.transfer`); `gloo` is the
# project's own (`rollout.gloo_transfer`), registered inside the server by its worker extension
TRANSFER_BACKENDS = {"nccl": "nccl", "gloo": "pasodoble_gloo"}
LONG_COMPLETION_TOKENS = 1024  # from here on, `hf` on a GPU warns (generation dominates the step)
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)  # vLLM 0.32 CPU attention kernels
INSTALL_HINT = "install it with `make vllm-env` (CPU build) or `pip install vllm` (GPU), or use engine=hf"


@dataclass
class VLLMConfig:
    gpu_memory_utilization: float = 0.3  # share of GPU memory vLLM may take (the rest is training's)
    max_model_len: int | None = None  # longest prompt + completion (None: the role's two budgets added)
    tensor_parallel_size: int = 1  # GPUs one engine spans; must divide the attention heads
    dtype: str = "auto"  # engine dtype ("auto": the role's dtype)
    enforce_eager: bool | None = None  # no CUDA graphs (None: eager on CPU, graphs on GPU)
    enable_prefix_caching: bool = True  # reuse the prompt's KV across the n samples (reset after each sync)
    sleep_mode: bool | None = (
        None  # free engine memory between rollouts (None: on for an in-process GPU engine)
    )
    max_lora_rank: int = 16  # largest LoRA rank the engine accepts (LoRA roles)
    sync_timeout_s: float = 300.0  # a weight sync slower than this is an error
    # how weights reach the engine (`engine_sync`): "direct", "shm", "nccl", "gloo" or "auto" (see docs/ROLLOUTS.md)
    weight_sync: str = "auto"
    cpu_kvcache_space_gb: int = 1  # CPU build: KV-cache memory per engine (VLLM_CPU_KVCACHE_SPACE)
    cpu_threads_bind: str | None = None  # CPU build: cores of the engine (None: engine k on core k mod cores)
    server_url: str | None = None  # vllm_server: an already running server (None: start one)
    server_port: int | None = None  # vllm_server: port of a started server (None: a free one)
    server_host: str = (
        "127.0.0.1"  # vllm_server: interface a started server listens on (0.0.0.0: other nodes too)
    )
    allow_remote: bool = False  # vllm_server: accept a server_host other machines can reach (it warns)
    server_start_timeout_s: float = 600.0  # vllm_server: how long a started server may take to be healthy
    request_timeout_s: float = 600.0  # vllm_server: longest wait for one HTTP request

    def validate(self) -> None:
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ConfigError(
                "vllm.gpu_memory_utilization", f"must be in (0, 1], got {self.gpu_memory_utilization}"
            )
        if self.tensor_parallel_size < 1:
            raise ConfigError("vllm.tensor_parallel_size", "must be >= 1")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ConfigError("vllm.max_model_len", "must be >= 2 tokens (or null for the role's budgets)")
        if self.max_lora_rank < 1 or self.sync_timeout_s <= 0 or self.cpu_kvcache_space_gb < 1:
            raise ConfigError("vllm.max_lora_rank", "max_lora_rank, sync_timeout_s, cpu_kvcache_space_gb > 0")
        if not self.allow_remote and not is_loopback(self.server_host):
            raise ConfigError(
                "vllm.server_host",
                f"{self.server_host!r} lets other machines reach the server; set vllm.allow_remote=true to "
                "accept that, or use 127.0.0.1",
            )
        if self.weight_sync not in WEIGHT_SYNCS:
            raise ConfigError(
                "vllm.weight_sync", f"unknown {self.weight_sync!r}; use {', '.join(WEIGHT_SYNCS)}"
            )
        if self.weight_sync == "direct" and self.tensor_parallel_size > 1:
            raise ConfigError(
                "vllm.weight_sync",
                "direct needs tensor_parallel_size 1 (one worker, in this process); use auto or shm",
            )
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ConfigError("vllm.dtype", f"unknown {self.dtype!r}; use auto, float32, bfloat16 or float16")


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


def resolve_engine(engine: str, *, cuda: bool, vllm: bool | None = None) -> str:
    """The engine `engine` names on this machine: `auto` is `vllm` where CUDA and vLLM are present, else `hf`."""
    if engine != "auto":
        return engine
    vllm = vllm_available() if vllm is None else vllm
    return "vllm" if cuda and vllm else "hf"


def sleeps(cfg: VLLMConfig, *, cuda: bool) -> bool:
    """Whether an in-process engine sleeps between rollouts: `sleep_mode`, or by default on a GPU (colocated with
    training, so the engine's weights and KV cache give their memory back to the update)."""
    return cuda if cfg.sleep_mode is None else cfg.sleep_mode


def direct_sync(cfg: VLLMConfig, *, cuda: bool) -> bool:
    """Whether an in-process engine takes the trainer's tensors directly (`engine_sync(..., "vllm")`)."""
    return engine_sync(cfg, "vllm", cuda=cuda) == "direct"


def engine_sync(cfg: VLLMConfig, engine: str, *, cuda: bool) -> str:
    """How weights reach `engine` (`vllm` or `vllm_server`): `weight_sync`, with `auto` resolved here.

    In process, `auto` is `direct` on a GPU with one worker, else `shm`: on a CPU the child engine core stays (in this
    process its thread binding would pin the trainer's threads too). A server gets `nccl` on a GPU (no /dev/shm, so it
    may run on another node) and `shm` on a CPU; `gloo` (vLLM's weight-transfer protocol over a gloo group) is asked
    for by name."""
    if cfg.weight_sync != "auto":
        return cfg.weight_sync
    if engine == "vllm_server":
        return "nccl" if cuda else "shm"
    return "direct" if cuda and cfg.tensor_parallel_size == 1 else "shm"


def check_sync(cfg: VLLMConfig, engine: str, *, cuda: bool) -> None:
    """A `ConfigError` for a `weight_sync` that `engine` cannot use on this machine."""
    sync = engine_sync(cfg, engine, cuda=cuda)
    if engine == "vllm" and sync in TRANSFER_BACKENDS:
        raise ConfigError(
            "vllm.weight_sync",
            f"{sync} is for engine=vllm_server; an in-process engine takes direct, shm or auto",
        )
    if engine == "vllm_server" and sync == "direct":
        raise ConfigError(
            "vllm.weight_sync", "direct is for engine=vllm; a server takes nccl, gloo, shm or auto"
        )
    if sync == "nccl" and not cuda:
        raise ConfigError(
            "vllm.weight_sync", "nccl needs a CUDA device in this process; use shm or gloo on a CPU"
        )
    if sync in TRANSFER_BACKENDS and not vllm_available():
        raise ConfigError(
            "vllm.weight_sync",
            f"{sync} sends weights with vLLM's transfer engine, so this process needs vllm; {INSTALL_HINT}",
        )
    url_host = urllib.parse.urlsplit(cfg.server_url).hostname if cfg.server_url else None
    if engine == "vllm_server" and sync == "shm" and url_host is not None and not is_loopback(url_host):
        raise ConfigError(
            "vllm.weight_sync",
            f"shm needs the server on this machine, but vllm.server_url is on {url_host}; use nccl (GPU) or gloo",
        )


def engine_dtype(cfg: VLLMConfig, dtype: str) -> str:
    """The engine's dtype: `vllm.dtype`, or the role's `dtype` when that is `auto`."""
    return cfg.dtype if cfg.dtype != "auto" else dtype


def hf_on_gpu_warning(engine: str, *, cuda: bool, max_completion_length: int, role: str) -> str | None:
    """The one-line warning for the HF engine asked for on a GPU with long completions (None: nothing to say)."""
    if engine != "hf" or not cuda or max_completion_length < LONG_COMPLETION_TOKENS:
        return None
    return (
        f"warning: {role}.engine=hf samples {max_completion_length}-token completions with the eager decode loop on "
        f"a GPU, several times slower than vLLM; set {role}.engine=auto (vLLM) unless you need the HF loop"
    )


def _model_config(model_dir: str | Path | None) -> dict | None:
    if model_dir is None:
        return None
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def check_engine_name(engine: str) -> None:
    """A `ConfigError` for an engine name that is none of `ENGINES` (the part of `validate_engine` that needs
    nothing of the machine)."""
    if engine not in ENGINES:
        raise ConfigError("engine", f"unknown {engine!r}; use one of {', '.join(ENGINES)}")


def validate_engine(
    engine: str,
    cfg: VLLMConfig,
    *,
    model_dir: str | Path | None = None,
    lora_rank: int | None = None,
    on_cpu: bool = True,
) -> None:
    """One clear `ConfigError` for an engine setting that cannot work (see module docstring)."""
    check_engine_name(engine)
    engine = resolve_engine(engine, cuda=not on_cpu)
    if engine == "hf":
        return
    if engine == "vllm" and not vllm_available():
        raise ConfigError(
            "engine", f"engine=vllm needs the vllm package, which is not importable; {INSTALL_HINT}"
        )
    if engine == "vllm_server" and cfg.server_url is None and not vllm_available():
        raise ConfigError(
            "engine",
            f"engine=vllm_server without vllm.server_url starts a server and needs vllm; {INSTALL_HINT}",
        )
    if lora_rank is not None and lora_rank > cfg.max_lora_rank:
        raise ConfigError(
            "lora.rank",
            f"rank {lora_rank} is above vllm.max_lora_rank={cfg.max_lora_rank}; raise max_lora_rank or lower rank",
        )
    check_sync(cfg, engine, cuda=not on_cpu)
    if cfg.sleep_mode is True and on_cpu:
        raise ConfigError("vllm.sleep_mode", "sleep mode is not supported on a CPU; set it to false")
    config = _model_config(model_dir)
    if config is None:
        return
    heads = config.get("num_attention_heads")
    kv_heads = config.get("num_key_value_heads") or heads
    tp = cfg.tensor_parallel_size
    if heads and (heads % tp or (kv_heads and kv_heads % tp and tp % kv_heads)):
        raise ConfigError(
            "vllm.tensor_parallel_size",
            f"{tp} does not divide the model's {heads} attention heads ({kv_heads} key/value heads); "
            "use a divisor of both",
        )
    head_dim = config.get("head_dim") or (config.get("hidden_size", 0) // max(heads or 1, 1))
    given = engine == "vllm_server" and cfg.server_url is not None  # runs wherever it runs, not on this CPU
    if on_cpu and not given and head_dim and head_dim not in CPU_HEAD_SIZES:
        raise ConfigError(
            "engine",
            f"the vLLM CPU build has no attention kernel for head_dim={head_dim} (it has "
            f"{', '.join(map(str, CPU_HEAD_SIZES))}); use engine=hf on this CPU",
        )
