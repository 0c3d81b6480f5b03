"""Narrow float32 linear layers on one CPU thread through the project's compiled products.

What: `NarrowLinear` is an `nn.Linear` (same parameters and state dict) whose forward computes `x @ weight.T + bias`
with the kernel's products (`narrow_matmul.c`) in a float32 autograd node whose backward makes its two products the
same way. It applies where `applies(x, weight)` holds: float32 on the CPU, plain tensors, one torch thread, no
autocast, in and out features multiples of 16, and the kernel built; anything else takes the stock `nn.Linear`
path. The forward reads the weight transposed, made once per update pass or generate call (`reuse_transposes`).
`mm(a, b)` is the same product for callers that multiply directly (`core.fused_head`), torch's where the layout does
not fit.
`core.cpu_matmul.use_cpu_matmul` turns layers into `NarrowLinear` (`cpu_matmul: auto` on a Zen 4 core for layers
under its oneDNN threshold, `cpu_matmul: native` for every layer it `takes`).

Why: at the tiny anchor's shapes (2,112 rows of 96 to 256 features) torch's BLAS (MKL) packs both operands and
zeroes its output before each product; the kernel reads the activations where they are and writes each output once.
On a Zen 4 core it ran the update's product shapes 1.17x faster than `torch.mm`, and the tiny anchor's update 1.13-1.18x
(docs/PERFORMANCE.md). The sums
are float32 in both; they differ in order only (relative differences around 1e-6, tested).

How it is built: as `core.train_attention`, by `core.native` (the system C compiler, `-O3 -march=native`, cached
under `$PASODOBLE_CACHE/native/`). No compiler, or a failed build, leaves torch's products with a one-line warning.
`PASODOBLE_NARROW_MATMUL=off` turns the kernel off.

Run: `use_cpu_matmul(model, "native")`; tests in tests/test_narrow_matmul.py.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from pathlib import Path

import torch

from pasodoble.core import native

SOURCE = Path(__file__).with_name("narrow_matmul.c")
ENV = "PASODOBLE_NARROW_MATMUL"  # "off": torch's products always
LANES = 16  # the kernel's vector width: output rows are read and written 16 floats at a time
TN_BLOCK = 128  # rows of A and B the weight gradient sums at a time (both stay in cache across C's tiles)

_state: dict[str, object] = {}  # "lib": (nn, tn) or None; "why": the reason it is None


def _bind(lib: ctypes.CDLL):
    p, i = ctypes.c_void_p, ctypes.c_int64
    nn, tn = lib.pasodoble_narrow_nn, lib.pasodoble_narrow_tn
    nn.argtypes = [p, i, p, i, p, i, i, i, i]
    tn.argtypes = [p, i, p, i, p, i, i, i, i, i]
    nn.restype = tn.restype = ctypes.c_int
    return nn, tn


def _load():
    """The kernel's (nn, tn) C functions, built and loaded once per process, or None."""
    return native.load(
        _state, SOURCE, ENV, "narrow matmul kernel", _bind, "linear layers take torch's products"
    )


def status() -> str:
    """'on', or why not ('off (...)', 'unavailable: ...'), building the kernel if it was not tried yet."""
    return "on" if _load() is not None else str(_state["why"])


def fits(in_features: int, out_features: int) -> bool:
    """Whether a layer of these sizes runs its forward and backward on the kernel (both multiples of its vector
    width)."""
    return in_features % LANES == 0 and out_features % LANES == 0 and in_features > 0 and out_features > 0


def takes(in_features: int, out_features: int) -> bool:
    """Whether `core.cpu_matmul` turns a layer of these sizes into a `NarrowLinear`: its in features a multiple of
    16. Where its out features are not (an LM head over a vocabulary of 287), its own forward keeps the stock path and
    the fused head's products (`mm`) run on the kernel all the same."""
    return in_features % LANES == 0 and in_features > 0 and out_features > 0


def _rows(x: torch.Tensor) -> bool:
    """A 2-D float32 CPU tensor whose rows are contiguous."""
    return x.dim() == 2 and x.stride(1) == 1 and x.dtype == torch.float32 and x.device.type == "cpu"


PROFILED = "pasodoble::narrow_mm"  # under torch.profiler each call is an event "PROFILED(m,k,n)" (bench/op_profile.py)


def _seen(m: int, k: int, n: int):
    """Under torch.profiler, an event named with the product's sizes (the profiler cannot see into the kernel);
    nothing otherwise."""
    if torch.autograd._profiler_enabled():
        return torch.profiler.record_function(f"{PROFILED}({m},{k},{n})")
    return contextlib.nullcontext()


def nn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a (M, K) @ b (K, N), rows contiguous in both, N a multiple of 16."""
    (m, k), n = a.shape, b.shape[1]
    out = torch.empty(m, n)
    with _seen(m, k, n):
        code = m and _load()[0](
            a.data_ptr(), a.stride(0), b.data_ptr(), b.stride(0), out.data_ptr(), n, m, k, n
        )
    if code:
        raise ValueError(f"narrow matmul: {n} output columns are not a multiple of {LANES}")
    return out


def tn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a.T @ b for a (M, N) and b (M, K), rows contiguous in both, K a multiple of 16: (N, K)."""
    (m, n), k = a.shape, b.shape[1]
    out = torch.empty(n, k)
    with _seen(n, m, k):
        code = _load()[1](
            a.data_ptr(), a.stride(0), b.data_ptr(), b.stride(0), out.data_ptr(), k, m, n, k, TN_BLOCK
        )
    if code:
        raise ValueError(f"narrow matmul: {k} output columns are not a multiple of {LANES}")
    return out


# per thread, `made`: inside `reuse_transposes()`, {key of a weight: (an alias of it, its transpose)}
_scope = threading.local()


@contextlib.contextmanager
def reuse_transposes():
    """Inside, `transposed` makes a weight's transpose once and reuses it: for a pass of an update or a generate call,
    when the weights cannot change. Outside, every call transposes afresh, so nothing stale is read after a step or a
    load, whatever bumps or skips the version counter. Nested scopes share the outer one; the scope is the calling
    thread's. (`core.fused_head.reuse_head_casts` enters it.)"""
    outer = getattr(_scope, "made", None)
    _scope.made = {} if outer is None else outer
    try:
        yield
    finally:
        _scope.made = outer


def transposed(weight: torch.Tensor) -> torch.Tensor:
    """`weight.T` made contiguous, with zero columns after its own up to a multiple of 16 (a vocabulary of 287 rows
    gives 288 columns); inside `reuse_transposes()` once per weight (keyed on its memory, shape and version; the
    scope holds an alias, so that memory cannot be reused by another tensor while it is a key)."""

    def make(w: torch.Tensor) -> torch.Tensor:
        rows, columns = w.shape
        out = torch.zeros(columns, -(-rows // LANES) * LANES, dtype=w.dtype)
        out[:, :rows] = w.t()
        return out

    made = getattr(_scope, "made", None)
    if made is None:
        return make(weight.detach())
    key = (weight.data_ptr(), tuple(weight.shape), weight.stride(), weight._version)
    if key not in made:
        made[key] = (weight.detach(), make(weight.detach()))
    return made[key][1]


def mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(M, K) @ (K, N) through the kernel where the operands' layout fits it, else `torch.mm`: `b` a transposed
    weight (any N: the product runs over the padded transpose and returns a view of its first N columns, rows
    contiguous), rows contiguous in both (N a multiple of 16), or `a` a transposed matrix (`b`'s columns a multiple of
    16)."""
    if torch.get_num_threads() == 1 and _load() is not None and a.dtype == b.dtype == torch.float32:
        n = b.shape[1]
        if _rows(a) and b.dim() == 2 and b.stride(0) == 1 and b.stride(1) != 1:  # b = W.T
            return nn(a, transposed(b.t()))[:, :n]
        if n % LANES == 0 and _rows(a) and _rows(b):
            return nn(a, b)
        if n % LANES == 0 and a.dim() == 2 and a.stride(0) == 1 and _rows(a.t()) and _rows(b):  # a = X.T
            return tn(a.t(), b)
    return torch.mm(a, b)


class _NarrowLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, weight_t):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        out = nn(x, weight_t)
        return out.add_(bias) if bias is not None else out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        grad = grad.contiguous()  # (M, N)
        grad_x = nn(grad, weight.detach()) if ctx.needs_input_grad[0] else None  # (M, K)
        grad_weight = tn(grad, x) if ctx.needs_input_grad[1] else None  # (N, K)
        grad_bias = grad.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_x, grad_weight, grad_bias, None


def _plain(t: torch.Tensor | None) -> bool:
    return t is None or (type(t) in (torch.Tensor, torch.nn.Parameter) and type(t.data) is torch.Tensor)


def applies(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether `NarrowLinear` runs a call on these tensors on the kernel (see module)."""
    return (
        x.device.type == "cpu"
        and weight.device.type == "cpu"
        and x.dtype == weight.dtype == torch.float32
        and (bias is None or bias.dtype == torch.float32)
        and x.numel() > 0
        and fits(weight.shape[1], weight.shape[0])
        and torch.get_num_threads() == 1
        and not torch.is_autocast_enabled("cpu")
        and _plain(x)
        and _plain(weight)
        and _plain(bias)
        and _load() is not None
    )


class NarrowLinear(torch.nn.Linear):
    """An `nn.Linear` whose float32 products run on the project's kernel where it applies (see module)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight, bias = self.weight, self.bias
        if not applies(x, weight, bias):
            return super().forward(x)
        flat = x.reshape(-1, x.shape[-1])  # (M, K)
        if flat.stride(1) != 1:
            flat = flat.contiguous()
        if torch.is_grad_enabled() and (
            x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
        ):
            out = _NarrowLinear.apply(flat, weight, bias, transposed(weight))
        else:
            out = nn(flat, transposed(weight))
            if bias is not None:
                out.add_(bias)
        return out.view(*x.shape[:-1], out.shape[-1])
