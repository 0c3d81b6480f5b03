"""The compiled shared-prompt decode attention (`accel.decode_kernel`) against the tensor path it replaces."""

from __future__ import annotations

import shutil

import pytest
import torch
from transformers.cache_utils import DynamicCache

from pasodoble.accel import decode_kernel, native
from pasodoble.update.prefix_attention import SharedPrefix, prefix_decode_attention, tensor_decode_attention

needs_compiler = pytest.mark.skipif(
    native.compiler() is None, reason="no C compiler (install gcc, or set CC)"
)


def _prefix(lengths, width, rows, kv, dim, layers=2, transposed=False) -> SharedPrefix:
    cache = DynamicCache()
    for layer in range(layers):
        if transposed:  # (U, P, KV, D) in memory, as a projection's transposed output is
            keys = torch.randn(len(lengths), width, kv, dim).transpose(1, 2)
            values = torch.randn(len(lengths), width, kv, dim).transpose(1, 2)
        else:
            keys, values = (
                torch.randn(len(lengths), kv, width, dim),
                torch.randn(len(lengths), kv, width, dim),
            )
        cache.update(keys, values, layer)
    mask = torch.tensor([[0] * (width - n) + [1] * n for n in lengths])
    return SharedPrefix(cache, mask, torch.tensor(rows))


def _own(rows, kv, group, own, dim, capacity, by_column=False):
    """A query and the rows' own keys and values as views of a preallocated cache, as the decode loop holds them;
    the unused columns hold NaN, which must not reach the output."""
    query = torch.randn(rows, kv * group, 1, dim)
    values = torch.full((rows, kv, capacity, dim), float("nan"))
    values[:, :, :own] = torch.randn(rows, kv, own, dim)
    if by_column:  # (rows, kv, dim, capacity) underneath, as the decode loop's buffer for the kernel
        keys = torch.full((rows, kv, dim, capacity), float("nan"))
        keys[..., :own] = torch.randn(rows, kv, dim, own)
        return query, keys[..., :own].transpose(-1, -2), values[:, :, :own]
    keys = torch.full((rows, kv, capacity, dim), float("nan"))
    keys[:, :, :own] = torch.randn(rows, kv, own, dim)
    return query, keys[:, :, :own], values[:, :, :own]


@needs_compiler
@pytest.mark.parametrize(
    "kv,group,dim,lengths,rows,transposed,own,capacity,by_column",
    [
        (2, 2, 24, [5, 3, 6], [0, 0, 1, 1, 2, 2], False, 5, 9, False),  # the tiny bench model's heads
        (2, 2, 24, [5, 3, 6], [0, 0, 1, 1, 2, 2], False, 20, 32, True),  # whole blocks, NaN past the columns
        (2, 2, 24, [5, 3, 6], [0, 0, 1, 1, 2, 2], False, 21, 21, True),  # a buffer that ends inside a block
        (3, 3, 64, [7, 0, 4, 2], [2, 0, 0, 1, 2, 3, 0, 1], True, 5, 9, True),  # SmolLM2's; a one-token prompt
        (2, 7, 64, [7, 3], [0, 1, 1], False, 17, 40, True),  # Qwen2.5-0.5B's seven queries a head
        (1, 1, 8, [2], [0, 0, 0], False, 5, 9, False),  # no grouping
        (2, 2, 12, [4, 4], [0, 1], False, 3, 16, True),  # a width not a multiple of 8
    ],
)
def test_kernel_matches_the_tensor_path(
    one_thread, fresh_kernel, kv, group, dim, lengths, rows, transposed, own, capacity, by_column
):
    torch.manual_seed(0)
    prefix = _prefix(lengths, 7, rows, kv, dim, transposed=transposed)
    assert prefix.by_column and prefix.keys[0].stride(2) == 1
    query, key, value = _own(len(rows), kv, group, own, dim, capacity, by_column)
    own_mask = torch.ones(len(rows), 1, 1, own, dtype=torch.bool)
    own_mask[0, ..., 1] = False
    scale = dim**-0.5
    for layer in range(2):
        for mask in (own_mask, None):
            got = decode_kernel.prefix_decode(query, key, value, mask, scale, prefix, layer)
            assert got is not None, decode_kernel.status()
            want = tensor_decode_attention(query, key, value, mask, scale, prefix, layer)
            torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5)
            dispatched = prefix_decode_attention(query, key, value, mask, scale, prefix, layer)
            assert torch.equal(dispatched, got)
    assert decode_kernel.status() == "on"
    assert len(list((fresh_kernel / "native").glob("*/decode_kernel.so"))) == 1


@needs_compiler
def test_kernel_follows_rows_that_leave(one_thread, fresh_kernel):
    torch.manual_seed(1)
    prefix = _prefix([4, 2, 5], 5, [0, 0, 1, 1, 2, 2], kv=2, dim=24)
    prefix.select(torch.tensor([1, 4, 5]))  # prompt 1 has no row left, rows regrouped
    query, key, value = _own(3, 2, 2, 6, 24, capacity=6)
    got = decode_kernel.prefix_decode(query, key, value, None, 0.2, prefix, 1)
    torch.testing.assert_close(got, tensor_decode_attention(query, key, value, None, 0.2, prefix, 1))


@needs_compiler
def test_where_the_kernel_does_not_apply_the_tensor_path_answers(fresh_kernel):
    torch.manual_seed(2)
    prefix = _prefix([3, 3], 4, [0, 1], kv=2, dim=24)
    query, key, value = _own(2, 2, 2, 3, 24, capacity=3)
    additive = torch.zeros(2, 1, 1, 3)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert decode_kernel.prefix_decode(query, key, value, None, 0.2, prefix, 0) is None  # two threads
        torch.set_num_threads(1)
        assert decode_kernel.prefix_decode(query, key, value, additive, 0.2, prefix, 0) is None
        assert decode_kernel.prefix_decode(query.double(), key, value, None, 0.2, prefix, 0) is None
        strided = key.transpose(2, 3).contiguous().transpose(2, 3)  # a column's floats not contiguous
        assert decode_kernel.prefix_decode(query, strided, strided, None, 0.2, prefix, 0) is None
        assert decode_kernel.prefix_decode(query, key, value, None, 0.2, prefix, 0) is not None
    finally:
        torch.set_num_threads(before)


def test_a_failed_build_warns_once_and_leaves_the_tensor_path(
    fresh_kernel, monkeypatch, one_thread, tmp_path
):
    false = shutil.which("false")
    if false is None:
        pytest.skip("no `false` command")
    monkeypatch.setenv("CC", false)
    query, key, value = _own(2, 2, 2, 3, 24, capacity=3)
    with pytest.warns(UserWarning, match="decode kernel unavailable") as caught:
        prefix = _prefix([3], 4, [0, 0], kv=2, dim=24)  # the shared prompts ask whether the kernel serves
        assert decode_kernel.prefix_decode(query, key, value, None, 0.2, prefix, 0) is None
    assert len(caught) == 1 and not prefix.by_column
    assert decode_kernel.status().startswith("unavailable:")
    want = tensor_decode_attention(query, key, value, None, 0.2, prefix, 0)
    assert torch.equal(prefix_decode_attention(query, key, value, None, 0.2, prefix, 0), want)
    assert not list((fresh_kernel / "native").glob("*/*.so"))  # no partial library left behind


def test_off_by_its_switch(fresh_kernel, accel_switch):
    accel_switch(decode_kernel="off")
    assert decode_kernel.status() == "off (accel.decode_kernel)"


def test_the_build_key_follows_the_source_compiler_and_cpu(monkeypatch):
    source = decode_kernel.SOURCE
    base = native.build_key(source, "cc", "gcc 12.2")
    assert base == native.build_key(source, "cc", "gcc 12.2")
    assert base != native.build_key(source, "cc", "gcc 13.1")
    assert base != native.build_key(source.with_name("train_attention.c"), "cc", "gcc 12.2")
    monkeypatch.setattr(native, "cpu_identity", lambda: "another cpu")
    assert base != native.build_key(source, "cc", "gcc 12.2")
