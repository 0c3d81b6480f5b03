"""The arithmetic and tables of `bench/vs_trl.py`: medians, spreads, paired ratios, FLOPs and MFU, Markdown.

Pure functions on plain values (no torch, no TRL), so the bench's numbers are tested on literal inputs
(`tests/bench/test_bench_vs_trl.py`). A run is one child process's JSON record; a side is "project", "trl" (gradient
checkpointing off, the project's settings) or "trl_defaults" (TRL's own defaults for what the work leaves free).

FLOPs: 2N per token through a forward (generation: the prompt tokens a side prefills, plus every sampled token)
and 6N per token through forward and backward (the update: the prompt tokens it runs, plus the completions), N the
model's parameters with tied weights counted once. TRL runs every sample's own copy of its prompt in both phases; the
project runs each distinct prompt of a generate() call or an update micro-batch once (`prefill_tokens`,
`update_prompt_tokens` in its record), so its MFU counts the FLOPs it executes, not the ones it saved. These MFU
leave attention's own FLOPs out, as the performance targets count them. A second set (`... MFU, attention counted`) adds
them where the record carries the model's attention width (layers x heads x head size) and the causal query-key pairs
of its work: 4 FLOPs a pair and width unit forward (QK^T and AV), 12 forward and backward, the pairs of a prompt
counted once where its side ran it once (`causal_pairs`). On the tiny model (96 wide) at 200 new tokens they add
about a fifth; on SmolLM2 at 128 a few percent. MFU is those FLOPs over CPU-seconds over the measured fp32 matmul
peak of one core; for GPU runs (`clock: wall` in their records) over wall-clock seconds and the GPU's measured
bfloat16 matmul peak, and the tables say "s" where CPU runs say "CPU-s" (the keys keep their `_cpu_s` names).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

SIDES = ("project", "trl", "trl_defaults")
SIDE_TITLES = {"project": "project", "trl": "TRL (ckpt off)", "trl_defaults": "TRL defaults"}
# (key, row title, digits): the per-run figures the table reports, medians over rounds.
ROWS = (
    ("step_cpu_s", "step (CPU-s)", 2),
    ("generate_cpu_s", "generation (CPU-s)", 2),
    ("update_cpu_s", "update (CPU-s)", 2),
    ("completion_tokens", "completion tokens per step", 0),
    ("tokens_per_cpu_s", "completion tokens per CPU-s", 1),
    ("peak_rss_mb", "peak RSS (MB)", 0),
    ("peak_gpu_mb", "peak GPU memory allocated (MB)", 0),  # GPU runs only
    ("mfu_generate", "generation MFU", 3),
    ("mfu_update", "update MFU", 3),
    ("mfu_step", "step MFU", 3),
    ("mfu_generate_attention", "generation MFU, attention counted", 3),  # records with attention pairs only
    ("mfu_update_attention", "update MFU, attention counted", 3),
    ("mfu_step_attention", "step MFU, attention counted", 3),
)


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of no values")
    return float(statistics.median(values))


def spread(values: Sequence[float]) -> float:
    """(max - min) / median: the relative range of a few paired rounds (0 for one value)."""
    mid = median(values)
    return (max(values) - min(values)) / mid if mid else 0.0


def generate_flops(params: int, prompt_tokens: int, completion_tokens: int) -> float:
    return 2.0 * params * (prompt_tokens + completion_tokens)


def update_flops(params: int, prompt_tokens: int, completion_tokens: int) -> float:
    return 6.0 * params * (prompt_tokens + completion_tokens)


def causal_pairs(rows: Sequence[tuple[object, int, int]], batch: int, shared: bool) -> int:
    """The (query, key) pairs causal attention computes over samples `rows`, each (its prompt's identity, prompt
    tokens, completion tokens): every completion token attends to its prompt and the completion tokens before it, and
    a prompt's own pairs count once a batch of `batch` rows where its side runs each distinct prompt once (`shared`),
    else once a row."""
    pairs, counted = 0, set()
    for k, (group, prompt, completion) in enumerate(rows):
        key = (k // batch, group) if shared else k
        if key not in counted:
            counted.add(key)
            pairs += prompt * (prompt + 1) // 2
        pairs += completion * prompt + completion * (completion + 1) // 2
    return pairs


def attention_flops(width: int, pairs: int, backward: bool) -> float:
    """Attention's own FLOPs: QK^T and AV at 2 FLOPs a multiply-add, for `pairs` query-key pairs and `width` = layers
    x heads x head size; three times that with the backward (its gradients run twice the forward's products)."""
    return (12.0 if backward else 4.0) * width * pairs


def mfu(flops: float, cpu_s: float, peak_flops_per_s: float) -> float:
    """Fraction of the peak reached: flops / cpu_s / peak (0 when nothing was timed)."""
    if cpu_s <= 0 or peak_flops_per_s <= 0:
        return 0.0
    return flops / cpu_s / peak_flops_per_s


def unit(runs_or_summary) -> str:
    """The clock's unit in titles: "CPU-s" for CPU runs, "s" (wall-clock) for GPU runs (`clock: wall`)."""
    if isinstance(runs_or_summary, dict):
        return runs_or_summary.get("unit", "CPU-s")
    return "s" if any(r.get("clock") == "wall" for r in runs_or_summary) else "CPU-s"


def _titled(title: str, clock_unit: str) -> str:
    return title if clock_unit == "CPU-s" else title.replace("CPU-s", clock_unit)


def derived(run: dict, peak_flops_per_s: float) -> dict:
    """A run's record plus tokens per CPU-second and the MFU of each phase and of the whole step."""
    n, p, c = run["params"], run["prompt_tokens"], run["completion_tokens"]
    gen = generate_flops(n, run.get("prefill_tokens", p), c)
    upd = update_flops(n, run.get("update_prompt_tokens", p), c)
    out = {
        **run,
        "tokens_per_cpu_s": c / run["step_cpu_s"] if run["step_cpu_s"] > 0 else 0.0,
        "mfu_generate": mfu(gen, run["generate_cpu_s"], peak_flops_per_s),
        "mfu_update": mfu(upd, run["update_cpu_s"], peak_flops_per_s),
        "mfu_step": mfu(gen + upd, run["step_cpu_s"], peak_flops_per_s),
    }
    if "attention_width" in run:
        width = run["attention_width"]
        gen += attention_flops(width, run["generate_attention_pairs"], backward=False)
        upd += attention_flops(width, run["update_attention_pairs"], backward=True)
        out["mfu_generate_attention"] = mfu(gen, run["generate_cpu_s"], peak_flops_per_s)
        out["mfu_update_attention"] = mfu(upd, run["update_cpu_s"], peak_flops_per_s)
        out["mfu_step_attention"] = mfu(gen + upd, run["step_cpu_s"], peak_flops_per_s)
    return out


def paired_ratios(runs: Sequence[dict], key: str, side: str, base: str = "project") -> list[float]:
    """`side`'s figure over `base`'s, one per round that has both (the pairing cancels slow drifts in load)."""
    by_round: dict[int, dict[str, float]] = {}
    for run in runs:
        by_round.setdefault(run["round"], {})[run["side"]] = run[key]
    return [
        sides[side] / sides[base]
        for _, sides in sorted(by_round.items())
        if side in sides and base in sides and sides[base]
    ]


def summarise(runs: Sequence[dict]) -> dict:
    """Per side and figure: median and spread over rounds; per other side: the median paired ratio to the project."""
    sides = [s for s in SIDES if any(r["side"] == s for r in runs)]
    rows = [key for key, _, _ in ROWS if all(key in r for r in runs)]  # GPU figures only in GPU runs
    out: dict = {"sides": {}, "ratios": {}, "unit": unit(runs)}
    for side in sides:
        mine = [r for r in runs if r["side"] == side]
        out["sides"][side] = {
            key: {"median": median([r[key] for r in mine]), "spread": spread([r[key] for r in mine])}
            for key in rows
        }
        out["sides"][side]["rounds"] = len(mine)
        if side != "project" and "project" in sides:
            out["ratios"][side] = {}
            for key in rows:
                ratios = paired_ratios(runs, key, side)
                if ratios:
                    out["ratios"][side][key] = {
                        "median": median(ratios),
                        "min": min(ratios),
                        "max": max(ratios),
                    }
    return out


def _figure(value: float, digits: int) -> str:
    return f"{value:,.{digits}f}"


def render_table(summary: dict) -> str:
    """A Markdown table: per side the median (and spread in %), then per TRL side its median paired ratio to the
    project (TRL / project: above 1, the project takes less time or memory or makes more tokens per TRL's one)."""
    sides = list(summary["sides"])
    head = ["figure"]
    for side in sides:
        head.append(SIDE_TITLES[side])
        if side in summary["ratios"]:
            head.append(f"{SIDE_TITLES[side]} / project")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, title, digits in ROWS:
        if key not in summary["sides"][sides[0]]:
            continue
        cells = [_titled(title, unit(summary))]
        for side in sides:
            stat = summary["sides"][side][key]
            cells.append(f"{_figure(stat['median'], digits)} (±{stat['spread'] * 50:.0f}%)")
            if side in summary["ratios"]:
                ratio = summary["ratios"][side].get(key)
                cells.append(f"{ratio['median']:.2f}" if ratio else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def speedup_line(summary: dict) -> str:
    """One line: the project's tokens per CPU-second over each TRL side's (the inverse of the paired ratio)."""
    parts = []
    for side, ratios in summary["ratios"].items():
        ratio = ratios.get("tokens_per_cpu_s")
        if ratio and ratio["median"]:
            parts.append(f"{1 / ratio['median']:.2f}x {SIDE_TITLES[side]}")
    per = "CPU-second" if unit(summary) == "CPU-s" else "second"
    return f"project tokens per {per}: " + (", ".join(parts) if parts else "no TRL runs to compare")


def target_line(summary: dict, factor: float = 2.0) -> str:
    """What `factor` x each TRL side's tokens per CPU-second asks of the project's step: the CPU-seconds it may take
    for its median completion tokens, and the step MFU that implies at its own FLOPs (the MFU scales with the speed
    when the work is fixed). A step MFU above 1 cannot be reached at this work and peak."""
    mine = summary["sides"].get("project")
    u = unit(summary)
    parts = []
    for side, ratios in summary["ratios"].items():
        ratio = ratios.get("tokens_per_cpu_s")
        if not mine or not ratio or not ratio["median"]:
            continue
        speedup = 1 / ratio["median"]
        need_s = mine["step_cpu_s"]["median"] * speedup / factor
        need_mfu = mine["mfu_step"]["median"] * factor / speedup
        parts.append(f"{SIDE_TITLES[side]}: step <= {need_s:.2f} {u}, step MFU {need_mfu:.3f}")
    now = f" (now {mine['step_cpu_s']['median']:.2f} {u}, {mine['mfu_step']['median']:.3f})" if mine else ""
    if not parts:
        return f"{factor:g}x TRL: no TRL runs to compare"
    per = "CPU-second" if u == "CPU-s" else "second"
    return f"{factor:g}x TRL's tokens per {per} needs{now}: " + "; ".join(parts)


def seed_row(seed: int, summary: dict) -> dict:
    """One seed's headline figures from its `summarise` output: the project's tokens per CPU-second over each TRL
    side's, TRL's update time over the project's, the step's CPU-seconds and every side's peak RSS (and, in GPU runs,
    peak GPU memory allocated); medians."""
    row: dict = {"seed": seed, "step_cpu_s": summary["sides"]["project"]["step_cpu_s"]["median"]}
    for side, ratios in summary["ratios"].items():
        tokens, update = ratios.get("tokens_per_cpu_s"), ratios.get("update_cpu_s")
        if tokens and tokens["median"]:
            row[f"speedup_{side}"] = 1 / tokens["median"]
        if update:
            row[f"update_ratio_{side}"] = update["median"]
    for side, figures in summary["sides"].items():
        for key in ("peak_rss_mb", "peak_gpu_mb"):  # GPU memory in GPU runs only
            if key in figures:
                row[f"{key}_{side}"] = figures[key]["median"]
    return row


def render_seed_table(name: str, per_seed: Sequence[tuple[int, dict]]) -> str:
    """A Markdown table of one shape over seeds (`seed_row` per seed), then a row with each column's range: the
    spread a figure over seeds has, where one seed's table would show a single value."""
    rows = [seed_row(seed, summary) for seed, summary in per_seed]
    sides = [s for s in SIDES if s != "project" and any(f"speedup_{s}" in r for r in rows)]
    u = unit(per_seed[0][1]) if per_seed else "CPU-s"  # "CPU-s", or "s" for GPU runs
    columns = [("step_cpu_s", f"project step ({u})", 2)]
    columns += [(f"speedup_{s}", f"tokens/{u}: x {SIDE_TITLES[s]}", 2) for s in sides]
    columns += [(f"update_ratio_{s}", f"update: {SIDE_TITLES[s]} / project", 2) for s in sides]
    columns += [
        (f"{key}_{s}", f"{title} {SIDE_TITLES[s]} (MB)", 0)
        for key, title in (("peak_rss_mb", "peak RSS"), ("peak_gpu_mb", "peak GPU memory"))
        for s in SIDES
        if any(f"{key}_{s}" in r for r in rows)
    ]
    lines = [
        f"{name} over seeds {', '.join(str(r['seed']) for r in rows)}:",
        "",
        "| seed | " + " | ".join(title for _, title, _ in columns) + " |",
        "|" + "---|" * (len(columns) + 1),
    ]
    for r in rows:
        cells = [_figure(r[key], digits) if key in r else "-" for key, _, digits in columns]
        lines.append(f"| {r['seed']} | " + " | ".join(cells) + " |")
    ranges = []
    for key, _, digits in columns:
        values = [r[key] for r in rows if key in r]
        ranges.append(f"{_figure(min(values), digits)}-{_figure(max(values), digits)}" if values else "-")
    lines.append("| range | " + " | ".join(ranges) + " |")
    return "\n".join(lines)
