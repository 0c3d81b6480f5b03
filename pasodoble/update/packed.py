"""Token log-probs of a GRPO micro-batch packed by prompt: each prompt once, its samples' completions after it, and
an attention mask that lets a completion see its prompt and itself only.

What: `packed_logprobs(model, prompts, completions, width, ...)` returns the (B, width) log-probs that
`update.logprobs.full_logprobs` returns for the same samples laid out by `roles.role.collate` (prompt, then completion, right
padding; position t scores token t, 0 outside the completions), with the same values to float tolerance and the
same gradients. Each distinct prompt of the micro-batch becomes one group `[p, c1, c2, ...]` (`pack`, first-seen
order): the prompt once, then its samples' completions without their last token (no later token reads it and
nothing scores its state), each completion at the positions (`position_ids`) it has after its prompt in the plain
layout. On a model that attends per sample (`update.segment_attention`) the groups follow each other in one row with
no padding at all (`pack(..., line=True)`); otherwise each group is a row of its own, the rows right-padded to the
longest. `segment_mask` gives the (R, 1, L, L) boolean mask: a position attends to the earlier positions of its own
group's prompt and of its own completion. Completion token k is scored from
its prompt's last state (k = 0) or from its own token k - 1, through the LM head in checkpointed chunks
(`chunked_logprobs.score_states`). `can_pack(model)` says whether a model takes such a mask.

Why: the update of a GRPO batch, which holds every prompt `num_generations` times, is most of a step's time. Running
the prompts once through the KV cache (`update.shared_prefix`) saved their repeats but left two forwards per
micro-batch (the prompts' matrix products have a few dozen rows, far from the CPU's peak, and every weight then gets
two gradients that autograd adds out of place) and padded every completion to the longest of its micro-batch.
Packed rows run one forward and full-height matrix products (docs/PERFORMANCE.md). Under a mask, which does not
let attention skip the blocks it hides, one row per prompt keeps the attention at each group's length squared, at
the cost of padding every group to the longest; models on an implementation in
`update.segment_attention.SEGMENT_AWARE` (the project's grouped SDPA on a CPU) get the layout instead of the mask,
attend at each sample's own length, and so take the whole micro-batch as one row without padding (on the tiny
anchor at 200 new tokens, 18% fewer positions than a row per prompt).

Run: `packed_logprobs(model, [[1, 2, 3]] * 4, completions, width=9, pad_id=0, temperature=0.6)`; tests in
`tests/update/test_packed.py`. Models on another attention implementation (FlashAttention takes no 4D mask; eager adds
the mask to its scores) use `update.shared_prefix`.
"""

from __future__ import annotations

import array
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from pasodoble.update.chunked_logprobs import CHUNK_TOKENS, head_skipped, score_states
from pasodoble.update.segment_attention import SegmentLayout, attends_per_sample
from pasodoble.update.shared_prefix import can_share_prompts, distinct_prompts

# Attention implementations that apply a boolean 4D mask as "True: attend" (the project's grouped SDPA included).
MASKED_IMPLEMENTATIONS = frozenset({"sdpa", "pasodoble_grouped_sdpa"})


def can_pack(model: torch.nn.Module) -> bool:
    """True when the model's head is a plain linear layer, every layer attends to the full causal past (no sliding
    window) and its attention implementation takes a boolean 4D mask."""
    config = getattr(model, "config", None)
    return (
        can_share_prompts(model) and getattr(config, "_attn_implementation", None) in MASKED_IMPLEMENTATIONS
    )


@dataclass(frozen=True)
class Packed:
    """A micro-batch with each distinct prompt once (a row per prompt, or all in one row), and where each completion
    token is scored from."""

    # (R, L_r) groups: a prompt, then its samples' completions without their last token
    input_ids: list[list[int]]
    position_ids: list[list[int]]  # each token's position in its own prompt + completion
    segment: list[list[int]]  # 0 on the prompt, 1 + the sample's index on its completion
    source: list[tuple[int, int]]  # (N,) the (row, column) whose state scores each completion token
    target: list[int]  # (N,) that token
    sample: list[int]  # (N,) its sample
    column: list[int]  # (N,) its column in the plain (B, width) layout


def flat_tensor(values: list, typecode: str, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    """`values` as a CPU tensor of `shape`, through one C array (`array` typecode "q": int64, "f": float32):
    `torch.tensor` of a long list reads it element by element, about three times slower."""
    if not values:  # frombuffer takes no empty buffer
        return torch.zeros(0, dtype=dtype).view(shape)
    return torch.frombuffer(array.array(typecode, values), dtype=dtype).view(shape)


def pack(
    prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], *, line: bool = False
) -> Packed:
    """The packed rows of samples (`prompts[b]`, `completions[b]`), a row per prompt's group or (`line`) every group
    in one row; every prompt must be non-empty."""
    if len(prompts) != len(completions):
        raise ValueError(f"pack needs one completion per prompt, got {len(prompts)} and {len(completions)}")
    if any(len(p) == 0 for p in prompts):
        raise ValueError("pack needs a non-empty prompt for every sample")
    unique, index = distinct_prompts(prompts)
    members: list[list[int]] = [[] for _ in unique]  # each prompt's samples, in order
    for b, g in enumerate(index):
        members[g].append(b)
    rows, positions, segments, source, target, sample, column = [], [], [], [], [], [], []
    for g, prompt in enumerate(unique):
        if not line or not rows:
            rows.append([])
            positions.append([])
            segments.append([])
        r, ids = len(rows) - 1, rows[-1]
        at = len(ids)  # the group's first column in its row
        ids += prompt
        positions[r] += range(len(prompt))
        segments[r] += [0] * len(prompt)
        for b in members[g]:
            tokens = list(completions[b])
            if not tokens:
                continue
            start, fed = len(ids), len(tokens) - 1  # the last token is scored, never fed
            ids += tokens[:-1]
            positions[r] += range(len(prompt), len(prompt) + fed)
            segments[r] += [1 + b] * fed
            # token 0 is scored from the prompt's last state, token k from the state of token k - 1
            source += [(r, at + len(prompt) - 1), *((r, c) for c in range(start, start + fed))]
            target += tokens
            sample += [b] * len(tokens)
            column += range(len(prompt), len(prompt) + len(tokens))
    return Packed(rows, positions, segments, source, target, sample, column)


def segment_mask(segment: torch.Tensor) -> torch.Tensor:
    """(R, 1, L, L) bool from (R, L) segments: position i attends to j <= i of its own group (a run of prompt
    columns, segment 0, and the completions after it) that is on the prompt or on i's own segment. Padding (segment
    -1, at the ends of rows) sees only padding, so no row of the mask is empty."""
    length = segment.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool, device=segment.device).tril()
    before = torch.nn.functional.pad(segment[:, :-1], (1, 0), value=-2)
    group = ((segment == 0) & (before != 0)).cumsum(1)  # padding stays in its row's last group
    visible = ((segment[:, None, :] == 0) & (segment[:, :, None] >= 0)) | (
        segment[:, :, None] == segment[:, None, :]
    )
    return (causal & visible & (group[:, :, None] == group[:, None, :]))[:, None]


def packed_logprobs(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    width: int,
    *,
    pad_id: int,
    temperature: float = 1.0,
    chunk_tokens: int = CHUNK_TOKENS,
) -> torch.Tensor:
    """(B, width) log-probs of `completions[b]` after `prompts[b]`, at the plain layout's positions (see module);
    `pad_id` fills the ends of rows shorter than the longest; `temperature` as scored (`update.logprobs`)."""
    device = next(model.parameters()).device
    per_sample = attends_per_sample(model)
    packed = pack(prompts, completions, line=per_sample)  # one row: per-sample attention pays for no padding
    length = max(len(r) for r in packed.input_ids)

    def padded(rows: list[list[int]], fill: int) -> torch.Tensor:
        flat = [v for r in rows for v in (*r, *[fill] * (length - len(r)))]
        return flat_tensor(flat, "q", torch.long, (len(rows), length)).to(device)

    segment = padded(packed.segment, -1)
    if per_sample:
        # each sample attends to its prompt and itself at its own length; the mask only stands in for the layout,
        # so that transformers builds none (a view of one element)
        attention = {
            "attention_mask": torch.ones((), dtype=torch.bool, device=device).expand(
                len(segment), 1, length, length
            ),
            "packed_segments": SegmentLayout.of(segment),
        }
    else:
        attention = {"attention_mask": segment_mask(segment)}
    head = model.get_output_embeddings()
    with head_skipped(head):
        hidden = model(
            input_ids=padded(packed.input_ids, pad_id),
            position_ids=padded(packed.position_ids, 0),
            use_cache=False,
            **attention,
        ).logits  # (R, L, H): the head is skipped
    if "packed_segments" in attention and not attention["packed_segments"].reads:
        # the mask was a stand-in: attention that never read the layout saw every position of the row
        raise RuntimeError(
            f"{type(model).__name__} did not pass packed_segments= to its attention, so its packed rows were "
            "attended unmasked; use an architecture of accel.grouped_attention.ARCHITECTURES or set "
            "share_prompt_prefill: false"
        )
    where = flat_tensor([r * length + c for r, c in packed.source], "q", torch.long, (-1,)).to(device)
    targets = flat_tensor(packed.target, "q", torch.long, (-1,)).to(device)
    flat = score_states(
        head, hidden.flatten(0, 1)[where], targets, temperature=temperature, chunk_tokens=chunk_tokens
    )
    if not targets.numel():
        flat = flat + hidden.sum() * 0.0  # no tokens: keep the graph connected
    out = hidden.new_zeros(len(completions), width, dtype=torch.float32)
    sample = flat_tensor(packed.sample, "q", torch.long, (-1,)).to(device)
    column = flat_tensor(packed.column, "q", torch.long, (-1,)).to(device)
    return out.index_put((sample, column), flat)  # (B, width)
