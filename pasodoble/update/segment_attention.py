"""Attention over packed update rows at the cost of each sample's own length, not the row's.

What: a packed row (`update.packed`) holds one or more groups, each a prompt and then several of its samples'
completions, and each position may see its own group's prompt and its own completion only.
`SegmentLayout.of(segment)` reads that layout once per micro-batch; `segment_attention(query, key, value, layout,
scaling)` is the attention of every layer over it.
Where the compiled kernel of `accel.train_attention` applies (float32 on the CPU with one torch thread), it is one
call over the rows themselves: each position attends the columns from its group's first up to itself less those
between its prompt's end and its own completion's first (`SegmentLayout.bounds`), and the kernel skips the 16-column
blocks that no query of a tile attends. Elsewhere (SDPA) it is two attention calls: the prompts as one causal call
of G groups x P columns (P: the longest prompt; the rows' first P columns where every row is one group, else
gathered), and the completions as one call of N samples x F queries (F: the longest completion of the micro-batch)
over P + F keys each, its group's prompt columns and the sample's own ones, masked to the prompt's length and to the
causal part of its own; queries, keys and values are gathered per sample with `index_select` and the outputs
gathered back into the rows, so autograd adds the prompt keys' gradients over their samples. Inputs and outputs
are those of transformers' attention functions ((R, H, L, D) in, (R, L, H, D) out).
Positions past a row's end (padding) get some finite output that nothing reads (0 through the kernel).

Why: SDPA with the row's (R, 1, L, L) mask cannot skip the blocks the mask hides, so its work grows with the square
of the row: a row of 8 samples of 145 tokens after a 30-token prompt costs 1,190^2 per head against 8 x 145 x 175
here, 7x fewer. In a paired A/B of SmolLM2-135M's update this made it 1.05x faster in float32 and 1.19x in bfloat16,
where the products are faster and attention a larger share (docs/PERFORMANCE.md). The kernel's call in place saves
the per-sample gathers, their scatter in the backward and the padding of every sample's queries to the longest.

Run: `layout = SegmentLayout.of(segment)` with `segment` the (R, L) tensor of `update.packed.segment_mask`,
then `segment_attention(q, k, v, layout, scaling)` inside a layer; the project's grouped SDPA does it when a forward
gets `packed_segments=layout` (tests in tests/update/test_segment_attention.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from pasodoble.update import fast_paths

# attention implementation names (registered with transformers) that read `packed_segments=` as described above
SEGMENT_AWARE: set[str] = set()


def attends_per_sample(model: torch.nn.Module) -> bool:
    """True when `model`'s attention implementation reads `packed_segments=` (see module)."""
    return getattr(getattr(model, "config", None), "_attn_implementation", None) in SEGMENT_AWARE


class _Gathers(NamedTuple):
    """The per-sample gathers of a layout (see `SegmentLayout`)."""

    prompt: int
    groups: torch.Tensor | None
    samples: int
    width: int
    query: torch.Tensor
    key: torch.Tensor
    mask: torch.Tensor
    inverse: torch.Tensor


@dataclass(frozen=True)
class SegmentLayout:
    """Where each sample's queries and keys lie in the flattened (R * L) positions of a micro-batch's rows. The kernel
    reads `bounds` only; the per-sample gathers (`prompt` to `inverse`) are made on first use, by SDPA's path."""

    rows: int  # R
    length: int  # L, the rows' padded length
    segment: torch.Tensor  # (R, L) the segments it was made from (see `of`)
    # int32 (4, R, L): each position's keys in its own row as `train_attention.spans` gives them (lo, hi, gap_lo,
    # gap_hi): its group's columns up to itself less those between its prompt's end and its own first; padding none
    bounds: torch.Tensor
    # one entry per attention call that read the layout (`update.packed` checks that some did)
    reads: list[int] = field(default_factory=list, compare=False)

    @classmethod
    def of(cls, segment: torch.Tensor) -> SegmentLayout:
        """From (R, L) segments: each group a run of 0 (its prompt) then its completions (1 + the sample's index,
        one run of columns each), a row one group or several, the first at its first column; -1 on padding at the
        row's end."""
        rows, length = segment.shape
        if rows and length and bool((segment[:, 0] != 0).any()):
            raise ValueError("segment_attention needs a non-empty prompt at the start of every row")
        return cls(rows, length, segment, _row_bounds(segment))

    @property
    def prompt(self) -> int:  # P, the longest prompt
        return self._gathers.prompt

    @property
    def groups(
        self,
    ) -> torch.Tensor | None:  # (G * P,) each group's prompt columns (a real one repeated past its
        # end), flat; None where every row is one group: its prompt queries are then columns [0, P) of the rows
        return self._gathers.groups

    @property
    def samples(self) -> int:  # N, the completions with at least one position in a row
        return self._gathers.samples

    @property
    def width(self) -> int:  # F, the longest of them
        return self._gathers.width

    @property
    def query(
        self,
    ) -> torch.Tensor:  # (N * F,) the flat position of each completion query (a real one past its end)
        return self._gathers.query

    @property
    def key(
        self,
    ) -> torch.Tensor:  # (N * (P + F),) the flat position of its group's prompt keys, then its own
        return self._gathers.key

    @property
    def mask(self) -> torch.Tensor:  # (N, 1, F, P + F) bool, True: attend
        return self._gathers.mask

    @property
    def inverse(
        self,
    ) -> torch.Tensor:  # (R * L,) each position's output in cat(G x P prompt outputs, completion outputs)
        return self._gathers.inverse

    @functools.cached_property
    def _gathers(self) -> _Gathers:
        segment, rows, length = self.segment, self.rows, self.length
        device = segment.device
        firsts, prompt_of = [], []  # each group's first flat position and prompt length
        starts, sizes, owners = [], [], []  # each sample's first flat position, length and group
        for r, row in enumerate(segment.tolist()):
            c = 0
            while c < length and row[c] == 0:  # a group: its prompt, then its samples' runs
                first = c
                while c < length and row[c] == 0:
                    c += 1
                firsts.append(r * length + first)
                prompt_of.append(c - first)
                while c < length and row[c] > 0:
                    end = c
                    while end < length and row[end] == row[c]:
                        end += 1
                    starts.append(r * length + c)
                    sizes.append(end - c)
                    owners.append(len(firsts) - 1)
                    c = end
        groups, prompt = len(firsts), max(prompt_of, default=1)
        samples, width = len(sizes), max(sizes, default=0)
        one_each = groups == rows and all(f == r * length for r, f in enumerate(firsts))
        start = torch.tensor(starts, dtype=torch.long, device=device)  # (N,)
        size = torch.tensor(sizes, dtype=torch.long, device=device)  # (N,)
        owner = torch.tensor(owners, dtype=torch.long, device=device)  # (N,)
        group_first = torch.tensor(firsts, dtype=torch.long, device=device)  # (G,)
        group_size = torch.tensor(prompt_of, dtype=torch.long, device=device)  # (G,)
        c = torch.arange(prompt, device=device)  # (P,)
        # (G, P) each group's prompt columns, past its end repeating its last (finite, unread)
        prompt_cols = group_first[:, None] + torch.minimum(c[None, :], group_size[:, None] - 1)
        j = torch.arange(width, device=device)  # (F,)
        # past a sample's end a query repeats its last one (finite, unread)
        query = start[:, None] + torch.minimum(j[None, :], size[:, None] - 1)  # (N, F)
        key = torch.cat([prompt_cols[owner], query], dim=1)  # (N, P + F)
        prompt_size = group_size[owner]  # (N,)
        sees_prompt = (c[None, :] < prompt_size[:, None])[:, None, :].expand(samples, width, prompt)
        # causal over its own columns
        sees_own = (j[None, :] <= j[:, None])[None].expand(samples, width, width)
        mask = torch.cat([sees_prompt, sees_own], dim=2)[:, None]  # (N, 1, F, P + F)
        inverse = torch.zeros(rows * length, dtype=torch.long, device=device)
        for g, (f, p) in enumerate(zip(firsts, prompt_of, strict=True)):
            inverse[f : f + p] = torch.arange(g * prompt, g * prompt + p, device=device)
        if samples:
            # (N,) each sample's first slot
            first = groups * prompt + torch.arange(samples, device=device) * width
            fed = torch.repeat_interleave(start, size) + _ramps(size)  # (sum of sizes,) every fed position
            inverse[fed] = fed + torch.repeat_interleave(first - start, size)
        return _Gathers(
            prompt, None if one_each else prompt_cols.flatten(), samples, width, query.flatten(), key.flatten(),
            mask, inverse,
        )  # fmt: skip


def _row_bounds(segment: torch.Tensor) -> torch.Tensor:
    """`SegmentLayout.bounds` from the (R, L) segments."""
    rows, length = segment.shape
    column = torch.arange(length, device=segment.device).expand(rows, length)
    before = torch.nn.functional.pad(segment[:, :-1], (1, 0), value=-2)
    prompt = segment == 0

    def last(
        where: torch.Tensor,
    ) -> torch.Tensor:  # each position's last column at or before it where `where`
        return torch.where(where, column, 0).cummax(1).values

    group = last(prompt & (before != 0))  # its group's first column
    prompt_end = last(~prompt & (before == 0))  # a completion's: the column after its group's prompt
    first = last(segment != before)  # its run's first column
    real, sample = segment >= 0, segment > 0
    return torch.stack(
        [
            torch.where(real, group, 0),
            torch.where(real, column + 1, 0),
            torch.where(sample, prompt_end, 0),  # gap_lo == gap_hi for a group's first sample: no gap
            torch.where(sample, first, 0),
        ]
    ).to(torch.int32)


def _ramps(size: torch.Tensor) -> torch.Tensor:
    """0, 1, ..., size[0] - 1, 0, 1, ..., size[1] - 1, ... as one tensor."""
    ends = torch.cumsum(size, 0)
    return torch.arange(int(ends[-1]), device=size.device) - torch.repeat_interleave(ends - size, size)


def segment_attention(
    query: torch.Tensor,  # (R, H, L, D)
    key: torch.Tensor,  # (R, KV, L, D)
    value: torch.Tensor,  # (R, KV, L, D)
    layout: SegmentLayout,
    scaling: float,
) -> torch.Tensor:
    """Each position's attention over its prompt and its own completion (see module); returns (R, L, H, D)."""
    rows, heads, length, dim = query.shape
    if (rows, length) != (layout.rows, layout.length):
        raise ValueError(
            f"packed_segments is for rows {layout.rows} x {layout.length}, got {rows} x {length}"
        )
    layout.reads.append(rows)
    if attends_in_place(query, key, value):
        return fast_paths.train_attention.over_spans(query, key, value, layout.bounds, length, scaling)
    prompt = layout.prompt

    def gathered(x: torch.Tensor, index: torch.Tensor, columns: int) -> torch.Tensor:
        flat = x.transpose(1, 2).reshape(rows * length, x.shape[1], dim)  # (R * L, heads, D)
        return flat.index_select(0, index).view(-1, columns, x.shape[1], dim).transpose(1, 2)

    if layout.groups is None:  # every row one group: its prompt is the row's first columns
        prompt_out = _attend(query[:, :, :prompt], key[:, :, :prompt], value[:, :, :prompt], None, scaling)
    else:
        where = layout.groups
        prompt_out = _attend(
            gathered(query, where, prompt), gathered(key, where, prompt), gathered(value, where, prompt), None,
            scaling,
        )  # fmt: skip
    parts = [prompt_out.reshape(-1, heads, dim)]  # from (G, P, H, D)
    if layout.samples:
        n, f = layout.samples, layout.width
        own_out = _attend(
            gathered(query, layout.query, f),
            gathered(key, layout.key, prompt + f),
            gathered(value, layout.key, prompt + f),
            layout.mask,
            scaling,
        )  # (N, F, H, D)
        parts.append(own_out.reshape(n * f, heads, dim))
    out = torch.cat(parts).index_select(0, layout.inverse)  # (R * L, H, D)
    return out.view(rows, length, heads, dim)


def attends_in_place(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> bool:
    """Whether `segment_attention` runs as one kernel call over the rows themselves (the compiled kernel applies),
    rather than two calls over per-sample gathers (see module)."""
    kernel = fast_paths.train_attention
    return kernel is not None and kernel.applies(query, key, value)


def _attend(query, key, value, mask, scaling) -> torch.Tensor:
    """(B, Q, H, D) attention of one call: masked by `mask`, else causal; the compiled kernel where it applies
    (`accel.train_attention`), else SDPA."""
    kernel = fast_paths.train_attention
    out = None if kernel is None else kernel.attention(query, key, value, mask, scaling, mask is None)
    if out is not None:
        return out
    out = torch.nn.functional.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=mask,
        is_causal=mask is None,
        scale=scaling,
        enable_gqa=query.shape[1] != key.shape[1],
    )
    return out.transpose(1, 2)
