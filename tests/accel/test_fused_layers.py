"""The compiled RMSNorm and SiLU-gate kernels (`accel.fused_layers`): values and gradients against the stock modules
in float64, the modules it turns, and where it declines."""

from __future__ import annotations

import copy
import shutil
import sys

import pytest
import torch
import torch.nn.functional as F
from transformers.models.llama.modeling_llama import LlamaRMSNorm
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

from pasodoble.accel import fused_layers, native

needs_compiler = pytest.mark.skipif(
    native.compiler() is None, reason="no C compiler (install gcc, or set CC)"
)


def _stock_norm(x, weight, eps):
    """transformers' RMSNorm, as Llama, Qwen2 and Qwen3 write it."""
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


@needs_compiler
@pytest.mark.parametrize("shape", [(2, 9, 96), (1, 13, 4, 24), (3, 7, 40), (2, 5, 576), (4, 3, 7), (1, 1, 1)])
def test_rms_norm_matches_the_stock_module_in_float64(one_thread, shape):
    torch.manual_seed(sum(shape))
    x64 = torch.randn(*shape, dtype=torch.float64) * 3
    w64 = 1 + 0.3 * torch.randn(shape[-1], dtype=torch.float64)
    dy = torch.randn(*shape, dtype=torch.float64)
    x_ref, w_ref = x64.clone().requires_grad_(), w64.clone().requires_grad_()
    _stock_norm(x_ref, w_ref, 1e-6).backward(dy)
    x, w = x64.float().requires_grad_(), w64.float().requires_grad_()
    y = fused_layers.rms_norm(x, w, 1e-6)
    assert y is not None and y.grad_fn is not None
    y.backward(dy.float())
    assert torch.allclose(y.double(), _stock_norm(x64, w64, 1e-6), rtol=1e-5, atol=1e-6)
    assert torch.allclose(x.grad.double(), x_ref.grad, rtol=1e-5, atol=1e-5)
    assert torch.allclose(w.grad.double(), w_ref.grad, rtol=1e-5, atol=1e-4)


@needs_compiler
def test_rms_norm_of_a_frozen_weight_and_without_grad(one_thread):
    x64, w64 = torch.randn(5, 24, dtype=torch.float64), torch.rand(24, dtype=torch.float64) + 0.5
    dy = torch.randn(5, 24, dtype=torch.float64)
    x_ref = x64.clone().requires_grad_()
    _stock_norm(x_ref, w64, 1e-5).backward(dy)
    x, w = x64.float().requires_grad_(), w64.float()
    fused_layers.rms_norm(x, w, 1e-5).backward(dy.float())
    assert w.grad is None
    assert torch.allclose(x.grad.double(), x_ref.grad, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        y = fused_layers.rms_norm(x, w, 1e-5)
    assert y.grad_fn is None
    assert torch.allclose(y.double(), _stock_norm(x64, w64, 1e-5), rtol=1e-5, atol=1e-6)


@needs_compiler
@pytest.mark.parametrize("shape", [(2, 11, 64), (5, 37), (1,)])
def test_silu_mul_matches_torch_in_float64(one_thread, shape):
    torch.manual_seed(len(shape))
    gate64 = torch.randn(*shape, dtype=torch.float64) * 4
    gate64.view(-1)[0] = -120.0  # far tails: the sigmoid must neither overflow nor turn NaN
    if gate64.numel() > 1:
        gate64.view(-1)[1] = 95.0
    up64, dout = torch.randn(*shape, dtype=torch.float64), torch.randn(*shape, dtype=torch.float64)
    gate_ref, up_ref = gate64.clone().requires_grad_(), up64.clone().requires_grad_()
    (F.silu(gate_ref) * up_ref).backward(dout)
    gate, up = gate64.float().requires_grad_(), up64.float().requires_grad_()
    out = fused_layers.silu_mul(gate, up)
    out.backward(dout.float())
    assert torch.isfinite(out).all() and torch.isfinite(gate.grad).all()
    assert torch.allclose(out.double(), F.silu(gate64) * up64, rtol=1e-5, atol=1e-6)
    assert torch.allclose(gate.grad.double(), gate_ref.grad, rtol=1e-5, atol=1e-6)
    assert torch.allclose(up.grad.double(), up_ref.grad, rtol=1e-5, atol=1e-6)


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=50, hidden_size=40, intermediate_size=72, num_hidden_layers=2, num_attention_heads=5,
        num_key_value_heads=1, max_position_embeddings=64,
    )  # fmt: skip
    torch.manual_seed(1)
    return LlamaForCausalLM(config)


def _rotary_inputs(batch, heads, positions, dim, cos_rows):
    """q as a projection's (B, T, H, D) output seen per head, and the rotary tables of positions offset per row."""
    x = torch.randn(batch, positions, heads, dim, dtype=torch.float64).transpose(1, 2)
    start = torch.arange(cos_rows)[:, None] * 3
    angles = (start + torch.arange(positions))[..., None] / (1e4 ** (torch.arange(0, dim, 2) / dim))
    table = torch.cat([angles, angles], -1)
    return x, table.cos(), table.sin()


@needs_compiler
@pytest.mark.parametrize("shape", [(2, 4, 9, 24, 1), (3, 2, 5, 64, 3), (1, 3, 1, 8, 1)])
def test_rotary_matches_transformers_in_float64(one_thread, shape):
    from transformers.models.qwen3 import modeling_qwen3

    stock = getattr(modeling_qwen3.apply_rotary_pos_emb, "original", modeling_qwen3.apply_rotary_pos_emb)
    torch.manual_seed(sum(shape))
    x64, cos, sin = _rotary_inputs(*shape)
    k64 = torch.randn_like(x64)  # contiguous (B, H, T, D): a layout other than the query's
    grad_q, grad_k = torch.randn_like(x64), torch.randn_like(x64).transpose(1, 2).contiguous().transpose(1, 2)
    ref = [t.clone().requires_grad_() for t in (x64, k64)]
    torch.autograd.backward(stock(*ref, cos, sin), (grad_q, grad_k))
    q, k = (t.float().requires_grad_() for t in (x64, k64))
    outs = [fused_layers.rotary(t, cos.float(), sin.float()) for t in (q, k)]
    assert all(o is not None and o.grad_fn is not None for o in outs)
    torch.autograd.backward(outs, (grad_q.float(), grad_k.float()))
    for out, want in zip(outs, stock(x64, k64, cos, sin), strict=True):
        assert torch.allclose(out.double(), want, rtol=1e-5, atol=1e-6)
    for t, r in zip((q, k), ref, strict=True):
        assert torch.allclose(t.grad.double(), r.grad, rtol=1e-5, atol=1e-6)


@needs_compiler
@pytest.mark.parametrize("family", ["qwen3", "llama"])
def test_a_turned_model_trains_as_the_stock_one(one_thread, tiny_lm, family, monkeypatch):
    """The loss and every parameter's gradient agree with the stock model's; the state dict is the same."""
    stock = copy.deepcopy(tiny_lm[0]) if family == "qwen3" else _llama()
    model = copy.deepcopy(stock)
    turned = fused_layers.use_fused_layers(model)
    modeling = sys.modules[type(stock.model.norm).__module__]
    assert modeling.apply_rotary_pos_emb.original is not None  # the rotary embedding runs the kernel too
    layers = stock.config.num_hidden_layers
    # per layer two norms and the MLP (Qwen3 also normalises queries and keys), the final norm, the rotary embedding
    assert turned == layers * (5 if family == "qwen3" else 3) + 2
    assert list(model.state_dict()) == list(stock.state_dict())
    assert type(model.model.norm).__name__.startswith("Fused")
    assert isinstance(model.model.norm, type(stock.model.norm))
    ids = torch.randint(3, stock.config.vocab_size, (2, 11))
    losses, grads = [], []
    for m in (stock, model):  # the stock model's rotary calls take transformers' code (below)
        loss = m(input_ids=ids, labels=ids).loss
        loss.backward()
        losses.append(loss.detach())
        grads.append({n: p.grad for n, p in m.named_parameters()})
    assert torch.allclose(losses[0], losses[1], rtol=1e-5)
    for name, grad in grads[0].items():  # against each gradient's own scale: the query and key ones are tiny
        assert (grads[1][name] - grad).abs().max() <= 1e-4 * grad.abs().max(), name
    assert fused_layers.use_fused_layers(model) == 0  # already turned
    calls = []
    monkeypatch.setattr(fused_layers, "rope_apply", lambda *a, **k: calls.append(k))
    with torch.no_grad():
        stock(input_ids=ids)  # a model that was not turned keeps transformers' rotary code
    assert calls == []
    twin = copy.deepcopy(model)  # the Role's reference copy
    assert type(twin.model.norm) is type(model.model.norm)


@needs_compiler
def test_other_dtypes_and_threads_run_the_stock_code(one_thread):
    norm, stock = Qwen3RMSNorm(24), Qwen3RMSNorm(24)
    fused_layers.use_fused_layers(norm)
    x = torch.randn(3, 24)
    assert fused_layers.rms_norm(x.bfloat16(), norm.weight, 1e-6) is None
    assert torch.equal(norm(x.bfloat16()), stock(x.bfloat16()))
    assert fused_layers.rms_norm(x.t(), torch.ones(3), 1e-6) is None  # not contiguous
    assert fused_layers.silu_mul(x, x[:, :12]) is None  # shapes differ
    cos = torch.ones(1, 5, 24)
    assert fused_layers.rotary(torch.randn(1, 2, 5, 24), cos, cos.clone().requires_grad_()) is None
    assert (
        fused_layers.rotary(torch.randn(1, 2, 5, 24), cos[..., :12], cos[..., :12]) is None
    )  # partial rotary
    torch.set_num_threads(2)
    assert fused_layers.rms_norm(x, norm.weight, 1e-6) is None
    assert torch.equal(norm(x), stock(x))


def test_only_known_modules_are_turned():
    norm = LlamaRMSNorm(8)
    other = torch.nn.LayerNorm(8)
    assert fused_layers.use_fused_layers(torch.nn.ModuleList([norm, other])) == 1
    assert type(other) is torch.nn.LayerNorm


def test_a_failed_build_warns_once_and_leaves_torch(fresh_kernel, monkeypatch, one_thread):
    false = shutil.which("false")
    if false is None:
        pytest.skip("no `false` command")
    monkeypatch.setenv("CC", false)
    norm = Qwen3RMSNorm(16)
    fused_layers.use_fused_layers(norm)
    x = torch.randn(2, 16)
    with pytest.warns(UserWarning, match="fused layer kernels unavailable") as caught:
        assert torch.equal(norm(x), _stock_norm(x, norm.weight, norm.variance_epsilon))
        assert fused_layers.silu_mul(x, x) is None
    assert len(caught) == 1
    assert fused_layers.status().startswith("unavailable:")


def test_off_by_its_switch(fresh_kernel, accel_switch, one_thread):
    accel_switch(fused_layers="off")
    assert fused_layers.status() == "off (accel.fused_layers)"
    assert fused_layers.rms_norm(torch.randn(2, 8), torch.ones(8), 1e-6) is None


@needs_compiler
def test_a_second_derivative_is_refused_not_wrong(one_thread):
    x = torch.randn(3, 16, requires_grad=True)
    out = fused_layers.rms_norm(x, torch.ones(16), 1e-6)
    (grad,) = torch.autograd.grad(out.square().sum(), x, create_graph=True)
    with pytest.raises(RuntimeError):
        grad.sum().backward()
