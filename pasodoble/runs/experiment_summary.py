"""An experiment's summary with intervals: per-run changes over the start, pooled estimates, the verdict.

What: from the runs' per-problem scores (each run's eval.json holds `scores[metric][<tier>/<id>]`, 1/0 greedy or
a sampled pass rate), `summary(cfg, results)` computes
    runs     per (arm, seed, metric, tier): start, after, change with its paired bootstrap 95% interval
             (10,000 resamples over problems; the start is the same seed's `sft` run on the same problems)
    pooled   per (arm, metric, tier): the mean change over seeds with a hierarchical bootstrap interval (seeds,
             then problems) and a seed-level t interval; the mean of each mechanism metric over steps and seeds
    verdict  the pre-registered criteria of docs/EXPERIMENTS.md when the config names a primary arm: the primary
             endpoint (change of `primary_arm` on `primary_tier`, greedy: hierarchical interval above 0, at least
             `min_gain`, every seed positive), the go/no-go of `control_arm` at seed 0 (change >= `min_gain`),
             primary vs control, non-inferiority on `guard_tiers` (interval's low end above -`margin`), and
             the primary arm's change on the other tiers (t4), with no criterion
`summary_markdown` renders it; the experiment writes both (`summary.json`, `results.md`).

Why here: the experiment module runs things; this one only reads numbers, so it is tested on literal scores.
"""

from __future__ import annotations

import statistics

from pasodoble.evals.intervals import (
    Interval,
    hierarchical_bootstrap,
    paired_bootstrap,
    points,
    seed_t_interval,
    verdict,
)

START = "sft"
METRIC_NAMES = {"greedy": "greedy", "sampled": "sampled (mean of k samples)"}
# Per-step metrics.jsonl means reported per arm (the mechanism: is the gain from the Proposer or the labels?).
MECHANISM = {
    "label_correct": "proposer/label/correct",
    "label_checkable": "proposer/label/checkable",
    "proposer_gradient": "proposer/advantage/nonzero",
    "learnable_band": "proposer/pass_rate_hist/learnable",
    "solver_no_answer": "solver/no_answer/fraction",
    "valid": "proposer/valid/fraction",
}


def _tier_scores(scores: dict[str, float], tier: str) -> dict[str, float]:
    return {k: v for k, v in scores.items() if k.split("/", 1)[0] == tier}


def _paired(before: dict[str, float], after: dict[str, float]) -> tuple[list[float], list[float]]:
    keys = sorted(before)
    if sorted(after) != keys:
        raise ValueError(
            "runs were evaluated on different problems; evaluate them again with one eval config"
        )
    return [before[k] for k in keys], [after[k] for k in keys]


def _runs(results: list[dict]) -> dict[tuple[str, int], dict]:
    return {(r["condition"], r["seed"]): r for r in results}


def tiers_of(results: list[dict]) -> list[str]:
    return sorted({k.split("/", 1)[0] for r in results for k in r["scores"]["greedy"]})


def summary(cfg, results: list[dict]) -> dict:
    """The summary dict (see module docstring); `cfg` is the ExperimentConfig."""
    by = _runs(results)
    tiers, metrics = tiers_of(results), [m for m in METRIC_NAMES if all(m in r["scores"] for r in results)]
    arms = [c for c in cfg.conditions if c != START]
    runs, pooled = [], {}
    for arm in arms:
        seeds = [s for s in cfg.seeds if (arm, s) in by and (START, s) in by]
        pooled[arm] = {"seeds": seeds, "mechanism": mechanism_means([by[(arm, s)] for s in seeds])}
        for metric in metrics:
            pooled[arm][metric] = {}
            for tier in tiers:
                pairs = [
                    _paired(
                        _tier_scores(by[(START, s)]["scores"][metric], tier),
                        _tier_scores(by[(arm, s)]["scores"][metric], tier),
                    )
                    for s in seeds
                ]
                for s, (before, after) in zip(seeds, pairs):
                    iv = paired_bootstrap(before, after, resamples=cfg.resamples, seed=s)
                    runs.append(
                        {
                            "arm": arm,
                            "seed": s,
                            "metric": metric,
                            "tier": tier,
                            "start": statistics.mean(before),
                            "after": statistics.mean(after),
                            "change": iv.as_dict(),
                        }
                    )
                if pairs:
                    deltas = [statistics.mean(a) - statistics.mean(b) for b, a in pairs]
                    pooled[arm][metric][tier] = {
                        "per_seed": deltas,
                        "hierarchical": hierarchical_bootstrap(pairs, resamples=cfg.resamples).as_dict(),
                        "t": seed_t_interval(deltas).as_dict(),
                    }
    n = {t: len(_tier_scores(results[0]["scores"]["greedy"], t)) for t in tiers} if results else {}
    out = {"arms": arms, "seeds": cfg.seeds, "n_per_tier": n, "runs": runs, "pooled": pooled}
    if cfg.primary_arm is not None:
        out["verdict"] = criteria(cfg, by, pooled)
    return out


def mechanism_means(results: list[dict]) -> dict[str, float | None]:
    means = {}
    for name in MECHANISM:
        values = [r["mechanism"][name] for r in results if r.get("mechanism", {}).get(name) is not None]
        means[name] = statistics.mean(values) if values else None
    return means


def _from(iv: dict) -> str:
    return points(Interval(**iv))


def criteria(cfg, by: dict, pooled: dict) -> dict:
    """The pre-registered verdict (docs/EXPERIMENTS.md), from the pooled greedy changes."""
    arm, tier, control = cfg.primary_arm, cfg.primary_tier, cfg.control_arm
    out: dict = {}
    primary = pooled.get(arm, {}).get("greedy", {}).get(tier)
    if primary is not None:
        iv = primary["hierarchical"]
        every = all(d > 0 for d in primary["per_seed"])
        met = iv["low"] > 0 and iv["estimate"] >= cfg.min_gain and every
        out["primary"] = {
            "arm": arm,
            "tier": tier,
            "change": iv,
            "every_seed_positive": every,
            "seeds": len(primary["per_seed"]),
            "met": met,
            "words": verdict(Interval(**iv)),
        }
    if control is not None and (control, 0) in by and (START, 0) in by:
        before = _tier_scores(by[(START, 0)]["scores"]["greedy"], tier)
        seed0 = statistics.mean(
            _tier_scores(by[(control, 0)]["scores"]["greedy"], tier).values()
        ) - statistics.mean(before.values())
        out["go_no_go"] = {"control_arm": control, "seed0_change": seed0, "go": seed0 >= cfg.min_gain}
    if control is not None and arm in pooled and control in pooled:
        seeds = [s for s in pooled[arm]["seeds"] if s in pooled[control]["seeds"]]
        pairs = [
            _paired(
                _tier_scores(by[(control, s)]["scores"]["greedy"], tier),
                _tier_scores(by[(arm, s)]["scores"]["greedy"], tier),
            )
            for s in seeds
        ]
        if pairs:
            out["primary_vs_control"] = hierarchical_bootstrap(pairs, resamples=cfg.resamples).as_dict()
    guards = {}
    for guard in cfg.guard_tiers:
        cell = pooled.get(arm, {}).get("greedy", {}).get(guard)
        if cell is not None:
            guards[guard] = {"change": cell["hierarchical"], "met": cell["hierarchical"]["low"] > -cfg.margin}
    out["non_inferiority"] = guards
    # the remaining tiers (t4 in the experiments): reported, no criterion
    greedy = pooled.get(arm, {}).get("greedy", {})
    out["other_tiers"] = {
        t: cell["hierarchical"] for t, cell in greedy.items() if t != tier and t not in cfg.guard_tiers
    }
    return out


def summary_markdown(s: dict) -> str:
    """Tables: per arm and tier the pooled change with both intervals, then every run, then the mechanism."""
    parts = [f"Problems per tier: {s['n_per_tier']}; seeds {s['seeds']}. Changes in points over the SFT start, "
             "95% intervals: hierarchical bootstrap (seeds, then problems) and seed-level t.\n"]  # fmt: skip
    tiers = list(s["n_per_tier"])
    for metric in METRIC_NAMES:
        if not any(metric in p for p in s["pooled"].values()):
            continue
        lines = [
            f"\n### Change over the start, {METRIC_NAMES[metric]}\n",
            "| arm | " + " | ".join(tiers) + " |",
        ]
        lines.append("|---|" + "---|" * len(tiers))
        for arm, p in s["pooled"].items():
            cells = []
            for t in tiers:
                cell = p.get(metric, {}).get(t)
                cells.append(
                    ""
                    if cell is None
                    else f"{_from(cell['hierarchical'])} (t: {_from(cell['t'])}; seeds "
                    + " / ".join(f"{100 * d:+.1f}" for d in cell["per_seed"])
                    + ")"
                )
            lines.append(f"| {arm} | " + " | ".join(cells) + " |")
        parts.append("\n".join(lines) + "\n")
    lines = ["\n### Each run (paired bootstrap over problems)\n", "| arm | seed | metric | tier | start | after | change [95%] |"]  # fmt: skip
    lines.append("|---|---|---|---|---|---|---|")
    for r in s["runs"]:
        lines.append(
            f"| {r['arm']} | {r['seed']} | {r['metric']} | {r['tier']} | {100 * r['start']:.1f} | "
            f"{100 * r['after']:.1f} | {_from(r['change'])} |"
        )
    parts.append("\n".join(lines) + "\n")
    lines = ["\n### Mechanism (means over steps and seeds)\n", "| arm | " + " | ".join(MECHANISM) + " |"]
    lines.append("|---|" + "---|" * len(MECHANISM))
    for arm, p in s["pooled"].items():
        m = p["mechanism"]
        lines.append(
            f"| {arm} | " + " | ".join("" if m[k] is None else f"{m[k]:.3f}" for k in MECHANISM) + " |"
        )
    parts.append("\n".join(lines) + "\n")
    if "verdict" in s:
        parts.append("\n" + verdict_lines(s["verdict"]) + "\n")
    return "".join(parts)


def verdict_lines(v: dict) -> str:
    out = []
    if "primary" in v:
        p = v["primary"]
        out.append(
            f"Primary endpoint ({p['arm']}, {p['tier']} greedy, {p['seeds']} seeds): {_from(p['change'])}, "
            f"{p['words']}; every seed positive: {p['every_seed_positive']} -> {'MET' if p['met'] else 'NOT met'}."
        )
    if "go_no_go" in v:
        g = v["go_no_go"]
        out.append(
            f"Go/no-go ({g['control_arm']} at seed 0): {100 * g['seed0_change']:+.1f} points -> "
            f"{'go' if g['go'] else 'NO GO: the assay cannot see learning at this budget'}."
        )
    if "primary_vs_control" in v:
        out.append(f"Primary minus control: {_from(v['primary_vs_control'])}.")
    for tier, g in v.get("non_inferiority", {}).items():
        out.append(f"Non-inferiority {tier}: {_from(g['change'])} -> {'met' if g['met'] else 'NOT met'}.")
    for tier, iv in v.get("other_tiers", {}).items():
        out.append(f"Change on {tier} (no criterion): {_from(iv)}, {verdict(Interval(**iv))}.")
    return "\n".join(out)
