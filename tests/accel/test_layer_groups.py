"""Layers of one input in one kernel call (`accel.narrow_matmul`'s `nn_sum`, `nn_out`, `tn_parts` and
`InputGroup`): the parts' products against torch's, a block's q, k and v (gate and up) against the stock layers in
values and gradients, and every call the group cannot share run alone."""

from __future__ import annotations

import pytest
import torch

from pasodoble.accel import narrow_matmul
from pasodoble.accel.cpu_matmul import use_cpu_matmul
from pasodoble.accel.narrow_matmul import InputGroup, NarrowLinear

pytestmark = [
    pytest.mark.skipif(narrow_matmul.status() != "on", reason="the narrow kernel could not be built"),
    pytest.mark.usefixtures("one_thread"),
]

WIDTHS = (96, 48, 48)  # q, k and v of the tiny anchor's blocks


@pytest.mark.parametrize("m", [0, 1, 9, 130])
def test_parts_products_equal_torch(m):
    torch.manual_seed(m)
    wide = torch.randn(m, 120)
    x = wide[:, 5:101]  # (m, 96), rows 120 floats apart
    bs = [torch.randn(96, n) for n in (16, 48, 32)]
    for got, b in zip(narrow_matmul.nn_out(x, bs), bs, strict=True):
        torch.testing.assert_close(got, x @ b, rtol=1e-5, atol=1e-5)
    grads = [torch.randn(m, n) for n in (40, 8, 24)]  # any widths: they are the output rows
    weights = [torch.randn(n, 32) for n in (40, 8, 24)]
    want = sum(g @ w for g, w in zip(grads, weights, strict=True))
    torch.testing.assert_close(narrow_matmul.nn_sum(list(zip(grads, weights))), want, rtol=1e-5, atol=1e-4)
    b = torch.randn(m, 32)
    for got, g in zip(narrow_matmul.tn_parts(grads, b), grads, strict=True):
        torch.testing.assert_close(got, g.t() @ b, rtol=1e-5, atol=1e-4)


def test_too_many_parts_or_odd_widths_are_refused():
    x = torch.randn(4, 16)
    with pytest.raises(ValueError, match="too many parts"):
        narrow_matmul.nn_out(x, [torch.randn(16, 16)] * (narrow_matmul.MAX_PARTS + 1))
    with pytest.raises(ValueError, match="multiples of 16"):
        narrow_matmul.nn_out(x, [torch.randn(16, 16), torch.randn(16, 20)])


def block(bias: bool, widths=WIDTHS, names=("q_proj", "k_proj", "v_proj")):
    """(stock layers, the same turned and grouped, the module holding them)."""
    torch.manual_seed(0)
    stock = [torch.nn.Linear(96, n, bias=bias) for n in widths]
    holder = torch.nn.Module()
    for name, layer in zip(names, stock, strict=True):
        twin = torch.nn.Linear(96, layer.out_features, bias=bias)
        twin.load_state_dict(layer.state_dict())
        setattr(holder, name, twin)
    assert use_cpu_matmul(holder, "native") == len(widths)
    turned = [getattr(holder, name) for name in names]
    assert all(type(t) is NarrowLinear for t in turned)
    assert turned[0].input_group is turned[-1].input_group
    return stock, turned, holder


def forward_backward(layers, x, used):
    """The layers' outputs on `x` (called in order), a loss on the outputs of `used`, its gradients."""
    x = x.detach().clone().requires_grad_(True)
    outs = [layer(x) for layer in layers]
    sum((outs[k] * torch.linspace(-1, 1, outs[k].shape[-1])).pow(2).sum() for k in used).backward()
    return [o.detach() for o in outs], x.grad, [(layer.weight.grad, layer.bias) for layer in layers]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("used", [(0, 1, 2), (0, 1)])
def test_a_block_s_layers_in_one_call_equal_the_stock_layers(bias, used):
    stock, turned, _ = block(bias)
    x = torch.randn(3, 37, 96)
    with torch.profiler.profile() as prof:
        got = forward_backward(turned, x, used)
    calls = [e.name for e in prof.events() if e.name.startswith(narrow_matmul.PROFILED)]
    # forward, input gradient, weight gradients: one call each for the whole block
    assert calls == [f"{narrow_matmul.PROFILED}(111,96,192)"] + [
        f"{narrow_matmul.PROFILED}(111,{sum(WIDTHS[k] for k in used)},96)",
        f"{narrow_matmul.PROFILED}({sum(WIDTHS[k] for k in used)},111,96)",
    ]
    want = forward_backward(stock, x, used)
    for a, b in zip(got[0], want[0], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=1e-4)
    for k, ((gw, _), (ww, _)) in enumerate(zip(got[2], want[2], strict=True)):
        if k not in used:  # an output nothing read: no gradient, as for the layer alone
            assert gw is None and ww is None
            continue
        torch.testing.assert_close(gw, ww, rtol=1e-5, atol=1e-4)
    if bias:  # a bias gradient exactly where the stock layer has one
        for k, (t, s) in enumerate(zip(turned, stock, strict=True)):
            assert (t.bias.grad is None) == (s.bias.grad is None) == (k not in used)
            if s.bias.grad is not None:
                torch.testing.assert_close(t.bias.grad, s.bias.grad, rtol=1e-5, atol=1e-4)


def test_calls_the_group_cannot_share_run_alone():
    stock, turned, _ = block(bias=True)
    q, k, v = turned
    x, y = torch.randn(5, 96), torch.randn(5, 96)
    want = [layer(x).detach() for layer in stock]
    with torch.no_grad():
        torch.testing.assert_close(k(x), want[1], rtol=1e-5, atol=1e-5)  # out of order: alone
        q(x)
        torch.testing.assert_close(k(y), stock[1](y), rtol=1e-5, atol=1e-5)  # another input: alone
        torch.testing.assert_close(v(x), want[2], rtol=1e-5, atol=1e-5)  # still held for x
        q(x)
        x.mul_(2.0)  # written in place after the shared call: its held outputs are stale
        torch.testing.assert_close(k(x), stock[1](x), rtol=1e-5, atol=1e-5)
    q(x)  # with gradients on; a sibling that asks without runs alone
    with torch.no_grad():
        torch.testing.assert_close(v(x), stock[2](x), rtol=1e-5, atol=1e-5)
    group = q.input_group
    assert group.output(k, x) is not None and group.output(v, x).requires_grad  # held for the grad-mode calls
    assert isinstance(group, InputGroup) and group.output(v, x) is None  # nothing held past its calls


def test_gate_and_up_group_and_the_switch_turns_groups_off(accel_switch):
    _, turned, _ = block(False, widths=(256, 256), names=("gate_proj", "up_proj"))
    assert turned[0].input_group.layers == tuple(turned)
    accel_switch(layer_groups="off")
    holder = torch.nn.Module()
    holder.q_proj, holder.k_proj, holder.v_proj = (torch.nn.Linear(96, n) for n in WIDTHS)
    use_cpu_matmul(holder, "native")
    assert "input_group" not in holder.q_proj.__dict__
    accel_switch()
    mixed = torch.nn.Module()  # widths of input that differ: no group
    mixed.gate_proj, mixed.up_proj = torch.nn.Linear(96, 64), torch.nn.Linear(64, 64)
    use_cpu_matmul(mixed, "native")
    assert "input_group" not in mixed.gate_proj.__dict__
    wide_q = torch.nn.Module()  # SmolLM2's shape of things: q on another kernel, k and v grouped
    wide_q.q_proj, wide_q.k_proj, wide_q.v_proj = (torch.nn.Linear(96, n) for n in WIDTHS)
    use_cpu_matmul(wide_q, "native")
    wide_q.q_proj.__class__ = torch.nn.Linear
    del wide_q.q_proj.input_group
    assert narrow_matmul.group_layers(wide_q) == 1
    assert wide_q.k_proj.input_group.layers == (wide_q.k_proj, wide_q.v_proj)


def test_a_copied_model_groups_its_own_layers():
    import copy
    import pickle

    _, turned, holder = block(bias=False)
    turned[0](torch.randn(2, 96))  # something held
    for twin in (copy.deepcopy(holder), pickle.loads(pickle.dumps(holder))):
        group = twin.q_proj.input_group
        assert group.layers == (twin.q_proj, twin.k_proj, twin.v_proj) and group is twin.v_proj.input_group
        x = torch.randn(4, 96)
        torch.testing.assert_close(twin.k_proj(x), holder.k_proj(x), rtol=1e-5, atol=1e-5)
