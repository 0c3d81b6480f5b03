"""Attention over packed update rows at the cost of each sample's own length, not the row's.

What: a packed row (`core.packed`) holds a prompt and then several of its samples' completions, and each position
may see its prompt and its own completion only. `SegmentLayout.of(segment)` reads that layout once per
micro-batch; `segment_attention(query, key, value, layout, scaling)` is the attention of every layer over it.
Where the compiled kernel of `core.train_attention` applies (float32 on the CPU with one torch thread), it is one
call over the rows themselves: each position attends the columns of its row up to itself less those between its
prompt and its own completion's first (`SegmentLayout.bounds`), and the kernel skips the 16-column blocks that no
query of a tile attends. Elsewhere (SDPA) it is two attention calls: the prompts as one causal call over the rows'
first P columns (P: the longest prompt), and the completions as one call of N samples x F queries (F: the longest
completion of the micro-batch) over P + F keys each, the row's prompt columns and the sample's own ones, masked to
the prompt's length and to the causal part of its own; queries, keys and values are gathered per sample with
`index_select` and the outputs gathered back into the rows, so autograd adds the prompt keys' gradients over their
samples. Inputs and outputs are those of transformers' attention functions ((R, H, L, D) in, (R, L, H, D) out).
Positions past a row's end (padding) get some finite output that nothing reads (0 through the kernel).

Why: SDPA with the row's (R, 1, L, L) mask cannot skip the blocks the mask hides, so its work grows with the square
of the row: a row of 8 samples of 145 tokens after a 30-token prompt costs 1,190^2 per head against 8 x 145 x 175
here, 7x fewer. In a paired A/B of SmolLM2-135M's update this made it 1.05x faster in float32 and 1.19x in bfloat16,
where the products are faster and attention a larger share (docs/PERFORMANCE.md). The kernel's call in place saves
the per-sample gathers, their scatter in the backward and the padding of every sample's queries to the longest.

Run: `layout = SegmentLayout.of(segment)` with `segment` the (R, L) tensor of `core.packed.segment_mask`,
then `segment_attention(q, k, v, layout, scaling)` inside a layer; the project's grouped SDPA does it when a forward
gets `packed_segments=layout` (tests in tests/test_segment_attention.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from pasodoble.core import train_attention

# attention implementation names (registered with transformers) that read `packed_segments=` as described above
SEGMENT_AWARE: set[str] = set()


def attends_per_sample(model: torch.nn.Module) -> bool:
    """True when `model`'s attention implementation reads `packed_segments=` (see module)."""
    return getattr(getattr(model, "config", None), "_attn_implementation", None) in SEGMENT_AWARE


class _Gathers(NamedTuple):
    """The per-sample gathers of a layout (see `SegmentLayout`)."""

    prompt: int
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
    # gap_hi): its row's columns up to itself less those between its prompt and its own first; padding none
    bounds: torch.Tensor
    # one entry per attention call that read the layout (`core.packed` checks that some did)
    reads: list[int] = field(default_factory=list, compare=False)

    @classmethod
    def of(cls, segment: torch.Tensor) -> SegmentLayout:
        """From (R, L) segments: 0 on the prompt (a row's first columns), 1 + a sample's index on its completion
        (one run of columns each), -1 on padding at the row's end."""
        rows, length = segment.shape
        if rows and length and int((segment == 0).sum(1).min()) < 1:
            raise ValueError("segment_attention needs a non-empty prompt at the start of every row")
        return cls(rows, length, segment, _row_bounds(segment))

    @property
    def prompt(self) -> int:  # P, the longest prompt: prompt queries are columns [0, P) of each row
        return self._gathers.prompt

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
    ) -> torch.Tensor:  # (N * (P + F),) the flat position of each sample's prompt keys, then its own
        return self._gathers.key

    @property
    def mask(self) -> torch.Tensor:  # (N, 1, F, P + F) bool, True: attend
        return self._gathers.mask

    @property
    def inverse(
        self,
    ) -> torch.Tensor:  # (R * L,) each position's output in cat(prompt outputs, completion outputs)
        return self._gathers.inverse

    @functools.cached_property
    def _gathers(self) -> _Gathers:
        segment, rows, length = self.segment, self.rows, self.length
        device = segment.device
        cells = segment.tolist()
        prompt_of = [row.count(0) for row in cells]
        prompt = max(prompt_of, default=1)
        starts, sizes, owners = [], [], []  # each sample's first flat position, length and row
        for r, row in enumerate(cells):
            c = prompt_of[r]
            while c < length and row[c] > 0:
                end = c
                while end < length and row[end] == row[c]:
                    end += 1
                starts.append(r * length + c)
                sizes.append(end - c)
                owners.append(r)
                c = end
        samples, width = len(sizes), max(sizes, default=0)
        start = torch.tensor(starts, dtype=torch.long, device=device)  # (N,)
        size = torch.tensor(sizes, dtype=torch.long, device=device)  # (N,)
        owner = torch.tensor(owners, dtype=torch.long, device=device)  # (N,)
        prompt_size = torch.tensor(prompt_of, dtype=torch.long, device=device)[owner]  # (N,)
        j = torch.arange(width, device=device)  # (F,)
        # past a sample's end a query repeats its last one (finite, unread)
        query = start[:, None] + torch.minimum(j[None, :], size[:, None] - 1)  # (N, F)
        c = torch.arange(prompt, device=device)  # (P,)
        prompt_keys = owner[:, None] * length + torch.minimum(c[None, :], prompt_size[:, None] - 1)  # (N, P)
        key = torch.cat([prompt_keys, query], dim=1)  # (N, P + F)
        sees_prompt = (c[None, :] < prompt_size[:, None])[:, None, :].expand(samples, width, prompt)
        # causal over its own columns
        sees_own = (j[None, :] <= j[:, None])[None].expand(samples, width, width)
        mask = torch.cat([sees_prompt, sees_own], dim=2)[:, None]  # (N, 1, F, P + F)
        inverse = torch.zeros(rows * length, dtype=torch.long, device=device)
        for r, p in enumerate(prompt_of):
            inverse[r * length : r * length + p] = torch.arange(r * prompt, r * prompt + p, device=device)
        if samples:
            # (N,) each sample's first slot
            first = rows * prompt + torch.arange(samples, device=device) * width
            fed = torch.repeat_interleave(start, size) + _ramps(size)  # (sum of sizes,) every fed position
            inverse[fed] = fed + torch.repeat_interleave(first - start, size)
        return _Gathers(prompt, samples, width, query.flatten(), key.flatten(), mask, inverse)


def _row_bounds(segment: torch.Tensor) -> torch.Tensor:
    """`SegmentLayout.bounds` from the (R, L) segments."""
    rows, length = segment.shape
    column = torch.arange(length, device=segment.device).expand(rows, length)
    prompt = (segment == 0).sum(1, keepdim=True)  # the prompt is each row's first columns
    before = torch.nn.functional.pad(segment[:, :-1], (1, 0), value=-2)
    first = torch.where(segment != before, column, 0).cummax(1).values  # each position's run's first column
    real, sample = segment >= 0, segment > 0
    zero = torch.zeros_like(column)
    return torch.stack(
        [
            zero,
            torch.where(real, column + 1, 0),
            torch.where(sample, prompt, 0),  # gap_lo == gap_hi for a row's first sample: no gap
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
        return train_attention.over_spans(query, key, value, layout.bounds, length, scaling)
    prompt = layout.prompt
    prompt_out = _attend(query[:, :, :prompt], key[:, :, :prompt], value[:, :, :prompt], None, scaling)
    parts = [prompt_out.reshape(rows * prompt, heads, dim)]  # from (R, P, H, D)
    if layout.samples:
        n, f = layout.samples, layout.width

        def per_sample(x: torch.Tensor, index: torch.Tensor, columns: int) -> torch.Tensor:
            flat = x.transpose(1, 2).reshape(rows * length, x.shape[1], dim)  # (R * L, heads, D)
            return flat.index_select(0, index).view(n, columns, x.shape[1], dim).transpose(1, 2)

        own_out = _attend(
            per_sample(query, layout.query, f),
            per_sample(key, layout.key, prompt + f),
            per_sample(value, layout.key, prompt + f),
            layout.mask,
            scaling,
        )  # (N, F, H, D)
        parts.append(own_out.reshape(n * f, heads, dim))
    out = torch.cat(parts).index_select(0, layout.inverse)  # (R * L, H, D)
    return out.view(rows, length, heads, dim)


def attends_in_place(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> bool:
    """Whether `segment_attention` runs as one kernel call over the rows themselves (the compiled kernel applies),
    rather than two calls over per-sample gathers (see module)."""
    return train_attention.applies(query, key, value)


def _attend(query, key, value, mask, scaling) -> torch.Tensor:
    """(B, Q, H, D) attention of one call: masked by `mask`, else causal; the compiled kernel where it applies
    (`core.train_attention`), else SDPA."""
    out = train_attention.attention(query, key, value, mask, scaling, mask is None)
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
