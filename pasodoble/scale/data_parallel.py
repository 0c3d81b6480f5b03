"""Data-parallel pieces of a dual-play step: each rank generates, grades and trains on its share.

What: `generate_shared` (each rank samples its contiguous share of the step's prompt x completion slots, the slots
are gathered in order, so every rank holds every completion), `solve_shared` (the same for Solver answers, each rank
grading its own share before the gather), and `update_shared` (each rank runs `Role.update` on its share of the
samples with the FULL batch's normaliser; the engine's gradient reduction sums the shares, so the update equals the
one-rank update on the same samples up to float rounding).

Why: the loop's decisions (rewards, advantages, skips, history, buffer) are pure functions of the gathered results,
so every rank computes them identically, without a rank 0 that knows more than the others.

How: called by `pasodoble.dualplay`; with `SingleProcess` every function reduces to the one-process call (same seed,
same batch), so one-rank runs are bit-identical to runs without this module. Tests: tests/scale/test_data_parallel.py.

Departures from the reference code: shares are ragged (any world size, any batch; the reference required the
number of training processes to divide the batch). A rank whose share is empty or shorter still runs as many
micro-batches as the longest share (zero-weight dummy forwards), because DDP needs every rank in every forward and
backward, and FSDP2's gradient reduce-scatter every rank in the last one. Each phase (a role's generation, solving, update) runs inside
`role.gathered()`, entered once by every rank: under FSDP2 that gathers the full weights once, so the different
numbers of forwards that ranks run inside a phase (decoding lengths, generate() calls) need no collective.
Sampling seeds: rank 0's first call uses the step's seed (so one rank reproduces a one-process run); other calls
derive their own, so a run on N ranks samples different (equally distributed) completions than a run on one, and
their metrics agree in distribution only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pasodoble.rollout import Completion
from pasodoble.scale.collectives import Collective, share


@dataclass(frozen=True)
class GlobalBatch:
    """What a rank's share of an update needs to know about the whole batch."""

    samples: int  # samples over all ranks (the grpo / dr_grpo normaliser)
    tokens: int  # completion tokens over all ranks (the dapo normaliser)
    micro_batches: int  # micro-batches of the longest share (every rank runs this many)


def _call_seed(seed: int | None, rank: int, call: int) -> int | None:
    if seed is None or (rank == 0 and call == 0):
        return seed
    digest = hashlib.blake2b(repr((seed, "share", rank, call)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % (2**31 - 1)


def local_generate(
    role, prompt_ids: Sequence[Sequence[int]], n: int, seed: int | None, rank: int, world_size: int
):
    """This rank's share of the len(prompt_ids) * n slots: [(prompt index, completion)] in slot order."""
    counts: dict[int, int] = {}
    for slot in share(len(prompt_ids) * n, world_size, rank):
        counts[slot // n] = counts.get(slot // n, 0) + 1
    by_count: dict[int, list[int]] = {}
    for p, c in counts.items():
        by_count.setdefault(c, []).append(p)
    got: dict[int, list[Completion]] = {}
    # One generate() per distinct count (at most three: a partial first prompt, full ones, a partial last one).
    for call, (count, prompts) in enumerate(sorted(by_count.items(), key=lambda kv: -kv[0])):
        groups = role.generate([prompt_ids[p] for p in prompts], _call_seed(seed, rank, call), n=count)
        got.update(zip(prompts, groups))
    return [(p, c) for p in sorted(got) for c in got[p]]


def _regroup(flat: list, n: int, prompts: int) -> list[list]:
    return [flat[i * n : (i + 1) * n] for i in range(prompts)]


def generate_shared(
    role, prompt_ids: Sequence[Sequence[int]], seed: int | None, collective: Collective, what: str
) -> list[list[Completion]]:
    """`role.num_generations` completions per prompt, the slots shared over ranks; every rank gets all of them."""
    n = role.cfg.num_generations
    with role.gathered():  # ranks make different numbers of generate() calls and forwards inside
        local = local_generate(role, prompt_ids, n, seed, collective.rank, collective.world_size)
    mine = [c for _, c in local]
    parts = collective.all_gather(mine, what) if collective.world_size > 1 else [mine]
    return _regroup([c for part in parts for c in part], n, len(prompt_ids))


def solve_shared(
    role, prompt_ids, golds: Sequence[str], seed: int | None, grader, collective: Collective, timer
):
    """Solver answers (J per prompt) generated and graded share by share, then gathered.

    Returns (completions, correct, answered, counters), the first three as (Q, J) nested lists."""
    n = role.cfg.num_generations
    with timer("solve"), role.gathered():
        local = local_generate(role, prompt_ids, n, seed, collective.rank, collective.world_size)
    rows, counters = [], {}
    with timer("grade"):
        if local:
            batch = grader.grade([golds[p] for p, _ in local], [c.text for _, c in local])
            rows = [(c, v.correct, v.extracted is not None) for (_, c), v in zip(local, batch.verdicts)]
            counters = dict(batch.counters)
        parts = (
            collective.all_gather((rows, counters), "solver answers and verdicts")
            if collective.world_size > 1
            else [(rows, counters)]
        )
    flat = [row for part_rows, _ in parts for row in part_rows]
    total: dict[str, int] = {}
    for _, part_counters in parts:
        for key, value in part_counters.items():
            total[key] = total.get(key, 0) + value
    groups = _regroup(flat, n, len(prompt_ids))
    return (
        [[c for c, _, _ in g] for g in groups],
        [[ok for _, ok, _ in g] for g in groups],
        [[a for _, _, a in g] for g in groups],
        total if any(part_rows for part_rows, _ in parts) else {},
    )


def global_batch(samples: Sequence, plan: Callable[[Sequence], list], world_size: int) -> GlobalBatch:
    """The whole batch's normalisers; `plan(share)` is the micro-batches a rank runs on its share (`Role.micro_batch_plan`),
    and every rank runs as many as the rank with the most."""
    shares = [
        samples[r.start : r.stop] for r in (share(len(samples), world_size, k) for k in range(world_size))
    ]
    return GlobalBatch(
        samples=len(samples),
        tokens=sum(max(len(s.completion.token_ids), 1) for s in samples),
        micro_batches=max(len(plan(part)) if part else 0 for part in shares),
    )


FIRST_RANK_STATS = ("grad_norm", "lr")  # identical on every rank after the gradient reduction
MAX_STATS = ("update_s",)


def update_shared(
    role, samples: Sequence, advantages: Sequence[float], collective: Collective
) -> dict[str, float]:
    """`role.update` on this rank's share with the full batch's normaliser; statistics combined over ranks."""
    batch = global_batch(samples, role.micro_batch_plan, collective.world_size)
    mine = share(len(samples), collective.world_size, collective.rank)
    stats = role.update(
        list(samples[mine.start : mine.stop]), list(advantages[mine.start : mine.stop]), batch=batch
    )
    if collective.world_size == 1:
        return stats
    return combine_stats(collective.all_gather(stats, f"{role.name} update statistics"))


def combine_stats(per_rank: list[dict[str, float]]) -> dict[str, float]:
    """Share-weighted statistics add up to the full batch's; grad norm and lr are rank 0's; time is the max."""
    out: dict[str, float] = {}
    for key in per_rank[0]:
        values = [s[key] for s in per_rank if key in s]
        if key in FIRST_RANK_STATS:
            out[key] = values[0]
        elif key in MAX_STATS:
            out[key] = max(values)
        else:
            out[key] = sum(values)
    return out
