"""Which samples go into which micro-batch of an update: the given order, or by completion length when that pads less.

What: `plan_micro_batches(prompts, completion_lengths, size, share=...)` returns the sample indices of each
micro-batch. It prices two plans by the token positions their forwards execute (`executed_tokens`: packed
(`update.packed`), a row per distinct prompt at the longest prompt + its completions, or with `line` every prompt
and its completions in one row, no padding; with shared prompts each
distinct prompt once at the widest prompt's width plus every row at the longest completion; otherwise every row at
the longest prompt + completion) and keeps the cheapest: the samples in the given order (a prompt's
samples together, so they share its prefill), sorted by completion length (rows of one micro-batch end close to
each other), or, packed, the prompt groups sorted by their row's length (rows end close to each other and none is
split), and, packed in one row (`line`), the given order and the groups by length again with each prompt group
whole where it fits (`_fill_groups`); a plan costs its positions plus `micro_batch_cost` a micro-batch (that
micro-batch's own calls, `micro_batch_weight`), ties keep the fewer micro-batches, then the earlier. Without a token
budget the plans have the same number of micro-batches of the same sizes.

Why: the update pads every row of a micro-batch to its longest; on the tiny anchor at 200 new tokens the length-
sorted plan executed 18% fewer token positions than prompt groups with their prefill shared, while at 48 new tokens
the prompt groups were cheaper; packed at 48 new tokens, the rows sorted by length executed 6% fewer positions than
the given order and ran the update 1.04x faster (docs/PERFORMANCE.md). The loss does not depend on how samples are grouped: every
loss type weighs a micro-batch by its share of the whole batch (`Role._update`).

With `max_tokens` (the role's `micro_batch_tokens`) a micro-batch is not a count of sequences: each plan fills a
micro-batch, in its order, until one more sample would take its executed token positions past `max_tokens` (a
sample longer than that runs alone). Short sequences then share one forward, which a fixed count leaves to per-
operation overhead on small models, and long ones split so that the activations a backward keeps stay bounded
(verl calls this dynamic batch size). Of the plans the cheapest wins (positions plus the micro-batch cost), then
the one with fewer micro-batches. In one row a sample-by-sample fill cuts a prompt group where the budget ends, and
the cut group runs its prompt twice (on SmolLM2 5% more positions than whole groups, its update 1.02-1.06x as
long), while whole groups can take more micro-batches (on the tiny anchor at 200 new tokens 27 against 20, the update
1.027x as long): the micro-batch cost weighs the two.

Run: `plan_micro_batches([[1, 2], [1, 2]], [5, 60], 1, share=True)` -> `[[0], [1]]`;
`plan_micro_batches([[1, 2]] * 3, [3, 3, 9], 8, share=True, max_tokens=12)` -> `[[0, 1], [2]]`.
"""

from __future__ import annotations

from collections.abc import Sequence


def executed_tokens(
    prompts: Sequence[Sequence[int]],
    completion_lengths: Sequence[int],
    rows: Sequence[int],
    *,
    share: bool,
    packed: bool = False,
    line: bool = False,
) -> int:
    """Token positions the update's forward runs for the micro-batch `rows` (indices into the samples); `line`: a
    packed micro-batch as one row (`update.packed.pack`)."""
    if packed:  # update/packed.py: each distinct prompt, its completions after it without their last token
        groups = _packed_groups(prompts, completion_lengths, rows)
        return sum(groups.values()) if line else len(groups) * max(groups.values())
    longest_completion = max(max(completion_lengths[r], 1) for r in rows)
    if share:
        distinct = {tuple(prompts[r]) for r in rows}
        return len(distinct) * max(len(p) for p in distinct) + len(rows) * longest_completion
    return len(rows) * max(len(prompts[r]) + max(completion_lengths[r], 1) for r in rows)


def _packed_groups(
    prompts: Sequence[Sequence[int]], completion_lengths: Sequence[int], rows: Sequence[int]
) -> dict[tuple[int, ...], int]:
    """Each distinct prompt of `rows` and the length of its packed group: the prompt and its completions' fed
    tokens."""
    groups: dict[tuple[int, ...], int] = {}
    for r in rows:
        key = tuple(prompts[r])
        groups[key] = groups.get(key, len(key)) + max(completion_lengths[r] - 1, 0)
    return groups


def attention_entries(
    prompts: Sequence[Sequence[int]],
    completion_lengths: Sequence[int],
    rows: Sequence[int],
    *,
    share: bool,
    packed: bool = False,
    segments: bool = False,
) -> int:
    """(query, key) pairs the update's attention computes for the micro-batch `rows`: a masked call computes every
    pair of its rows (CPU attention does not skip the blocks a mask hides), so a packed row of L positions costs L
    squared, as does a padded row. `segments`: packed rows attended per sample (`update.segment_attention`): each
    prompt over itself and each sample's fed tokens over its prompt and its own, every one at its own length (the
    compiled kernel skips what a span leaves out; SDPA's path pads them to the longest)."""
    if packed and segments:
        total = sum(len(key) ** 2 for key in _packed_groups(prompts, completion_lengths, rows))
        for r in rows:
            fed = max(completion_lengths[r] - 1, 0)
            total += fed * (len(prompts[r]) + fed)
        return total
    if packed:  # R rows of width L
        positions = executed_tokens(prompts, completion_lengths, rows, share=True, packed=True)
        return positions * (positions // len({tuple(prompts[r]) for r in rows}))
    longest_completion = max(max(completion_lengths[r], 1) for r in rows)
    if share:  # the prompts' own pass, then every completion over its prompt's columns and its own
        wide = max(len(prompts[r]) for r in rows)
        distinct = len({tuple(prompts[r]) for r in rows})
        return distinct * wide * wide + len(rows) * longest_completion * (wide + longest_completion)
    width = max(len(prompts[r]) + max(completion_lengths[r], 1) for r in rows)
    return len(rows) * width * width


def layout_cost(
    prompts: Sequence[Sequence[int]],
    completion_lengths: Sequence[int],
    plan: Sequence[Sequence[int]],
    *,
    share: bool,
    packed: bool,
    entry_weight: float,
    segments: bool = False,
    micro_batch_cost: float = 0.0,
) -> float:
    """A plan's forward-and-backward work in units of one token position's matrix products: executed positions plus
    `entry_weight` (`attention_entry_weight`) per attention pair (`segments`: see `attention_entries`; packed, a
    micro-batch is then one row, `executed_tokens`'s `line`), plus `micro_batch_cost` (`micro_batch_weight`) per
    micro-batch."""
    return micro_batch_cost * len(plan) + sum(
        executed_tokens(prompts, completion_lengths, mb, share=share, packed=packed, line=packed and segments)
        + entry_weight
        * attention_entries(prompts, completion_lengths, mb, share=share, packed=packed, segments=segments)
        for mb in plan
    )


def attention_entry_weight(
    *, hidden: int, intermediate: int, heads: int, kv_heads: int, head_dim: int
) -> float:
    """One attention (query, key) pair's FLOPs (a product with the key and one with the value, every head) over one
    token position's through a decoder layer's projections and MLP: the exchange rate of `layout_cost`."""
    projections = hidden * head_dim * (2 * heads + 2 * kv_heads) + 3 * hidden * intermediate
    return 2 * heads * head_dim / projections


# A micro-batch's own cost, whatever its size, in FLOPs of the core's matrix products: its calls through every layer
# (Python, autograd's nodes), the head's chunks, the loss. On the tiny anchor at 200 new tokens a plan of 27
# micro-batches ran 2.7% slower than one of 20 with 1.4% more positions, about 10 ms a micro-batch
# (docs/PERFORMANCE.md): about 0.5-1 GFLOP at the measured core's 100 GFLOP/s.
MICRO_BATCH_FLOPS = 5e8


def micro_batch_weight(
    *, hidden: int, intermediate: int, heads: int, kv_heads: int, head_dim: int, layers: int, vocab: int
) -> float:
    """`MICRO_BATCH_FLOPS` in token positions of this model's forward and backward (6 FLOPs a weight): what one
    more micro-batch costs in `layout_cost`'s units (hundreds of positions on the tiny anchor, under one on
    SmolLM2-135M)."""
    per_layer = hidden * head_dim * (2 * heads + 2 * kv_heads) + 3 * hidden * intermediate
    return MICRO_BATCH_FLOPS / (6 * (layers * per_layer + hidden * vocab))


def plan_micro_batches(
    prompts: Sequence[Sequence[int]],
    completion_lengths: Sequence[int],
    size: int,
    *,
    share: bool,
    packed: bool = False,
    line: bool = False,
    max_tokens: int | None = None,
    micro_batch_cost: float = 0.0,
) -> list[list[int]]:
    """Sample indices per micro-batch: at most `size` samples each, or (with `max_tokens`) as many as run at most
    `max_tokens` token positions; the given order or length-sorted, whichever runs fewer positions, counting
    `micro_batch_cost` positions a micro-batch (`micro_batch_weight`), then fewer micro-batches (`line`: see
    `executed_tokens`)."""
    if len(prompts) != len(completion_lengths) or size < 1 or (max_tokens is not None and max_tokens < 1):
        raise ValueError(
            "plan_micro_batches needs one completion length per prompt, a size of at least 1 and max_tokens "
            "of at least 1 (or None)"
        )
    prompts = [tuple(p) for p in prompts]  # once: `executed_tokens` keys its groups by the prompts' tuples
    given = list(range(len(prompts)))
    orders = [given, sorted(given, key=lambda i: completion_lengths[i])]
    if packed:
        orders.append(_by_row_length(prompts, completion_lengths))
    if max_tokens is None:
        plans = [[order[lo : lo + size] for lo in range(0, len(order), size)] for order in orders]
    else:
        plans = [
            _fill(order, prompts, completion_lengths, max_tokens, share, packed, line) for order in orders
        ]
        if packed and line:  # and whole prompt groups: a group cut in two runs its prompt twice
            plans += [
                _fill_groups(order, prompts, completion_lengths, max_tokens) for order in (given, orders[2])
            ]
    costs = [
        (
            micro_batch_cost * len(p)
            + sum(
                executed_tokens(prompts, completion_lengths, mb, share=share, packed=packed, line=line)
                for mb in p
            ),
            len(p),
        )
        for p in plans
    ]
    return plans[min(range(len(plans)), key=lambda k: costs[k])]  # the first of the cheapest


def _by_row_length(prompts: Sequence[tuple[int, ...]], completion_lengths: Sequence[int]) -> list[int]:
    """The samples grouped by prompt (each group in the given order), the groups by the length of their packed row
    (`executed_tokens`), shortest first: rows of one micro-batch end close to each other."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, key in enumerate(prompts):
        groups.setdefault(key, []).append(i)
    rows = sorted(
        groups.values(),
        key=lambda g: len(prompts[g[0]]) + sum(max(completion_lengths[i] - 1, 0) for i in g),
    )
    return [i for group in rows for i in group]


def _fill(
    order: Sequence[int],
    prompts: Sequence[Sequence[int]],
    completion_lengths: Sequence[int],
    max_tokens: int,
    share: bool,
    packed: bool,
    line: bool = False,
) -> list[list[int]]:
    """`order` cut into consecutive micro-batches of at most `max_tokens` executed positions (one sample at least).
    The micro-batch being filled keeps its running sizes (`_Filling`), so that each sample is priced in constant
    time rather than by `executed_tokens` over the whole micro-batch again."""
    plan: list[list[int]] = []
    filling = _Filling(share, packed, line)
    for i in order:
        key, completion = tuple(prompts[i]), completion_lengths[i]
        if filling.rows and filling.cost_with(key, completion) > max_tokens:
            plan.append(filling.rows)
            filling = _Filling(share, packed, line)
        filling.add(i, key, completion)
    if filling.rows:
        plan.append(filling.rows)
    return plan


def _fill_groups(
    order: Sequence[int], prompts: Sequence[Sequence[int]], completion_lengths: Sequence[int], max_tokens: int
) -> list[list[int]]:
    """`order` cut into micro-batches of whole prompt groups (runs of samples with one prompt), each at most
    `max_tokens` positions as one packed row (`executed_tokens`'s `line`); a group longer than that is cut as `_fill`
    cuts it."""
    plan: list[list[int]] = []
    filling = _Filling(True, True, True)
    start = 0
    while start < len(order):
        key, end = tuple(prompts[order[start]]), start + 1
        while end < len(order) and tuple(prompts[order[end]]) == key:
            end += 1
        run = order[start:end]
        size = (0 if key in filling.groups else len(key)) + sum(
            max(completion_lengths[i] - 1, 0) for i in run
        )
        if filling.rows and filling.total + size > max_tokens:
            plan.append(filling.rows)
            filling = _Filling(True, True, True)
        for i in run:
            if filling.rows and filling.cost_with(key, completion_lengths[i]) > max_tokens:
                plan.append(filling.rows)
                filling = _Filling(True, True, True)
            filling.add(i, key, completion_lengths[i])
        start = end
    if filling.rows:
        plan.append(filling.rows)
    return plan


class _Filling:
    """A micro-batch being filled: its rows and the running sizes `executed_tokens` prices it by."""

    def __init__(self, share: bool, packed: bool, line: bool = False) -> None:
        self.share, self.packed, self.line = share, packed, line
        self.rows: list[int] = []
        # packed: each prompt's row length; shared: each prompt's width
        self.groups: dict[tuple[int, ...], int] = {}
        # packed: the longest row; shared: the widest prompt; otherwise the longest prompt + completion
        self.widest = 0
        self.longest = 0  # shared: the longest completion (at least 1)
        self.total = 0  # packed: the rows' positions

    def cost_with(self, key: tuple[int, ...], completion: int) -> int:
        """`executed_tokens` of the rows with one more sample (`key` its prompt's tokens)."""
        if self.packed and self.line:
            return self.total + (len(key) if key not in self.groups else 0) + max(completion - 1, 0)
        if self.packed:
            row = self.groups.get(key, len(key)) + max(completion - 1, 0)
            return (len(self.groups) + (key not in self.groups)) * max(self.widest, row)
        if self.share:
            distinct = len(self.groups) + (key not in self.groups)
            longest = max(self.longest, completion, 1)
            return distinct * max(self.widest, len(key)) + (len(self.rows) + 1) * longest
        return (len(self.rows) + 1) * max(self.widest, len(key) + max(completion, 1))

    def add(self, row: int, key: tuple[int, ...], completion: int) -> None:
        self.rows.append(row)
        if self.packed:
            self.total = self.cost_with(key, completion) if self.line else 0
            self.groups[key] = self.groups.get(key, len(key)) + max(completion - 1, 0)
            self.widest = max(self.widest, self.groups[key])
        elif self.share:
            self.groups[key] = len(key)
            self.widest = max(self.widest, len(key))
            self.longest = max(self.longest, completion, 1)
        else:
            self.widest = max(self.widest, len(key) + max(completion, 1))


def padding_free_tokens(prompt_length: int, completion_length: int) -> int:
    """Positions one sample feeds in the padding-free layout (`update.padding_free`): its prompt and its completion
    without the last token."""
    return prompt_length + max(completion_length - 1, 0)


def plan_padding_free(
    prompts: Sequence[Sequence[int]], completion_lengths: Sequence[int], max_tokens: int
) -> list[list[int]]:
    """Sample indices per padding-free micro-batch (one row, no padding: `update.padding_free`), each at most
    `max_tokens` positions (a longer sample runs alone). Every plan runs the same positions, so a plan is priced
    by its micro-batches, each of which launches the model's whole operator list once: the fewer wins, then the
    given order (a prompt's samples next to each other). The candidates: the given order filled in turn, and
    first-fit by decreasing length (within 11/9 of the fewest micro-batches plus one)."""
    if len(prompts) != len(completion_lengths) or max_tokens < 1:
        raise ValueError("plan_padding_free needs one completion length per prompt and max_tokens >= 1")
    sizes = [padding_free_tokens(len(p), c) for p, c in zip(prompts, completion_lengths)]
    given: list[list[int]] = []
    used = 0
    for i, size in enumerate(sizes):
        if not given or used + size > max_tokens:
            given.append([])
            used = 0
        given[-1].append(i)
        used += size
    bins: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        k = next((k for k, r in enumerate(room) if r >= sizes[i]), None)
        if k is None:
            bins.append([])
            room.append(max_tokens)
            k = len(bins) - 1
        bins[k].append(i)
        room[k] -= sizes[i]
    decreasing = [sorted(b) for b in bins]
    return decreasing if len(decreasing) < len(given) else given
