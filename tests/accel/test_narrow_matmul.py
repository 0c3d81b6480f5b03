"""The narrow-layer kernel: its products against torch's at every tile edge, the layer's values and gradients against
the stock layer's, the stock path wherever it does not apply, the transposes reused only where weights are fixed,
and the choice of layers by name and by CPU."""

from __future__ import annotations

import pytest
import torch

from pasodoble.accel import cpu_matmul, narrow_matmul
from pasodoble.accel.cpu_matmul import Cpu, OneDnnLinear, narrow_below, use_cpu_matmul
from pasodoble.accel.narrow_matmul import NarrowLinear, reuse_transposes, transposed
from pasodoble.roles.role import Role, RoleConfig, Sample
from pasodoble.update.fused_head import head_logprobs, products_of
from tests.linear_helpers import assert_same_as, assert_stock_path_off_float32, inputs, run, twins
from tests.loop_helpers import save_tiny

needs_kernel = pytest.mark.skipif(
    narrow_matmul.status() != "on", reason="the narrow kernel could not be built"
)
pytestmark = pytest.mark.usefixtures("one_thread")


@needs_kernel
@pytest.mark.parametrize("m", [0, 1, 7, 8, 9, 17, 130])
@pytest.mark.parametrize("n", [16, 32, 48, 80])
def test_products_equal_torch_at_every_tile_edge(m, n):
    """Rows past a multiple of 8 and a last block of 16 columns, in both kernels; rows read at a stride."""
    torch.manual_seed(m * 100 + n)
    k = 40
    wide = torch.randn(m, k + 8)
    a = wide[:, 3 : 3 + k]  # rows 48 floats apart
    b = torch.randn(k, n)
    torch.testing.assert_close(narrow_matmul.nn(a, b), a @ b, rtol=1e-5, atol=1e-5)
    g = torch.randn(m, 21)  # tn: (21, n) summed over the m rows, in blocks of TN_BLOCK
    x = torch.randn(m, n)
    torch.testing.assert_close(narrow_matmul.tn(g, x), g.t() @ x, rtol=1e-5, atol=1e-4)


@needs_kernel
def test_the_weight_gradient_sums_across_row_blocks():
    torch.manual_seed(0)
    m = 3 * narrow_matmul.TN_BLOCK + 17
    g, x = torch.randn(m, 7), torch.randn(m, 32)
    torch.testing.assert_close(narrow_matmul.tn(g, x), g.t() @ x, rtol=1e-5, atol=1e-4)


@needs_kernel
def test_output_columns_off_the_vector_width_are_refused_and_mm_falls_back():
    with pytest.raises(ValueError, match="multiple of 16"):
        narrow_matmul.nn(torch.randn(4, 8), torch.randn(8, 20))
    a, b = torch.randn(5, 8), torch.randn(8, 20)
    torch.testing.assert_close(narrow_matmul.mm(a, b), a @ b)  # torch's product: 20 columns do not fit


@needs_kernel
@pytest.mark.parametrize("vocab", [64, 287])
def test_mm_takes_each_layout_of_the_head_products(vocab):
    torch.manual_seed(1)
    states, weight, grad = torch.randn(50, 32), torch.randn(vocab, 32), torch.randn(50, vocab)
    logits = narrow_matmul.mm(states, weight.t())  # over the transpose padded to 64 / 288 columns
    assert logits.shape == (50, vocab) and logits.stride(1) == 1
    torch.testing.assert_close(logits, states @ weight.t(), rtol=1e-5, atol=1e-4)
    for a, b in ((grad, weight), (grad.t(), states), (logits, weight), (logits.t(), states)):
        torch.testing.assert_close(narrow_matmul.mm(a, b), a @ b, rtol=1e-5, atol=1e-4)


@needs_kernel
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(300, 96), (5, 7, 96), "transposed"])
def test_values_and_gradients_equal_the_stock_layer(bias, shape):
    stock, turned = twins("native", bias)
    assert type(turned) is NarrowLinear and isinstance(turned, torch.nn.Linear)
    x = inputs(shape)
    grad = torch.randn(*x.shape[:-1], 48)
    with torch.profiler.profile() as prof:
        got = run(turned, x, grad)
    assert not {"aten::mm", "aten::addmm", "aten::linear"} & {e.name for e in prof.events()}  # the kernel's
    assert_same_as(got, run(stock, x, grad))


@needs_kernel
def test_other_dtypes_autocast_threads_and_empty_inputs_keep_or_match_the_stock_path():
    stock, turned = twins("native", bias=True)
    torch.set_num_threads(2)  # torch's BLAS would use both threads; the kernel has one
    with torch.profiler.profile() as prof:
        turned(torch.randn(6, 96))
    assert "aten::linear" in {e.name for e in prof.events()}
    torch.set_num_threads(1)
    assert_stock_path_off_float32(stock, turned)


@needs_kernel
def test_transposes_are_reused_only_inside_the_scope_and_follow_the_weight():
    layer = torch.nn.Linear(32, 16, bias=False)
    outside = transposed(layer.weight)
    assert transposed(layer.weight) is not outside  # afresh each call: a write that skips the version is seen
    with reuse_transposes():
        first = transposed(layer.weight)
        assert transposed(layer.weight) is first
        with reuse_transposes():  # nested: the same store
            assert transposed(layer.weight) is first
        with torch.no_grad():
            layer.weight.mul_(2.0)  # an optimizer's in-place step bumps the version
        torch.testing.assert_close(transposed(layer.weight), layer.weight.t())
    assert narrow_matmul._scope.made is None


@needs_kernel
def test_layers_whose_inputs_do_not_fit_keep_the_stock_class():
    model = torch.nn.ModuleDict(
        {"fits": torch.nn.Linear(96, 48), "head": torch.nn.Linear(96, 33), "odd": torch.nn.Linear(33, 96)}
    )
    assert use_cpu_matmul(model, "native") == 2
    assert type(model["fits"]) is NarrowLinear and type(model["odd"]) is torch.nn.Linear
    head = model["head"]  # turned for the fused head's products; its own forward keeps the stock path
    assert type(head) is NarrowLinear and not narrow_matmul.applies(
        torch.randn(3, 96), head.weight, head.bias
    )
    x = torch.randn(3, 96, requires_grad=True)
    with torch.profiler.profile() as prof:
        head(x).sum().backward()
    assert "aten::linear" in {e.name for e in prof.events()}
    assert use_cpu_matmul(model, "blas") == 0


def test_narrow_layers_by_name_and_by_cpu(monkeypatch):
    zen4, zen5 = Cpu("AuthenticAMD", 25, {"avx2", "avx512f"}), Cpu("AuthenticAMD", 26, {"avx2", "avx512f"})
    assert narrow_below("auto", zen4) == cpu_matmul.HALF_WIDTH_MIN_WEIGHTS  # the layers oneDNN leaves
    assert narrow_below("auto", zen5) == 0  # oneDNN takes every layer there
    assert narrow_below("auto", Cpu("GenuineIntel", 6, {"avx512f"})) == 0  # not measured there
    assert narrow_below("auto", Cpu("AuthenticAMD", 25, {"avx2"})) == 0  # Zen 3
    assert narrow_below("blas", zen4) == narrow_below("onednn", zen4) == 0
    assert narrow_below("native", zen5) > 1 << 40
    with pytest.raises(ValueError, match="native"):
        narrow_below("mkl", zen4)


@needs_kernel
def test_auto_on_a_zen_4_core_splits_the_layers_between_onednn_and_the_kernel(monkeypatch):
    monkeypatch.setattr(cpu_matmul, "_cpu_flags", lambda: Cpu("AuthenticAMD", 25, {"avx512f"}))
    least = cpu_matmul.HALF_WIDTH_MIN_WEIGHTS
    model = torch.nn.ModuleDict(
        {
            "narrow": torch.nn.Linear(96, 256),
            "wide": torch.nn.Linear(512, least // 512),
            "odd": torch.nn.Linear(9, 9),
        }
    )
    use_cpu_matmul(model, "auto")
    assert type(model["narrow"]) is NarrowLinear and type(model["odd"]) is torch.nn.Linear
    assert type(model["wide"]) is (OneDnnLinear if cpu_matmul.available() else torch.nn.Linear)


def test_the_switch_turns_the_kernel_off(monkeypatch, accel_switch):
    accel_switch(narrow_matmul="off")
    monkeypatch.setattr(narrow_matmul, "_state", {})
    assert narrow_matmul.status() == "off (accel.narrow_matmul)"
    layer = torch.nn.Linear(96, 48)
    assert use_cpu_matmul(layer, "native") == 0 and type(layer) is torch.nn.Linear


@needs_kernel
def test_fused_head_products_through_the_kernel_match_torch_mm():
    torch.manual_seed(1)
    weight = torch.randn(287, 32, requires_grad=True)  # a vocabulary off the vector width: a padded transpose
    states = torch.randn(11, 32) * 3
    targets = torch.randint(0, 287, (11,))
    results = []
    for products in (torch.mm, narrow_matmul.mm):
        weight.grad = None
        s = states.clone().requires_grad_(True)
        out = head_logprobs(s, weight, targets, 0.7, products)
        (out * torch.arange(11.0)).sum().backward()
        results.append((out.detach(), s.grad, weight.grad.clone()))
    for got, want in zip(results[1], results[0], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    head = torch.nn.Linear(32, 320, bias=False)
    use_cpu_matmul(head, "native")
    assert products_of(head) is narrow_matmul.mm and products_of(torch.nn.Linear(2, 2)) is torch.mm


@needs_kernel
def test_roles_on_either_kernel_take_the_same_update(tmp_path):
    folder = save_tiny(tmp_path / "m", seed=0)
    base = dict(model=str(folder), num_generations=3, temperature=1.0, max_completion_length=8, lr=1e-2)
    roles = {
        c: Role.from_pretrained("solver", RoleConfig(**base, cpu_matmul=c), folder)
        for c in ("blas", "native")
    }
    assert not any(isinstance(m, NarrowLinear) for m in roles["blas"].model.modules())
    assert any(isinstance(m, NarrowLinear) for m in roles["native"].model.modules())
    assert any("input_group" in vars(m) for m in roles["native"].model.modules())  # q, k, v and gate, up
    ids = [roles["blas"].prompt_ids([{"role": "user", "content": p}]) for p in ("1+1", "2+3")]
    groups = {c: role.generate(ids, 0) for c, role in roles.items()}
    for a, b in zip(
        groups["blas"], groups["native"], strict=True
    ):  # the same draws, log-probs to float tolerance
        for x, y in zip(a, b, strict=True):
            assert x.token_ids == y.token_ids
            assert x.logprobs == pytest.approx(y.logprobs, abs=1e-4)
    samples = [Sample(ids[i], c) for i, g in enumerate(groups["blas"]) for c in g]
    advantages = [(-1.0) ** k * (1 + k % 3) / 2 for k in range(len(samples))]
    before = [p.detach().clone() for p in roles["native"].model.parameters()]
    stats = {c: role.update(samples, advantages) for c, role in roles.items()}
    for key in ("loss", "grad_norm"):
        assert stats["native"][key] == pytest.approx(stats["blas"][key], rel=1e-4, abs=1e-6)
    assert stats["blas"]["grad_norm"] > 0
    after = list(roles["native"].model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))  # it took a step
    for a, b in zip(roles["blas"].model.parameters(), after, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
