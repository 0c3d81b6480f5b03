"""oneDNN linear layers: the stock layer's values and gradients, the stock path wherever they do not apply, and the
choice of kernel by name and by CPU."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from pasodoble.accel import cpu_matmul
from pasodoble.accel.cpu_matmul import Cpu, OneDnnLinear, min_layer_size, use_cpu_matmul
from pasodoble.errors import ConfigError
from pasodoble.roles.role import Role, RoleConfig, Sample
from pasodoble.update.fused_head import head_logprobs
from tests.linear_helpers import assert_same_as, assert_stock_path_off_float32, inputs, run, twins
from tests.loop_helpers import save_tiny

needs_onednn = pytest.mark.skipif(not cpu_matmul.available(), reason="this torch build has no oneDNN linear")


@needs_onednn
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(300, 96), (5, 7, 96), "transposed"])
def test_values_and_gradients_equal_the_stock_layer(bias, shape):
    stock, turned = twins("onednn", bias, out_features=33)
    assert type(turned) is OneDnnLinear and isinstance(turned, torch.nn.Linear)
    x = inputs(shape)
    grad = torch.randn(*x.shape[:-1], 33)
    assert_same_as(run(turned, x, grad), run(stock, x, grad))


@needs_onednn
def test_the_layer_differs_from_stock_only_in_summation_order_and_runs_oneDNN():
    stock, turned = twins("onednn", bias=True, out_features=512)
    x = torch.randn(64, 96)
    with torch.profiler.profile() as prof:
        out = turned(x)
    names = {e.name for e in prof.events()}
    assert "mkldnn::_linear_pointwise" in names and "aten::addmm" not in names
    torch.testing.assert_close(out, stock(x), rtol=1e-5, atol=1e-5)


@needs_onednn
def test_other_dtypes_autocast_empty_inputs_and_no_grad_keep_or_match_the_stock_path():
    assert_stock_path_off_float32(*twins("onednn", bias=True, out_features=33))


def test_choices_by_name_and_by_cpu():
    zen5, zen4 = Cpu("AuthenticAMD", 26, {"avx2", "avx512f"}), Cpu("AuthenticAMD", 25, {"avx2", "avx512f"})
    every_layer = 0 if cpu_matmul.available() else None  # without oneDNN in torch no layer is ever turned
    assert min_layer_size("blas", zen5) is None
    assert min_layer_size("onednn", zen4) == every_layer
    assert min_layer_size("auto", zen5) == every_layer
    # AVX-512 in two 256-bit halves: oneDNN for wide layers only
    assert min_layer_size("auto", zen4) == (
        cpu_matmul.HALF_WIDTH_MIN_WEIGHTS if cpu_matmul.available() else None
    )
    assert (
        min_layer_size("auto", Cpu("GenuineIntel", 6, {"avx2", "avx512f"})) is None
    )  # MKL takes AVX-512 there
    assert (
        min_layer_size("auto", Cpu("AuthenticAMD", 25, {"avx2"})) is None
    )  # Zen 3: no wider path for oneDNN
    assert min_layer_size("auto", Cpu("", 0, set())) is None  # an unreadable /proc/cpuinfo
    with pytest.raises(ValueError, match="auto, onednn, blas, native"):
        min_layer_size("mkl")


def test_cpu_flags_read_the_first_core_and_survive_a_missing_file(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nflags\t\t: fpu avx2 avx512f\n\n"
        "processor\t: 1\nvendor_id\t: Other\ncpu family\t: 6\nflags\t\t: fpu\n"
    )
    assert cpu_matmul._cpu_flags(info) == ("AuthenticAMD", 25, {"fpu", "avx2", "avx512f"})
    assert cpu_matmul._cpu_flags(tmp_path / "missing") == ("", 0, set())
    info.write_text("vendor_id\t: AuthenticAMD\ncpu family\t: ?\n")  # a family that is not a number
    assert cpu_matmul._cpu_flags(info) == ("AuthenticAMD", 0, set())


@needs_onednn
@pytest.mark.parametrize(("family", "turned"), [(26, {"head", "narrow", "wide"}), (25, {"head", "wide"})])
def test_auto_turns_the_layers_its_core_runs_faster_on_onednn(monkeypatch, family, turned):
    """Zen 5: every layer; Zen 4: layers of at least HALF_WIDTH_MIN_WEIGHTS weights (the head is tied or not); the
    narrower ones take the project's kernel there (tests/accel/test_narrow_matmul.py), off here."""
    monkeypatch.setattr(cpu_matmul, "_cpu_flags", lambda: Cpu("AuthenticAMD", family, {"avx512f"}))
    monkeypatch.setattr(cpu_matmul, "narrow_below", lambda choice: 0)
    least = cpu_matmul.HALF_WIDTH_MIN_WEIGHTS
    model = torch.nn.ModuleDict(
        {
            "narrow": torch.nn.Linear(96, 256),  # the tiny anchor's widest layer
            "wide": torch.nn.Linear(512, least // 512),  # exactly at the threshold
            "head": torch.nn.Linear(576, 1024, bias=False),
        }
    )
    assert use_cpu_matmul(model, "auto") == len(turned)
    assert {name for name, m in model.items() if type(m) is OneDnnLinear} == turned
    assert use_cpu_matmul(torch.nn.Linear(4, 4), "onednn") == 1  # forced: every layer, however small


@needs_onednn
def test_fused_head_products_through_onednn_match_torch_mm():
    torch.manual_seed(1)
    weight = torch.randn(300, 16, requires_grad=True)
    states = torch.randn(11, 16) * 3
    targets = torch.randint(0, 300, (11,))
    results = []
    for products in (torch.mm, cpu_matmul.mm):
        weight.grad = None
        s = states.clone().requires_grad_(True)
        out = head_logprobs(s, weight, targets, 0.7, products)
        (out * torch.arange(11.0)).sum().backward()
        results.append((out.detach(), s.grad, weight.grad.clone()))
    for got, want in zip(results[1], results[0], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@needs_onednn
def test_a_model_keeps_its_state_dict_and_logits(tmp_path):
    folder = save_tiny(tmp_path / "m", seed=0)
    stock = AutoModelForCausalLM.from_pretrained(folder).eval()
    turned = AutoModelForCausalLM.from_pretrained(folder).eval()
    linears = sum(type(m) is torch.nn.Linear for m in turned.modules())
    assert use_cpu_matmul(turned, "blas") == 0
    assert use_cpu_matmul(turned, "onednn") == linears > 0
    assert use_cpu_matmul(turned, "onednn") == 0  # nothing left to turn
    assert list(turned.state_dict()) == list(stock.state_dict())
    ids = torch.randint(0, 40, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(
            turned(input_ids=ids).logits, stock(input_ids=ids).logits, rtol=1e-4, atol=1e-5
        )


@needs_onednn
def test_roles_on_either_kernel_take_the_same_update(tmp_path):
    folder = save_tiny(tmp_path / "m", seed=0)
    base = dict(model=str(folder), num_generations=3, temperature=1.0, max_completion_length=8, lr=1e-2)
    roles = {
        c: Role.from_pretrained("solver", RoleConfig(**base, cpu_matmul=c), folder)
        for c in ("blas", "onednn")
    }
    assert not any(isinstance(m, OneDnnLinear) for m in roles["blas"].model.modules())
    assert any(isinstance(m, OneDnnLinear) for m in roles["onednn"].model.modules())
    ids = [roles["blas"].prompt_ids([{"role": "user", "content": p}]) for p in ("1+1", "2+3")]
    samples = [Sample(ids[i], c) for i, g in enumerate(roles["blas"].generate(ids, 0)) for c in g]
    advantages = [(-1.0) ** k * (1 + k % 3) / 2 for k in range(len(samples))]
    before = [p.detach().clone() for p in roles["blas"].model.parameters()]
    stats = {c: role.update(samples, advantages) for c, role in roles.items()}
    for key in ("loss", "grad_norm"):
        assert stats["onednn"][key] == pytest.approx(stats["blas"][key], rel=1e-4, abs=1e-6)
    assert stats["blas"]["grad_norm"] > 0
    for role in roles.values():  # both took a step
        assert any(not torch.equal(a, b) for a, b in zip(before, role.model.parameters(), strict=True))


def test_config_names_the_choices():
    with pytest.raises(ConfigError, match="cpu_matmul"):
        RoleConfig(model="test", cpu_matmul="mkl").validate()
