"""A compiled CPU kernel for the shared-prompt decode attention, built from `decode_kernel.c` on first use.

What: `prefix_decode(query, key, value, mask, scaling, prefix, layer)` computes what
`update.prefix_attention.prefix_decode_attention` does (one decode step's attention over each prompt's shared columns
and the row's own) in one C call per layer: for each row and key/value head, the scores of its query heads over all
columns, one softmax, one pass over the values. It returns None, and the caller keeps its tensor path, unless the
call is on the CPU in float32 with one torch thread, each column's head dimensions are contiguous, the mask is
boolean or absent, and the kernel could be built. Keys stored by column (`by_column`, which the decode loop and
`SharedPrefix` use where `serves` says so) take its fast path. `status()` says which, for the start line and benches.

Why: on the tiny bench model a decode step's attention is about twenty small tensor operations a layer (batched
products over 100-200 columns at head dim 24, masks, exponentials, the log-sum-exp merge); they took most of its
generation time at about a tenth of the core's matmul rate. The kernel runs them 2.4-3.2x faster, and the tiny
model's generation in 0.74-0.82x the CPU time (docs/PERFORMANCE.md).

How it is built: `accel.native` compiles the source (and the shared `native_vec.h`) with the system C compiler
(`$CC`, else `cc`) and `-O3 -march=native` into `$PASODOBLE_CACHE/native/<key>/` (default ~/.cache/pasodoble), keyed
on the sources, the compiler's version, the flags and the CPU's model and features, written to a temporary name and
renamed into place (processes that build at once do not clash). Nothing else is loaded: the library is the
project's own source compiled here. No compiler, or a failed build, leaves the tensor path with a one-line warning.
`accel.decode_kernel: off` (config) turns the kernel off.

Run: nothing to call; tests in tests/accel/test_decode_kernel.py compare it with the tensor path.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from pasodoble.accel import native
from pasodoble.update.prefix_attention import padded

SOURCE = Path(__file__).parent / "csrc" / "decode_kernel.c"
SYMBOL = "pasodoble_prefix_decode_f32"
KEY = "decode_kernel"  # its switch, `accel.decode_kernel`; "off": the tensor path always

_state: dict[str, object] = {}  # "lib": the loaded function or None; "why": the reason it is None


class _Part(ctypes.Structure):
    """One side's keys and values, as the C source's `Part`."""

    _fields_ = [("k", ctypes.c_void_p), ("v", ctypes.c_void_p), ("mask", ctypes.c_void_p)] + [
        (name, ctypes.c_int64)
        for name in ("k_row", "k_head", "k_col", "k_dim", "v_row", "v_head", "v_col", "cols")
    ]


def _part(keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None) -> _Part:
    return _Part(
        keys.data_ptr(),
        values.data_ptr(),
        None if mask is None else mask.data_ptr(),
        *keys.stride(),
        *values.stride()[:3],
        keys.shape[2],
    )


def _bind(lib: ctypes.CDLL):
    fn = getattr(lib, SYMBOL)
    fn.restype = ctypes.c_int
    i64, ptr, part = ctypes.c_int64, ctypes.c_void_p, ctypes.POINTER(_Part)
    fn.argtypes = [ptr, ptr, i64, i64, i64, i64, ctypes.c_float, ptr, ptr, part, part]
    return fn


def _load():
    """The kernel's C function, built and loaded once per process, or None (the reason in `status()`)."""
    return native.load(_state, SOURCE, KEY, "decode kernel", _bind, "decoding takes the tensor path")


def status() -> str:
    """'on', or why not ('off (...)', 'unavailable: ...'), building the kernel if it was not tried yet."""
    return "on" if _load() is not None else str(_state["why"])


def _floats_ok(x: torch.Tensor) -> bool:
    return x.dtype == torch.float32 and x.device.type == "cpu"


def serves(states: torch.Tensor) -> bool:
    """Whether the kernel would serve a decode over `states` (a layer's cached keys): float32 on the CPU, one torch
    thread, and the kernel built (it is built here on first use)."""
    return _floats_ok(states) and torch.get_num_threads() == 1 and _load() is not None


def by_column(keys: torch.Tensor) -> torch.Tensor:
    """(N, H, C, D) keys with the same values, stored by column in a buffer `padded(C)` columns wide: the kernel's
    fast layout."""
    rows, heads, columns, dim = keys.shape
    buffer = keys.new_empty(rows, heads, dim, padded(columns))
    buffer[..., :columns] = keys.transpose(-1, -2)
    return buffer[..., :columns].transpose(-1, -2)


def prefix_decode(query, key, value, mask, scaling, prefix, layer) -> torch.Tensor | None:
    """`prefix_decode_attention`'s (b, 1, H, D) output through the kernel, or None where it does not apply."""
    if query.dtype != torch.float32 or query.device.type != "cpu" or torch.get_num_threads() != 1:
        return None
    if mask is not None and mask.dtype != torch.bool:
        return None
    pre_k, pre_v = prefix.keys[layer], prefix.values[layer]
    if (
        not all(_floats_ok(x) for x in (key, value, pre_k, pre_v))
        or value.stride(3) != 1
        or pre_v.stride(3) != 1
    ):
        return None
    fn = _load()
    if fn is None:
        return None
    rows, heads, _, dim = query.shape
    group = heads // key.shape[1]
    own_mask = None if mask is None else mask.reshape(rows, key.shape[2]).contiguous()
    pre_mask = prefix.mask.contiguous()  # held until the call returns, as every tensor it reads
    own, pre = _part(key, value, own_mask), _part(pre_k, pre_v, pre_mask)
    out = torch.empty(rows, 1, heads, dim)
    scratch = torch.empty(group * (padded(pre.cols) + padded(own.cols)))  # score rows, each part padded
    q = query.contiguous()
    prompt_of = prefix.rows.to(torch.int64).contiguous()
    code = fn(
        q.data_ptr(),
        out.data_ptr(),
        rows,
        key.shape[1],
        group,
        dim,
        scaling,
        prompt_of.data_ptr(),
        scratch.data_ptr(),
        ctypes.byref(own),
        ctypes.byref(pre),
    )
    return out if code == 0 else None
