"""Float32 linear layers on the CPU through oneDNN, where the BLAS library runs below the core's vector width.

What: `use_cpu_matmul(model, choice)` turns every plain `nn.Linear` of a model on the CPU into a `OneDnnLinear`
(the same module, parameters and state dict; only its forward differs) when `resolve(choice)` says oneDNN, and
returns how many it turned. `OneDnnLinear.forward` computes `x @ weight.T + bias` with oneDNN's matrix product
(`torch.ops.mkldnn._linear_pointwise`) in a float32 autograd node whose backward makes its two products the same
way; anything else (another dtype, autocast, a sharded or offloaded weight, another device) takes the stock
`nn.Linear` path. `mm(a, b)` is the same product for callers that multiply directly (`core.fused_head`).
`resolve`: "blas" keeps torch's default; "onednn" asks for oneDNN; "auto" picks it on AMD cores with AVX-512,
where MKL (torch's BLAS on x86) takes its AVX2 path and oneDNN uses the whole vector width.

Why: on a Zen 5 core MKL's float32 products ran at 88-112 GFLOP/s at the bench models' shapes and oneDNN's at
198-256, a linear layer's forward and backward 1.65-2.13x faster, SmolLM2-135M's GRPO step 1.66x (docs/PERFORMANCE.md). The products are
float32 in both; they differ only in summation order (relative differences around 1e-6, tested).

Run: `use_cpu_matmul(model, "auto")` once after loading; the Role does it for every model it loads
(`<role>.cpu_matmul`); tests in tests/test_cpu_matmul.py.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

CHOICES = ("auto", "onednn", "blas")


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(M, K) @ (K, N) through oneDNN (the operands may be transposed views)."""
    return _linear(a, b.t(), None)


@functools.cache
def available() -> bool:
    """True when this torch build has oneDNN's linear operator on the CPU."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def _cpu_flags(path: Path = Path("/proc/cpuinfo")) -> tuple[str, set[str]]:
    """(vendor id, flags) of the first core listed in `path`; ("", set()) where it cannot be read."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "", set()
    vendor, flags = "", set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "vendor_id" and not vendor:
            vendor = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = set(value.split())
    return vendor, flags


def resolve(choice: str, cpu: tuple[str, set[str]] | None = None) -> bool:
    """Whether `choice` ("auto" | "onednn" | "blas") runs float32 linear layers through oneDNN on this machine
    (`cpu`: (vendor, flags), read from /proc/cpuinfo when None)."""
    if choice not in CHOICES:
        raise ValueError(f"unknown cpu_matmul {choice!r}; use one of {', '.join(CHOICES)}")
    if choice == "blas" or not available():
        return False
    if choice == "onednn":
        return True
    vendor, flags = _cpu_flags() if cpu is None else cpu
    return vendor == "AuthenticAMD" and "avx512f" in flags


class _OneDnnLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _linear(x, weight, bias)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        grad = grad.contiguous()  # (M, N)
        grad_x = _linear(grad, weight.t(), None) if ctx.needs_input_grad[0] else None  # (M, K)
        grad_weight = _linear(grad.t(), x.t(), None) if ctx.needs_input_grad[1] else None  # (N, K)
        grad_bias = grad.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_x, grad_weight, grad_bias


def _plain(t: torch.Tensor | None) -> bool:
    return t is None or (type(t) in (torch.Tensor, torch.nn.Parameter) and type(t.data) is torch.Tensor)


class OneDnnLinear(torch.nn.Linear):
    """An `nn.Linear` whose float32 CPU products run through oneDNN (see module)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight, bias = self.weight, self.bias
        eligible = (
            x.device.type == "cpu"
            and x.dtype == weight.dtype == torch.float32
            and (bias is None or bias.dtype == torch.float32)
            and x.numel() > 0
            and not torch.is_autocast_enabled("cpu")
            and _plain(x)
            and _plain(weight)
            and _plain(bias)
            and weight.device.type == "cpu"
        )
        if not eligible:
            return super().forward(x)
        flat = x.reshape(-1, x.shape[-1])  # (M, K)
        if torch.is_grad_enabled() and (
            x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
        ):
            out = _OneDnnLinear.apply(flat, weight, bias)
        else:
            out = _linear(flat, weight, bias)
        return out.view(*x.shape[:-1], out.shape[-1])


def use_cpu_matmul(model: torch.nn.Module, choice: str) -> int:
    """Turns the plain `nn.Linear` modules of `model` whose weights are on the CPU into `OneDnnLinear` when
    `resolve(choice)`; returns how many it turned (0 when it keeps the stock path)."""
    if not resolve(choice):
        return 0
    turned = 0
    for module in model.modules():
        if type(module) is torch.nn.Linear and module.weight.device.type == "cpu":
            module.__class__ = OneDnnLinear
            turned += 1
    return turned
