"""A decoder layer as one autograd node (`accel.fused_block`): the same values and gradients, bit for bit, as the
layer's own forward through the same kernels, on Qwen3 and on a Llama with attention biases; and the calls it leaves
to that forward."""

from __future__ import annotations

import copy

import pytest
import torch

from pasodoble.accel import fused_block, native
from pasodoble.accel.cpu_matmul import use_cpu_matmul
from pasodoble.accel.fused_layers import use_fused_layers
from pasodoble.accel.grouped_attention import use_grouped_attention
from pasodoble.update.packed import packed_logprobs

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler (install gcc, or set CC)")

PROMPTS = [[5, 6, 7, 8], [9, 10], [5, 6, 7, 8]]
COMPLETIONS = [[11, 12, 13], [14, 15, 16, 17, 18], [19]]
WIDTH = 7  # the plain layout's columns: the longest prompt and completion together


def _stock(family: str) -> torch.nn.Module:
    """A random 2-layer model of `family` whose every layer fits the kernels."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    sizes = dict(
        vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=64, pad_token_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    if family == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(**sizes))
    else:  # Llama with q, k, v and o biases, as Qwen2's q, k and v
        model = LlamaForCausalLM(LlamaConfig(**sizes, attention_bias=True))
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("bias"):
                    p.normal_()  # biases of zero would hide a missing one
    return model


def _model(family: str) -> torch.nn.Module:
    """`_stock(family)` turned as the Role turns the models it loads."""
    model = _stock(family)
    assert use_grouped_attention(model)
    use_cpu_matmul(model, "native")
    use_fused_layers(model)
    assert fused_block.use_fused_blocks(model) == 2
    return model.train()


def _loss_and_grads(model):
    logps = packed_logprobs(model, PROMPTS, COMPLETIONS, WIDTH, pad_id=0)  # (B, WIDTH)
    loss = (logps * torch.linspace(-1, 2, logps.numel()).view(logps.shape)).sum()
    model.zero_grad(set_to_none=True)
    loss.backward()
    return logps.detach(), {n: p.grad for n, p in model.named_parameters()}


def _counted(monkeypatch) -> list:
    calls = []
    real = fused_block.block_forward
    monkeypatch.setattr(fused_block, "block_forward", lambda *a: calls.append(1) or real(*a))
    return calls


@pytest.mark.parametrize("family", ["qwen3", "llama"])
def test_the_fused_layer_computes_what_its_own_forward_does(one_thread, family, monkeypatch):
    model = _model(family)
    calls = _counted(monkeypatch)
    monkeypatch.setitem(fused_block._fusing, "on", False)
    want = _loss_and_grads(model)
    assert calls == []
    monkeypatch.setitem(fused_block._fusing, "on", True)
    got = _loss_and_grads(model)
    assert len(calls) == 2  # each layer once
    assert torch.equal(got[0], want[0])
    assert got[1].keys() == want[1].keys()
    for name, grad in want[1].items():  # every parameter, biases and the q and k norms included
        assert grad is not None and torch.equal(got[1][name], grad), name
    with torch.no_grad():  # without autograd: the same values, nothing kept
        assert torch.equal(packed_logprobs(model, PROMPTS, COMPLETIONS, WIDTH, pad_id=0), want[0])
    assert len(calls) == 4


def test_a_frozen_layer_gets_no_gradient_and_passes_one_through(one_thread, monkeypatch):
    model = _model("qwen3")
    model.model.layers[1].requires_grad_(False)
    monkeypatch.setitem(fused_block._fusing, "on", False)
    want = _loss_and_grads(model)
    monkeypatch.setitem(fused_block._fusing, "on", True)
    got = _loss_and_grads(model)
    for name, grad in want[1].items():
        if name.startswith("model.layers.1."):
            assert grad is None and got[1][name] is None
        else:
            assert torch.equal(got[1][name], grad), name


def test_calls_it_does_not_serve_run_the_layer_s_own_forward(one_thread, monkeypatch):
    model = _model("qwen3")
    calls = _counted(monkeypatch)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    model(input_ids=ids).logits.sum().backward()  # no packed rows: the stock path
    assert calls == []
    seen = []
    handle = model.model.layers[0].self_attn.q_proj.register_forward_hook(lambda *a: seen.append(1))
    _loss_and_grads(model)  # a hook on a layer's module: that layer runs its modules, so the hook runs
    assert seen == [1] and len(calls) == 1
    handle.remove()
    torch.set_num_threads(2)
    try:
        _loss_and_grads(model)  # the kernels serve one thread only
    finally:
        torch.set_num_threads(1)
    assert len(calls) == 1
    with torch.autocast("cpu", dtype=torch.bfloat16):
        packed_logprobs(model, PROMPTS, COMPLETIONS, WIDTH, pad_id=0)
    assert len(calls) == 1
    _loss_and_grads(model.double())  # float64: the stock path
    assert len(calls) == 1


def test_a_layer_subclassed_again_runs_each_forward_once(one_thread):
    """A wrapper that subclasses the turned layer (as FSDP2 does) reaches the stock forward without recursing."""
    model = _model("qwen3")
    layer = model.model.layers[0]
    layer.__class__ = type("Wrapped", (type(layer),), {})
    _loss_and_grads(model)
    model(input_ids=torch.tensor([[5, 6, 7]]))


def test_copies_keep_the_turned_layers_and_the_switch_turns_them_off(one_thread, accel_switch):
    model = _model("qwen3")
    twin = copy.deepcopy(model)  # the Role's reference copy
    assert type(twin.model.layers[0]) is type(model.model.layers[0])
    assert fused_block.use_fused_blocks(model) == 0  # already turned
    assert type(model.model.layers[0]).__mro__[1].__name__ == "Qwen3DecoderLayer"
    accel_switch(fused_blocks="off")
    assert fused_block.use_fused_blocks(_stock("qwen3")) == 0


def test_the_start_line_status(accel_switch):
    assert fused_block.status() == "on"
    accel_switch(fused_blocks="off")
    assert fused_block.status() == "off (accel.fused_blocks)"


def test_under_checkpointing_the_layer_runs_its_own_forward_and_a_second_backward_is_refused(
    one_thread, monkeypatch
):
    model = _model("qwen3")
    calls = _counted(monkeypatch)
    want = _loss_and_grads(model)
    model.gradient_checkpointing_enable()  # its saved-tensor hooks would not see what the node keeps
    got = _loss_and_grads(model)
    assert len(calls) == 2  # the first run only
    for name, grad in want[1].items():
        assert torch.equal(got[1][name], grad), name
    model.gradient_checkpointing_disable()
    outputs = []  # the first layer's output, through a hook on the layer itself (which the node allows)
    model.model.layers[0].register_forward_hook(lambda module, args, out: outputs.append(out))
    packed_logprobs(model, PROMPTS, COMPLETIONS, WIDTH, pad_id=0)
    assert len(calls) == 4
    outputs[0].sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="runs once"):
        outputs[0].sum().backward()
