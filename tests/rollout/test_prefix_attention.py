"""Decode attention that reads each prompt's cached columns once for its rows (`update.prefix_attention`)."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers.cache_utils import DynamicCache

from pasodoble.accel import decode_kernel
from pasodoble.accel.grouped_attention import GROUPED_SDPA, grouped_sdpa_forward, use_grouped_attention
from pasodoble.rollout import HFEngine, SamplingParams
from pasodoble.update import prefix_attention
from pasodoble.update.prefix_attention import SharedPrefix, prefix_decode_attention

KV, GROUP, DIM, LAYERS = 2, 3, 8, 2


def _prefix(prompt_lengths: list[int], width: int, rows: list[int]) -> SharedPrefix:
    cache = DynamicCache()
    for layer in range(LAYERS):
        cache.update(
            torch.randn(len(prompt_lengths), KV, width, DIM),
            torch.randn(len(prompt_lengths), KV, width, DIM),
            layer,
        )
    # left padding; a prompt of 0 columns is all padding
    mask = torch.tensor([[0] * (width - n) + [1] * n for n in prompt_lengths])
    return SharedPrefix(cache, mask, torch.tensor(rows))


def _reference(query, key, value, own_mask, prefix: SharedPrefix, layer: int) -> torch.Tensor:
    """Plain SDPA over each row's copy of its prompt's columns followed by its own, heads repeated: (b, 1, H, D)."""
    rows = prefix.rows
    keys = torch.cat([prefix.keys[layer][rows], key], dim=2).repeat_interleave(GROUP, dim=1)
    values = torch.cat([prefix.values[layer][rows], value], dim=2).repeat_interleave(GROUP, dim=1)
    own = torch.ones(key.shape[0], key.shape[2], dtype=torch.bool) if own_mask is None else own_mask[:, 0, 0]
    mask = torch.cat([prefix.mask[rows], own], dim=1)[:, None, None, :]
    out = torch.nn.functional.scaled_dot_product_attention(
        query, keys, values, attn_mask=mask, scale=DIM**-0.5
    )
    return out.transpose(1, 2)


def _step(rows: int, own: int):
    query = torch.randn(rows, KV * GROUP, 1, DIM)
    return query, torch.randn(rows, KV, own, DIM), torch.randn(rows, KV, own, DIM)


@pytest.mark.parametrize(
    "lengths,rows",
    [
        ([5, 3, 6], [0, 0, 1, 1, 2, 2]),  # every prompt's rows together, as many each: no regrouping
        # rows out of order, uneven groups, a one-token prompt (no columns)
        ([5, 0, 6, 2], [2, 0, 0, 1, 2, 3, 0, 1]),
    ],
)
def test_matches_attention_over_each_rows_copy_of_its_prompt(lengths, rows):
    torch.manual_seed(0)
    prefix = _prefix(lengths, 6, rows)
    assert prefix.identity == (rows == sorted(rows) and len(set(rows.count(u) for u in set(rows))) == 1)
    query, key, value = _step(len(rows), 4)
    own_mask = torch.ones(len(rows), 1, 1, 4, dtype=torch.bool)
    own_mask[0, ..., 1] = False  # a masked own column, as a bool mask and as an additive one
    additive = torch.zeros(len(rows), 1, 1, 4).masked_fill(~own_mask, float("-inf"))
    for layer in range(LAYERS):
        want = _reference(query, key, value, own_mask, prefix, layer)
        for mask in (own_mask, additive):
            got = prefix_decode_attention(query, key, value, mask, DIM**-0.5, prefix, layer)
            torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5)
    unmasked = prefix_decode_attention(query, key, value, None, DIM**-0.5, prefix, 0)
    torch.testing.assert_close(unmasked, _reference(query, key, value, None, prefix, 0), atol=2e-6, rtol=1e-5)


def test_select_drops_rows_and_prompts_left_without_rows():
    torch.manual_seed(1)
    prefix = _prefix([4, 2, 5], 5, [0, 0, 1, 1, 2, 2])
    keys_before = [k.clone() for k in prefix.keys]
    prefix.select(torch.tensor([1, 4, 5]))  # prompt 1 has no row left
    assert len(prefix.mask) == 2 and prefix.rows.tolist() == [0, 1, 1]
    torch.testing.assert_close(prefix.keys[1], keys_before[1][[0, 2]])
    query, key, value = _step(3, 2)
    got = prefix_decode_attention(query, key, value, None, DIM**-0.5, prefix, 1)
    torch.testing.assert_close(got, _reference(query, key, value, None, prefix, 1), atol=2e-6, rtol=1e-5)


def test_grouped_attention_takes_the_prefix_only_for_one_query_column():
    prefix = _prefix([3], 3, [0, 0])
    module = torch.nn.Module()
    module.layer_idx = 0
    query, key, value = _step(2, 1)
    out, _ = grouped_sdpa_forward(module, query, key, value, None, scaling=DIM**-0.5, shared_prefix=prefix)
    torch.testing.assert_close(out, _reference(query, key, value, None, prefix, 0), atol=2e-6, rtol=1e-5)
    wide = torch.randn(2, KV * GROUP, 2, DIM)
    with pytest.raises(ValueError, match="one query column"):
        grouped_sdpa_forward(module, wide, key, value, None, scaling=DIM**-0.5, shared_prefix=prefix)
    assert GROUPED_SDPA in prefix_attention.PREFIX_AWARE


def _prompts(tokenizer) -> list[list[int]]:
    # a one-token prompt and a repeated one
    texts = ("What is 2+3?", "x", "Name three primes below 20.", "What is 2+3?")
    return [tokenizer(t)["input_ids"] for t in texts]


@pytest.fixture(params=[1, 2], ids=["one-thread", "two-threads"])
def threads(request):
    """One torch thread: the compiled decode kernel serves the shared-prefix steps where it builds; two: tensors."""
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_engine_samples_what_it_samples_with_copied_prompts(tiny_lm, monkeypatch, temperature, threads):
    model, tokenizer, _ = tiny_lm
    plain = copy.deepcopy(model).eval()
    with torch.no_grad():  # larger weights: continuations differ by context, and rows end at different steps
        for p in plain.parameters():
            if p.dim() > 1:
                p.mul_(10**0.5)
    grouped = copy.deepcopy(plain)
    assert use_grouped_attention(grouped)
    calls = []
    real = prefix_attention.prefix_decode_attention

    def counted(*args):
        calls.append(args[0].shape[0])
        return real(*args)

    monkeypatch.setattr("pasodoble.accel.grouped_attention.prefix_decode_attention", counted)
    fused = []
    real_kernel = decode_kernel.prefix_decode

    def kernel_counted(*args):
        out = real_kernel(*args)
        fused.append(out is not None)
        return out

    monkeypatch.setattr(decode_kernel, "prefix_decode", kernel_counted)
    prompts = _prompts(tokenizer)
    sampling = SamplingParams(n=3, temperature=temperature, max_new_tokens=24, seed=3)
    engines = HFEngine(plain, tokenizer, batch_size=16), HFEngine(grouped, tokenizer, batch_size=16)
    rows = [c.token_ids for group in engines[0].generate(prompts, sampling) for c in group]
    # the EOS becomes the token that ends rows at the most distinct steps: ended rows leave the batch mid-decode
    firsts = {
        t: {next(k for k, x in enumerate(r) if x == t) if t in r else 24 for r in rows}
        for r in rows
        for t in r
    }
    eos = max(sorted(firsts), key=lambda t: len(firsts[t]))
    for engine in engines:
        engine.eos_ids = [eos]
    want = engines[0].generate(prompts, sampling)
    assert not calls
    got = engines[1].generate(prompts, sampling)
    assert calls and calls[0] == 12  # every decode row read the prompts through the shared prefix
    assert min(calls) < 12  # ... and rows left on the way
    kernel = threads == 1 and decode_kernel.status() == "on"
    assert fused and all(f == kernel for f in fused)  # the compiled kernel or the tensor path, for every step
    for group_want, group_got in zip(want, got):
        for w, g in zip(group_want, group_got):
            assert g.token_ids == w.token_ids and g.finish_reason == w.finish_reason
            torch.testing.assert_close(torch.tensor(g.logprobs), torch.tensor(w.logprobs), atol=1e-5, rtol=0)


def test_half_precision_keeps_its_dtype_and_softmaxes_in_float32():
    torch.manual_seed(2)
    prefix = _prefix([4, 2], 4, [0, 0, 1, 1])
    query, key, value = _step(4, 3)
    want = _reference(query, key, value, None, prefix, 0)
    prefix.keys = [k.bfloat16() for k in prefix.keys]
    prefix.values = [v.bfloat16() for v in prefix.values]
    got = prefix_decode_attention(
        query.bfloat16(), key.bfloat16(), value.bfloat16(), None, DIM**-0.5, prefix, 0
    )
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want, atol=3e-2, rtol=3e-2)
