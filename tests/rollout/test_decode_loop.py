"""The HF engine's own decode loop (`rollout.decode_loop`): what `generate` would give, with ended rows dropped."""

from __future__ import annotations

import copy

import pytest
import torch

from pasodoble.rollout import HFEngine, SamplingParams
from pasodoble.rollout.decode_loop import COMPACT_AT
from pasodoble.rollout.hf import InverseCdfSampler


def _prompts(tokenizer) -> list[list[int]]:
    texts = ("What is 2+3?", "Hi", "Name three primes below 20.", "x")
    chats = [[{"role": "user", "content": t}] for t in texts]
    out = []
    for chat in chats:
        ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True)
        out.append(list(ids["input_ids"]) if hasattr(ids, "keys") else list(ids))
    return out


def _peaked(model) -> torch.nn.Module:
    """A copy of the random model with every matrix scaled by sqrt(10): its greedy continuations vary by context."""
    peaked = copy.deepcopy(model)
    with torch.no_grad():
        for p in peaked.parameters():
            if p.dim() > 1:
                p.mul_(10**0.5)
    return peaked


def _engine_ending_early(model, tokenizer, prompts, steps: int, sampling: SamplingParams) -> HFEngine:
    """An engine whose EOS is the token that ends `sampling`'s rows at the most distinct steps (never the first)."""
    engine = HFEngine(model, tokenizer, batch_size=16, share_prefill=False)
    rows = [c.token_ids for group in engine.generate(prompts, sampling) for c in group]

    def ends(token: int) -> list[int]:
        return [next((k for k, t in enumerate(r) if t == token), steps) for r in rows]

    seen = {t for r in rows for t in r[1:] if t not in (r[0],)}
    engine.eos_ids = [max(sorted(seen), key=lambda t: len(set(ends(t))))]
    return engine


def _batch(engine, prompts):
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[engine.pad_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask


@pytest.mark.parametrize("with_stop", [False, True])
def test_greedy_loop_matches_generate_token_for_token(tiny_lm, with_stop):
    model, tokenizer, _ = tiny_lm
    model, prompts = _peaked(model), _prompts(tokenizer)
    greedy = SamplingParams(temperature=0, max_new_tokens=16)
    engine = _engine_ending_early(model, tokenizer, prompts, 16, greedy)
    stop = ()
    if with_stop:  # a text the longest row makes before its EOS, ending it (and any row that makes it) early
        longest = max(
            (c for g in engine.generate(prompts, greedy) for c in g), key=lambda c: len(c.token_ids)
        )
        stop = (tokenizer.decode(longest.token_ids[len(longest.token_ids) // 2 : -1]),)
    sampling = SamplingParams(temperature=0, max_new_tokens=16, stop=stop)
    ids, mask = _batch(engine, prompts)
    with torch.no_grad():
        own = engine._decode(ids, mask, None, sampling, None, None)
        ref = engine._generate_with_hf(ids, mask, None, sampling, None, None)
    assert own[2] == ref[2] and own[3] == ref[3]  # lengths, finish reasons
    if not with_stop:
        assert len(set(own[2])) > 1 and "stop" in own[3]  # rows really ended at different steps
    else:  # a stop string, not an EOS, ended a row
        assert any(
            own[0][r, n - 1] not in engine.eos_ids for r, n in enumerate(own[2]) if own[3][r] == "stop"
        )
    for row, n in enumerate(own[2]):
        assert own[0][row, :n].tolist() == ref[0][row, :n].tolist()
        torch.testing.assert_close(own[1][row, :n], ref[1][row, :n], atol=2e-5, rtol=1e-5)


def test_ended_rows_stop_costing_decode_steps(tiny_lm):
    model, tokenizer, _ = tiny_lm
    prompts = _prompts(tokenizer)
    engine = _engine_ending_early(
        model, tokenizer, prompts, 20, SamplingParams(n=3, temperature=1.0, max_new_tokens=20, seed=9)
    )
    rows_per_step: list[int] = []
    handle = model.register_forward_pre_hook(
        lambda _m, _a, kw: rows_per_step.append(kw["input_ids"].shape[0]), with_kwargs=True
    )
    ended: list[int] = []
    try:
        out = engine.generate(
            prompts, SamplingParams(n=3, temperature=1.0, max_new_tokens=20, seed=1), on_progress=ended.append
        )
    finally:
        handle.remove()
    lengths = [len(c.token_ids) for group in out for c in group]
    assert min(lengths) < 20 and sum(ended) == len(lengths)
    # one pass a step; every running row is in it, and rows that ended stay only while under an eighth of it
    assert len(rows_per_step) == max(lengths)
    running = [sum(n > k for n in lengths) for k in range(max(lengths))]
    assert all(0 <= (rows - r) * COMPACT_AT < rows for rows, r in zip(rows_per_step, running, strict=True))
    assert rows_per_step[-1] < len(lengths)


@pytest.mark.parametrize("top_k", [7, None])  # a cut vocabulary; the decode loop's own weights
def test_seeded_sampling_repeats_and_matches_the_sampler(tiny_lm, top_k):
    model, tokenizer, _ = tiny_lm
    prompts = _prompts(tokenizer)
    engine = _engine_ending_early(
        model, tokenizer, prompts, 12, SamplingParams(n=4, temperature=0.9, max_new_tokens=12, seed=9)
    )
    sampling = SamplingParams(n=4, temperature=0.9, top_k=top_k, max_new_tokens=12, seed=5)
    a, b = engine.generate(prompts, sampling), engine.generate(prompts, sampling)
    assert [[c.token_ids for c in g] for g in a] == [[c.token_ids for c in g] for g in b]
    # the first token of every row is the sampler's draw from the prompt's logits under the same seed
    ids, mask = _batch(engine, [p for p in prompts for _ in range(4)])
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        logits = model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0))
        torch.manual_seed(5)
        first = InverseCdfSampler(0.9, top_k=top_k, top_p=1.0, min_p=None).draw(logits.logits[:, -1].float())
    assert first.tolist() == [c.token_ids[0] for g in a for c in g]


def test_max_new_tokens_ends_every_row_with_length(tiny_lm):
    model, tokenizer, _ = tiny_lm
    engine = HFEngine(model, tokenizer, batch_size=16)
    engine.eos_ids = [len(tokenizer) + 5]  # a token that cannot be drawn: no row ends early
    out = engine.generate(_prompts(tokenizer), SamplingParams(n=2, temperature=1.0, max_new_tokens=6, seed=0))
    for group in out:
        for c in group:
            assert len(c.token_ids) == 6 == len(c.logprobs) and c.finish_reason == "length"


def test_preallocated_layer_writes_in_place_and_keeps_rows_it_selects():
    from transformers.cache_utils import DynamicLayer

    from pasodoble.rollout.decode_loop import PreallocatedLayer

    torch.manual_seed(0)
    keys, values = torch.randn(3, 2, 4, 5), torch.randn(3, 2, 4, 5)
    layer, plain = PreallocatedLayer(keys, values, capacity=6), DynamicLayer()
    plain.update(keys, values)
    buffer = layer.key_buffer.data_ptr()
    for _ in range(2):
        new_k, new_v = torch.randn(3, 2, 1, 5), torch.randn(3, 2, 1, 5)
        got, want = layer.update(new_k, new_v), plain.update(new_k, new_v)
        assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert layer.key_buffer.data_ptr() == buffer and layer.get_seq_length() == 6  # written in place, no copy
    rows = torch.tensor([2, 0])
    layer.batch_select_indices(rows)
    plain.batch_select_indices(rows)
    assert torch.equal(layer.keys, plain.keys) and torch.equal(layer.values, plain.values)
    extra = torch.randn(2, 2, 1, 5)  # past the capacity: it concatenates like its parent
    assert torch.equal(layer.update(extra, extra)[0], plain.update(extra, extra)[0])
