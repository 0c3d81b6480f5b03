"""Liger's fused linear GRPO loss (`liger-kernel`, an optional extra) as a role's loss: `<role>.loss_kernel: liger`.

What: `grpo_loss(...)` builds `LigerFusedLinearGRPOLoss` from a role's GRPO settings as TRL's `GRPOTrainer` builds
it (`use_liger_kernel`); `fused_policy_loss(loss_fn, model, batch, ...)` runs the model with its LM head switched off
and hands the last hidden states and the head's weight to it, as TRL's `compute_liger_loss` does, returning the
micro-batch's loss and the statistics Liger returns (`clip_fraction`; `kl` when beta > 0). The head, log-softmax and
clipped objective run chunk by chunk, and each chunk's gradients are taken in the forward pass, so the update never
holds a micro-batch's logits nor the trainer's per-token log-probs. `liger_unavailable()` says why it cannot run
here (not importable), `require_liger(where)` and `refuse_ranks(where, world_size)` turn a refusal into one
`ConfigError` line naming the switch and the fix.

Why: it is the well-kept library for the fused head; a role trains with it by one key, and
`tests/update/test_liger.py` checks that updates with it give the project's loss (`core.grpo.policy_loss`), its
statistics, gradients and updated parameters. `bench/gpu_sections.py` runs it as the `liger` arm of the update section.

Where it departs, and what it needs:
- Liger's chunked losses (`liger_kernel.chunked_loss`) are plain torch, and run on a CPU without Triton (the
  project's CPU tests install `liger-kernel` without its dependencies, see the Makefile); its Triton kernels are
  other modules, which the loss does not import. The loss math is `torch.compile`d on CUDA (Liger's and TRL's
  default) and eager on a CPU, where a compile's gain is unmeasured. Its GPU speed against the project's update has
  not been measured.
- Liger normalises each call as the project's `policy_loss` normalises a micro-batch (`grpo`: the mean of the
  sequence means; `dr_grpo`: rows x `max_completion_length`; `dapo`: the call's completion tokens), so a caller
  splitting a batch into micro-batches weights each loss by its share of the rows (of the tokens for `dapo`), as
  the Role weights its own loss.
- It runs on the padded layout only (rows of one advantage each; no packed or padding-free rows) and on one
  process: under several ranks its `dapo` normaliser all-reduces each micro-batch's tokens and the sharded
  backends hold the head's weight in pieces (`refuse_ranks`).
- It returns no per-token log-probs: the engine/trainer gap (`logprob_diff`) and `ratio_mean` are not logged, and
  the truncated importance-sampling correction (`tis_cap`), which weights by the trainer's log-probs, is refused.
"""

from __future__ import annotations

import importlib.util

from pasodoble.errors import ConfigError

# `<role>.loss_kernel`: the project's `core.grpo.policy_loss`, or Liger's
LOSS_KERNELS = ("pasodoble", "liger")
INSTALL = "pip install 'pasodoble[liger]' (liger-kernel)"


def liger_unavailable() -> str | None:
    """Why Liger's loss cannot run here (liger-kernel is not importable), or None."""
    if importlib.util.find_spec("liger_kernel") is None:
        return f"liger-kernel is not installed; {INSTALL}"
    return None


def require_liger(where: str = "loss_kernel") -> None:
    """One `ConfigError` line when Liger's loss was asked for (`where`) but cannot run here."""
    reason = liger_unavailable()
    if reason is not None:
        raise ConfigError(where, f"{reason}, or set it to pasodoble for the project's own loss")


def refuse_ranks(where: str, world_size: int) -> None:
    """One `ConfigError` line when Liger's loss (`where`) is asked of a run over several ranks."""
    if world_size > 1:
        raise ConfigError(
            where,
            f"liger runs on one process, this launch has {world_size} ranks (Liger's dapo normaliser all-reduces "
            "each micro-batch, and sharded backends split the LM head); set it to pasodoble",
        )


def grpo_loss(
    *,
    beta: float,
    epsilon: float,
    epsilon_high: float | None,
    loss_type: str,
    max_completion_length: int,
    temperature: float = 1.0,
    compiled: bool = False,
):
    """`LigerFusedLinearGRPOLoss` with the role's settings (TRL's names and its construction); `temperature` as
    scored (`update.logprobs.scored_temperature`). Called by `fused_policy_loss`."""
    from liger_kernel.chunked_loss import LigerFusedLinearGRPOLoss

    return LigerFusedLinearGRPOLoss(
        beta=beta,
        compiled=compiled,
        epsilon_low=epsilon,
        epsilon_high=epsilon if epsilon_high is None else epsilon_high,
        temperature=temperature,
        use_ref_model=beta != 0.0,
        loss_type=loss_type,
        max_completion_length=max_completion_length,
    )


def fused_policy_loss(loss_fn, model, batch: dict, *, old_logps=None, ref_logps=None):
    """(loss, {"clip_fraction", "kl" when beta > 0}) of one padded micro-batch (`roles.role.collate`'s tensors and
    its (B,) `advantages`): the model's last hidden states and LM head through `loss_fn` (`grpo_loss`). Log-prob
    tensors are (B, T) with position t scoring token t, as the project's; `old_logps` None takes the ratio against
    the pass's own detached log-probs (exactly 1), `ref_logps` are the frozen reference's when beta > 0."""
    from pasodoble.update.chunked_logprobs import head_skipped, inner_model

    ids, attention = batch["input_ids"], batch["attention_mask"]
    position_ids = (attention.long().cumsum(-1) - 1).clamp(min=0)  # as `update.logprobs.full_logprobs`
    head = inner_model(model).get_output_embeddings()
    with head_skipped(head):  # the forward returns the last hidden states (B, T, H) in place of logits
        hidden = model(input_ids=ids, attention_mask=attention, position_ids=position_ids).logits
    shifted = {  # position t - 1 scores token t
        k: None if v is None else v[:, 1:] for k, v in (("old", old_logps), ("ref", ref_logps))
    }
    loss, metrics = loss_fn(
        _input=hidden[:, :-1],
        lin_weight=head.weight,
        selected_token_ids=ids[:, 1:],
        attention_mask=batch["completion_mask"][:, 1:],
        advantages=batch["advantages"],
        bias=head.bias,
        old_per_token_logps=shifted["old"],
        ref_per_token_logps=shifted["ref"],
    )
    stats = {"clip_fraction": metrics[-1]}  # Liger's metrics: (kl when beta != 0, clip fraction)
    if loss_fn.beta != 0.0:
        stats["kl"] = metrics[0]
    return loss, stats
