"""Checks shared by the tests of the project's linear layers (`accel.cpu_matmul`'s oneDNN layer, `accel.narrow_matmul`'s
kernel layer): a stock `nn.Linear` and its turned twin, their values and gradients, and the stock path wherever the
turned layer does not apply."""

from __future__ import annotations

import torch

from pasodoble.accel.cpu_matmul import use_cpu_matmul


def twins(
    choice: str, bias: bool, in_features: int = 96, out_features: int = 48
) -> tuple[torch.nn.Linear, torch.nn.Linear]:
    """A stock layer and the same weights turned by `use_cpu_matmul(choice)`."""
    torch.manual_seed(0)
    stock = torch.nn.Linear(in_features, out_features, bias=bias)
    turned = torch.nn.Linear(in_features, out_features, bias=bias)
    turned.load_state_dict(stock.state_dict())
    assert use_cpu_matmul(turned, choice) == 1
    return stock, turned


def run(layer: torch.nn.Module, x: torch.Tensor, grad: torch.Tensor):
    """(output, input gradient, parameter gradients) of one forward and backward."""
    layer.zero_grad()
    x = x.detach().clone().requires_grad_(True)
    out = layer(x)
    out.backward(grad)
    grads = [p.grad.clone() for p in layer.parameters()]
    return out.detach(), x.grad, grads


def inputs(shape, in_features: int = 96) -> torch.Tensor:
    """An input of `shape`, or "transposed": a non-contiguous (40, in_features) one."""
    return torch.randn(in_features, 40).t() if shape == "transposed" else torch.randn(*shape)


def assert_same_as(got, want) -> None:
    """`run`'s results of a turned layer against the stock layer's, up to the order of their sums."""
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=1e-5)
    for g, w in zip(got[2], want[2], strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-4)


def assert_stock_path_off_float32(stock: torch.nn.Linear, turned: torch.nn.Linear) -> None:
    """Without gradients the turned layer matches the stock one; under bfloat16 autocast, on an empty input and in
    bfloat16 it takes the stock path (bit for bit). Leaves both layers in bfloat16."""
    x = torch.randn(6, stock.in_features)
    with torch.no_grad():
        torch.testing.assert_close(turned(x), stock(x), rtol=1e-5, atol=1e-5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low, want = turned(x), stock(x)
    assert low.dtype == torch.bfloat16
    torch.testing.assert_close(low, want, rtol=0, atol=0)  # the stock path: autocast's own product
    assert turned(torch.randn(0, stock.in_features)).shape == (0, stock.out_features)
    stock.to(torch.bfloat16), turned.to(torch.bfloat16)
    xb = x.to(torch.bfloat16)
    torch.testing.assert_close(turned(xb), stock(xb), rtol=0, atol=0)
