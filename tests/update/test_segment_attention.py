"""Attention over packed rows per sample: the layout it reads, the same values and gradients as SDPA under the rows'
segment mask, and the packed update runs through it on the project's grouped SDPA."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

import pasodoble.update.segment_attention as seg
from pasodoble.accel import train_attention
from pasodoble.accel.grouped_attention import use_grouped_attention
from pasodoble.update.packed import packed_logprobs, segment_mask
from pasodoble.update.segment_attention import SegmentLayout, segment_attention
from tests.update.test_shared_prefix import assert_same_as_plain


def test_the_layout_of_two_rows():
    # row 0: p p a a b; row 1: p c and three padding positions
    layout = SegmentLayout.of(torch.tensor([[0, 0, 1, 1, 2], [0, 3, -1, -1, -1]]))
    assert (layout.rows, layout.length, layout.prompt, layout.samples, layout.width) == (2, 5, 2, 3, 2)
    # each sample's queries, repeating its last past its end
    assert layout.query.view(3, 2).tolist() == [[2, 3], [4, 4], [6, 6]]
    # its row's prompt keys (row 1 has one: its second slot repeats it), then its own
    assert layout.key.view(3, 4).tolist() == [[0, 1, 2, 3], [0, 1, 4, 4], [5, 5, 6, 6]]
    assert layout.mask[:, 0].int().tolist() == [
        [[1, 1, 1, 0], [1, 1, 1, 1]],
        [[1, 1, 1, 0], [1, 1, 1, 1]],
        [[1, 0, 1, 0], [1, 0, 1, 1]],  # row 1's prompt is one column long
    ]
    # outputs: the prompts' (2 rows x 2), then the samples' (3 x 2); padding reads slot 0
    assert layout.inverse.tolist() == [0, 1, 4, 5, 6, 2, 8, 0, 0, 0]
    # in place in the rows: keys [lo, hi) less [gap_lo, gap_hi); b skips a, padding attends nothing
    assert layout.bounds.tolist() == [
        [[0] * 5, [0] * 5],
        [[1, 2, 3, 4, 5], [1, 2, 0, 0, 0]],
        [[0, 0, 2, 2, 2], [0, 1, 0, 0, 0]],
        [[0, 0, 2, 2, 4], [0, 1, 0, 0, 0]],
    ]
    with pytest.raises(ValueError, match="non-empty prompt"):
        SegmentLayout.of(torch.tensor([[1, 1, -1]]))


def test_the_layout_of_a_row_of_two_groups():
    # p p a a b | q c, then padding: each group's positions attend from its own first column
    layout = SegmentLayout.of(torch.tensor([[0, 0, 1, 1, 2, 0, 3, -1]]))
    assert (layout.rows, layout.length, layout.prompt, layout.samples, layout.width) == (1, 8, 2, 3, 2)
    assert layout.bounds[:, 0].tolist() == [
        [0, 0, 0, 0, 0, 5, 5, 0],
        [1, 2, 3, 4, 5, 6, 7, 0],
        [0, 0, 2, 2, 2, 0, 6, 0],
        [0, 0, 2, 2, 4, 0, 6, 0],  # b skips a; c has no sample before it in its group
    ]
    # the prompts' columns per group (the second prompt is one column long: repeated), and each sample's keys
    assert layout.groups.view(2, 2).tolist() == [[0, 1], [5, 5]]
    assert layout.key.view(3, 4).tolist() == [[0, 1, 2, 3], [0, 1, 4, 4], [5, 5, 6, 6]]
    # outputs: the prompts' (2 groups x 2), then the samples' (3 x 2); padding reads slot 0
    assert layout.inverse.tolist() == [0, 1, 4, 5, 6, 2, 8, 0]
    assert SegmentLayout.of(torch.tensor([[0, 1, 0, 2]])).groups is not None
    assert SegmentLayout.of(torch.tensor([[0, 1], [0, 0]])).groups is None  # one group a row: columns [0, P)


def _segments() -> torch.Tensor:
    """Three rows: prompts of 3, 1 and 4 columns, samples of 4, 1, 2 / 5 / none, padding after."""
    rows = [[0] * 3 + [1] * 4 + [2] + [3] * 2, [0] + [4] * 5, [0] * 4]
    length = max(map(len, rows))
    return torch.tensor([r + [-1] * (length - len(r)) for r in rows])


def _line(segment: torch.Tensor) -> torch.Tensor:
    """The groups of `segment`'s rows one after another in one row (`update.packed.pack`'s `line`)."""
    return torch.cat([row[row >= 0] for row in segment])[None]


@pytest.mark.parametrize(
    "heads,kv,dtype,tolerance",
    [(4, 2, torch.float32, 1e-6), (2, 2, torch.float32, 1e-6), (4, 2, torch.bfloat16, 2e-2)],
)
@pytest.mark.parametrize(
    "segment",
    [_segments(), torch.tensor([[0, 0, -1], [0, 0, 0]]), _line(_segments())],
    ids=["samples", "none", "one-row"],
)
@pytest.mark.parametrize("threads", [1, 2], ids=["one-thread", "two-threads"])
@pytest.mark.parametrize("in_place", [True, False], ids=["in-place", "gathered"])
def test_values_and_gradients_equal_sdpa_under_the_segment_mask(
    heads, kv, dtype, tolerance, segment, threads, in_place, monkeypatch
):
    """With one thread the float32 calls run through the compiled attention kernel (accel.train_attention): over
    the rows in place, or (as where it does not apply) over per-sample gathers."""
    if not in_place:
        monkeypatch.setattr(seg, "attends_in_place", lambda query, key, value: False)
    served = []
    forward = train_attention.forward_spans
    monkeypatch.setattr(train_attention, "forward_spans", lambda *a: served.append(1) or forward(*a))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        _compare_with_sdpa(heads, kv, dtype, tolerance, segment)
    finally:
        torch.set_num_threads(before)
    kernel = threads == 1 and dtype == torch.float32 and train_attention.status() == "on"
    assert bool(served) == kernel


def _compare_with_sdpa(heads, kv, dtype, tolerance, segment):
    rows, length = segment.shape
    gen = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(rows, h, length, 8, generator=gen).to(dtype).requires_grad_() for h in (heads, kv, kv)
    )
    weights = torch.randn(rows, length, heads, 8, generator=gen).to(dtype)
    real = (segment >= 0)[:, :, None, None]  # padding's output is unread
    out = {}
    for name in ("mask", "segments"):
        if name == "mask":
            got = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=segment_mask(segment), scale=0.3, enable_gqa=heads != kv
            ).transpose(1, 2)
        else:
            got = segment_attention(q, k, v, SegmentLayout.of(segment), 0.3)
        assert got.shape == (rows, length, heads, 8) and torch.isfinite(got).all()
        grads = torch.autograd.grad((got * weights * real).sum(), (q, k, v))
        out[name] = (got * real, grads)
    torch.testing.assert_close(out["segments"][0], out["mask"][0], atol=tolerance, rtol=tolerance * 10)
    for a, b in zip(out["segments"][1], out["mask"][1]):
        torch.testing.assert_close(a, b, atol=tolerance, rtol=tolerance * 10)


def _long_segments() -> torch.Tensor:
    """Rows whose samples are long enough that a completion's tile of queries skips whole 16-column blocks of the
    samples before it: prompts of 7, 20, 3 and 5 columns, then samples of 40, 3, 37 / 50, 1 / 66 / none."""
    rows = [
        [0] * 7 + [1] * 40 + [2] * 3 + [3] * 37,
        [0] * 20 + [4] * 50 + [5],
        [0] * 3 + [6] * 66,
        [0] * 5,
    ]
    length = max(map(len, rows))
    return torch.tensor([r + [-1] * (length - len(r)) for r in rows])


@pytest.mark.skipif(train_attention.status() != "on", reason="the compiled attention kernel is not available")
@pytest.mark.parametrize("heads,kv,dim", [(4, 2, 24), (9, 3, 64)], ids=["tiny", "smollm2"])
@pytest.mark.parametrize("whole", [True, False], ids=["heads-at-once", "head-by-head"])
@pytest.mark.parametrize("line", [False, True], ids=["rows", "one-row"])
def test_the_kernel_attends_packed_rows_in_place_as_float64_sdpa_does(
    heads, kv, dim, whole, line, one_thread, monkeypatch
):
    """The kernel reads each position's keys in its row (`SegmentLayout.bounds`), skipping the columns of the
    samples between its prompt and itself, and gives SDPA's values and gradients under the segment mask, reading a
    batch row's heads at once or one at a time (`train_attention.WHOLE_ROW_FLOATS`)."""
    monkeypatch.setattr(train_attention, "WHOLE_ROW_FLOATS", train_attention.WHOLE_ROW_FLOATS if whole else 0)
    served = []
    forward = train_attention.forward_spans
    monkeypatch.setattr(train_attention, "forward_spans", lambda *a: served.append(a[0].shape) or forward(*a))
    segment = _line(_long_segments()) if line else _long_segments()
    rows, length = segment.shape
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(rows, length, h, dim, generator=gen).transpose(1, 2) for h in (heads, kv, kv))
    weights = torch.randn(rows, length, heads, dim, generator=gen) * (segment >= 0)[:, :, None, None]
    layout = SegmentLayout.of(segment)
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    got = segment_attention(*leaves, layout, dim**-0.5)
    assert served == [(rows, heads, length, dim)]  # one call over the rows themselves
    got_grads = torch.autograd.grad((got * weights).sum(), leaves)
    exact = [x.detach().double().requires_grad_() for x in (q, k, v)]
    want = torch.nn.functional.scaled_dot_product_attention(
        *exact, attn_mask=segment_mask(segment), scale=dim**-0.5, enable_gqa=True
    ).transpose(1, 2)
    want_grads = torch.autograd.grad((want * weights.double()).sum(), exact)
    real = (segment >= 0)[:, :, None, None]
    torch.testing.assert_close((got * real).double(), want * real, atol=2e-5, rtol=1e-4)
    assert torch.all(got[~(segment >= 0)] == 0)  # padding attends nothing
    for a, b in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(a.double(), b, atol=2e-5, rtol=1e-4)


def test_a_layout_of_other_rows_is_refused():
    layout = SegmentLayout.of(_segments())
    q = torch.zeros(2, 2, 3, 4)
    with pytest.raises(ValueError, match="rows 3 x 10, got 2 x 3"):
        segment_attention(q, q, q, layout, 1.0)


@pytest.mark.parametrize("chunk_tokens", [1, 2048])
def test_the_packed_update_attends_per_sample_on_grouped_sdpa(tiny_lm, chunk_tokens, monkeypatch):
    _, tokenizer, path = tiny_lm
    model = AutoModelForCausalLM.from_pretrained(path)
    assert use_grouped_attention(model)
    calls = []
    real = seg.segment_attention

    def counted(*args, **kwargs):
        calls.append(args[3])
        return real(*args, **kwargs)

    monkeypatch.setattr("pasodoble.accel.grouped_attention.segment_attention", counted)
    assert_same_as_plain(model, tokenizer, packed_logprobs, chunk_tokens)
    assert len(calls) == model.config.num_hidden_layers and calls[0].samples > 1  # every layer, one forward
    assert all(layout.rows == 1 for layout in calls)  # the groups in one row, no padding between them


def test_a_model_that_drops_the_layout_is_refused(tiny_lm, monkeypatch):
    """The mask is only a stand-in beside the layout: attention that never read the layout must not pass."""
    model, tokenizer, _ = tiny_lm
    # stock SDPA ignores packed_segments=
    monkeypatch.setattr("pasodoble.update.segment_attention.SEGMENT_AWARE", {"sdpa"})
    with pytest.raises(RuntimeError, match="did not pass packed_segments="):
        packed_logprobs(model, [[5, 6, 7]] * 2, [[8, 9, 10], [11, 12]], 6, pad_id=tokenizer.pad_token_id)
