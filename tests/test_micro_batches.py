"""Micro-batch plans (`core.micro_batches`): priced on literal lengths, and an update that does not depend on them."""

from __future__ import annotations

import pytest

from pasodoble.core.micro_batches import executed_tokens, plan_micro_batches
from pasodoble.roles.role import Sample
from pasodoble.rollout import Completion
from tests.test_roles import make_role

A, B = [1, 2, 3], [4, 5]


def test_executed_tokens_counts_shared_prompts_once_and_pads_to_the_longest():
    prompts, lengths = [A, A, B], [2, 7, 0]
    assert executed_tokens(prompts, lengths, [0, 1, 2], share=True) == 2 * 3 + 3 * 7
    assert executed_tokens(prompts, lengths, [0, 1, 2], share=False) == 3 * (3 + 7)
    assert (
        executed_tokens(prompts, lengths, [2], share=True) == 2 + 1
    )  # an empty completion still runs a token


def test_length_sorting_wins_when_lengths_spread_and_prompt_groups_when_they_do_not():
    prompts = [A, A, B, B]
    assert plan_micro_batches(prompts, [1, 50, 2, 60], 2, share=True) == [[0, 2], [1, 3]]
    assert plan_micro_batches(prompts, [10, 11, 10, 12], 2, share=True) == [[0, 1], [2, 3]]
    assert plan_micro_batches(prompts, [5, 5, 5, 5], 2, share=False) == [
        [0, 1],
        [2, 3],
    ]  # a tie keeps the order


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7])
def test_every_sample_lands_in_exactly_one_micro_batch_of_the_plain_sizes(size):
    prompts = [A, B, A, B, A, B, A]
    lengths = [9, 1, 3, 30, 2, 8, 0]
    for share in (True, False):
        plan = plan_micro_batches(prompts, lengths, size, share=share)
        assert sorted(i for mb in plan for i in mb) == list(range(len(prompts)))
        assert [len(mb) for mb in plan] == [
            len(prompts[lo : lo + size]) for lo in range(0, len(prompts), size)
        ]


def test_plan_rejects_mismatched_inputs():
    with pytest.raises(ValueError, match="one completion length per prompt"):
        plan_micro_batches([A], [1, 2], 1, share=True)


@pytest.mark.parametrize("loss_type", ["dr_grpo", "grpo", "dapo"])
def test_a_length_sorted_plan_gives_the_one_micro_batch_loss_and_gradient(loss_type):
    plain = make_role(micro_batch_size=6, loss_type=loss_type, max_grad_norm=None)
    planned = make_role(micro_batch_size=2, loss_type=loss_type, max_grad_norm=None)
    prompt_a = plain.prompt_ids([{"role": "user", "content": "1+1"}])
    prompt_b = plain.prompt_ids([{"role": "user", "content": "2+2"}])
    lengths = [1, 30, 1, 30, 1, 30]  # each prompt's group spans short and long completions
    samples = [
        Sample(p, Completion("", [10 + k] * n, [-1.0 - 0.1 * k] * n, "stop"))
        for k, (p, n) in enumerate(zip([prompt_a] * 3 + [prompt_b] * 3, lengths, strict=True))
    ]
    ids, lens = [s.prompt_ids for s in samples], [len(s.completion.token_ids) for s in samples]
    assert plan_micro_batches(ids, lens, 2, share=True) == [[0, 2], [4, 1], [3, 5]]  # regrouped by length
    advantages = [1.0, -0.5, 0.25, -1.0, 0.75, -0.25]
    a, b = plain.update(samples, advantages), planned.update(samples, advantages)
    assert a["loss"] == pytest.approx(b["loss"], abs=1e-6)
    assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4)
