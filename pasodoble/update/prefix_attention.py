"""Decode-step attention that reads each prompt's cached keys and values once for all of its samples.

What: `SharedPrefix(cache, prompt_mask, rows)` holds every layer's keys and values of U distinct prompts (all but
their last column, left-padded, `prompt_mask` (U, P)) and which prompt each of the B decode rows continues (`rows`).
The rows' own columns (the prompt's last one, then the completion) live in an ordinary KV cache of their own.
`prefix_decode_attention(query, key, value, mask, scaling, prefix, layer)` is one decode step's attention over the
concatenation of both, computed as two partial softmaxes merged by their log-sum-exp: the prefix part as one matrix
product per prompt whose rows are all of that prompt's samples' query heads, the own part per row. `select(keep)`
follows the decode loop when ended rows leave, dropping prompts none of whose rows still run.
`PREFIX_AWARE` names the attention implementations (registered with transformers) that honour the keyword
`shared_prefix=` this way; the decode loop passes it only to models running one of them.

Why: J samples of a prompt hold J copies of its keys and values, and a decode step reads the whole cache: the
memory-bound attention was about a third of the tiny bench model's generation. Reading the prompt once per group
cuts those reads by J and the cache copies made when ended rows leave (docs/PERFORMANCE.md).

Run: `prefix = SharedPrefix(prefill_cache, mask, rows)`, then `model(..., shared_prefix=prefix)` for each decode step
with the rows' own cache; tests in tests/rollout/test_prefix_attention.py.
"""

from __future__ import annotations

import torch

from pasodoble.update import fast_paths

LANES = 16  # the decode kernel's block of columns: by-column key buffers are this many columns wide at a time


def padded(columns: int) -> int:
    """`columns` rounded up to the decode kernel's block of 16: a by-column buffer this wide is read in whole blocks."""
    return -(-columns // LANES) * LANES


PREFIX_AWARE: set[str] = set()  # attention implementation names that read `shared_prefix=` as described above


class SharedPrefix:
    """The prompts' cached keys and values, shared by the decode rows that continue them (see module)."""

    def __init__(self, cache, prompt_mask: torch.Tensor, rows: torch.Tensor):
        self.keys = [layer.keys for layer in cache.layers]  # each (U, KV, P, D)
        self.values = [layer.values for layer in cache.layers]
        self.mask = prompt_mask.bool()  # (U, P)
        # where the compiled kernel serves the decode, keys stored by column (its fast layout), values by row
        kernel = fast_paths.decode
        self.by_column = bool(self.keys) and kernel is not None and kernel.serves(self.keys[0])
        self._lay_out()
        self._arrange(rows)

    def _lay_out(self) -> None:
        if self.by_column:
            self.keys = [fast_paths.decode.by_column(k) for k in self.keys]
            self.values = [v.contiguous() for v in self.values]

    def _arrange(self, rows: torch.Tensor) -> None:
        """Row b's queries go to slot `dense[b]` of a (U, width) grid: prompt u's rows fill u's line in order."""
        self.rows = rows  # (b,) the prompt of each decode row
        order = torch.argsort(rows, stable=True)  # (b,)
        counts = torch.bincount(rows, minlength=len(self.mask))  # (U,)
        self.width = max(int(counts.max()), 1)
        starts = torch.cumsum(counts, 0) - counts  # (U,) first place of each prompt in `order`
        slot = torch.empty_like(rows)
        slot[order] = torch.arange(len(rows), device=rows.device) - starts[rows[order]]
        self.dense = rows * self.width + slot  # (b,)
        full = len(rows) == len(self.mask) * self.width
        self.identity = full and bool((self.dense == torch.arange(len(rows), device=rows.device)).all())

    def select(self, keep: torch.Tensor) -> None:
        """Only rows `keep` go on; prompts with no row left are dropped (a copy of their keys and values)."""
        rows = self.rows[keep]
        used, rows = torch.unique(rows, return_inverse=True)  # (U',), (b',)
        if len(used) < len(self.mask):
            self.keys = [k[used] for k in self.keys]
            self.values = [v[used] for v in self.values]
            self.mask = self.mask[used]
            self._lay_out()
        self._arrange(rows)


def _to_grid(x: torch.Tensor, prefix: SharedPrefix) -> torch.Tensor:
    """(b, ...) per row -> (U * width, ...) on the prompts' grid, zeros in empty slots."""
    if prefix.identity:
        return x
    grid = x.new_zeros(len(prefix.mask) * prefix.width, *x.shape[1:])
    return grid.index_copy_(0, prefix.dense, x)


def _from_grid(x: torch.Tensor, prefix: SharedPrefix) -> torch.Tensor:
    return x if prefix.identity else x.index_select(0, prefix.dense)


def _partial(scores: torch.Tensor, values: torch.Tensor):
    """Unnormalised softmax(scores) @ values with its row maximum and sum: (out, max, sum), float32."""
    # a fully masked row (a prompt of one token has no shared column) gets a finite top, so its weights are 0
    top = scores.amax(-1, keepdim=True).clamp(min=torch.finfo(scores.dtype).min)
    weights = torch.exp(scores - top)
    return torch.matmul(weights.to(values.dtype), values).float(), top, weights.sum(-1, keepdim=True)


def prefix_decode_attention(
    query: torch.Tensor,  # (b, H, 1, D)
    key: torch.Tensor,  # (b, KV, S, D) the rows' own columns
    value: torch.Tensor,  # (b, KV, S, D)
    mask: torch.Tensor | None,  # (b, 1, 1, S) bool (True: attend) or additive float; None: every column
    scaling: float,
    prefix: SharedPrefix,
    layer: int,
) -> torch.Tensor:
    """One decode step's attention over the prompt's shared columns and the row's own; returns (b, 1, H, D)."""
    kernel = fast_paths.decode
    fused = None if kernel is None else kernel.prefix_decode(query, key, value, mask, scaling, prefix, layer)
    if fused is not None:  # the compiled kernel: float32 on the CPU, one thread
        return fused
    return tensor_decode_attention(query, key, value, mask, scaling, prefix, layer)


def tensor_decode_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    scaling: float,
    prefix: SharedPrefix,
    layer: int,
) -> torch.Tensor:
    """`prefix_decode_attention` in tensor operations (any device and dtype)."""
    rows, heads, _, dim = query.shape
    kv = key.shape[1]
    group = heads // kv
    # head h reads key/value head h // group, as repeat_kv lays them out
    q = query.reshape(rows, kv, group, dim)
    own = torch.matmul(q, key.transpose(-1, -2)).float() * scaling  # (b, KV, g, S), softmax in float32
    if mask is not None:
        own = own.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else own + mask
    own_out, own_top, own_sum = _partial(own, value)  # (b, KV, g, D), (b, KV, g, 1) x2

    prompts, width = len(prefix.mask), prefix.width
    grid = _to_grid(q, prefix).view(prompts, width, kv, group, dim).transpose(1, 2)
    grid = grid.reshape(prompts, kv, width * group, dim)  # every sample's heads of one prompt: one product
    # (U, KV, width * g, P)
    shared = torch.matmul(grid, prefix.keys[layer].transpose(-1, -2)).float() * scaling
    shared = shared.masked_fill(~prefix.mask[:, None, None, :], float("-inf"))
    parts = _partial(shared, prefix.values[layer])

    def per_row(x: torch.Tensor) -> torch.Tensor:  # (U, KV, width * g, d) -> (b, KV, g, d)
        x = x.view(prompts, kv, width, group, -1).transpose(1, 2).reshape(prompts * width, kv, group, -1)
        return _from_grid(x, prefix)

    shared_out, shared_top, shared_sum = (per_row(x) for x in parts)
    top = torch.maximum(own_top, shared_top)
    own_scale, shared_scale = torch.exp(own_top - top), torch.exp(shared_top - top)
    out = (own_out * own_scale + shared_out * shared_scale) / (
        own_sum * own_scale + shared_sum * shared_scale
    )
    return out.reshape(rows, 1, heads, dim).to(query.dtype)
