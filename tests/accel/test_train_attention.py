"""The compiled training attention (`accel.train_attention`): values and gradients against SDPA, and where it
declines."""

from __future__ import annotations

import shutil

import pytest
import torch

from pasodoble.accel import native, train_attention

needs_compiler = pytest.mark.skipif(
    native.compiler() is None, reason="no C compiler (install gcc, or set CC)"
)


def _update_mask(prompts: list[int], width: int, own: list[int], left: bool = True) -> torch.Tensor:
    """(B, 1, F, P + F): the update's KV-cache layout, each sample's queries over its prompt's keys (padded to
    `width` on the left, else on the right: two runs of keys) and its own keys up to the query; queries past the
    sample's end see nothing."""
    rows, queries = len(prompts), max(own)
    mask = torch.zeros(rows, 1, queries, width + queries, dtype=torch.bool)
    for b, (p, n) in enumerate(zip(prompts, own, strict=True)):
        for i in range(n):
            if left:
                mask[b, 0, i, width - p : width] = True
            else:
                mask[b, 0, i, :p] = True
            mask[b, 0, i, width : width + i + 1] = True
    return mask


def _inputs(batch, heads, kv, queries, keys, dim, transposed_query=True):
    if transposed_query:  # (B, Q, H, D) underneath, as a projection's output viewed per head
        query = torch.randn(batch, queries, heads, dim).transpose(1, 2)
    else:
        query = torch.randn(batch, heads, queries, dim)
    return query, torch.randn(batch, kv, keys, dim), torch.randn(batch, kv, keys, dim)


def _both(query, key, value, mask, causal, scale):
    """(output, dq, dk, dv) of the kernel and of float64 SDPA, with the same output gradient."""
    grad = torch.randn(query.shape[0], query.shape[2], query.shape[1], query.shape[3])
    results = []
    for kernel in (True, False):
        q, k, v = (x.detach().clone().requires_grad_() for x in (query, key, value))
        if kernel:
            out = train_attention.attention(q, k, v, mask, scale, causal)
            assert out is not None
            out.backward(grad)
        else:
            q, k, v = (x.double().detach().requires_grad_() for x in (q, k, v))
            out = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, scale=scale, is_causal=causal, enable_gqa=True
            ).transpose(1, 2)
            out.backward(grad.double())
        results.append([x.detach().double() for x in (out, q.grad, k.grad, v.grad)])
    return results


@needs_compiler
@pytest.mark.parametrize(
    "heads,kv,dim",
    [(4, 2, 24), (9, 3, 64), (16, 8, 128), (2, 2, 8)],
    ids=["tiny", "smollm2", "qwen3", "no-groups"],
)
@pytest.mark.parametrize("left", [True, False], ids=["left-padded", "right-padded"])
@pytest.mark.parametrize("whole", [True, False], ids=["heads-at-once", "head-by-head"])
def test_the_update_layout_matches_sdpa(heads, kv, dim, left, whole, one_thread, monkeypatch):
    """Both ways of reading a batch row: every head's planes in one pass (they fit `WHOLE_ROW_FLOATS` at these
    shapes), and one head at a time."""
    monkeypatch.setattr(train_attention, "WHOLE_ROW_FLOATS", train_attention.WHOLE_ROW_FLOATS if whole else 0)
    torch.manual_seed(0)
    prompts, own, width = [7, 3, 12, 12, 1], [21, 5, 17, 1, 9], 12
    mask = _update_mask(prompts, width, own, left)
    assert train_attention.spans(mask, max(own), width + max(own), False) is not None
    query, key, value = _inputs(len(prompts), heads, kv, max(own), width + max(own), dim)
    got, want = _both(query, key, value, mask, False, dim**-0.5)
    for name, g, w in zip(("out", "dq", "dk", "dv"), got, want, strict=True):
        assert torch.allclose(g, w, atol=2e-5, rtol=1e-4), (name, (g - w).abs().max())
    assert torch.all(got[0][1, 5:] == 0)  # queries that see no key: 0, as SDPA


@needs_compiler
@pytest.mark.parametrize(
    "mask_kind", ["causal", "none", "shared-mask", "shuffled-rows"], ids=lambda k: k.replace("-", "_")
)
def test_other_spans_match_sdpa(mask_kind, one_thread):
    torch.manual_seed(1)
    batch, heads, kv, queries, dim = 3, 4, 2, 37, 24
    keys = queries if mask_kind in ("causal", "none") else 53
    query, key, value = _inputs(batch, heads, kv, queries, keys, dim, transposed_query=False)
    mask, causal = None, mask_kind == "causal"
    if mask_kind == "shared-mask":  # one mask row for every batch row: a sliding span
        mask = torch.zeros(1, 1, queries, keys, dtype=torch.bool)
        for i in range(queries):
            mask[0, 0, i, i : i + 17] = True
    if mask_kind == "shuffled-rows":  # spans in no order over the rows, some of one key, one empty
        mask = torch.zeros(batch, 1, queries, keys, dtype=torch.bool)
        starts = torch.randint(0, keys, (batch, queries))
        ends = torch.minimum(starts + torch.randint(1, 40, (batch, queries)), torch.tensor(keys))
        for b in range(batch):
            for i in range(queries):
                mask[b, 0, i, starts[b, i] : ends[b, i]] = True
        mask[1, 0, 4] = False
    got, want = _both(query, key, value, mask, causal, 0.3)
    for name, g, w in zip(("out", "dq", "dk", "dv"), got, want, strict=True):
        assert torch.allclose(g, w, atol=2e-5, rtol=1e-4), (name, (g - w).abs().max())


@needs_compiler
def test_without_gradients_it_returns_the_output_only(one_thread):
    query, key, value = _inputs(2, 4, 2, 9, 9, 24)
    with torch.no_grad():
        out = train_attention.attention(query, key, value, None, 0.2, True)
    want = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, scale=0.2, is_causal=True, enable_gqa=True
    )
    assert out is not None and not out.requires_grad
    assert torch.allclose(out, want.transpose(1, 2), atol=1e-6)


def test_spans_read_one_or_two_runs_per_query_and_are_cached_per_mask():
    mask = _update_mask([2, 3], 4, [3, 2])
    bounds, span_b = train_attention.spans(mask, 3, 7, False)
    assert span_b == 3
    lo, hi, gap_lo, gap_hi = bounds.tolist()
    assert lo == [[2, 2, 2], [1, 1, 0]] and hi == [[5, 6, 7], [5, 6, 0]]
    assert all(
        g >= h for gl, gh in zip(gap_lo, gap_hi, strict=True) for g, h in zip(gl, gh, strict=True)
    )  # no gap
    assert train_attention.spans(mask, 3, 7, False)[0] is bounds  # read once per mask tensor
    mask[0, 0, 0, 3] = False  # a gap: two runs in query 0's keys; the mask's version moved
    bounds, _ = train_attention.spans(mask, 3, 7, False)
    assert bounds[:, 0, 0].tolist() == [2, 5, 3, 4]  # keys 2 and 4, not 3
    mask[0, 0, 0, 0] = True  # three runs
    assert train_attention.spans(mask, 3, 7, False) is None
    assert train_attention.spans(mask.float(), 3, 7, False) is None  # an additive mask
    assert train_attention.spans(torch.ones(2, 4, 3, 7, dtype=torch.bool), 3, 7, False) is None  # per head
    assert train_attention.spans(None, 3, 7, True) is None  # causal over more keys than queries
    bounds, span_b = train_attention.spans(None, 3, 3, True)
    assert (bounds[:2].tolist(), span_b) == ([[[0, 0, 0]], [[1, 2, 3]]], 0)


@needs_compiler
def test_it_declines_what_it_does_not_serve(one_thread):
    query, key, value = _inputs(2, 4, 2, 5, 5, 24)
    assert train_attention.attention(query, key, value, None, 0.2, True) is not None
    gaps = torch.ones(2, 1, 5, 5, dtype=torch.bool)
    gaps[0, 0, 2, 1] = gaps[0, 0, 2, 3] = False  # three runs of keys
    assert train_attention.attention(query, key, value, gaps, 0.2, False) is None
    assert train_attention.attention(query.double(), key.double(), value.double(), None, 0.2, True) is None
    odd = _inputs(2, 4, 2, 5, 5, 20)  # head dim not a multiple of 8
    assert train_attention.attention(*odd, None, 0.2, True) is None
    strided = key.transpose(2, 3).contiguous().transpose(2, 3)
    assert train_attention.attention(query, strided, value, None, 0.2, True) is None
    torch.set_num_threads(2)
    assert train_attention.attention(query, key, value, None, 0.2, True) is None


@needs_compiler
def test_a_call_past_the_scratch_limit_is_declined(one_thread, monkeypatch):
    """The scratch holds two score arrays (the rows, in tiles of 8, plus one, by the keys in blocks of 16), and every
    head's queries and their gradients and every key/value head's keys and values: past the limit in either, SDPA
    serves the call."""
    # scores 2 x (8 + 1) x 16 = 288 floats; the planes 2 x (4 heads x 8 + 2 key/value heads x 16) x 24 = 3,072
    query, key, value = _inputs(1, 4, 2, 5, 5, 24)
    monkeypatch.setattr(train_attention, "MAX_SCRATCH_FLOATS", 3072)
    assert train_attention.attention(query, key, value, None, 0.2, True) is not None
    monkeypatch.setattr(train_attention, "MAX_SCRATCH_FLOATS", 3071)
    assert train_attention.attention(query, key, value, None, 0.2, True) is None
    # scores 2 x (40 + 1) x 48 = 3,936 floats, the planes 2 x (40 + 48) x 8 = 1,408: the scores alone are past it
    wide = _inputs(1, 1, 1, 40, 40, 8)
    monkeypatch.setattr(train_attention, "MAX_SCRATCH_FLOATS", 3936)
    assert train_attention.attention(*wide, None, 0.2, True) is not None
    monkeypatch.setattr(train_attention, "MAX_SCRATCH_FLOATS", 3935)
    assert train_attention.attention(*wide, None, 0.2, True) is None


@needs_compiler
def test_the_models_update_gradients_match_sdpa(one_thread, tiny_lm, monkeypatch):
    """A tiny Qwen3 through the project's grouped SDPA: the loss's gradients with the kernel and with it off."""
    calls = []
    forward = train_attention.forward_spans
    monkeypatch.setattr(train_attention, "forward_spans", lambda *a: calls.append(a[0].shape) or forward(*a))
    from transformers import AutoModelForCausalLM

    from pasodoble.accel.grouped_attention import use_grouped_attention

    model = AutoModelForCausalLM.from_pretrained(tiny_lm[2], dtype=torch.float32, attn_implementation="sdpa")
    assert use_grouped_attention(model)
    ids = torch.randint(3, model.config.vocab_size, (3, 19))
    attention = torch.ones_like(ids)
    attention[1, :6] = 0  # a left-padded row
    grads = []
    for on in (True, False):
        model.zero_grad()
        saved = dict(train_attention._state)
        if not on:
            train_attention._state.update(lib=None, why="off (test)")
        try:
            logits = model(input_ids=ids, attention_mask=attention).logits
            (logits[attention.bool()].logsumexp(-1).sum()).backward()
        finally:
            train_attention._state.clear()
            train_attention._state.update(saved)
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert len(calls) == 2  # one call a layer, with the kernel on only
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for name in grads[0]:
        assert torch.allclose(grads[0][name], grads[1][name], atol=1e-4, rtol=1e-3), name


def test_a_failed_build_warns_once_and_leaves_sdpa(fresh_kernel, monkeypatch, one_thread):
    false = shutil.which("false")
    if false is None:
        pytest.skip("no `false` command")
    monkeypatch.setenv("CC", false)
    query, key, value = _inputs(2, 4, 2, 5, 5, 24)
    with pytest.warns(UserWarning, match="training attention kernel unavailable") as caught:
        assert train_attention.attention(query, key, value, None, 0.2, True) is None
        assert train_attention.attention(query, key, value, None, 0.2, True) is None
    assert len(caught) == 1
    assert train_attention.status().startswith("unavailable:")
    assert not list((fresh_kernel / "native").glob("*/*.so"))  # no partial library left behind


def test_off_by_its_switch(fresh_kernel, accel_switch, one_thread):
    accel_switch(train_attention="off")
    assert train_attention.status() == "off (accel.train_attention)"
    query, key, value = _inputs(2, 4, 2, 5, 5, 24)
    assert train_attention.attention(query, key, value, None, 0.2, True) is None


@needs_compiler
def test_a_second_derivative_is_refused_not_wrong(one_thread):
    query, key, value = (x.requires_grad_() for x in _inputs(2, 4, 2, 5, 5, 24, transposed_query=False))
    out = train_attention.attention(query, key, value, None, 0.2, True)
    (grad,) = torch.autograd.grad(out.square().sum(), query, create_graph=True)
    with pytest.raises(RuntimeError):
        grad.sum().backward()
