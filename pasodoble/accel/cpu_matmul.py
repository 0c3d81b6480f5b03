"""Float32 linear layers on the CPU through oneDNN, where the BLAS library runs below the core's vector width.

What: `use_cpu_matmul(model, choice)` turns each plain `nn.Linear` of a model on the CPU with at least
`min_layer_size(choice)` weights into a `OneDnnLinear` (the same module, parameters and state dict; only its forward
differs), and returns how many it turned. `OneDnnLinear.forward` computes `x @ weight.T + bias` with oneDNN's matrix product
(`torch.ops.mkldnn._linear_pointwise`) in a float32 autograd node whose backward makes its two products the same
way; anything else (another dtype, autocast, a sharded or offloaded weight, another device) takes the stock
`nn.Linear` path. `mm(a, b)` is the same product for callers that multiply directly (`update.fused_head`).
`min_layer_size(choice)`: the least weights (in x out features) a layer needs to be turned (None: no layer is).
"blas" keeps torch's default; "onednn" turns every layer; "native" turns every layer whose sizes fit the project's
own kernel into a `accel.narrow_matmul.NarrowLinear`; "auto" picks oneDNN on AMD cores with AVX-512, where MKL
(torch's BLAS on x86) takes its AVX2 path: every layer on a core that runs 512-bit vectors at full width (Zen 5, CPU
family 26 and later), and layers of at least `HALF_WIDTH_MIN_WEIGHTS` weights on one that splits them into two
256-bit halves (Zen 4, family 25), whose narrower layers take the project's kernel (`narrow_below`).

Why: on a Zen 5 core MKL's float32 products ran at 88-112 GFLOP/s at the bench models' shapes and oneDNN's at
198-256, a linear layer's forward and backward 1.65-2.13x faster, SmolLM2-135M's GRPO step 1.66x (docs/PERFORMANCE.md).
On a Zen 4 core the two rates are close (MKL 89-99, oneDNN 101-109 GFLOP/s on large products) and oneDNN's cost per
call and its kernel caches decide: the tiny anchor's layers (96 x 256 at most) ran its GRPO step 10-20% faster and
24-31 MB smaller on MKL; a wide layer's forward and backward (576 x 576 and up, SmolLM2's) ran 1.04-1.18x faster on
oneDNN. Those narrow layers now run faster still on the project's own kernel (`accel.narrow_matmul`, which neither
packs the activations nor zeroes its outputs first). The products are float32 in all three; they differ only in
summation order (relative differences around 1e-6, tested).

Run: `use_cpu_matmul(model, "auto")` once after loading; the Role does it for every model it loads
(`<role>.cpu_matmul`); tests in tests/accel/test_cpu_matmul.py.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import NamedTuple

import torch

CHOICES = ("auto", "onednn", "blas", "native")
# On a core that splits 512-bit vectors in two (Zen 4), "auto" turns layers of at least this many weights (2^18:
# SmolLM2's 576 x 576 and up, not its 576 x 192 or the tiny anchor's 96 x 256; docs/PERFORMANCE.md).
HALF_WIDTH_MIN_WEIGHTS = 1 << 18
# AMD CPU families: 25 (0x19) is Zen 3 and Zen 4 (only Zen 4 has AVX-512), 26 (0x1A) is Zen 5.
FULL_WIDTH_AMD_FAMILY = 26


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(M, K) @ (K, N) through oneDNN (the operands may be transposed views)."""
    return _linear(a, b.t(), None)


@functools.cache
def available() -> bool:
    """True when this torch build has oneDNN's linear operator on the CPU."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


class Cpu(NamedTuple):
    vendor: str  # "AuthenticAMD", "GenuineIntel"; "" where unknown
    family: int  # the CPU family number; 0 where unknown
    flags: set[str]


def _cpu_flags(path: Path = Path("/proc/cpuinfo")) -> Cpu:
    """Vendor id, family and flags of the first core listed in `path`; empty values where it cannot be read."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return Cpu("", 0, set())
    vendor, family, flags = "", 0, set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "vendor_id" and not vendor:
            vendor = value
        elif key == "cpu family" and not family and value.isdigit():
            family = int(value)
        elif key == "flags" and not flags:
            flags = set(value.split())
    return Cpu(vendor, family, flags)


def min_layer_size(choice: str, cpu: Cpu | None = None) -> int | None:
    """The least weights (in x out features) a float32 linear layer needs to run through oneDNN under `choice`
    ("auto" | "onednn" | "blas" | "native") on this machine; None: no layer does (`cpu`: read from /proc/cpuinfo when
    None)."""
    if choice not in CHOICES:
        raise ValueError(f"unknown cpu_matmul {choice!r}; use one of {', '.join(CHOICES)}")
    if choice in ("blas", "native") or not available():
        return None
    if choice == "onednn":
        return 0
    vendor, family, flags = _cpu_flags() if cpu is None else cpu
    if vendor != "AuthenticAMD" or "avx512f" not in flags:
        return None
    return 0 if family >= FULL_WIDTH_AMD_FAMILY else HALF_WIDTH_MIN_WEIGHTS


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

    head_product = staticmethod(mm)  # the product `update.fused_head` runs for this layer as an LM head

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


def narrow_below(choice: str, cpu: Cpu | None = None) -> int:
    """The weights (in x out features) under which a float32 linear layer runs on the project's narrow kernel
    (`accel.narrow_matmul`) under `choice`, where its sizes fit it; 0: no layer does. "native": every layer; "auto": on
    a core that splits 512-bit vectors in two (Zen 4), the layers oneDNN does not take, where the kernel measured
    faster than MKL; elsewhere none (not measured there)."""
    if choice not in CHOICES:
        raise ValueError(f"unknown cpu_matmul {choice!r}; use one of {', '.join(CHOICES)}")
    if choice == "native":
        return 1 << 62
    if choice != "auto":
        return 0
    vendor, family, flags = _cpu_flags() if cpu is None else cpu
    if vendor != "AuthenticAMD" or "avx512f" not in flags or family >= FULL_WIDTH_AMD_FAMILY:
        return 0
    return HALF_WIDTH_MIN_WEIGHTS


def use_cpu_matmul(model: torch.nn.Module, choice: str) -> int:
    """Turns the plain `nn.Linear` modules of `model` whose weights are on the CPU into `OneDnnLinear` where they
    number at least `min_layer_size(choice)`, and into `accel.narrow_matmul.NarrowLinear` where they number fewer than
    `narrow_below(choice)` and their sizes fit that kernel (when it builds), those of one input in a block (q, k and
    v; gate and up) grouped into one call (`narrow_matmul.group_layers`); returns how many it turned (0 when every
    layer keeps the stock path)."""
    from pasodoble.accel import narrow_matmul

    least, below = min_layer_size(choice), narrow_below(choice)
    turned = 0
    for module in model.modules():
        if type(module) is not torch.nn.Linear or module.weight.device.type != "cpu":
            continue
        weights = module.in_features * module.out_features
        if least is not None and weights >= least:
            module.__class__ = OneDnnLinear
        elif (
            weights < below
            and narrow_matmul.takes(module.in_features, module.out_features)
            and narrow_matmul.status() == "on"
        ):
            module.__class__ = narrow_matmul.NarrowLinear
        else:
            continue
        turned += 1
    narrow_matmul.group_layers(model)
    return turned
