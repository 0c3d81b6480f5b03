"""Token log-probs from the last hidden states in chunks, so the (B, T, V) logits never exist at once.

What: `chunked_token_logprobs` returns what `update.logprobs.full_logprobs` returns (same shapes, same values to float
tolerance, same gradients) but runs the model with its LM head switched off, gathers the hidden states of the
completion tokens only (the loss never reads a prompt position), and applies the head to `chunk_tokens` of them at a
time. Each chunk runs under activation checkpointing, so the backward pass recomputes one chunk's logits instead of
keeping all of them: peak memory holds one (chunk_tokens, V) block where the plain path holds (B, T, V) logits in
float32 plus their gradient. `supports_chunking(model)` says whether a model's logits are a plain linear head of
its last hidden state (models that soft-cap or scale their logits use the plain path).

Why: with a 49k-151k vocabulary the logits are the largest tensors of a GRPO update (issue: performance), and the
prompt positions' share of them is pure waste.

Run: `chunked_token_logprobs(model, ids, attention, completion_mask, temperature=0.6)`; tests in
`tests/update/test_chunked_logprobs.py`; figures in docs/PERFORMANCE.md.
"""

from __future__ import annotations

import contextlib
import functools

import torch
from torch.utils.checkpoint import checkpoint

from pasodoble.core.grpo import entropy_from_logits
from pasodoble.update.fused_head import can_fuse, head_logprobs, products_of

CHUNK_TOKENS = 2048  # completion tokens per head application: 2048 x 49k float32 logits is 400 MB


def inner_model(model: torch.nn.Module) -> torch.nn.Module:
    """The model a data-parallel wrapper holds (DDP's and DeepSpeed's `module`); the model itself otherwise."""
    return getattr(model, "module", model)


def supports_chunking(model: torch.nn.Module) -> bool:
    """True when the model's logits are `lm_head(last hidden state)` with nothing applied after the head."""
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    config = getattr(model, "config", None)
    if not isinstance(head, torch.nn.Linear) or config is None:
        return False
    scaled = any(
        getattr(config, name, None) not in (None, 1, 1.0)
        for name in ("final_logit_softcapping", "logit_scale", "logits_scaling")
    )
    return not scaled


@contextlib.contextmanager
def head_skipped(head: torch.nn.Module):
    """The model's forward returns its last hidden state in place of logits for the duration."""
    head.forward = lambda hidden: hidden  # an instance attribute shadows the class's forward
    try:
        yield
    finally:
        del head.forward


def _chunk_logps(head: torch.nn.Module, temperature: float, hidden: torch.Tensor, targets: torch.Tensor):
    if can_fuse(head, hidden):
        # one (N, V) buffer, not six
        return head_logprobs(hidden, head.weight, targets, temperature, products_of(head))
    logits = (
        head(hidden).float() / temperature
    )  # (N, V): the only vocabulary-sized tensor, one chunk at a time
    return logits.gather(-1, targets[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)  # (N,)


def chunked_token_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk_tokens: int = CHUNK_TOKENS,
    return_entropy: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """(B, T) log-probs as `update.logprobs.full_logprobs` (position t scores token t; 0 outside `completion_mask`);
    `temperature` as scored (`update.logprobs.scored_temperature`)."""
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    head = inner_model(model).get_output_embeddings()
    with head_skipped(head):  # through the wrapper's own forward (DDP, DeepSpeed): its gradient hooks stay
        hidden = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    rows, cols = (completion_mask[:, 1:] > 0).nonzero(as_tuple=True)  # completion tokens, scored from t - 1
    states = hidden[:, :-1][rows, cols]  # (N, H)
    targets = input_ids[:, 1:][rows, cols]  # (N,)
    flat = score_states(head, states, targets, temperature=temperature, chunk_tokens=chunk_tokens)
    if not states.shape[0]:
        flat = flat + hidden.sum() * 0.0  # no tokens: keep the graph connected
    batch, width = input_ids.shape
    logps = hidden.new_zeros(batch, width - 1, dtype=torch.float32)
    logps = logps.index_put((rows, cols), flat)  # (B, T-1)
    pad = logps.new_zeros(batch, 1)
    out = torch.cat([pad, logps], dim=1)  # (B, T)
    if not return_entropy:
        return out
    with torch.no_grad():
        entropy = logps.new_zeros(batch, width - 1)
        for lo in range(0, states.shape[0], chunk_tokens):
            logits = head(states[lo : lo + chunk_tokens]).float() / temperature
            entropy[rows[lo : lo + chunk_tokens], cols[lo : lo + chunk_tokens]] = entropy_from_logits(logits)
    return out, torch.cat([pad, entropy], dim=1)


def score_states(
    head: torch.nn.Module,
    states: torch.Tensor,
    targets: torch.Tensor,
    *,
    temperature: float,
    chunk_tokens: int = CHUNK_TOKENS,
) -> torch.Tensor:
    """(N,) log p(targets[i] | states[i]) at `temperature`: the head applied `chunk_tokens` states at a time, each
    chunk checkpointed when gradients flow and there is more than one (its logits are recomputed in the backward
    pass, never kept). A single chunk is not checkpointed: the backward would rebuild the same logits at the same
    peak, and the recompute costs an extra pass of the head."""
    score = functools.partial(_chunk_logps, head, temperature)
    grad = torch.is_grad_enabled() and states.requires_grad and states.shape[0] > chunk_tokens
    pieces = [
        checkpoint(
            score, states[lo : lo + chunk_tokens], targets[lo : lo + chunk_tokens], use_reentrant=False
        )
        if grad
        else score(states[lo : lo + chunk_tokens], targets[lo : lo + chunk_tokens])
        for lo in range(0, states.shape[0], chunk_tokens)
    ]
    return torch.cat(pieces) if pieces else states.new_zeros(0, dtype=torch.float32)
