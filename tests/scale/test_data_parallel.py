"""Data-parallel shares: every slot generated once and reassembled in order; a sharded update equals the full one.

The ranks are simulated in one process: `local_generate` is called once per rank, and for the update each rank is
a thread whose gradient "all-reduce" sums the ranks' gradients behind a barrier (what DDP's reduction computes,
up to its averaging, which `grad_scale` undoes). The real engine is exercised by tests/scale/test_distributed.py.
"""

from __future__ import annotations

import threading

import pytest
import torch

from pasodoble.roles.role import Role
from pasodoble.rollout import Completion
from pasodoble.scale.collectives import share
from pasodoble.scale.data_parallel import GlobalBatch, combine_stats, global_batch, local_generate
from pasodoble.scale.sharding.unsharded import Unsharded
from tests.roles.test_roles import make_role, sampled


class CountingRole:
    """generate() returns completions that name their prompt and their index within the call."""

    def __init__(self):
        self.calls = []

    def generate(self, prompt_ids, seed, *, n):
        self.calls.append((len(prompt_ids), n, seed))
        return [[Completion(f"{p[0]}:{k}", [p[0]], [0.0], "stop") for k in range(n)] for p in prompt_ids]


@pytest.mark.parametrize("prompts,n,world", [(1, 6, 4), (4, 6, 3), (3, 8, 5), (2, 2, 7), (5, 3, 1)])
def test_shares_generate_every_slot_once_in_order(prompts, n, world):
    ids = [[100 + p] for p in range(prompts)]
    flat, seeds = [], []
    for rank in range(world):
        role = CountingRole()
        got = local_generate(role, ids, n, 1234, rank, world)
        assert len(role.calls) <= 3  # one generate() per distinct count
        flat += [p for p, _ in got]
        seeds += [seed for _, _, seed in role.calls]
    assert flat == [p for p in range(prompts) for _ in range(n)]
    assert len(set(seeds)) == len(seeds)  # no two calls sample the same stream


def test_one_rank_is_one_call_with_the_step_seed():
    role = CountingRole()
    local_generate(role, [[1], [2], [3]], 4, 99, 0, 1)
    assert role.calls == [(3, 4, 99)]


def test_share_sizes_differ_by_at_most_one():
    for n in range(0, 30):
        for world in range(1, 7):
            parts = [share(n, world, r) for r in range(world)]
            assert [i for p in parts for i in p] == list(range(n))
            assert max(map(len, parts)) - min(map(len, parts)) <= 1


class Recording(Unsharded):
    """One rank that keeps the gradients of its last step."""

    def clip_grad_norm(self, model, max_norm):
        self.summed = [p.grad.clone() for p in model.parameters()]
        return super().clip_grad_norm(model, max_norm)


class ThreadSum(Unsharded):
    """An in-process all-reduce: threads (ranks) sum their gradients before clipping."""

    def __init__(self, world: int):
        self.world, self.barrier, self.grads = world, threading.Barrier(world), {}

    def clip_grad_norm(self, model, max_norm):
        rank = int(threading.current_thread().name)
        self.grads[rank] = [p.grad.clone() for p in model.parameters()]
        self.barrier.wait()
        for i, p in enumerate(model.parameters()):
            p.grad = sum(self.grads[r][i] for r in range(self.world))
        self.summed = [p.grad.clone() for p in model.parameters()]
        self.barrier.wait()
        return super().clip_grad_norm(model, max_norm)


def sharded_update(world: int, samples, advantages, **overrides) -> tuple[list[Role], list[dict]]:
    sharding = ThreadSum(world)
    roles = [make_role(**overrides) for _ in range(world)]
    for role in roles:
        role.sharding = sharding
    batch = global_batch(samples, roles[0].micro_batch_plan, world)
    stats: list = [None] * world

    def run(rank: int) -> None:
        mine = share(len(samples), world, rank)
        stats[rank] = roles[rank].update(
            samples[mine.start : mine.stop], advantages[mine.start : mine.stop], batch=batch
        )

    threads = [threading.Thread(target=run, args=(r,), name=str(r)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return roles, stats, sharding


@pytest.mark.parametrize(
    "world,prompts,overrides",
    [
        (2, ["a", "b", "c"], {}),  # 9 samples: shares 5/4, micro-batches 2/1 (the short share pads)
        (3, ["a"], {"micro_batch_size": 1}),  # 3 samples, one per rank
        (4, ["a"], {"micro_batch_size": 2}),  # 3 samples on 4 ranks: one rank has none
        (3, ["a", "b"], {"loss_type": "dapo", "micro_batch_size": 2}),
        (2, ["a", "b"], {"loss_type": "grpo", "num_iterations": 2}),
        (
            2,
            ["a", "b", "c"],
            {"micro_batch_tokens": 24},
        ),  # a sample a micro-batch: 5 on one rank, 4 on the other
        (
            2,
            ["a", "b", "c"],
            {"micro_batch_tokens": 44},
        ),  # up to 3 samples (20 prompt + 3 x 8 tokens) a forward
    ],
)
def test_sharded_update_equals_the_full_batch_update(world, prompts, overrides):
    full = make_role(**overrides)
    full.sharding = Recording()
    samples, advantages = sampled(full, prompts)
    full_stats = full.update(samples, advantages)
    roles, stats, sharding = sharded_update(world, samples, advantages, **overrides)
    combined = combine_stats(stats)
    for a, b in zip(full.sharding.summed, sharding.summed):  # the last step's gradient, before clipping
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)
    for role in roles:  # Adam's first steps amplify rounding where a gradient is ~0: 1% of lr
        for a, b in zip(full.model.parameters(), role.model.parameters()):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-4)
    assert combined["samples"] == full_stats["samples"]
    assert combined["loss"] == pytest.approx(full_stats["loss"], rel=1e-4, abs=1e-6)
    assert combined["grad_norm"] == pytest.approx(full_stats["grad_norm"], rel=1e-4)


def test_a_batch_with_fewer_micro_batches_than_a_rank_plans_is_refused():
    role = make_role(micro_batch_tokens=24)  # one sample a micro-batch here
    samples, advantages = sampled(role, ["a"])
    batch = GlobalBatch(samples=len(samples), tokens=8 * len(samples), micro_batches=1)
    with pytest.raises(RuntimeError, match="planned 3 micro-batches but the batch allows 1"):
        role.update(samples, advantages, batch=batch)


def test_an_unnormalised_share_would_differ():
    """The pin above can fail: each rank normalising by its own share gives a different update."""
    full = make_role()
    samples, advantages = sampled(full, ["a", "b", "c"])
    full_stats = full.update(samples, advantages)
    sharding, roles = ThreadSum(2), [make_role(), make_role()]
    for role in roles:
        role.sharding = sharding

    def run(rank: int) -> None:
        mine = share(len(samples), 2, rank)
        roles[rank].update(samples[mine.start : mine.stop], advantages[mine.start : mine.stop])

    threads = [threading.Thread(target=run, args=(r,), name=str(r)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert roles[0].updates == 1 and full_stats["grad_norm"] > 0
    diff = max(
        (a - b).abs().max().item() for a, b in zip(full.model.parameters(), roles[0].model.parameters())
    )
    assert diff > 1e-6
