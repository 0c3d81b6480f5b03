"""No re-scoring pass: decode-step log-probs equal the re-scored ones, and at num_iterations == 1 the update's loss
and gradients are those of the re-scoring path; with num_iterations > 1 the pass still runs."""

from __future__ import annotations

import pytest
import torch

from pasodoble.rollout import HFEngine, SamplingParams
from tests.roles.test_roles import make_role, sampled


def _count_forwards(model) -> list[int]:
    calls = [0]
    model.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


@pytest.mark.parametrize(
    "sampling",
    [
        SamplingParams(n=3, temperature=0.7, max_new_tokens=10, seed=1),
        SamplingParams(n=3, temperature=1.0, top_k=4, top_p=0.9, max_new_tokens=10, seed=2),
        SamplingParams(n=1, temperature=0.0, max_new_tokens=10),
    ],
)
def test_decode_step_logprobs_equal_the_rescored_ones(tiny_lm, sampling):
    model, tokenizer, _ = tiny_lm
    prompts = [
        tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True)
        for t in ("What is 2+3?", "Hi")
    ]
    prompts = [list(p["input_ids"]) if hasattr(p, "keys") else list(p) for p in prompts]
    fast = HFEngine(model, tokenizer, batch_size=4).generate(prompts, sampling)
    slow = HFEngine(model, tokenizer, batch_size=4, rescore=True).generate(prompts, sampling)
    for a, b in zip([c for g in fast for c in g], [c for g in slow for c in g]):
        assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=2e-5, rtol=1e-5)


def test_one_iteration_skips_the_pass_with_the_same_loss_and_gradients():
    new, old = make_role(), make_role()  # same seed: same weights
    assert not new.engine.rescore and new.ratio_on_current
    old.engine.rescore, old.ratio_on_current = True, False  # the re-scoring path, ratio against its log-probs
    new_calls, old_calls = _count_forwards(new.model), _count_forwards(old.model)
    samples, adv = sampled(new, ["1+1", "2+2"])
    samples_old, _ = sampled(old, ["1+1", "2+2"])
    assert [s.completion.token_ids for s in samples] == [s.completion.token_ids for s in samples_old]
    assert old_calls[0] == new_calls[0] + 1  # 6 sequences: one re-scoring micro-batch, no longer run
    results = []
    for role, batch in ((new, samples), (old, samples_old)):
        role.model.train()
        loss, stats, _ = role._micro_batch_loss(batch, adv)
        loss.backward()
        results.append((loss.detach(), stats, [p.grad.clone() for p in role.model.parameters()]))
    (loss_new, stats_new, grads_new), (loss_old, stats_old, grads_old) = results
    assert stats_new["ratio_mean"] == 1.0 and stats_old["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    torch.testing.assert_close(loss_new, loss_old, atol=1e-7, rtol=1e-5)
    for a, b in zip(grads_new, grads_old):
        torch.testing.assert_close(a, b, atol=1e-7, rtol=1e-4)
    assert stats_new["logprob_diff_max"] < 1e-4  # the decode-step figures still feed the engine-gap metric


def test_several_iterations_keep_the_pass_and_stale_samples_use_the_engine_logprobs():
    role = make_role(num_iterations=2)
    assert role.engine.rescore and not role.ratio_on_current
    once = make_role()
    samples, adv = sampled(once, ["1+1"])
    assert all(s.completion.policy_version == 0 for s in samples)
    once.update(samples, adv)
    stale = once.update(samples, adv)  # generated before the first step: the ratio is off-policy again
    assert stale["ratio_mean"] != pytest.approx(1.0, abs=1e-4)
