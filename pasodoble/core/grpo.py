"""GRPO on tensors: group advantages and the clipped policy-gradient loss (the log-probs it takes: `update.logprobs`).

What: `group_advantages` (docs/METHOD.md step 8) and `policy_loss` (step 11: token-level clipped surrogate with `dr_grpo`, `grpo` or `dapo` normalisation and an optional
k3 KL term to a frozen reference). Shapes: B sequences, T positions; `# (B, T)` comments say which.

Why: both roles train with the same loss; keeping it a pure tensor function lets tests pin every variant on
hand-computed numbers.

How to run: `python -m pytest tests/core/test_grpo.py`.

Reference semantics and departures:
- Advantages use the sample (unbiased, Bessel-corrected) standard deviation, as the reference's TRL-derived
  trainers do (`tensor.std()`), with eps 1e-4 added to it. A one-element group, or one whose rewards are all
  equal, has advantage exactly 0 (torch would give NaN for the first and float noise / eps for the second).
- The importance ratio is taken against `old_logps`, the log-probs of the policy that generated the samples
  (the rollout engine's), never a recomputation under different prompt truncation.
- `dr_grpo` divides the masked token sum by B * max_completion_length, where B is the local batch, as TRL does.
- Train/inference mismatch (a vLLM engine's numerics are not the trainer's): `logprob_gap` measures it on the
  sampled tokens, and `tis_weights` gives the optional truncated importance-sampling correction (Yao et al., 2025,
  "Your efficient RL framework secretly brings you off-policy RL training"): the ratio is then taken against the
  trainer's own log-probs of the generating weights, and each token's loss is weighted by
  min(p_trainer / p_engine, cap).
"""

from __future__ import annotations

import torch

LOSS_TYPES = ("dr_grpo", "grpo", "dapo")


def group_advantages(rewards: torch.Tensor, eps: float = 1e-4, *, unbiased: bool = True) -> torch.Tensor:
    """(G,) -> (G,): (r - mean) / (std + eps) within one group; `unbiased=False` uses the population std."""
    rewards = rewards.float()
    if rewards.numel() < 2 or bool((rewards == rewards[0]).all()):
        # Identical rewards carry no signal; exact zeros (not float noise / eps) let the loop's skip rule see it.
        return torch.zeros_like(rewards)
    centred = rewards - rewards.mean()
    return centred / (rewards.std(unbiased=unbiased) + eps)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """(..., V) -> (...): entropy of softmax(logits) in nats."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def logprob_gap(
    train_logps: torch.Tensor, engine_logps: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) x 2 + mask -> (mean, max) of |train - engine| over the masked tokens, as 0-dim tensors on their device
    (nothing read back to the host); (0, 0) for an empty mask."""
    mask = mask.to(torch.float32)
    gap = (train_logps.detach().float() - engine_logps.float()).abs() * mask
    top = gap.amax() if gap.numel() else gap.new_zeros(())
    return gap.sum() / mask.sum().clamp(min=1.0), top


def tis_weights(
    train_logps: torch.Tensor, engine_logps: torch.Tensor, mask: torch.Tensor, cap: float
) -> torch.Tensor:
    """(B, T) truncated importance weights min(exp(train - engine), cap), 0 outside the mask, no gradient."""
    if cap <= 0:
        raise ValueError(f"the truncated importance-sampling cap must be > 0, got {cap}")
    ratio = torch.exp(train_logps.detach().float() - engine_logps.float())
    return torch.clamp(ratio, max=cap) * mask.to(ratio.dtype)


def _normalise(per_token: torch.Tensor, mask: torch.Tensor, loss_type: str, max_completion_length: int):
    if loss_type == "dr_grpo":
        return (per_token * mask).sum() / (per_token.shape[0] * max_completion_length)
    if loss_type == "grpo":
        return ((per_token * mask).sum(1) / mask.sum(1).clamp(min=1.0)).mean()
    if loss_type == "dapo":
        return (per_token * mask).sum() / mask.sum().clamp(min=1.0)
    raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def policy_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    epsilon_low: float = 0.2,
    epsilon_high: float | None = None,
    loss_type: str = "dr_grpo",
    max_completion_length: int,
    ref_logps: torch.Tensor | None = None,
    beta: float = 0.0,
    token_weights: torch.Tensor | None = None,
    tensor_stats: bool = False,
) -> tuple[torch.Tensor, dict[str, float]] | tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Token-level clipped surrogate -min(ratio A, clip(ratio) A) (+ beta * k3 KL), normalised per `loss_type`.

    logps, old_logps, ref_logps, mask: (B, T); advantages: (B,). `epsilon_high=None` means symmetric clipping.
    `token_weights` (B, T), e.g. `tis_weights`, scales each token's policy-gradient term (not the KL term).
    Stats: clip_fraction (share of masked tokens whose clipped branch is the active one), ratio_mean, and kl
    (mean k3 estimate) when beta > 0; as 0-dim tensors on the loss's device with `tensor_stats` (nothing read back
    to the host), else floats.
    """
    eps_high = epsilon_low if epsilon_high is None else epsilon_high
    mask = mask.to(logps.dtype)
    adv = advantages.to(logps.dtype).unsqueeze(1)  # (B, 1)
    ratio = torch.exp(logps - old_logps)  # (B, T)
    clipped = torch.clamp(ratio, 1.0 - epsilon_low, 1.0 + eps_high)
    per_token = -torch.min(ratio * adv, clipped * adv)  # (B, T)
    if token_weights is not None:
        per_token = per_token * token_weights.to(per_token.dtype)
    stats: dict[str, torch.Tensor] = {}
    if beta > 0.0:
        if ref_logps is None:
            raise ValueError("beta > 0 needs ref_logps from the frozen reference model")
        log_diff = ref_logps - logps
        kl = torch.exp(log_diff) - log_diff - 1.0  # (B, T) k3 estimator, >= 0
        per_token = per_token + beta * kl
        stats["kl"] = _masked_mean(kl.detach(), mask)
    loss = _normalise(per_token, mask, loss_type, max_completion_length)
    with torch.no_grad():
        low = (ratio < 1.0 - epsilon_low) & (adv < 0)
        high = (ratio > 1.0 + eps_high) & (adv > 0)
        stats["clip_fraction"] = _masked_mean((low | high).to(mask.dtype), mask)
        stats["ratio_mean"] = _masked_mean(ratio, mask)
    return loss, stats if tensor_stats else {k: float(v) for k, v in stats.items()}
