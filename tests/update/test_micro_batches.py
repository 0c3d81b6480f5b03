"""Micro-batch plans (`update.micro_batches`): priced on literal lengths, and an update that does not depend on them."""

from __future__ import annotations

import pytest

from pasodoble.errors import ConfigError
from pasodoble.roles.role import RoleConfig, Sample
from pasodoble.rollout import Completion
from pasodoble.update.micro_batches import (
    executed_tokens,
    padding_free_tokens,
    plan_micro_batches,
    plan_padding_free,
)
from tests.roles.test_roles import make_role

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


def test_packed_rows_of_one_micro_batch_are_of_close_lengths():
    """Packed, the prompt groups sorted by their row's length pad less than the given order or the samples sorted by
    completion length (which also splits rows); each prompt's samples stay together."""
    a, c, b, d = (1, 2), (3, 4), (5, 6), (7, 8)
    prompts, lengths = (
        [a, a, c, c, b, b, d, d],
        [10, 2, 2, 2, 6, 6, 2, 2],
    )  # rows of 12, 4, 12 and 4 positions
    plan = plan_micro_batches(prompts, lengths, 4, share=True, packed=True)
    assert plan == [[2, 3, 6, 7], [0, 1, 4, 5]]
    assert (
        sum(executed_tokens(prompts, lengths, mb, share=True, packed=True) for mb in plan) == 32
    )  # 48 either other way
    assert plan_micro_batches(prompts, lengths, 4, share=True, packed=True, max_tokens=24) == plan


def test_plan_rejects_mismatched_inputs():
    with pytest.raises(ValueError, match="one completion length per prompt"):
        plan_micro_batches([A], [1, 2], 1, share=True)
    with pytest.raises(ValueError, match="max_tokens"):
        plan_micro_batches([A], [1], 1, share=True, max_tokens=0)


def test_a_token_budget_fills_micro_batches_up_to_it_whatever_their_count():
    prompts = [A] * 4 + [B] * 4
    lengths = [4, 4, 4, 4, 2, 2, 2, 2]
    # shared: A once (3) + 4 rows x 4 = 19, then B once (2) + 4 x 2 = 10; the size (2) no longer caps
    assert plan_micro_batches(prompts, lengths, 2, share=True, max_tokens=19) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    # plain, budget 14: given order 2 x 7 + 2 x 7 + 3 x 4 + 4 = 44 positions; length-sorted [4, 5, 6], [7, 0],
    # [1, 2], [3] runs 12 + 14 + 14 + 7 = 47
    assert plan_micro_batches(prompts, lengths, 2, share=False, max_tokens=14) == [
        [0, 1],
        [2, 3],
        [4, 5, 6],
        [7],
    ]
    assert plan_micro_batches([A, A], [50, 1], 8, share=True, max_tokens=10) == [[0], [1]]  # too long: alone


@pytest.mark.parametrize("max_tokens", [1, 9, 20, 33, 64, 1000])
def test_every_micro_batch_of_a_budget_fits_it_unless_it_holds_one_sample(max_tokens):
    prompts = [A, B, A, B, A, B, A, [7] * 9]
    lengths = [9, 1, 3, 30, 2, 8, 0, 5]
    for share in (True, False):
        plan = plan_micro_batches(prompts, lengths, 1, share=share, max_tokens=max_tokens)
        assert sorted(i for mb in plan for i in mb) == list(range(len(prompts)))
        for mb in plan:
            assert len(mb) == 1 or executed_tokens(prompts, lengths, mb, share=share) <= max_tokens
        if max_tokens == 1000:
            assert len(plan) == 1


@pytest.mark.parametrize("loss_type", ["dr_grpo", "grpo", "dapo"])
def test_token_budget_micro_batches_give_the_one_micro_batch_loss_and_gradient(loss_type):
    plain = make_role(micro_batch_size=6, loss_type=loss_type, max_grad_norm=None)
    budget = make_role(micro_batch_size=6, micro_batch_tokens=40, loss_type=loss_type, max_grad_norm=None)
    prompt = plain.prompt_ids([{"role": "user", "content": "1+1"}])
    samples = [
        Sample(prompt, Completion("", [10 + k] * n, [-1.0 - 0.1 * k] * n, "stop"))
        for k, n in enumerate([3, 12, 5, 20, 1, 7])
    ]
    plan = budget.micro_batch_plan(samples)
    assert 2 <= len(plan) < len(samples)  # several samples share a forward, and the budget splits the batch
    advantages = [1.0, -0.5, 0.25, -1.0, 0.75, -0.25]
    a, b = plain.update(samples, advantages), budget.update(samples, advantages)
    assert a["loss"] == pytest.approx(b["loss"], abs=1e-6)
    assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4)


@pytest.mark.parametrize("value", [0, -5, True, 2.5, 10**12])
def test_a_bad_token_budget_is_a_config_error(value):
    with pytest.raises(ConfigError, match="micro_batch_tokens"):
        RoleConfig(model="m", micro_batch_tokens=value).validate()


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


def test_packed_rows_and_the_attention_pairs_each_layout_computes():
    from pasodoble.update.micro_batches import attention_entries, layout_cost

    prompts, lengths = [A, A, B], [2, 7, 0]
    # rows: A + (2 - 1) + (7 - 1) = 10 positions, B alone = 2, padded to 10
    assert executed_tokens(prompts, lengths, [0, 1, 2], share=True, packed=True) == 2 * 10
    assert attention_entries(prompts, lengths, [0, 1, 2], share=True, packed=True) == 2 * 10 * 10
    # the KV-cache path: two prompts of width 3, then 3 rows of 7 over 3 + 7 columns
    assert attention_entries(prompts, lengths, [0, 1, 2], share=True) == 2 * 9 + 3 * 7 * 10
    assert attention_entries(prompts, lengths, [0, 1, 2], share=False) == 3 * 10 * 10
    # packed rows attended per sample: each prompt over itself, each fed sample (1 and 6 tokens) over its prompt
    # and itself, every one at its own length
    assert attention_entries(prompts, lengths, [0, 1, 2], share=True, packed=True, segments=True) == (
        3 * 3 + 2 * 2 + 1 * (3 + 1) + 6 * (3 + 6)
    )
    # one row (attended per sample): the two groups' positions, no padding
    assert executed_tokens(prompts, lengths, [0, 1, 2], share=True, packed=True, line=True) == 10 + 2
    plan = [[0, 1], [2]]
    assert layout_cost(prompts, lengths, plan, share=True, packed=True, entry_weight=0.5) == (
        10 + 0.5 * 100 + 2 + 0.5 * 4
    )
    assert layout_cost(prompts, lengths, plan, share=True, packed=True, entry_weight=0.5, segments=True) == (
        10 + 0.5 * (9 + 4 + 54) + 2 + 0.5 * 4
    )


def test_one_row_plans_keep_whole_groups_unless_a_micro_batch_costs_more_than_a_cut():
    from pasodoble.update.micro_batches import _fill_groups, micro_batch_weight

    # three prompt groups of 3 + 2 + 2 positions in one row each, a budget of 12
    prompts, lengths = [A, A, [7, 8, 9], [7, 8, 9], [4, 5, 6], [4, 5, 6]], [3] * 6
    assert _fill_groups(range(6), prompts, lengths, 12) == [[0, 1], [2, 3], [4, 5]]  # 21 positions
    # filled sample by sample, the second group is cut in two and its prompt runs twice: 24 positions, 2 micro-batches
    assert plan_micro_batches(prompts, lengths, 8, share=True, packed=True, line=True, max_tokens=12) == [
        [0, 1],
        [2, 3],
        [4, 5],
    ]
    assert plan_micro_batches(
        prompts, lengths, 8, share=True, packed=True, line=True, max_tokens=12, micro_batch_cost=10.0
    ) == [[0, 1, 2], [3, 4, 5]]
    # SmolLM2-135M: 30 layers, a 49,152-token vocabulary: a micro-batch costs under one position
    weight = micro_batch_weight(
        hidden=576, intermediate=1536, heads=9, kv_heads=3, head_dim=64, layers=30, vocab=49152
    )
    assert weight == pytest.approx(5e8 / (6 * (30 * (576 * 64 * 24 + 3 * 576 * 1536) + 576 * 49152)))
    assert weight < 1


def test_attention_entry_weight_is_a_pair_over_a_position():
    from pasodoble.update.micro_batches import attention_entry_weight

    # SmolLM2-135M: 9 heads of 64 (3 key/value heads), hidden 576, MLP 1536
    weight = attention_entry_weight(hidden=576, intermediate=1536, heads=9, kv_heads=3, head_dim=64)
    assert weight == pytest.approx(2 * 9 * 64 / (576 * 64 * 24 + 3 * 576 * 1536))


def test_the_role_packs_short_groups_and_keeps_the_cache_for_long_ones():
    role = make_role(micro_batch_size=64)
    prompt = role.prompt_ids([{"role": "user", "content": "1+1"}])
    short = [Sample(prompt, Completion("", [10] * 4, [-1.0] * 4, "stop")) for _ in range(3)]
    assert role.micro_batch_layout(short)[1]  # packed: fewer positions, few pairs
    role.entry_weight = 1.0  # attention priced like a whole layer: a packed row's squared length loses
    assert not role.micro_batch_layout(short)[1]
    role.entry_weight = None  # a model without the sizes: never packed
    assert not role.micro_batch_layout(short)[1]


def test_a_budget_fills_each_micro_batch_as_pricing_it_whole_does():
    # the running sizes `_fill` prices a sample by against `executed_tokens` over the whole grown micro-batch
    import random

    from pasodoble.update.micro_batches import _fill

    def by_whole_micro_batch(order, prompts, lengths, max_tokens, share, packed, line):
        plan = [[]]
        for i in order:
            grown = plan[-1] + [i]
            if (
                len(grown) > 1
                and executed_tokens(prompts, lengths, grown, share=share, packed=packed, line=line)
                > max_tokens
            ):
                plan.append([i])
            else:
                plan[-1] = grown
        return plan if plan[0] else []

    rng = random.Random(0)
    for _ in range(300):
        n = rng.randint(0, 24)
        pool = [tuple(rng.randint(1, 9) for _ in range(rng.randint(1, 12))) for _ in range(rng.randint(1, 4))]
        prompts = [rng.choice(pool) for _ in range(n)]
        lengths = [rng.randint(0, 40) for _ in range(n)]
        order = rng.sample(range(n), n)
        max_tokens = rng.randint(1, 200)
        for share, packed, line in (
            (False, False, False),
            (True, False, False),
            (True, True, False),
            (True, True, True),
        ):
            expected = by_whole_micro_batch(order, prompts, lengths, max_tokens, share, packed, line)
            assert _fill(order, prompts, lengths, max_tokens, share, packed, line) == expected


def test_a_padding_free_plan_fits_its_budget_and_takes_the_fewest_micro_batches():
    prompts = [[1, 2]] * 6  # each sample feeds its prompt and its completion but the last token
    lengths = [7, 7, 3, 3, 5, 5]  # 8, 8, 4, 4, 6, 6 positions
    # the given order fills 8 | 8 4 | 4 6 | 6: four; first-fit by decreasing length 8 4 | 8 4 | 6 6: three
    plan = plan_padding_free(prompts, lengths, 12)
    assert plan == [[0, 2], [1, 3], [4, 5]]
    assert sorted(i for mb in plan for i in mb) == list(range(6))
    assert all(sum(padding_free_tokens(2, lengths[i]) for i in mb) <= 12 for mb in plan)
    # a tie keeps the given order (a prompt's samples together); a sample past the budget runs alone
    assert plan_padding_free(prompts, lengths, 100) == [[0, 1, 2, 3, 4, 5]]
    assert plan_padding_free([[1]] * 3, [2, 50, 2], 10) == [[1], [0, 2]]
    with pytest.raises(ValueError, match="max_tokens"):
        plan_padding_free([[1]], [1], 0)
