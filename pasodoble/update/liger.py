"""Liger's fused linear GRPO loss (`liger-kernel`, an optional extra): the LM head, log-softmax and clipped GRPO
objective in one chunked Triton pass, so the update never holds a micro-batch's full logits.

What: `liger_unavailable(device)` (why it cannot run here, or None), `require_liger(device)` (that reason as one
`ConfigError` line naming the switch and the fix) and `grpo_loss(...)`, the loss module built from the role's
GRPO settings as TRL's `GRPOTrainer` builds it (`use_liger_kernel`), called on the last hidden states with the LM
head's weight (TRL's `compute_liger_loss`).

Why: it is the well-kept library for the fused head on CUDA; `bench/gpu_sections.py` runs it as the `liger` arm
of the update section beside the project's update and the plain padded loop, so the gain is measured, not assumed.

Where it departs: Liger's kernels are Triton, CUDA only; on a CPU, or without the extra, the arm writes
`{"skipped": reason}`. Its `dr_grpo` normalises each call by its own rows x `max_completion_length`, so a caller
splitting a batch into micro-batches scales each loss by its share of the rows.
"""

from __future__ import annotations

import importlib.util

from pasodoble.errors import ConfigError

INSTALL = "pip install 'pasodoble[liger]' (liger-kernel; Triton, CUDA only)"


def liger_unavailable(device: str) -> str | None:
    """Why Liger's loss cannot run on `device` here (not installed, or not a CUDA device), or None."""
    if importlib.util.find_spec("liger_kernel") is None:
        return f"liger-kernel is not installed; {INSTALL}"
    if not str(device).startswith("cuda"):
        return f"Liger's fused GRPO loss is Triton, CUDA only; the device is {device}"
    import torch

    if not torch.cuda.is_available():
        return "Liger's fused GRPO loss is Triton, CUDA only; no CUDA device is visible"
    return None


def require_liger(device: str, where: str = "liger") -> None:
    """One `ConfigError` line when Liger's loss was asked for (`where`) but cannot run on `device`."""
    reason = liger_unavailable(device)
    if reason is not None:
        raise ConfigError(where, f"{reason}; drop the switch to use the project's own loss")


def grpo_loss(
    *,
    beta: float,
    epsilon: float,
    epsilon_high: float | None,
    loss_type: str,
    max_completion_length: int,
    temperature: float = 1.0,
):
    """`LigerFusedLinearGRPOLoss` with the role's settings (TRL's names and its construction). Called as
    `loss(_input=hidden, lin_weight=head.weight, selected_token_ids=ids, attention_mask=mask, advantages=adv,
    old_per_token_logps=..., ref_per_token_logps=...)` -> (loss, metrics)."""
    from liger_kernel.chunked_loss import LigerFusedLinearGRPOLoss

    return LigerFusedLinearGRPOLoss(
        beta=beta,
        epsilon_low=epsilon,
        epsilon_high=epsilon if epsilon_high is None else epsilon_high,
        temperature=temperature,
        use_ref_model=beta != 0.0,
        loss_type=loss_type,
        max_completion_length=max_completion_length,
    )
