"""A role's settings, read and checked without torch: `RoleConfig` (`proposer:` / `solver:`), `LoraConfig`
(`<role>.lora`), `RolesConfig` (`roles:`, how the two share weights) and `check_shared_base`.

Why apart from `role.py`: the command line reads and checks a recipe before it imports torch, so that a mistyped
key or a bad value answers in a second. `RoleConfig.validate` checks the recipe itself; `check_machine` checks what
it asks of this machine (a visible CUDA device, an engine that runs here) and is the one part that imports torch.
`role.py`, `adapters.py` and `shared_base.py` re-export these names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pasodoble.accel_config import MATMULS
from pasodoble.core.lr_schedules import SCHEDULES
from pasodoble.errors import ConfigError
from pasodoble.rollout.settings import VLLMConfig, check_engine_name, resolve_engine, validate_engine
from pasodoble.update.dtype_names import DTYPE_NAMES
from pasodoble.update.liger import LOSS_KERNELS, require_liger

LOSS_TYPES = ("dr_grpo", "grpo", "dapo")
LR_SCHEDULERS = SCHEDULES
# Sizes past these cannot run anywhere, so they are refused at validation rather than hours in.
# Completions per prompt: GRPO groups are 4-64, and each completion is a full generation.
MAX_GENERATIONS = 1024
# Prompt + completion tokens: 16.8M, over 100x the 32K-128K context of the models the recipes train (a typo).
MAX_SEQUENCE_TOKENS = 1 << 24
# Tokens in one forward pass: their fp32 logits alone would take 1 TiB even with a 256-token vocabulary.
MAX_PASS_TOKENS = 1 << 30
ADAPTER_FILE = "adapter_model.safetensors"  # a LoRA role's weights in its model folder (peft's name)


@dataclass
class RoleConfig:
    model: str = (
        "tiny:solver"  # HF model folder / hub id, or `tiny:proposer` / `tiny:solver` (the tiny world)
    )
    num_generations: int = 6  # completions per prompt (I for the Proposer, J for the Solver)
    temperature: float = 0.6  # sampling temperature (0 = greedy)
    top_p: float = 1.0  # nucleus sampling mass
    top_k: int | None = None  # sample only from the k most likely tokens (None or 0: off)
    min_p: float | None = None  # drop tokens below min_p x the top token's probability (None or 0: off)
    max_prompt_length: int = 512  # prompt tokens kept (left-truncated, keeping the end); Proposer: 1280
    max_completion_length: int = 6144  # new tokens per completion; also the dr_grpo normaliser
    lr: float = 1e-6  # AdamW learning rate
    lr_scheduler: str = "constant"  # "constant" | "linear" | "cosine"
    warmup_steps: int = 0  # linear warm-up updates
    weight_decay: float = 0.0  # AdamW weight decay
    max_grad_norm: float | None = 1.0  # gradient clipping norm (None: off)
    loss_type: str = "dr_grpo"  # "dr_grpo" | "grpo" | "dapo"
    # who computes the GRPO loss: "pasodoble" (core/grpo.py) | "liger" (Liger's fused linear GRPO loss, the liger
    # extra; update/liger.py)
    loss_kernel: str = "pasodoble"
    num_iterations: int = 1  # mu: optimizer steps per batch, each ratio against the generating policy
    epsilon: float = 0.2  # lower clip range of the importance ratio
    epsilon_high: float | None = None  # upper clip range (None: same as epsilon)
    beta: float = 0.0  # KL weight to a frozen reference model (0: no reference model is loaded)
    micro_batch_size: int = 8  # sequences per forward/backward pass (gradient accumulation above it)
    # token positions per forward/backward (None: micro_batch_size; "auto": from the model's shape,
    # update/token_budget.py)
    micro_batch_tokens: int | Literal["auto"] | None = None
    generation_batch_size: int = 64  # prompts per generate() call of the Hugging Face engine
    dtype: str = "float32"  # compute dtype: "float32" | "bfloat16" | "float16" (trained weights: float32)
    device: str = "auto"  # "auto" (CUDA when present, else CPU) | "cpu" | "cuda" | "cuda:N"
    # trade compute for memory in the backward pass ("auto": only where the update's activations would not fit the
    # device, update/token_budget.py)
    gradient_checkpointing: bool | Literal["auto"] = False
    trainable: bool = True  # False: the role only generates (no optimizer is built)
    engine: str = (
        "auto"  # rollout engine: "auto" (vllm on CUDA with vLLM, else hf) | "hf" | "vllm" | "vllm_server"
    )
    vllm: VLLMConfig = field(default_factory=VLLMConfig)  # settings of the vllm / vllm_server engines
    lora: LoraConfig | None = None  # train a LoRA adapter on a frozen base (None: full fine-tuning)
    tis_cap: float | None = None  # truncated importance-sampling cap for engine/trainer mismatch (None: off)
    # LM-head tokens per chunk of the loss (None: whole logits; "auto": from the vocabulary and the model's size)
    logprob_chunk_tokens: int | Literal["auto"] | None = 2048
    share_prompt_prefill: bool = True  # each distinct prompt of a generate() call / micro-batch runs once
    cpu_matmul: str | None = None  # deprecated: the process's `accel.cpu_matmul` (None: that section's value)

    def validate(self) -> None:
        if self.num_generations < 1:
            raise ConfigError("num_generations", "must be >= 1 (GRPO needs a group; the paper uses 6)")
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ConfigError("temperature", "temperature must be >= 0 and top_p in (0, 1]")
        if self.top_k is not None and self.top_k < 0:
            raise ConfigError("top_k", f"must be an integer >= 0 (0 or null: off), got {self.top_k}")
        if self.min_p is not None and not 0 <= self.min_p < 1:
            raise ConfigError("min_p", f"must be in [0, 1) (0 or null: off), got {self.min_p}")
        if self.max_prompt_length < 1 or self.max_completion_length < 1:
            raise ConfigError("max_prompt_length", "prompt and completion lengths must be >= 1")
        if self.loss_type not in LOSS_TYPES:
            raise ConfigError("loss_type", f"unknown {self.loss_type!r}; use one of {', '.join(LOSS_TYPES)}")
        self._validate_loss_kernel()
        if self.lr_scheduler not in LR_SCHEDULERS:
            raise ConfigError("lr_scheduler", f"unknown {self.lr_scheduler!r}; use one of {LR_SCHEDULERS}")
        if self.dtype not in DTYPE_NAMES:
            raise ConfigError("dtype", f"unknown {self.dtype!r}; use one of {', '.join(DTYPE_NAMES)}")
        if not isinstance(self.num_iterations, int) or self.num_iterations < 1:
            raise ConfigError("num_iterations", f"must be an integer >= 1, got {self.num_iterations!r}")
        if self.lr < 0 or self.beta < 0 or self.epsilon <= 0:
            raise ConfigError("lr", "lr and beta must be >= 0 and epsilon > 0")
        if self.device != "auto" and not self.device.startswith(("cpu", "cuda")):
            raise ConfigError("device", f"unknown {self.device!r}; use auto, cpu, cuda or cuda:N")
        if self.micro_batch_size < 1 or self.generation_batch_size < 1:
            raise ConfigError("micro_batch_size", "batch sizes must be >= 1")
        if self.micro_batch_tokens not in (None, "auto") and (
            isinstance(self.micro_batch_tokens, bool)
            or not isinstance(self.micro_batch_tokens, int)
            or not 1 <= self.micro_batch_tokens <= MAX_PASS_TOKENS
        ):
            raise ConfigError(
                "micro_batch_tokens",
                f"must be an integer in [1, {MAX_PASS_TOKENS:,}], auto (from the model's shape) or null "
                "(micro_batch_size sequences), got "
                f"{self.micro_batch_tokens!r}",
            )
        if self.logprob_chunk_tokens not in (None, "auto") and (
            isinstance(self.logprob_chunk_tokens, bool)
            or not isinstance(self.logprob_chunk_tokens, int)
            or self.logprob_chunk_tokens < 1
        ):
            raise ConfigError(
                "logprob_chunk_tokens",
                "must be an integer >= 1 (e.g. 2048), auto (from the vocabulary and the model's size) or null for "
                f"off, got {self.logprob_chunk_tokens!r}",
            )
        if self.cpu_matmul is not None and self.cpu_matmul not in MATMULS:
            raise ConfigError("cpu_matmul", f"unknown {self.cpu_matmul!r}; use one of {', '.join(MATMULS)}")
        if self.tis_cap is not None and self.tis_cap <= 0:
            raise ConfigError("tis_cap", f"must be > 0 (e.g. 2.0) or null for off, got {self.tis_cap}")
        check_engine_name(self.engine)
        self._validate_optimizer()
        self._validate_sizes()

    def check_machine(self) -> None:
        """What this machine must offer the role: a CUDA device it names, an engine that runs here (vLLM
        importable, a head size the vLLM CPU build has). Apart from `validate` because it imports torch."""
        if not self.device.startswith("cuda") and resolve_engine(self.engine, cuda=True) == "hf":
            return  # the HF engine, on a device that is not a named GPU, runs on any machine: torch is not needed
        import torch  # here, not above: the recipe's own checks (`validate`) run before torch is imported

        cuda = torch.cuda.is_available()
        if self.device.startswith("cuda") and not cuda:
            raise ConfigError(
                "device", f"{self.device!r} asked for but no CUDA device is visible; use auto or cpu"
            )
        local = Path(self.model) / "config.json"
        validate_engine(
            self.engine,
            self.vllm,
            model_dir=Path(self.model) if local.is_file() else None,
            lora_rank=self.lora.rank if self.lora else None,
            on_cpu=not cuda,
        )

    def _validate_loss_kernel(self) -> None:
        if self.loss_kernel not in LOSS_KERNELS:
            raise ConfigError(
                "loss_kernel", f"unknown {self.loss_kernel!r}; use one of {', '.join(LOSS_KERNELS)}"
            )
        if self.loss_kernel != "liger":
            return
        if self.tis_cap is not None:
            raise ConfigError(
                "tis_cap",
                "weights each token by the trainer's log-probs, which Liger's fused loss (loss_kernel: liger) does "
                "not return; set tis_cap: null or loss_kernel: pasodoble",
            )
        require_liger("loss_kernel")

    def _validate_optimizer(self) -> None:
        if self.warmup_steps < 0:
            raise ConfigError("warmup_steps", f"must be >= 0 (0: no warm-up), got {self.warmup_steps}")
        if self.weight_decay < 0:
            raise ConfigError("weight_decay", f"must be >= 0, got {self.weight_decay}")
        if self.max_grad_norm is not None and self.max_grad_norm <= 0:
            raise ConfigError(
                "max_grad_norm",
                f"must be > 0 (0 would zero every gradient), or null to switch clipping off; got {self.max_grad_norm}",
            )
        if self.epsilon_high is not None and self.epsilon_high <= 0:
            raise ConfigError("epsilon_high", f"must be > 0, or null to use epsilon; got {self.epsilon_high}")

    @property
    def max_sequence_length(self) -> int:
        """The longest prompt plus completion a rollout of this role holds, in tokens."""
        return self.max_prompt_length + self.max_completion_length

    def _validate_sizes(self) -> None:
        if self.num_generations > MAX_GENERATIONS:
            raise ConfigError(
                "num_generations",
                f"{self.num_generations} completions per prompt is past the limit of {MAX_GENERATIONS} "
                "(GRPO groups are 4-64; the paper uses 6)",
            )
        tokens = self.max_sequence_length
        if tokens > MAX_SEQUENCE_TOKENS:
            raise ConfigError(
                "max_completion_length",
                f"max_prompt_length + max_completion_length = {tokens:,} tokens is past {MAX_SEQUENCE_TOKENS:,}, "
                "over 100x the 32K-128K context window of the models the recipes train; check for a typo",
            )
        for name in ("micro_batch_size", "generation_batch_size"):
            batch = getattr(self, name)
            if batch * tokens > MAX_PASS_TOKENS:
                raise ConfigError(
                    name,
                    f"{batch:,} sequences of up to {tokens:,} tokens make {batch * tokens:,} tokens in one pass, past "
                    f"{MAX_PASS_TOKENS:,} (the logits alone would need over 1 TiB); lower {name}",
                )


@dataclass
class LoraConfig:
    rank: int = 16  # LoRA rank r
    alpha: float = 32.0  # scaling numerator (scale = alpha / rank)
    dropout: float = 0.0  # dropout on the LoRA input
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )  # module names that get an adapter

    def validate(self) -> None:
        if self.rank < 1 or self.alpha <= 0 or not 0 <= self.dropout < 1:
            raise ConfigError("lora.rank", "rank must be >= 1, alpha > 0 and dropout in [0, 1)")
        if not self.target_modules:
            raise ConfigError("lora.target_modules", "name at least one module, e.g. [q_proj, v_proj]")


@dataclass
class RolesConfig:
    shared_base: bool = (
        False  # both roles as LoRA adapters of one frozen base (needs proposer.lora and solver.lora)
    )


def check_shared_base(proposer_cfg: RoleConfig, solver_cfg: RoleConfig) -> None:
    """`roles.shared_base` trains two adapters of one base: both roles need a `lora` section."""
    if proposer_cfg.lora is None or solver_cfg.lora is None:
        raise ConfigError(
            "roles.shared_base", "needs proposer.lora and solver.lora (e.g. proposer.lora.rank=8)"
        )
