"""The fused LM-head log-probs equal the stock expression's values and gradients, and apply only where exact."""

from __future__ import annotations

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from pasodoble.update import chunked_logprobs
from pasodoble.update.fused_head import can_fuse, head_logprobs


def stock(head, temperature, states, targets):
    logits = head(states).float() / temperature
    return logits.gather(-1, targets[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def grads(fn, head, states, targets, weights):
    head.weight.grad = None
    states = states.detach().requires_grad_(True)
    out = fn(states, targets)
    (out * weights).sum().backward()
    return out.detach(), head.weight.grad.clone(), states.grad.clone()


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("checkpointed", [False, True])
def test_values_and_gradients_equal_the_stock_expression(temperature, checkpointed):
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 300, bias=False)
    states = torch.randn(11, 16) * 3
    targets = torch.randint(0, 300, (11,))
    weights = torch.randn(11)

    def fused(s, t):
        if checkpointed:
            return checkpoint(head_logprobs, s, head.weight, t, temperature, use_reentrant=False)
        return head_logprobs(s, head.weight, t, temperature)

    want = grads(lambda s, t: stock(head, temperature, s, t), head, states, targets, weights)
    got = grads(fused, head, states, targets, weights)
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


def test_gradient_adds_into_an_existing_gradient_and_a_tied_embedding():
    torch.manual_seed(1)
    embedding = torch.nn.Embedding(50, 8)
    head = torch.nn.Linear(8, 50, bias=False)
    head.weight = embedding.weight  # tied, as SmolLM2's
    ids = torch.randint(0, 50, (6,))
    targets = torch.randint(0, 50, (6,))

    def gradient(fn):
        embedding.weight.grad = torch.ones_like(embedding.weight)  # an earlier micro-batch's
        fn(torch.tanh(embedding(ids))).sum().backward()
        return embedding.weight.grad.clone()

    want = gradient(lambda s: stock(head, 1.0, s, targets))
    got = gradient(lambda s: head_logprobs(s, head.weight, targets, 1.0))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_score_states_takes_the_fused_path_and_keeps_its_results():
    torch.manual_seed(2)
    head = torch.nn.Linear(12, 90, bias=False)
    states = torch.randn(9, 12)
    targets = torch.randint(0, 90, (9,))
    weights = torch.randn(9)
    calls = []
    real = chunked_logprobs.head_logprobs

    def counted(*args):
        calls.append(1)
        return real(*args)

    chunked_logprobs.head_logprobs = counted
    try:
        got = grads(
            lambda s, t: chunked_logprobs.score_states(head, s, t, temperature=0.6, chunk_tokens=4),
            head,
            states,
            targets,
            weights,
        )
    finally:
        chunked_logprobs.head_logprobs = real
    want = grads(lambda s, t: stock(head, 0.6, s, t), head, states, targets, weights)
    assert calls  # three checkpointed chunks: the forward and each recompute
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


def test_applies_only_where_exact():
    states = torch.randn(3, 4)
    assert can_fuse(torch.nn.Linear(4, 7, bias=False), states)
    assert not can_fuse(torch.nn.Linear(4, 7, bias=True), states)
    assert not can_fuse(torch.nn.Linear(4, 7, bias=False).to(torch.bfloat16), states)
    assert not can_fuse(torch.nn.Linear(4, 7, bias=False), states.to(torch.bfloat16))
    hooked = torch.nn.Linear(4, 7, bias=False)
    hooked.register_forward_hook(lambda *a: None)
    assert not can_fuse(hooked, states)

    class Scaled(torch.nn.Linear):
        pass

    assert not can_fuse(Scaled(4, 7, bias=False), states)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert can_fuse(torch.nn.Linear(4, 7, bias=False), states)  # the products in bfloat16, as autocast's


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_under_bfloat16_autocast_it_keeps_the_stock_numerics(temperature):
    """A role with `dtype: bfloat16`: the stock expression under autocast multiplies in bfloat16 and takes the
    softmax of the rounded logits in float32; the fused node does the same, so both agree far more closely than
    either agrees with float32."""
    torch.manual_seed(3)
    head = torch.nn.Linear(32, 500, bias=False)
    states = torch.randn(13, 32) * 2
    targets = torch.randint(0, 500, (13,))
    weights = torch.randn(13)

    def under_autocast(fn):
        def run(s, t):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return fn(s, t)

        return run

    want = grads(under_autocast(lambda s, t: stock(head, temperature, s, t)), head, states, targets, weights)
    got = grads(
        under_autocast(lambda s, t: head_logprobs(s, head.weight, t, temperature)),
        head,
        states,
        targets,
        weights,
    )
    full = grads(lambda s, t: stock(head, temperature, s, t), head, states, targets, weights)
    for w, g, f in zip(want, got, full):
        assert g.dtype == f.dtype == torch.float32
        torch.testing.assert_close(g, w, rtol=1e-2, atol=1e-3)
        assert (g - w).abs().max() < 0.5 * (f - w).abs().max()  # bfloat16's numerics, not float32's


def test_gradient_is_taken_once():
    head = torch.nn.Linear(4, 7, bias=False)
    out = head_logprobs(torch.randn(3, 4, requires_grad=True), head.weight, torch.tensor([0, 1, 2]), 1.0)
    out.sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError):
        out.sum().backward()  # the saved softmax became the gradient in place: a second pass must not reuse it


def test_the_head_is_cast_once_inside_a_pass_and_afresh_outside():
    from pasodoble.update.fused_head import low_precision_copy, reuse_head_casts

    head = torch.nn.Linear(8, 20, bias=False)
    assert low_precision_copy(head.weight, torch.bfloat16) is not low_precision_copy(
        head.weight, torch.bfloat16
    )
    with reuse_head_casts():
        first = low_precision_copy(head.weight, torch.bfloat16)
        assert low_precision_copy(head.weight, torch.bfloat16) is first  # the same weight: no new cast
        assert (
            low_precision_copy(head.weight.detach(), torch.bfloat16) is first
        )  # another object, same memory
        with reuse_head_casts():
            assert low_precision_copy(head.weight, torch.bfloat16) is first  # a nested scope shares the outer
        other = torch.nn.Linear(8, 20, bias=False)
        torch.testing.assert_close(
            low_precision_copy(other.weight, torch.bfloat16), other.weight.detach().bfloat16()
        )
    with torch.no_grad():
        head.weight.data.add_(
            1.0
        )  # a write that leaves the version counter alone (as fused AdamW's step does)
    with reuse_head_casts():
        torch.testing.assert_close(
            low_precision_copy(head.weight, torch.bfloat16), head.weight.detach().to(torch.bfloat16)
        )


def test_each_thread_has_its_own_scope_and_none_outlives_it():
    """Ranks run as threads (tests, gloo): one thread's pass must neither reuse another's casts nor, ending first,
    leave its scope behind for the other to restore."""
    import threading

    from pasodoble.update import fused_head

    head = torch.nn.Linear(8, 20, bias=False)
    inside, release = threading.Event(), threading.Event()
    seen = {}

    def rank():
        with fused_head.reuse_head_casts():
            seen["rank"] = fused_head.low_precision_copy(head.weight, torch.bfloat16)
            inside.set()
            release.wait(timeout=60)

    worker = threading.Thread(target=rank)
    worker.start()
    assert inside.wait(timeout=60)
    with fused_head.reuse_head_casts():
        mine = fused_head.low_precision_copy(head.weight, torch.bfloat16)
        assert mine is not seen["rank"]  # the other thread's cast is not this one's
    release.set()
    worker.join(timeout=60)
    a = fused_head.low_precision_copy(head.weight, torch.bfloat16)
    assert a is not fused_head.low_precision_copy(head.weight, torch.bfloat16)  # no scope left behind
