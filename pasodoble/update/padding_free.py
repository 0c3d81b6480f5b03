"""Token log-probs of a micro-batch laid out padding-free: every sample's prompt and completion one after another in
one row, `position_ids` restarting at 0 for each sample, and no attention mask.

What: `flatten(prompts, completions, width)` builds, on the CPU and at collate time, the row (`input_ids`,
`position_ids`), the sequence boundaries FlashAttention's varlen kernel takes (`cu_seq_lens`, `max_length`) and
the indices that score each completion token and place it in the plain (B, width) layout of `roles.role.collate`.
`padding_free_logprobs(model, flat, batch_size, width, ...)` returns the (B, width) log-probs that
`update.logprobs.full_logprobs` returns for the same samples, with the same values to float tolerance and the same
gradients (tests/update/test_padding_free.py). A sample feeds its prompt and its completion without the last token
(nothing scores that token's state); completion token k is scored from the state just before it, through the LM
head in checkpointed chunks (`chunked_logprobs.score_states`), and every index is a tensor built beforehand, so the
forward reads nothing back to the host and indexes by no mask.

The masking is transformers' own packed-sequence support: with `position_ids` that restart and no attention mask,
`masking_utils` finds the sequences from the positions (a position that does not follow its predecessor starts a
new one) and attends within each, through the attention implementation's mask interface (SDPA's boolean mask,
FlexAttention's block mask, which skips the blocks it hides); FlashAttention runs its varlen kernel on the
boundaries given here. That detection reads one flag back per forward (`find_packed_sequence_indices`). An
implementation outside `PACKED_AWARE` (the project's grouped SDPA on a CPU) would attend across samples: `usable`
says no, and `attention_for(device)` names the implementation the update sets (`attention_set`, for the update
only): FlashAttention 2 on CUDA when installed, else FlexAttention, and SDPA on a CPU.

Why: on a GPU a packed row with a dense boolean mask makes SDPA compute every (query, key) pair of the row, and the
two-pass KV-cache layout runs two forwards a micro-batch; without padding or a mask a micro-batch is one forward of
exactly its tokens, so the planner can fill it to the memory budget (`micro_batches.plan_padding_free`).

Run: `padding_free_logprobs(model, flatten(prompts, completions, width), len(prompts), width)`.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Sequence

import torch

from pasodoble.update.chunked_logprobs import CHUNK_TOKENS, head_skipped, inner_model, score_states
from pasodoble.update.packed import flat_tensor
from pasodoble.update.shared_prefix import can_share_prompts

# Attention implementations whose masks transformers builds from packed `position_ids` (or, FlashAttention, whose
# varlen kernel takes the sequence boundaries).
PACKED_AWARE = frozenset({"flash_attention_2", "flash_attention_3", "flex_attention", "sdpa", "eager"})
FLASH = ("flash_attention_2", "flash_attention_3")


def attention_for(device: torch.device) -> str:
    """The attention implementation of the padding-free update on `device`: FlashAttention 2 on CUDA when
    `flash_attn` is installed, else FlexAttention; SDPA elsewhere."""
    if device.type == "cuda":
        return "flash_attention_2" if importlib.util.find_spec("flash_attn") else "flex_attention"
    return "sdpa"


@contextlib.contextmanager
def attention_set(models: Sequence[torch.nn.Module], name: str):
    """`models` attend through implementation `name` for the duration (the update's; generation keeps its own)."""
    kept = [m.config._attn_implementation for m in models]
    for m in models:
        m.set_attn_implementation(name)
    try:
        yield
    finally:
        for m, k in zip(models, kept):
            m.set_attn_implementation(k)


def usable(model: torch.nn.Module) -> bool:
    """True when the model's head is a plain linear layer, every layer attends to its full causal past and its
    attention implementation masks packed sequences (`PACKED_AWARE`)."""
    config = getattr(inner_model(model), "config", None)
    return (
        can_share_prompts(inner_model(model))
        and getattr(config, "_attn_implementation", None) in PACKED_AWARE
    )


def flatten(
    prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], width: int
) -> dict[str, torch.Tensor | int]:
    """The padding-free row of samples (`prompts[b]`, `completions[b]`) and its indices, as CPU tensors (see
    module); `width`: the plain layout's row length; every prompt must be non-empty."""
    if len(prompts) != len(completions) or any(len(p) == 0 for p in prompts):
        raise ValueError("flatten needs one completion and a non-empty prompt per sample")
    ids: list[int] = []
    positions: list[int] = []
    bounds, source, target, place = [0], [], [], []
    for b, (prompt, completion) in enumerate(zip(prompts, completions)):
        start, fed = len(ids), [*prompt, *completion[:-1]]
        ids += fed
        positions += range(len(fed))
        bounds.append(len(ids))
        source += range(start + len(prompt) - 1, start + len(prompt) - 1 + len(completion))
        target += completion
        place += range(b * width + len(prompt), b * width + len(prompt) + len(completion))
    lengths = [hi - lo for lo, hi in zip(bounds, bounds[1:])]
    return {
        "input_ids": flat_tensor(ids, "q", torch.long, (1, len(ids))),
        "position_ids": flat_tensor(positions, "q", torch.long, (1, len(ids))),
        "cu_seq_lens": torch.tensor(bounds, dtype=torch.int32),
        "max_length": max(lengths),
        "source": flat_tensor(source, "q", torch.long, (-1,)),
        "target": flat_tensor(target, "q", torch.long, (-1,)),
        "place": flat_tensor(place, "q", torch.long, (-1,)),
    }


def to_device(batch, device: torch.device):
    """`batch`'s tensors (and those of its nested dicts) on `device`; to CUDA from pinned memory without blocking,
    so that the host queues a micro-batch's kernels while its copies run."""
    if isinstance(batch, torch.Tensor):
        if device.type != "cuda":
            return batch.to(device)
        return batch.pin_memory().to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    return batch  # a size, kept on the host


def padding_free_logprobs(
    model: torch.nn.Module,
    flat: dict[str, torch.Tensor | int],
    batch_size: int,
    width: int,
    *,
    temperature: float = 1.0,
    chunk_tokens: int = CHUNK_TOKENS,
    head_outside_forward: bool = True,
) -> torch.Tensor:
    """(batch_size, width) log-probs of the samples `flat` holds (`flatten`, its tensors on the model's device), at
    the plain layout's positions; `temperature` as scored (`update.logprobs`). `model` may be a data-parallel
    wrapper (DDP, a DeepSpeed engine): the forward runs through it, so its gradient hooks stay, and the head is its
    inner model's. `head_outside_forward=False` (`Sharding.head_outside_forward`: ZeRO-3, whose head weight is a
    partition outside the forward) keeps the head in the forward and scores the row's whole (N, V) logits."""
    config = inner_model(model).config
    if config._attn_implementation not in PACKED_AWARE:  # it would attend across the samples of the row
        raise ValueError(
            f"attention {config._attn_implementation!r} does not mask packed sequences; the padding-free layout "
            f"needs one of {', '.join(sorted(PACKED_AWARE))} (padding_free.attention_for)"
        )
    varlen = {}
    if (
        config._attn_implementation in FLASH
    ):  # the boundaries from collate time: no read-back to size the kernel
        cu = flat["cu_seq_lens"]
        varlen = dict(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=flat["max_length"])
        varlen["max_length_k"] = flat["max_length"]
    head = inner_model(model).get_output_embeddings()
    inputs = dict(input_ids=flat["input_ids"], position_ids=flat["position_ids"], use_cache=False, **varlen)
    if not head_outside_forward:  # (N, V) logits from the forward; the "head" left to apply is the identity
        hidden, head = model(**inputs).logits[0], torch.nn.Identity()
    else:
        with head_skipped(head):
            hidden = model(**inputs).logits[0]  # (N, H): the head is skipped
    targets = flat["target"]
    scored = score_states(
        head,
        hidden.index_select(0, flat["source"]),
        targets,
        temperature=temperature,
        chunk_tokens=chunk_tokens,
    )
    if not targets.numel():
        scored = scored + hidden.sum() * 0.0  # no tokens: keep the graph connected
    out = hidden.new_zeros(batch_size * width, dtype=torch.float32)
    return out.index_put((flat["place"],), scored).view(batch_size, width)
