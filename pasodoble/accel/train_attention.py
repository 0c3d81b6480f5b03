"""A compiled CPU kernel for several-token attention with its backward: the update's attention, over key spans.

What: `attention(query, key, value, mask, scale, causal)` returns what
`torch.nn.functional.scaled_dot_product_attention(..., enable_gqa=True)` would, as the (B, Q, H, D) output that
transformers' attention functions return, with autograd through the kernel's own backward. It returns None, and
the caller keeps SDPA, unless the call is float32 on the CPU with one torch thread, each position's head dimensions
are contiguous, the head dimension is a multiple of 8 up to 256, the mask is boolean, the same for every head and
one or two runs of keys per query (or absent, with or without the causal flag), the call's scratch (two score
arrays; every head's queries and their gradients, keys and values) fits `MAX_SCRATCH_FLOATS`, and the kernel could be built.
`status()` says which, for the start line and benches. The project's grouped SDPA (`accel/grouped_attention.py`)
and the packed rows' attention (`update.segment_attention`) call it for the update's forward and backward and for a
prefill; the packed rows, whose spans their layout already knows, through `applies` and `over_spans` (no mask).

Why: the update's masks (a prompt's keys past its padding, then the sample's own up to the query) leave each query
one span of keys, or two where the prompts are padded on the right, and SDPA's CPU kernel visits every masked column and, at small head dimensions, runs its products
far under the core's rate: on the tiny bench model (head dimension 24) attention took 29% of the update. The
kernel's work follows the spans (half of a causal block) with the products in registers (train_attention.c;
figures in docs/PERFORMANCE.md).

How it is built: as `accel.decode_kernel`, by `accel.native` (the system C compiler, `-O3 -march=native`, cached
under `$PASODOBLE_CACHE/native/`). No compiler, or a failed build, leaves SDPA with a one-line warning.
`accel.train_attention: off` (config) turns the kernel off.

Run: nothing to call; tests in tests/accel/test_train_attention.py compare values and gradients with SDPA.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch
from torch.autograd.function import once_differentiable

from pasodoble.accel import native

SOURCE = Path(__file__).parent / "csrc" / "train_attention.c"
KEY = "train_attention"  # its switch, `accel.train_attention`; "off": SDPA always
MAX_DIM = 256
# a call's scratch: two (queries x keys) score arrays, and every head's queries and their gradients, keys and values;
# past this SDPA, which tiles them
MAX_SCRATCH_FLOATS = 1 << 24
# The kernel reads a batch row's queries and output gradients over every head, and its keys and values over every
# key/value head, in one pass along memory, and runs it chunk by chunk (a packed group's rows, over every head),
# while a chunk's planes (or the row's) fit in this many floats (1 MB, a core's L2 on the Zen 4 host measured), and
# one head at a time over the whole row past it, so that the planes its tiles read stay in cache: on the tiny
# anchor's heads the first took 7-11% off the attention's time, on SmolLM2's it was 19-32% slower than the second
# (docs/PERFORMANCE.md).
WHOLE_ROW_FLOATS = 1 << 18

_state: dict[str, object] = {}  # "lib": (forward, backward) or None; "why": the reason it is None


class _View(ctypes.Structure):
    """A (batch, heads, positions, dim) tensor's data and strides, as the C source's `View`."""

    _fields_ = [("p", ctypes.c_void_p), ("b", ctypes.c_int64), ("h", ctypes.c_int64), ("i", ctypes.c_int64)]


class _Shape(ctypes.Structure):
    """The call's sizes and spans, as the C source's `Shape`."""

    _fields_ = [
        *((name, ctypes.c_int64) for name in ("batch", "heads", "kv_heads", "queries", "keys", "dim")),
        ("scale", ctypes.c_float),
        *((name, ctypes.c_void_p) for name in ("lo", "hi", "gap_lo", "gap_hi")),
        ("span_b", ctypes.c_int64),
        ("whole_floats", ctypes.c_int64),
    ]


def _bind(lib: ctypes.CDLL):
    view, shape, ptr = ctypes.POINTER(_View), ctypes.POINTER(_Shape), ctypes.c_void_p
    forward, backward = lib.pasodoble_attention_forward_f32, lib.pasodoble_attention_backward_f32
    forward.argtypes = [view, view, view, shape, ptr, ptr]
    backward.argtypes = [view, view, view, shape, ptr, ptr, ptr, ptr, ptr, ptr]
    forward.restype = backward.restype = ctypes.c_int
    return forward, backward


def _load():
    """The kernel's (forward, backward) C functions, built and loaded once per process, or None."""
    return native.load(_state, SOURCE, KEY, "training attention kernel", _bind, "attention takes SDPA")


def status() -> str:
    """'on', or why not ('off (...)', 'unavailable: ...'), building the kernel if it was not tried yet."""
    return "on" if _load() is not None else str(_state["why"])


CACHED = "_pasodoble_spans"  # attribute of a mask tensor: (its version, its spans)


def spans(
    mask: torch.Tensor | None, queries: int, keys: int, causal: bool
) -> tuple[torch.Tensor, int] | None:
    """(bounds, span_b): `bounds` is int32 (4, rows, queries), lo, hi, gap_lo, gap_hi: query i of batch row b (its row
    b * span_b of `bounds`) attends the keys in [lo, hi) outside [gap_lo, gap_hi) (no gap: gap_lo >= gap_hi). None
    when `mask` leaves a query more than two runs of keys or differs over heads. Cached per mask tensor (every layer
    of a forward reads the same one)."""
    if mask is None:
        if causal and queries != keys:
            return None
        bounds = torch.zeros(4, 1, queries, dtype=torch.int32)
        bounds[1] = torch.arange(1, queries + 1, dtype=torch.int32) if causal else keys
        return bounds, 0
    if mask.dtype != torch.bool or mask.dim() != 4 or mask.shape[1] != 1 or mask.shape[2:] != (queries, keys):
        return None
    known = getattr(mask, CACHED, None)
    if known is not None and known[0] == mask._version:
        return known[1]
    m = mask[:, 0]
    before = torch.nn.functional.pad(m[..., :-1], (1, 0))  # each key's left neighbour (False at the first)
    after = torch.nn.functional.pad(m[..., 1:], (0, 1))
    starts, ends = m & ~before, m & ~after  # a run's first and last key
    found = None
    if not bool((starts.sum(-1) > 2).any()):
        last = keys - 1

        def first(flags):
            return flags.to(torch.uint8).argmax(-1)

        def final(flags):
            return last - first(flags.flip(-1))

        bounds = torch.stack([first(starts), final(ends) + 1, first(ends) + 1, final(starts)]).to(torch.int32)
        bounds[:, ~m.any(-1)] = 0  # a query that attends nothing: an empty span
        found = (bounds.contiguous(), queries if mask.shape[0] > 1 else 0)
    setattr(mask, CACHED, (mask._version, found))
    return found


def _view(x: torch.Tensor) -> _View:
    return _View(x.data_ptr(), x.stride(0), x.stride(1), x.stride(2))


def _shape(query, key, bounds, span_b, scale) -> _Shape:
    batch, heads, queries, dim = query.shape
    pointers = (bound.data_ptr() for bound in bounds)  # lo, hi, gap_lo, gap_hi
    return _Shape(
        batch, heads, key.shape[1], queries, key.shape[2], dim, scale, *pointers, span_b, WHOLE_ROW_FLOATS
    )


def forward_spans(query, key, value, bounds, span_b, scale) -> tuple[torch.Tensor, torch.Tensor]:
    """(out (B, Q, H, D), lse (B, H, Q)) of `over_spans`, no autograd."""
    batch, heads, queries, dim = query.shape
    out = torch.empty(batch, queries, heads, dim)
    lse = torch.empty(batch, heads, queries)
    fn = _load()[0]
    code = fn(_view(query), _view(key), _view(value), _shape(query, key, bounds, span_b, scale), out.data_ptr(),
              lse.data_ptr())  # fmt: skip
    if code != 0:
        raise MemoryError(
            f"training attention kernel failed ({code}) at {tuple(query.shape)} x {key.shape[2]} keys"
        )
    return out, lse


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, bounds, span_b, scale):
        out, lse = forward_spans(query, key, value, bounds, span_b, scale)
        ctx.save_for_backward(query, key, value, out, lse, bounds)
        ctx.span_b, ctx.scale = span_b, scale
        return out

    @staticmethod
    @once_differentiable  # its backward is the C kernel: no second derivative
    def backward(ctx, grad):
        query, key, value, out, lse, bounds = ctx.saved_tensors
        dq, dk, dv = backward_spans(
            query, key, value, out, lse, bounds, ctx.span_b, ctx.scale, grad.contiguous()
        )
        return dq.transpose(1, 2), dk, dv, None, None, None


def backward_spans(query, key, value, out, lse, bounds, span_b, scale, grad):
    """(dq (B, Q, H, D), dk, dv (B, KV, K, D), contiguous) of `forward_spans`'s output for `grad` (contiguous, as out)."""
    batch, heads, queries, dim = query.shape
    dq = torch.empty(batch, queries, heads, dim)
    dk, dv = torch.empty(key.shape), torch.empty(value.shape)
    fn = _load()[1]
    code = fn(_view(query), _view(key), _view(value), _shape(query, key, bounds, span_b, scale),
              out.data_ptr(), grad.data_ptr(), lse.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr())  # fmt: skip
    if code != 0:
        raise MemoryError(f"training attention kernel's backward failed ({code})")
    return dq, dk, dv


def applies(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> bool:
    """Whether the kernel serves a call on these tensors (see module), building it if it was not tried yet."""
    if torch.get_num_threads() != 1:
        return False
    if any(
        x.dtype != torch.float32 or x.device.type != "cpu" or x.stride(3) != 1 for x in (query, key, value)
    ):
        return False
    batch, heads, queries, dim = query.shape
    return (
        key.shape == value.shape
        and key.shape[0] == batch
        and fits(heads, key.shape[1], queries, key.shape[2], dim)
    )


def fits(heads: int, kv_heads: int, queries: int, keys: int, dim: int) -> bool:
    """Whether the kernel takes a call of these sizes (float32 CPU tensors, one torch thread, each position's head
    dimensions contiguous), building it if it was not tried yet."""
    return not (
        dim % 8
        or dim > MAX_DIM
        or heads % kv_heads
        or 2 * (-(-queries // 8) * 8 + 1) * (-(-keys // 16) * 16) > MAX_SCRATCH_FLOATS
        or 2 * (heads * -(-queries // 8) * 8 + kv_heads * -(-keys // 16) * 16) * dim > MAX_SCRATCH_FLOATS
        or queries == 0
        or keys == 0
        or _load() is None
    )


def attention(
    query: torch.Tensor,  # (B, H, Q, D)
    key: torch.Tensor,  # (B, KV, K, D)
    value: torch.Tensor,  # (B, KV, K, D)
    mask: torch.Tensor | None,  # bool (B or 1, 1, Q, K), True: attend
    scale: float,
    causal: bool,
) -> torch.Tensor | None:
    """SDPA's grouped attention as a (B, Q, H, D) tensor through the kernel, or None where it does not apply."""
    if mask is not None and mask.shape[0] not in (1, query.shape[0]):
        return None
    if not applies(query, key, value):
        return None
    found = spans(mask, query.shape[2], key.shape[2], causal)
    if found is None:
        return None
    return over_spans(query, key, value, *found, scale)


def over_spans(
    query: torch.Tensor,  # (B, H, Q, D)
    key: torch.Tensor,  # (B, KV, K, D)
    value: torch.Tensor,  # (B, KV, K, D)
    bounds: torch.Tensor,  # int32 (4, B or 1, Q): lo, hi, gap_lo, gap_hi (see `spans`)
    span_b: int,  # Q where `bounds` has a row per batch row, 0 where one row serves all
    scale: float,
) -> torch.Tensor:
    """The kernel's (B, Q, H, D) attention over spans the caller has (`applies` must hold): query i of batch row b
    attends keys [lo, hi) outside [gap_lo, gap_hi), with lo <= gap_lo and gap_hi < hi where there is a gap."""
    if torch.is_grad_enabled() and any(x.requires_grad for x in (query, key, value)):
        return _Attention.apply(query, key, value, bounds, span_b, float(scale))
    return forward_spans(query, key, value, bounds, span_b, float(scale))[0]
