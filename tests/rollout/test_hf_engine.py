"""HFEngine: shapes, EOS handling, greedy determinism, seeding, and log-probs equal to a plain forward pass."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pasodoble.rollout import HFEngine, SamplingParams


def _prompts(tokenizer):
    texts = ["What is 2+3?", "Hi"]
    return [
        tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True)
        for t in texts
    ]


def _ids(x):
    return list(x["input_ids"]) if isinstance(x, dict) or hasattr(x, "keys") else list(x)


def test_generate_shapes_and_logprobs_match_forward(tiny_lm):
    model, tokenizer, _ = tiny_lm
    prompts = [_ids(p) for p in _prompts(tokenizer)]
    engine = HFEngine(model, tokenizer, batch_size=3)
    out = engine.generate(prompts, SamplingParams(n=3, temperature=0.7, max_new_tokens=12, seed=1))
    assert [len(group) for group in out] == [3, 3]
    for prompt, group in zip(prompts, out):
        for c in group:
            assert 1 <= len(c.token_ids) <= 12 and len(c.logprobs) == len(c.token_ids)
            assert c.finish_reason == ("stop" if c.token_ids[-1] == tokenizer.eos_token_id else "length")
            # unpadded forward pass of prompt + completion gives the same log-probs
            ids = torch.tensor([prompt + c.token_ids])
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1] / 0.7
            want = F.log_softmax(logits.float(), -1).gather(1, ids[0, len(prompt) :, None]).squeeze(1)
            torch.testing.assert_close(torch.tensor(c.logprobs), want, atol=1e-4, rtol=1e-4)
            assert all(lp <= 0 for lp in c.logprobs)


def test_seeded_sampling_is_reproducible_and_greedy_is_deterministic(tiny_lm):
    model, tokenizer, _ = tiny_lm
    prompts = [_ids(p) for p in _prompts(tokenizer)]
    engine = HFEngine(model, tokenizer)
    a = engine.generate(prompts, SamplingParams(n=4, temperature=1.0, max_new_tokens=8, seed=7))
    b = engine.generate(prompts, SamplingParams(n=4, temperature=1.0, max_new_tokens=8, seed=7))
    c = engine.generate(prompts, SamplingParams(n=4, temperature=1.0, max_new_tokens=8, seed=8))
    ids = lambda out: [[x.token_ids for x in g] for g in out]  # noqa: E731
    assert ids(a) == ids(b) and ids(a) != ids(c)
    g1 = engine.generate(prompts, SamplingParams(n=2, temperature=0, max_new_tokens=8))
    assert g1[0][0].token_ids == g1[0][1].token_ids


def test_training_mode_is_restored(tiny_lm):
    model, tokenizer, _ = tiny_lm
    model.train()
    HFEngine(model, tokenizer).generate(
        [_ids(_prompts(tokenizer)[0])], SamplingParams(max_new_tokens=2, seed=0)
    )
    assert model.training
    model.eval()


def test_progress_reports_every_sequence_without_changing_the_samples(tiny_lm):
    model, tokenizer, _ = tiny_lm
    engine = HFEngine(model, tokenizer, batch_size=4)
    prompts = [
        tokenizer("12+3=")["input_ids"],
        tokenizer("7*8=")["input_ids"],
        tokenizer("1+1=")["input_ids"],
    ]
    sampling = SamplingParams(n=3, temperature=1.0, max_new_tokens=10, seed=5)
    steps, batches = [], []
    plain = engine.generate(prompts, sampling)
    watched = engine.generate(
        prompts, sampling, on_batch=lambda first, c: batches.append((first, len(c))), on_progress=steps.append
    )
    assert [[c.text for c in p] for p in plain] == [[c.text for c in p] for p in watched]
    assert sum(steps) == 9 and all(s > 0 for s in steps)  # every sequence once, as it finishes
    assert batches == [(0, 4), (4, 4), (8, 1)]


def test_stop_strings_end_each_row_after_its_first_stop(tiny_lm):
    model, tokenizer, _ = tiny_lm
    prompts = [_ids(p) for p in _prompts(tokenizer)]
    engine = HFEngine(model, tokenizer)
    free = engine.generate(prompts, SamplingParams(temperature=0, max_new_tokens=24))
    text = free[0][0].text
    stop = text[5:7]  # two characters from the first row's greedy text; the second row may never write them
    out = engine.generate(prompts, SamplingParams(temperature=0, max_new_tokens=24, stop=(stop,)))
    for before, after in zip(free, out):
        before, after = before[0], after[0]
        end = before.text.find(stop)
        if end < 0:  # never written: the row runs as before
            assert after.token_ids == before.token_ids and after.finish_reason == before.finish_reason
            continue
        assert after.text == before.text[: end + len(stop)] and after.finish_reason == "stop"
        assert after.token_ids == before.token_ids[: len(after.token_ids)]
        assert len(after.logprobs) == len(after.token_ids)
    assert out[0][0].text.endswith(stop)


def test_stop_must_be_non_empty_strings():
    with pytest.raises(ValueError, match="stop"):
        SamplingParams(stop=("",))
    with pytest.raises(ValueError, match="stop"):
        SamplingParams(stop=["\ndef "])
