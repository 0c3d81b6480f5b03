"""A trainable role: one class for both the Proposer and the Solver.

What: `Role` bundles a Hugging Face causal LM, its tokenizer, an AdamW optimizer, a learning-rate schedule, a
rollout engine and (only when `beta > 0`) a frozen reference model. The dual-play loop talks to both roles through
the same four calls: `prompt_ids(messages)`, `generate(prompt_ids, seed)`, `update(samples, advantages)` and
`save(dir)` / `load_state(dir)`. `RoleConfig` holds one role's settings; the recipe gives the Proposer and the
Solver different values (prompt budgets 1280 vs 512 in the paper).

Why one class: the method trains two policies with the same GRPO recipe; forking a trainer per role is the
failure mode the project exists to avoid.

How to run: built by `pasodoble.runs.train`; tests in `tests/roles/test_roles.py`.

Departures from the reference code:
- Prompts are tokenised once (chat template applied) and left-truncated to `max_prompt_length`, keeping the END
  (the generation header and the end of the instruction); the very same ids feed generation and the loss, so the
  two can never disagree (the reference truncated them differently).
- The importance ratio is taken against the log-probs the rollout engine reported for the sampled tokens (the
  policy that generated them). With one optimizer step per batch on the Hugging Face engine (which samples the
  live module) it is taken against the detached log-probs of the update's own forward, which are the generating
  policy's; the engine then skips its re-scoring pass (docs/PERFORMANCE.md).
- Micro-batches are weighted so that the accumulated gradient equals the full-batch loss of `loss_type`
  (dr_grpo: sum / (B * max_completion_length); grpo: mean of sequence means; dapo: sum / all tokens), whichever
  computes it: the project's `core.grpo.policy_loss`, or Liger's fused linear GRPO loss on the last hidden states
  (`loss_kernel: liger`, `update.liger`: padded micro-batches, one process, no log-prob gap statistics).
- `dtype` is the compute dtype: a trainable role keeps float32 master weights and AdamW states and autocasts its
  forward passes to `dtype` (`pasodoble.update.precision`): AdamW stepping bfloat16 weights directly rounds lr-1e-6
  updates away.
"""

from __future__ import annotations

import contextlib
import copy
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pasodoble import accel
from pasodoble.checkpoint import load_torch_state
from pasodoble.core import grpo, lr_schedules
from pasodoble.errors import UserError
from pasodoble.roles import adapters
from pasodoble.roles.adapters import shape_problem
from pasodoble.roles.config import RoleConfig as RoleConfig  # re-exported: defined without torch
from pasodoble.rollout import Completion, RolloutEngine, SamplingParams
from pasodoble.rollout.factory import build_engine, hf_engine
from pasodoble.rollout.placement import Placement
from pasodoble.scale.data_parallel import GlobalBatch
from pasodoble.scale.sharding.base import Sharding
from pasodoble.scale.sharding.unsharded import Unsharded
from pasodoble.update import liger, precision
from pasodoble.update.chunked_logprobs import inner_model, supports_chunking
from pasodoble.update.embedding_grad import rows_into_grad
from pasodoble.update.fused_head import reuse_head_casts
from pasodoble.update.logprobs import logprobs, scored_temperature
from pasodoble.update.micro_batches import (
    attention_entry_weight,
    layout_cost,
    micro_batch_weight,
    plan_micro_batches,
    plan_padding_free,
)
from pasodoble.update.packed import can_pack, flat_tensor
from pasodoble.update.padding_free import PACKED_AWARE, attention_for, attention_set, flatten, to_device
from pasodoble.update.precision import DTYPES
from pasodoble.update.segment_attention import attends_per_sample
from pasodoble.update.shared_prefix import can_share_prompts
from pasodoble.update.token_budget import (
    auto_logprob_chunk_tokens,
    auto_micro_batch_tokens,
    micro_batch_positions,
    needs_checkpointing,
)

READ_BACK = "pasodoble::read_back"  # the profiler region of an update's one read of its statistics


def text_config(model: torch.nn.Module):
    """The config that holds the decoder's sizes (a multimodal model's text part), or None."""
    config = getattr(model, "config", None)
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def _state_bytes(model: torch.nn.Module) -> int:
    """The weights; a trained parameter adds its gradient and two float32 AdamW moments."""
    return sum(
        p.numel() * (p.element_size() * (2 if p.requires_grad else 1) + (8 if p.requires_grad else 0))
        for p in model.parameters()
    )


def _budget_sizes(cfg: RoleConfig, model: torch.nn.Module) -> dict | None:
    """The numbers the token budget and the checkpointing rule read (update/token_budget.py), or None when the
    model's config lacks the sizes."""
    config = text_config(model)
    sizes = {k: getattr(config, k, None) for k in ("hidden_size", "intermediate_size", "num_hidden_layers")}
    if not all(isinstance(v, int) and v > 0 for v in sizes.values()):
        return None
    return {
        "hidden": sizes["hidden_size"],
        "intermediate": sizes["intermediate_size"],
        "layers": sizes["num_hidden_layers"],
        "state_bytes": _state_bytes(model),
        # autocast over float32 weights keeps float32 activations too (update/token_budget.py)
        "value_bytes": max(DTYPES[cfg.dtype].itemsize, next(model.parameters()).element_size()),
        "device_bytes": device_memory(model),
    }


def token_budgets(
    cfg: RoleConfig, model: torch.nn.Module, checkpointing: bool = False, *, padding_free: bool = False
) -> tuple[int | None, int | None]:
    """The role's `micro_batch_tokens` and `logprob_chunk_tokens` with "auto" resolved from the model's config and
    its weights, gradients and AdamW states (update/token_budget.py), for a backward with or without
    `checkpointing`; `padding_free` (`Role.padding_free`): null resolves as "auto" too, to the padding-free budget.
    A model whose config lacks the sizes gets micro_batch_size sequences and 2048-token chunks."""
    vocab = getattr(text_config(model), "vocab_size", None)
    tokens, chunk = cfg.micro_batch_tokens, cfg.logprob_chunk_tokens
    if tokens == "auto" or (tokens is None and padding_free):
        sizes = _budget_sizes(cfg, model)
        tokens = (
            auto_micro_batch_tokens(**sizes, checkpointing=checkpointing, padding_free=padding_free)
            if sizes
            else None
        )
    if chunk == "auto":
        state = _state_bytes(model)
        chunk = auto_logprob_chunk_tokens(vocab=vocab, state_bytes=state) if isinstance(vocab, int) else 2048
    return tokens, chunk


def gradient_checkpointing(cfg: RoleConfig, model: torch.nn.Module) -> bool:
    """`gradient_checkpointing` with "auto" resolved by `needs_checkpointing` (update/token_budget.py) at the
    micro-batch the role would run without it; off for a frozen role (no backward) or unknown sizes."""
    if cfg.gradient_checkpointing != "auto":
        return cfg.gradient_checkpointing
    sizes = _budget_sizes(cfg, model)
    if not cfg.trainable or sizes is None:
        return False
    budget, _ = token_budgets(cfg, model, checkpointing=False)
    tokens = micro_batch_positions(budget, cfg.micro_batch_size, cfg.max_sequence_length)
    return needs_checkpointing(**sizes, tokens=tokens)


def device_memory(model: torch.nn.Module) -> int | None:
    """Total memory of the accelerator holding the model's first parameter; None on a CPU (or without one)."""
    param = next(model.parameters(), None)
    if param is None or param.device.type != "cuda":
        return None
    return torch.cuda.get_device_properties(param.device).total_memory


def entry_weight(model: torch.nn.Module) -> float | None:
    """`micro_batches.attention_entry_weight` of the model's decoder layers; None when its config lacks the
    sizes."""
    sizes = _layer_sizes(model)
    if sizes is None:
        return None
    return attention_entry_weight(
        **{k: sizes[k] for k in ("hidden", "intermediate", "heads", "kv_heads", "head_dim")}
    )


def micro_batch_cost(model: torch.nn.Module) -> float:
    """`micro_batches.micro_batch_weight` of the model; 0 (plans priced by positions alone) when its config lacks
    the sizes."""
    sizes = _layer_sizes(model)
    if sizes is None or not all(isinstance(sizes[k], int) and sizes[k] > 0 for k in ("layers", "vocab")):
        return 0.0
    return micro_batch_weight(**sizes)


def _layer_sizes(model: torch.nn.Module) -> dict | None:
    """The model's decoder sizes from its config (hidden, intermediate, heads, kv_heads, head_dim, layers, vocab);
    None without the first three."""
    config = text_config(model)
    hidden, heads = getattr(config, "hidden_size", None), getattr(config, "num_attention_heads", None)
    intermediate = getattr(config, "intermediate_size", None)
    if not all(isinstance(v, int) and v > 0 for v in (hidden, heads, intermediate)):
        return None
    return {
        "hidden": hidden,
        "intermediate": intermediate,
        "heads": heads,
        "kv_heads": getattr(config, "num_key_value_heads", None) or heads,
        "head_dim": getattr(config, "head_dim", None) or hidden // heads,
        "layers": getattr(config, "num_hidden_layers", None),
        "vocab": getattr(config, "vocab_size", None),
    }


def adamw_options(params: Sequence[torch.Tensor]) -> dict:
    """`fused=True` when every parameter is on CUDA (one kernel for the whole step, not one per tensor group);
    torch's default elsewhere (the CPU path's speed was measured with it)."""
    return {"fused": True} if params and all(p.is_cuda for p in params) else {}


def resolve_device(name: str) -> torch.device:
    """`auto` -> the first CUDA device when there is one, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


@dataclass(frozen=True)
class Sample:
    """One trajectory to learn from: the exact prompt ids and the engine's completion (ids + log-probs)."""

    prompt_ids: list[int]
    completion: Completion


class Role:
    """A trainable (or frozen) policy: model + tokenizer + optimizer + scheduler + rollout engine."""

    def __init__(
        self,
        name: str,
        cfg: RoleConfig,
        model: torch.nn.Module,
        tokenizer,
        *,
        engine: RolloutEngine | None = None,
        total_updates: int | None = None,
        sharding: Sharding | None = None,
    ):
        self.name, self.cfg, self.tokenizer = name, cfg, tokenizer
        self.compute_dtype = DTYPES[cfg.dtype]
        # in place, so an engine handed the same module keeps seeing the live weights
        self.model = model.to(precision.weights_dtype(cfg.dtype, cfg.trainable))
        # `train_model` is what the loss runs through (the engine's wrapper); `model` stays the plain module.
        self.sharding = sharding if sharding is not None else Unsharded()
        self.train_model = self.model
        self.engine = engine if engine is not None else hf_engine(cfg, model, tokenizer)
        # One step per batch on an engine that samples the live module: for samples generated at the current
        # weights (`Completion.policy_version`), those weights ARE the generating policy, so the ratio is taken
        # against their detached log-probs (exactly 1) and the engine need not re-score in the loss's numerics.
        self.ratio_on_current = cfg.num_iterations == 1 and not self.engine.copies_weights
        self.liger = self._liger_loss() if cfg.loss_kernel == "liger" and cfg.trainable else None
        self.scaler = precision.grad_scaler(next(model.parameters()).device, self.compute_dtype)
        self.optimizer: torch.optim.Optimizer | None = None
        self.scheduler = None
        self.reference: torch.nn.Module | None = None
        self.updates = 0
        self.gradient_checkpointing = gradient_checkpointing(cfg, self.model)  # "auto" resolved by memory
        self.padding_free = False  # the update's layout: `use_padding_free`
        self.update_attention: str | None = None  # the attention implementation the update sets
        self.micro_batch_tokens, self.logprob_chunk_tokens = token_budgets(
            cfg, self.model, self.gradient_checkpointing
        )
        if next(self.model.parameters()).device.type == "cuda":
            self.use_padding_free()
        self.entry_weight = entry_weight(self.model)
        self.micro_batch_cost = micro_batch_cost(self.model)
        if self.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        if cfg.trainable and cfg.beta > 0:  # copied before the policy is sharded, then sharded on its own
            reference = copy.deepcopy(model).to(self.compute_dtype).eval().requires_grad_(False)
            self.reference = self.sharding.prepare_reference(reference)
        if cfg.trainable:
            self._build_optimizer(total_updates)
            self.train_model, self.optimizer = self.sharding.prepare(
                name, model, self.optimizer, max_grad_norm=cfg.max_grad_norm, compute_dtype=self.compute_dtype
            )

    @classmethod
    def from_pretrained(
        cls, name: str, cfg: RoleConfig, path: str | Path, placement: Placement | None = None, **kwargs
    ) -> Role:
        """Load the model and tokenizer from a Hugging Face folder (or hub id); `placement` places a vLLM server
        (`rollout.placement`; None: one process)."""
        tokenizer = AutoTokenizer.from_pretrained(str(path))
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        dtype = precision.weights_dtype(cfg.dtype, cfg.trainable)
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype)
        model = model.to(resolve_device(cfg.device))
        accel.apply(model, cpu_matmul=cfg.cpu_matmul)
        if cfg.lora is not None:
            model = adapters.wrap_lora(model, name, cfg.lora)
        if "engine" not in kwargs:
            kwargs["engine"] = build_engine(name, cfg, model, tokenizer, path, placement)
        return cls(name, cfg, model, tokenizer, **kwargs)

    def use_padding_free(self) -> bool:
        """Run the update padding-free (`update.padding_free`) where the role allows it (trainable, a model that
        can): its forwards attend through `padding_free.attention_for` the device (FlashAttention when installed,
        else FlexAttention on CUDA; SDPA on a CPU; generation keeps the model's own) and a null
        `micro_batch_tokens` resolves to the padding-free budget. On every sharding backend: the forward runs
        through the wrapper (DDP, a DeepSpeed engine; FSDP2 shards the module itself), so each rank reduces and
        accumulates its gradients as on the padded path; under ZeRO-3 the LM head stays inside the forward
        (`Sharding.head_outside_forward`). The Role calls it on CUDA; a CPU keeps its measured layouts unless a
        caller asks (the GPU check's CPU run). Returns whether the update now runs padding-free."""
        if not self.cfg.trainable or self._same_numerics():
            return False
        if self.liger is not None:  # Liger's loss takes padded rows, one advantage each
            return False
        if not can_share_prompts(self.model):  # a plain linear head, full attention in every layer
            return False
        attention = attention_for(next(self.model.parameters()).device)
        try:  # the implementation is importable and the architecture takes it
            with attention_set([self.model], attention):
                pass
        except (ImportError, ValueError) as err:
            warnings.warn(f"{self.name}: the padding-free update is off: {err}", stacklevel=2)
            return False
        self.padding_free = attention in PACKED_AWARE
        self.update_attention = attention if self.padding_free else None
        if self.padding_free:
            self.micro_batch_tokens, _ = token_budgets(
                self.cfg, self.model, self.gradient_checkpointing, padding_free=True
            )
        return self.padding_free

    def _liger_loss(self):
        """Liger's fused GRPO loss with the role's settings (`update.liger`), on one process only."""
        # a run refuses it before loading (`scale.sharding.check_roles`); this guards a Role built in code
        if not isinstance(self.sharding, Unsharded):
            raise ValueError(f"{self.name}: Liger's fused loss (loss_kernel: liger) runs unsharded only")
        cfg = self.cfg
        return liger.grpo_loss(
            beta=cfg.beta,
            epsilon=cfg.epsilon,
            epsilon_high=cfg.epsilon_high,
            loss_type=cfg.loss_type,
            max_completion_length=cfg.max_completion_length,
            temperature=scored_temperature(cfg.temperature),
            compiled=next(self.model.parameters()).is_cuda,  # Liger's default on CUDA; eager on a CPU
        )

    def _build_optimizer(self, total_updates: int | None) -> None:
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            params, lr=self.cfg.lr, weight_decay=self.cfg.weight_decay, **adamw_options(params)
        )
        self.scheduler = lr_schedules.build(
            self.cfg.lr_scheduler,
            self.optimizer,
            warmup_steps=self.cfg.warmup_steps,
            total_steps=total_updates or 1,
        )

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """Chat template applied once; left-truncated to max_prompt_length, keeping the end."""
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return list(ids[-self.cfg.max_prompt_length :])

    def sampling(self, seed: int | None, *, n: int | None = None, greedy: bool = False) -> SamplingParams:
        return SamplingParams(
            n=1 if greedy else (n or self.cfg.num_generations),
            temperature=0.0 if greedy else self.cfg.temperature,
            top_p=self.cfg.top_p,
            top_k=self.cfg.top_k,
            min_p=self.cfg.min_p,
            max_new_tokens=self.cfg.max_completion_length,
            seed=seed,
        )

    def gathered(self):
        """Context of a phase that runs the model (generation, scoring, evaluation): every rank enters it, the
        same number of times (a collective under FSDP2, which gathers the full weights once for the phase)."""
        return self.sharding.gathered(self.model)

    def generate(
        self, prompt_ids: Sequence[Sequence[int]], seed: int | None, *, n: int | None = None
    ) -> list[list[Completion]]:
        """Sample `n` (default num_generations) completions per prompt with the role's sampling settings (on
        several ranks, inside `gathered()`)."""
        if not prompt_ids:
            return []
        self.model.eval()
        groups = self.engine.generate(prompt_ids, self.sampling(seed, n=n))
        for group in groups:
            for c in group:
                c.policy_version = self.updates
        accel.release_freed()  # the freed heap back to the kernel, for other processes (a vLLM server)
        return groups

    def update(
        self, samples: Sequence[Sample], advantages: Sequence[float], *, batch: GlobalBatch | None = None
    ) -> dict[str, float]:
        """`num_iterations` optimizer steps on `samples` (each accumulated over micro-batches); returns loss and
        gradient statistics averaged over those steps. With `batch`, `samples` is this rank's share of a batch
        spread over ranks: the loss is normalised by the whole batch and padded to `batch.micro_batches`."""
        if self.optimizer is None:
            raise RuntimeError(f"role {self.name} is frozen (trainable: false) and cannot be updated")
        if len(samples) != len(advantages) or (not samples and batch is None):
            raise ValueError("update() needs one advantage per sample and at least one sample")
        start = time.perf_counter()
        models = [m for m in (self.model, self.reference) if m is not None]
        attention = attention_set(models, self.update_attention) if self.update_attention else None
        # every rank enters once per update (FSDP2: one gather)
        with self.sharding.updating(self.model), attention or contextlib.nullcontext():
            stats = self._update(samples, advantages, batch)
        accel.release_freed()  # the activations' heap, before the engine syncs
        sync_start = time.perf_counter()
        self.sharding.sync_engine(self.model, self.engine)
        return {
            **stats,
            "weight_sync_s": time.perf_counter() - sync_start,
            "samples": float(len(samples)),
            "update_s": time.perf_counter() - start,
        }

    def _update(self, samples, advantages, batch: GlobalBatch | None) -> dict[str, float]:
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        total_tokens = batch.tokens if batch else sum(max(len(s.completion.token_ids), 1) for s in samples)
        total_samples = batch.samples if batch else len(samples)
        passes = self.cfg.num_iterations
        plan, packed = self.micro_batch_layout(samples)
        chunks = []  # (samples, advantages, weight of the micro-batch in the full-batch loss)
        for rows in plan:
            chunk = [samples[r] for r in rows]
            if self.cfg.loss_type == "dapo":
                weight = sum(max(len(s.completion.token_ids), 1) for s in chunk) / total_tokens
            else:
                weight = len(chunk) / total_samples
            chunks.append((chunk, [advantages[r] for r in rows], weight))
        if batch is not None and len(chunks) > batch.micro_batches:
            raise RuntimeError(
                f"{self.name}: this rank planned {len(chunks)} micro-batches but the batch allows "
                f"{batch.micro_batches}; build it with global_batch(samples, role.micro_batch_plan, world_size)"
            )
        while batch is not None and len(chunks) < batch.micro_batches:  # every rank runs every forward
            chunks.append(([self._dummy_sample()], [0.0], 0.0))
        sums: dict[str, float] = {}
        grad_norm = 0.0
        scale = self.sharding.grad_scale
        first_pass: list[torch.Tensor] = []  # trainer log-probs of the generating weights, per micro-batch
        gap_max = 0.0
        for it in range(passes):  # GRPO's mu inner iterations; old_logps stay the generating policy's
            with reuse_head_casts():  # the weights are fixed until the step: the head is cast once a pass
                for ci, (chunk, adv, weight) in enumerate(chunks):
                    with self.sharding.accumulate(self.train_model, last=ci == len(chunks) - 1):
                        with precision.autocast(next(self.model.parameters()).device, self.compute_dtype):
                            loss, stats, logps = self._micro_batch_loss(
                                chunk, adv, first_pass[ci] if it else None, packed=packed
                            )
                        if it == 0:
                            first_pass.append(logps)
                            # None: Liger's loss measures no gap; a zero-weight filler sample has no engine
                            # log-probs to compare
                            chunk_gap = stats.pop("logprob_diff_max", None)
                            if chunk_gap is not None and weight > 0:
                                gap_max = torch.maximum(torch.as_tensor(gap_max), chunk_gap.double())
                        self.sharding.backward(self.scaler.scale(loss * (weight * scale)))
                    for key, value in {"loss": loss.detach(), **stats}.items():
                        # the gap: first pass only; in float64 on the device, as the host would sum them
                        per_pass = 1.0 if key == "logprob_diff_mean" else 1.0 / passes
                        sums[key] = sums.get(key, 0.0) + value.double() * weight * per_pass
            grad_norm = grad_norm + torch.as_tensor(self._clip_and_step()).double() / passes
            self.updates += 1
            if it + 1 < passes:
                self.sharding.refresh(self.train_model)  # the next pass runs on the stepped weights
        if "logprob_diff_mean" in sums:
            sums["logprob_diff_max"] = gap_max
        return {
            **read_once({**sums, "grad_norm": grad_norm}),
            "lr": self.scheduler.get_last_lr()[0] if self.scheduler else 0.0,
        }

    def micro_batch_plan(self, samples: Sequence[Sample]) -> list[list[int]]:
        """Sample indices of each micro-batch `update` runs on `samples` (see update/micro_batches.py)."""
        return self.micro_batch_layout(samples)[0]

    def micro_batch_layout(self, samples: Sequence[Sample]) -> tuple[list[list[int]], bool]:
        """The micro-batches of `micro_batch_plan`, and whether they run packed (`update.packed`, each prompt once):
        when the model allows it and `micro_batches.layout_cost` prices the packed plan below the other. A packed
        row's masked attention grows with the square of its group's length (long completions, small models),
        unless the model attends per sample (`update.segment_attention`, the project's grouped SDPA on a CPU); then
        a packed micro-batch is one row without padding. A padding-free role (`padding_free`, CUDA) plans one row of
        whole samples a micro-batch up to its token budget, never the two-pass layout (`plan_padding_free`)."""
        # tuples: the planners key their groups by them, and take a tuple as it is
        prompts = [tuple(s.prompt_ids) for s in samples]
        lengths = [len(s.completion.token_ids) for s in samples]
        if self.padding_free:  # one row a micro-batch, filled to the token budget (`update.padding_free`)
            budget = self.micro_batch_tokens or self.cfg.micro_batch_size * self.cfg.max_sequence_length
            return plan_padding_free(prompts, lengths, budget), False
        share = self._shares_cache(self.train_model)
        cost = self.micro_batch_cost
        plan = plan_micro_batches(
            prompts,
            lengths,
            self.cfg.micro_batch_size,
            share=share,
            max_tokens=self.micro_batch_tokens,
            micro_batch_cost=cost,
        )
        if not self._packs(self.train_model) or self.entry_weight is None:
            return plan, False
        segments = attends_per_sample(
            self.train_model
        )  # packed_logprobs then lays a micro-batch out as one row
        packed = plan_micro_batches(
            prompts,
            lengths,
            self.cfg.micro_batch_size,
            share=True,
            packed=True,
            line=segments,
            max_tokens=self.micro_batch_tokens,
            micro_batch_cost=cost,
        )
        costs = [
            layout_cost(
                prompts,
                lengths,
                p,
                share=share,
                packed=k,
                entry_weight=self.entry_weight,
                segments=segments,
                micro_batch_cost=cost,
            )
            for p, k in ((packed, True), (plan, False))
        ]
        return (packed, True) if costs[0] < costs[1] else (plan, False)

    def _dummy_sample(self) -> Sample:
        """A one-token sample for a zero-weight forward/backward (a rank whose share ran out of micro-batches)."""
        pad = self.tokenizer.pad_token_id
        return Sample([pad], Completion("", [pad], [0.0], "length"))

    def _clip_and_step(self) -> float:
        max_norm = self.cfg.max_grad_norm if self.cfg.max_grad_norm is not None else float("inf")
        # the sharding backend steps: unscale (float16), clip, optimizer step (skipped on a float16 overflow)
        grad_norm = self.sharding.step(self.train_model, self.optimizer, self.scaler, max_norm)
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return grad_norm

    def _micro_batch_loss(
        self,
        samples: Sequence[Sample],
        advantages: Sequence[float],
        first_logps: torch.Tensor | None = None,
        *,
        packed: bool = False,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        """Loss, stats (0-dim tensors on the device, read once per update) and the detached log-probs of this pass
        (None under Liger's loss, `loss_kernel: liger`, which computes the loss from the hidden states);
        `first_logps` is None on the first pass (the log-prob gap to the engine is measured there) and that pass's
        log-probs afterwards (for TIS); `packed`: the micro-batch runs packed, each prompt once
        (`micro_batch_layout`)."""
        batch = collate(samples, self.tokenizer.pad_token_id)
        batch["advantages"] = torch.tensor(list(advantages), dtype=torch.float32)
        if self.padding_free:  # its indices built here, on the CPU, like the rest of the batch
            batch["flat"] = flatten(
                [s.prompt_ids for s in samples],
                [s.completion.token_ids for s in samples],
                batch["input_ids"].shape[1],
            )
        device = next(self.model.parameters()).device
        batch = to_device(batch, device)
        ref_logps = None
        if self.reference is not None:
            with torch.no_grad():
                ref_logps = self._token_logprobs(self.reference, batch, samples, packed=packed)
        on_current = self.ratio_on_current and all(
            s.completion.policy_version == self.updates for s in samples
        )
        if self.liger is not None:  # the one other loss: Liger's, which returns no per-token log-probs
            old_logps = None if on_current else batch["old_logps"]
            with rows_into_grad(self.train_model):  # unsharded (`_liger_loss`)
                loss, stats = liger.fused_policy_loss(
                    self.liger, self.train_model, batch, old_logps=old_logps, ref_logps=ref_logps
                )
            return loss, stats, None
        logps = self._token_logprobs(self.train_model, batch, samples, packed=packed)
        mask, engine_logps = batch["completion_mask"], batch["old_logps"]
        behaviour = logps.detach() if first_logps is None else first_logps
        gap = {}
        if first_logps is None:
            gap["logprob_diff_mean"], gap["logprob_diff_max"] = grpo.logprob_gap(
                behaviour, engine_logps, mask
            )
        old_logps, token_weights = engine_logps, None
        if on_current:
            old_logps = behaviour
        if (
            self.cfg.tis_cap is not None
        ):  # ratio against the trainer's own log-probs, weighted by p_train/p_engine
            old_logps = behaviour
            token_weights = grpo.tis_weights(behaviour, engine_logps, mask, self.cfg.tis_cap)
        loss, stats = grpo.policy_loss(
            logps,
            old_logps,
            batch["advantages"],
            batch["completion_mask"],
            epsilon_low=self.cfg.epsilon,
            epsilon_high=self.cfg.epsilon_high,
            loss_type=self.cfg.loss_type,
            max_completion_length=self.cfg.max_completion_length,
            ref_logps=ref_logps,
            beta=self.cfg.beta,
            token_weights=token_weights,
            tensor_stats=True,
        )
        return loss, {**stats, **gap}, behaviour

    def _shares_cache(self, model: torch.nn.Module) -> bool:
        """True when the update may run each distinct prompt of a micro-batch once through the KV cache."""
        return self._may_share() and not self.gradient_checkpointing and can_share_prompts(model)

    def _packs(self, model: torch.nn.Module) -> bool:
        """True when the update may run a micro-batch packed, each distinct prompt once (`update.packed`)."""
        return self._may_share() and can_pack(model)

    def _may_share(self) -> bool:
        return (
            self.cfg.share_prompt_prefill
            and self.liger is None  # Liger's loss takes padded rows, one advantage each
            and not self._same_numerics()
            and self.train_model is self.model
        )

    def _same_numerics(self) -> bool:
        """An HF engine that re-scores (num_iterations > 1) does so through the plain path, and the later passes'
        ratios need the loss in the very same numerics: then the update keeps the plain layout."""
        return self.cfg.num_iterations > 1 and not self.engine.copies_weights

    def _token_logprobs(
        self,
        model: torch.nn.Module,
        batch: dict[str, torch.Tensor],
        samples: Sequence[Sample],
        *,
        packed: bool = False,
    ) -> torch.Tensor:
        """(B, T) log-probs for the loss. On an unsharded role whose model allows it: packed, each distinct prompt once
        (`packed`), else each distinct prompt run once through the KV cache when samples share one
        (`shared_prefix`), else in LM-head chunks (`chunked_logprobs`, on every backend whose ranks hold the whole
        head: one process, DDP, FSDP2, ZeRO-1/2); otherwise through the whole logits."""
        chunk = self.logprob_chunk_tokens
        unsharded = self.train_model is self.model
        shared = len({tuple(s.prompt_ids) for s in samples}) < len(samples)
        if self.padding_free:
            layout = "padding_free"
        elif (packed and len(samples) > 1) or (shared and self._shares_cache(model)):
            layout = "packed" if packed else "shared_prefix"
        elif (
            chunk is not None and self.sharding.head_outside_forward and supports_chunking(inner_model(model))
        ):
            layout = "chunked"
        else:
            layout = "full"
        # unsharded, the input embedding's backward adds its rows into the gradient in place (update/embedding_grad.py)
        with rows_into_grad(model) if unsharded else contextlib.nullcontext():
            return logprobs(
                model,
                batch["input_ids"],
                batch["attention_mask"],
                batch["completion_mask"],
                temperature=self.cfg.temperature,
                layout=layout,
                chunk_tokens=chunk,
                prompts=[s.prompt_ids for s in samples],
                completions=[s.completion.token_ids for s in samples],
                pad_id=self.tokenizer.pad_token_id,
                flat=batch.get("flat"),
                head_outside_forward=self.sharding.head_outside_forward,
            )

    def full_state(self, *, all_ranks: bool = False) -> dict | None:
        """Full weights and optimizer state gathered from the shards (every rank calls it, under FSDP2 a
        collective); rank 0 gets them (every rank with `all_ranks`). None: the live module is already full."""
        return self.sharding.full_state(self.model, self.optimizer, all_ranks=all_ranks)

    def weights(self) -> dict[str, torch.Tensor]:
        """The full state dict on every rank (a collective under FSDP2)."""
        state = self.full_state(all_ranks=True)
        return state["model"] if state is not None else self.model.state_dict()

    def save(self, dirpath: str | Path, state: dict | None = None) -> None:
        """Weights + tokenizer (Hugging Face format, under `model/`; a trainable role's in float32, its master
        weights), optimizer, scheduler and loss-scaler states. `state`: what `full_state()` gathered on this rank
        (sharded roles); None saves the live module."""
        dirpath = Path(dirpath)
        if state is None:
            self.model.save_pretrained(dirpath / "model")
        else:
            self.model.save_pretrained(dirpath / "model", state_dict=state["model"])
        self.tokenizer.save_pretrained(dirpath / "model")
        if self.optimizer is not None:
            torch.save(
                {
                    "optimizer": state["optimizer"] if state is not None else self.optimizer.state_dict(),
                    "scheduler": self.scheduler.state_dict(),
                    "scaler": self.scaler.state_dict(),
                    "updates": self.updates,
                },
                dirpath / "trainer_state.pt",
            )

    def load_state(self, dirpath: str | Path) -> None:
        """Restore what `save` wrote: weights (in place), optimizer, scheduler, update counter. Every rank calls
        it (sharded roles keep their slice of the full weights and optimizer states)."""
        dirpath = Path(dirpath)
        # float32 master weights load without rounding (a DeepSpeed bf16 module holds bfloat16, its masters float32)
        dtype = precision.weights_dtype(self.cfg.dtype, self.cfg.trainable)
        adapters.load_weights(
            self.model, dirpath / "model", dtype, load=lambda sd: self.sharding.load_weights(self.model, sd)
        )
        state_path = dirpath / "trainer_state.pt"
        if self.optimizer is not None and state_path.exists():
            device = next(self.model.parameters()).device
            state = load_torch_state(state_path, map_location=device)
            try:
                self.sharding.load_optimizer(self.model, self.optimizer, state["optimizer"])
            except (RuntimeError, ValueError) as err:
                raise UserError(
                    f"{state_path}: the optimizer state does not fit {self.name}'s model ({shape_problem(err)})"
                ) from None
            self.scheduler.load_state_dict(state["scheduler"])
            if state.get("scaler"):
                self.scaler.load_state_dict(state["scaler"])
            self.updates = int(state["updates"])
        self.sharding.sync_engine(self.model, self.engine)


def read_once(values: dict[str, torch.Tensor | float]) -> dict[str, float]:
    """The update's statistics, kept as device tensors through its micro-batches, read back to the host in one
    copy."""
    keys = list(values)
    tensors = [v for v in values.values() if isinstance(v, torch.Tensor)]
    device = tensors[0].device if tensors else torch.device("cpu")
    stacked = torch.stack([torch.as_tensor(values[k], dtype=torch.float64, device=device) for k in keys])
    with torch.profiler.record_function(READ_BACK):  # the GPU check counts this region as one host sync
        return dict(zip(keys, stacked.cpu().tolist()))


def collate(samples: Sequence[Sample], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded (B, T) tensors: prompt + completion ids, attention mask, completion mask and the generating
    policy's log-probs placed at the completion tokens' positions (0 elsewhere). Built from flat lists and masks
    over the columns, not per-row slice assignments (four tensor operations a sample)."""
    width = max(len(s.prompt_ids) + len(s.completion.token_ids) for s in samples)
    ids, logps, starts, ends = [], [], [], []
    for s in samples:
        p, c = len(s.prompt_ids), len(s.completion.token_ids)
        if len(s.completion.logprobs) < c:
            raise ValueError(
                f"a completion of {c} tokens carries {len(s.completion.logprobs)} log-probs; the update needs one "
                "a token"
            )
        ids += [*s.prompt_ids, *s.completion.token_ids, *[pad_id] * (width - p - c)]
        logps += [*[0.0] * p, *s.completion.logprobs[:c], *[0.0] * (width - p - c)]
        starts.append(p)
        ends.append(p + c)
    shape = (len(samples), width)
    column = torch.arange(width)
    start, end = torch.tensor(starts)[:, None], torch.tensor(ends)[:, None]
    return {
        "input_ids": flat_tensor(ids, "q", torch.long, shape),
        "attention_mask": (column < end).long(),
        "completion_mask": ((column >= start) & (column < end)).float(),
        "old_logps": flat_tensor(logps, "f", torch.float32, shape),
    }
