"""The update's token log-probs through one entry point, `logprobs(...)`, and the rule for the temperature they are
scored at.

What: `logprobs(model, input_ids, attention_mask, completion_mask, temperature=..., layout=...)` returns the (B, T)
log p(token t | tokens before it) under softmax(logits / temperature), 0 outside `completion_mask`, laid out as
`layout` says: "full" (the whole logits at once, `full_logprobs`), "chunked" (the LM head a chunk of tokens at a
time, `update.chunked_logprobs`), "shared_prefix" (each distinct prompt once through the KV cache,
`update.shared_prefix`), "packed" (a micro-batch as rows of prompt groups without padding, `update.packed`), whose
two take the samples' `prompts` and `completions` token ids, or "padding_free" (the samples in one row, no mask,
`update.padding_free`), which takes their `flat` row built at collate time (or builds it from the two). Every layout computes the same values to float
rounding (tests in tests/update/).

`scored_temperature(t)`: temperature 0 (greedy sampling) is scored at temperature 1, as every rollout engine
reports its sampled tokens' log-probs; the one statement of that rule.

Run: `logprobs(model, ids, mask, completion_mask, temperature=1.0)`; the Role picks the layout for its update.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

from pasodoble.core.grpo import entropy_from_logits
from pasodoble.update.chunked_logprobs import CHUNK_TOKENS, chunked_token_logprobs
from pasodoble.update.packed import packed_logprobs
from pasodoble.update.padding_free import flatten, padding_free_logprobs, to_device
from pasodoble.update.shared_prefix import shared_prompt_logprobs

LAYOUTS = ("full", "chunked", "shared_prefix", "packed", "padding_free")


def scored_temperature(temperature: float) -> float:
    """The temperature log-probs are scored at: `temperature`, and 1 for greedy sampling (0)."""
    return temperature if temperature > 0 else 1.0


def logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,  # (B, T)
    attention_mask: torch.Tensor,  # (B, T)
    completion_mask: torch.Tensor,  # (B, T)
    *,
    temperature: float = 1.0,
    layout: Literal["full", "chunked", "shared_prefix", "packed", "padding_free"] = "full",
    chunk_tokens: int | None = None,
    prompts: Sequence[Sequence[int]] | None = None,
    completions: Sequence[Sequence[int]] | None = None,
    pad_id: int | None = None,
    flat: dict | None = None,
    head_outside_forward: bool = True,
    return_entropy: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """(B, T) log-probs of `input_ids` (see module); `chunk_tokens`: LM-head tokens a chunk (None: the batch's).
    `head_outside_forward` ("padding_free"): False keeps the LM head inside the forward (ZeRO-3,
    `Sharding.head_outside_forward`). With `return_entropy` ("full" and "chunked"), also the (B, T) entropies of
    those next-token distributions."""
    temperature = scored_temperature(temperature)
    if layout == "padding_free":
        if (flat is None and (prompts is None or completions is None)) or return_entropy:
            raise ValueError(
                "layout 'padding_free' takes flat (or prompts and completions), and returns no entropy"
            )
        if flat is None:
            flat = to_device(flatten(prompts, completions, input_ids.shape[1]), input_ids.device)
        return padding_free_logprobs(
            model, flat, *input_ids.shape, temperature=temperature,
            chunk_tokens=chunk_tokens or max(flat["target"].shape[0], 1),
            head_outside_forward=head_outside_forward,
        )  # fmt: skip
    if layout in ("shared_prefix", "packed"):
        if prompts is None or completions is None or return_entropy:
            raise ValueError(f"layout {layout!r} takes prompts and completions, and returns no entropy")
        run = packed_logprobs if layout == "packed" else shared_prompt_logprobs
        return run(
            model, prompts, completions, input_ids.shape[1], pad_id=pad_id, temperature=temperature,
            chunk_tokens=chunk_tokens or input_ids.numel(),
        )  # fmt: skip
    args = (model, input_ids, attention_mask, completion_mask)
    if layout == "chunked":
        return chunked_token_logprobs(
            *args,
            temperature=temperature,
            chunk_tokens=chunk_tokens or CHUNK_TOKENS,
            return_entropy=return_entropy,
        )
    if layout != "full":
        raise ValueError(f"unknown layout {layout!r}; use one of {', '.join(LAYOUTS)}")
    return full_logprobs(*args, temperature=temperature, return_entropy=return_entropy)


def full_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    return_entropy: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """(B, T) log p(input_ids[:, t] | input_ids[:, :t]) under softmax(logits / temperature), 0 outside the mask.

    Position t holds the log-prob of token t, so the result lines up with `input_ids` and `completion_mask`
    (position 0, which has no context, is always 0). The whole (B, T, V) logits at once. With `return_entropy`, also returns the (B, T) entropy of each of those
    next-token distributions, masked the same way.
    """
    temperature = scored_temperature(temperature)
    # Positions follow the mask, so a left-padded batch (the rollout engine's) scores like an unpadded one.
    position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits[
        :, :-1
    ]
    logits = logits.float() / temperature
    targets = input_ids[:, 1:].unsqueeze(-1)  # (B, T-1, 1)
    # gather - logsumexp avoids materialising a second (B, T, V) tensor of log-probs.
    logps = logits.gather(-1, targets).squeeze(-1) - torch.logsumexp(logits, dim=-1)  # (B, T-1)
    mask = completion_mask[:, 1:].to(logps.dtype)
    pad = logps.new_zeros(logps.shape[0], 1)
    out = torch.cat([pad, logps * mask], dim=1)  # (B, T)
    if not return_entropy:
        return out
    with torch.no_grad():
        entropy = torch.cat([pad, entropy_from_logits(logits) * mask], dim=1)
    return out, entropy
