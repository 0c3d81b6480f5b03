"""Compiled CPU kernels for the RMSNorm, the rotary embedding and the gated MLP's activation of Llama-family models,
with their backward.

What: `use_fused_layers(model)` turns each RMSNorm module of transformers' Llama, Qwen2 and Qwen3 (and the models
built on them, such as SmolLM2) into a subclass whose forward is `rms_norm`, and each gated MLP whose activation is
SiLU into one whose forward is `down_proj(silu_mul(gate_proj(x), up_proj(x)))`; parameters, state dict and module
tree are unchanged. Their rotary embedding modules are turned too: the cos and sin they make carry a mark, and those
architectures' `apply_rotary_pos_emb` (a function of their modeling module, which the attention looks up at each
call) is pointed, once per process, at a wrapper that sends marked calls to `rotary` and every other call, such as
one from a model that was not turned, to transformers' function. It returns how many modules it turned.
`rms_norm`, `silu_mul` and `rotary` run the C kernels (`fused_layers.c`) with their own backward when the call is
float32 on the CPU with one torch thread, and transformers' own code otherwise (another dtype, device or thread
count, a layout the kernel does not take), so a model on a GPU, in bfloat16 or on several threads computes exactly
as before. `status()` says whether the kernels are on, for the start line and benches.

Why: torch runs the norm as six elementwise operators forward and about ten backward, the activation as three and
five, the rotary embedding as six a tensor, each a pass over memory with its own output; on the tiny bench model
these took about as long as the update's attention. One pass each forward and backward took 7-15% off that
model's update, and the norm and activation no longer keep intermediate tensors for the backward (figures in
docs/PERFORMANCE.md).

How it is built: as the other kernels, by `accel.native` (the system C compiler, cached under
`$PASODOBLE_CACHE/native/`); no compiler leaves transformers' code with a one-line warning.
`accel.fused_layers: off` (config) turns the kernels off.

Run: `use_fused_layers(model)` once after loading; the Role does it for every model it loads. Tests in
tests/accel/test_fused_layers.py compare values and gradients with transformers' code in float64.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import torch
from torch.autograd.function import once_differentiable

from pasodoble.accel import native

SOURCE = Path(__file__).parent / "csrc" / "fused_layers.c"
KEY = "fused_layers"  # its switch, `accel.fused_layers`; "off": transformers' code always
# the RMSNorms that compute weight * (x * rsqrt(mean(x^2) + eps)), as these write it
NORMS = ("LlamaRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm")
MLPS = ("LlamaMLP", "Qwen2MLP", "Qwen3MLP")  # down_proj(act_fn(gate_proj(x)) * up_proj(x))
SILU = ("silu", "swish")
# the modeling modules whose apply_rotary_pos_emb is x * cos + rotate_half(x) * sin over the whole head, and their
# rotary embedding modules (which make cos and sin)
ROTARY = tuple(f"transformers.models.{m}.modeling_{m}" for m in ("llama", "qwen2", "qwen3"))
ROTARY_EMBEDDINGS = ("LlamaRotaryEmbedding", "Qwen2RotaryEmbedding", "Qwen3RotaryEmbedding")
MARK = "_pasodoble_rotary"  # attribute of the cos and sin tensors of a turned model's rotary embedding

_state: dict[str, object] = {}  # "lib": the C functions by name, or None; "why": the reason it is None


def _bind(lib: ctypes.CDLL) -> dict:
    ptr, n = ctypes.c_void_p, ctypes.c_int64
    fns = {
        "norm": (lib.pasodoble_rms_norm_forward_f32, [ptr, ptr, ptr, ptr, n, n, ctypes.c_float]),
        "norm_backward": (lib.pasodoble_rms_norm_backward_f32, [ptr, ptr, ptr, ptr, ptr, ptr, n, n]),
        "silu_mul": (lib.pasodoble_silu_mul_forward_f32, [ptr, ptr, ptr, n]),
        "silu_mul_backward": (lib.pasodoble_silu_mul_backward_f32, [ptr, ptr, ptr, ptr, ptr, n]),
        "rope": (lib.pasodoble_rope_f32, [ptr, ptr, ptr, ptr, ptr, ptr, n, n, n, n, n, n, ctypes.c_int]),
    }
    for fn, argtypes in fns.values():
        fn.argtypes, fn.restype = argtypes, None
    fns["norm_backward"][0].restype = ctypes.c_int
    return {name: fn for name, (fn, _) in fns.items()}


INSTEAD = "norms, rotary embeddings and SiLU gates take transformers' code"  # the warning's end, should a build fail


def _load() -> dict | None:
    return native.load(_state, SOURCE, KEY, "fused layer kernels", _bind, INSTEAD)


def status() -> str:
    """'on', or why not ('off (...)', 'unavailable: ...'), building the kernels if they were not tried yet."""
    return "on" if _load() is not None else str(_state["why"])


def serves(*tensors: torch.Tensor) -> bool:
    """Whether the norm and SiLU kernels take these tensors: contiguous float32 on the CPU, one torch thread."""
    return (
        torch.get_num_threads() == 1
        and all(t.dtype == torch.float32 and t.device.type == "cpu" and t.is_contiguous() for t in tensors)
        and _load() is not None
    )


class _RmsNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        y, rstd = norm_forward(x, weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    @once_differentiable  # its backward is the C kernel: no second derivative
    def backward(ctx, grad):
        x, weight, rstd = ctx.saved_tensors
        return *norm_backward(x, weight, rstd, grad.contiguous(), ctx.needs_input_grad[1]), None


def norm_backward(x, weight, rstd, grad, want_weight: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(grad of x, grad of weight or None) of `norm_forward`'s output for `grad` (contiguous, as x)."""
    dim = x.shape[-1]
    dx = torch.empty_like(x)
    dw = torch.zeros(dim, dtype=torch.float64) if want_weight else None
    code = _load()["norm_backward"](x.data_ptr(), weight.data_ptr(), rstd.data_ptr(), grad.data_ptr(),
                                    dx.data_ptr(), None if dw is None else dw.data_ptr(), x.numel() // dim, dim)  # fmt: skip
    if code != 0:
        raise MemoryError(f"RMSNorm kernel's backward failed ({code}) at {tuple(x.shape)}")
    return dx, None if dw is None else dw.to(weight.dtype)


def norm_forward(x: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(the norm of x's rows, their reciprocal RMS) through the kernel, no autograd (`serves` must hold)."""
    dim = x.shape[-1]
    y = torch.empty_like(x)
    rstd = torch.empty(x.numel() // dim)
    _load()["norm"](
        x.data_ptr(), weight.data_ptr(), y.data_ptr(), rstd.data_ptr(), x.numel() // dim, dim, eps
    )
    return y, rstd


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor | None:
    """`weight * (x * rsqrt(mean(x^2, -1) + eps))` through the kernel, or None where it does not apply."""
    if x.numel() == 0 or weight.shape != x.shape[-1:] or not serves(x, weight):
        return None
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return _RmsNorm.apply(x, weight, float(eps))
    return norm_forward(x, weight, float(eps))[0]


class _SiluMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate, up):
        ctx.save_for_backward(gate, up)
        return silu_mul_forward(gate, up)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        gate, up = ctx.saved_tensors
        return silu_mul_backward(gate, up, grad.contiguous())


def silu_mul_backward(gate, up, grad) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad of gate, grad of up) of `silu_mul_forward`'s output for `grad` (contiguous, as gate)."""
    dgate, dup = torch.empty_like(gate), torch.empty_like(up)
    _load()["silu_mul_backward"](gate.data_ptr(), up.data_ptr(), grad.data_ptr(), dgate.data_ptr(),
                                 dup.data_ptr(), gate.numel())  # fmt: skip
    return dgate, dup


def silu_mul_forward(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """`silu(gate) * up` through the kernel, no autograd (`serves` must hold)."""
    out = torch.empty_like(gate)
    _load()["silu_mul"](gate.data_ptr(), up.data_ptr(), out.data_ptr(), gate.numel())
    return out


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor | None:
    """`silu(gate) * up` through the kernel, or None where it does not apply."""
    if gate.shape != up.shape or gate.numel() == 0 or not serves(gate, up):
        return None
    if torch.is_grad_enabled() and (gate.requires_grad or up.requires_grad):
        return _SiluMul.apply(gate, up)
    return silu_mul_forward(gate, up)


def rope_apply(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, like: torch.Tensor, backward: bool
) -> torch.Tensor:
    """`x` rotated (or, `backward`, a gradient rotated back) into a tensor laid out as `like`."""
    out = torch.empty_like(like)
    batch, heads, positions, dim = x.shape
    strides = [(ctypes.c_int64 * 3)(*t.stride()[:3]) for t in (x, out)]
    rows = cos.stride(0) if cos.shape[0] > 1 else 0
    _load()["rope"](x.data_ptr(), strides[0], out.data_ptr(), strides[1], cos.data_ptr(), sin.data_ptr(), rows,
                    cos.stride(1), batch, heads, positions, dim, int(backward))  # fmt: skip
    return out


class _Rope(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cos, sin):
        ctx.save_for_backward(cos, sin)
        return rope_apply(x, cos, sin, x, backward=False)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        cos, sin = ctx.saved_tensors
        if grad.stride(-1) != 1:
            grad = grad.contiguous()
        return rope_apply(grad, cos, sin, grad, backward=True), None, None


def _rope_serves(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> bool:
    batch, _, positions, dim = x.shape
    return (
        x.numel() > 0
        and x.dtype == torch.float32
        and x.device.type == "cpu"
        and x.stride(-1) == 1
        and rope_tables_serve(cos, sin, batch, positions, dim)
    )


def rope_tables_serve(cos: torch.Tensor, sin: torch.Tensor, batch: int, positions: int, dim: int) -> bool:
    """Whether the rotary kernel takes `cos` and `sin` for `batch` rows of `positions` positions of heads `dim` wide,
    on one torch thread."""
    return (
        torch.get_num_threads() == 1
        and dim % 2 == 0
        and all(t.dtype == torch.float32 and t.device.type == "cpu" and t.stride(-1) == 1 for t in (cos, sin))
        and cos.dim() == 3
        and cos.shape[0] in (1, batch)
        and cos.shape[1:] == (positions, dim)
        and sin.shape == cos.shape
        and sin.stride() == cos.stride()
        and not (cos.requires_grad or sin.requires_grad)
        and _load() is not None
    )


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor | None:
    """`x * cos[:, None] + rotate_half(x) * sin[:, None]` for `x` (B, H, T, D) and `cos`, `sin` (B or 1, T, D)
    through the kernel, or None where it does not apply."""
    if x.dim() != 4 or not _rope_serves(x, cos, sin):
        return None
    if torch.is_grad_enabled() and x.requires_grad:
        return _Rope.apply(x, cos, sin)
    return rope_apply(x, cos, sin, x, backward=False)


def _rotary_function(original):
    """transformers' `apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)` through `rotary` where it applies."""

    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        if unsqueeze_dim == 1 and getattr(cos, MARK, False):  # made by a turned model
            q_out, k_out = rotary(q, cos, sin), rotary(k, cos, sin)
            if q_out is not None and k_out is not None:
                return q_out, k_out
        return original(q, k, cos, sin, unsqueeze_dim)

    apply_rotary_pos_emb.original = original
    return apply_rotary_pos_emb


def _use_fused_rotary(module_name: str) -> None:
    """Points the `apply_rotary_pos_emb` of transformers' modeling module `module_name` (of `ROTARY`) at the kernel,
    once per process (the attention modules look it up there at each call). It takes the kernel only for the cos and
    sin of a turned rotary embedding module, so models that were not turned compute as before."""
    module = sys.modules.get(module_name)
    current = getattr(module, "apply_rotary_pos_emb", None)
    if module_name in ROTARY and current is not None and not hasattr(current, "original"):
        module.apply_rotary_pos_emb = _rotary_function(current)


def _rotary_embedding_forward(self, x: torch.Tensor, position_ids: torch.Tensor):
    cos, sin = super(type(self), self).forward(x, position_ids)
    setattr(cos, MARK, True)
    setattr(sin, MARK, True)
    return cos, sin


def _norm_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
    out = rms_norm(hidden_states, self.weight, self.variance_epsilon)
    return out if out is not None else super(type(self), self).forward(hidden_states)


def _mlp_forward(self, x: torch.Tensor) -> torch.Tensor:
    gate, up = self.gate_proj(x), self.up_proj(x)
    mixed = silu_mul(gate, up)
    return self.down_proj(mixed if mixed is not None else self.act_fn(gate) * up)


def is_turned(module: torch.nn.Module) -> bool:
    """Whether `module` is a norm or MLP that `use_fused_layers` turned (its forward the kernels')."""
    return type(module).forward in (_norm_forward, _mlp_forward)


_fused_classes: dict[type, type] = {}


def _fused_class(cls: type, forward) -> type:
    if cls not in _fused_classes:
        _fused_classes[cls] = type(
            f"Fused{cls.__name__}", (cls,), {"forward": forward, "__module__": __name__}
        )
    return _fused_classes[cls]


def use_fused_layers(model: torch.nn.Module) -> int:
    """Turns `model`'s RMSNorm modules of `NORMS`, rotary embeddings of `ROTARY_EMBEDDINGS` and SiLU MLPs of `MLPS`
    into their fused subclasses; returns how many it turned. A module already turned, or of another class, is left as
    it is."""
    turned = 0
    for module in model.modules():
        name = type(module).__name__
        if name in NORMS and isinstance(getattr(module, "weight", None), torch.Tensor):
            module.__class__ = _fused_class(type(module), _norm_forward)
        elif name in ROTARY_EMBEDDINGS and type(module).__module__ in ROTARY:
            _use_fused_rotary(type(module).__module__)
            module.__class__ = _fused_class(type(module), _rotary_embedding_forward)
        elif name in MLPS and getattr(getattr(module, "config", None), "hidden_act", None) in SILU:
            module.__class__ = _fused_class(type(module), _mlp_forward)
        else:
            continue
        turned += 1
    return turned
