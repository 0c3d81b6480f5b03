"""`pasodoble demo`: the tiny world end to end on a CPU in minutes.

Phases (one log line each, with seconds): build the world and SFT both roles (cached, see `sft/tiny.py`; the
warm-up stops when the next tier is half-learned, `world/select.py`) -> evaluate the SFT Solver on the held-out
tiers, greedy and sampled -> a short online dual-play run (`dualplay.steps`, recipe `dualplay.recipe` with
`dualplay.overrides`, the demo's world and SFT settings) -> evaluate its final Solver the same way -> print the
per-tier table of both with the change, and the change on the tiers above the SFT data. Run directory:

    RUN_DIR/config.yaml          resolved config (`pasodoble demo --config RUN_DIR/config.yaml` reruns it)
    RUN_DIR/metrics.jsonl        SFT losses and stop-rule checks, then both evaluations' scores
    RUN_DIR/checkpoints/         the SFT checkpoints (HF format)
    RUN_DIR/dualplay/            the dual-play run (metrics.jsonl, samples.jsonl, checkpoints)
    RUN_DIR/eval/sft/, eval/dualplay/
                                 greedy/ and sampled/ (samples.jsonl, results.json, results.md), results.json,
                                 results.md (the per-tier table of that Solver)
    RUN_DIR/eval/results.md      SFT start vs after dual-play, per tier, with the change in points
    RUN_DIR/eval/results.json    both summaries, the change per tier, the tiers above the SFT data
    RUN_DIR/sft_loss.png         SFT loss curves

The per-tier tables report greedy accuracy, the sampled mean accuracy (avg@k), pass@k, and the share of problems
whose sampled pass rate lies in the learnable band (0.2, 1): dual-play's Solver update only learns from those.
`dualplay.steps=0` evaluates the SFT Solver alone. Measured figures: docs/EXPERIMENTS.md ("The demo").

Run: `pasodoble demo [--config FILE] [--out DIR] [key=value ...]`, e.g. `pasodoble demo sft.max_steps=200`.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections import defaultdict
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pasodoble.config import load_config, save_config
from pasodoble.evals import EvalSettings, Problem, evaluate
from pasodoble.evals.intervals import Interval, paired_by_key, points, scores_by_problem, verdict
from pasodoble.evals.report import build_results, write_run_outputs
from pasodoble.evals.runner import settings_dict
from pasodoble.evals.tiers import load_tier_problems
from pasodoble.grader import Grader, GraderConfig
from pasodoble.io import read_jsonl, write_json_atomic, write_text_atomic
from pasodoble.reports.series import load_series
from pasodoble.reports.tracking import Tracker
from pasodoble.rollout import HFEngine
from pasodoble.runs.demo_config import DemoConfig, find_recipe  # DemoConfig re-exported: read without torch
from pasodoble.runs.demo_config import DemoDualPlayConfig as DemoDualPlayConfig
from pasodoble.runs.demo_config import DemoEvalConfig as DemoEvalConfig
from pasodoble.runs.run_notes import demo_next
from pasodoble.sft.tiny import ensure_sft_models
from pasodoble.world import WorldConfig, formats
from pasodoble.world.problems import TIER_DESCRIPTIONS, TIERS

log = logging.getLogger("pasodoble.runs.demo")
BAND = (0.2, 1.0)  # open interval of pass rates the Solver update learns from (docs/METHOD.md, step 10)


def band_shares(samples_path: Path) -> dict[str, float]:
    """Per tier: share of problems whose sampled pass rate p satisfies 0.2 < p < 1."""
    per_problem: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for row in read_jsonl(samples_path):
        per_problem[(row["source"], row["id"])].append(bool(row["correct"]))
    in_band: dict[str, list[bool]] = defaultdict(list)
    for (source, _), correct in per_problem.items():
        rate = sum(correct) / len(correct)
        in_band[source].append(BAND[0] < rate < BAND[1])
    return {source: sum(flags) / len(flags) for source, flags in in_band.items()}


def tier_table(summary: dict, k: int) -> str:
    """Markdown: one row per tier of an `evaluate_solver` summary."""
    lines = [
        f"| Tier | Problems | n | Greedy acc | Sampled avg@{k} | pass@{k} | In band (0.2, 1) |",
        "|---|---|---|---|---|---|---|",
    ]
    for tier, r in summary["per_tier"].items():
        lines.append(
            f"| {tier} | {TIER_DESCRIPTIONS.get(tier, tier)} | {int(r['n'])} | {100 * r['greedy_acc']:.1f} "
            f"| {100 * r['sampled_avg']:.1f} | {100 * r['sampled_pass']:.1f} | {100 * r['in_band']:.1f} |"
        )
    return "\n".join(lines)


def plot_sft_loss(metrics_path: Path, out_path: Path) -> None:
    """`sft_loss.png`: every `*/sft/loss` series of metrics.jsonl."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = {k: v for k, v in load_series(metrics_path).items() if k.endswith("/sft/loss")}
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for key, (steps, values) in sorted(series.items()):
        ax.plot(steps, values, label=key)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (completion tokens)")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_path, dpi=110)
    plt.close(fig)


class _Phase:
    """Logs one line with the seconds a phase took."""

    def __init__(self, name: str):
        self.name = name

    def __enter__(self) -> _Phase:
        self.start = time.perf_counter()
        self.note = ""
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            log.info("[demo] %-10s %6.1fs  %s", self.name, time.perf_counter() - self.start, self.note)


def evaluate_solver(
    model_dir: Path, problems: list[Problem], config: DemoEvalConfig, out_dir: Path, *, progress: bool = True
) -> dict:
    """Greedy and sampled evaluation of a Solver on tier problems; writes `out_dir` and returns the summary."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    engine = HFEngine(
        AutoModelForCausalLM.from_pretrained(model_dir), tokenizer, batch_size=config.batch_size
    )
    runs = {
        "greedy": EvalSettings(num_samples=1, temperature=0.0, seed=config.seed),
        "sampled": EvalSettings(
            num_samples=config.num_samples, temperature=config.temperature, seed=config.seed
        ),
    }
    results = {}
    with Grader(GraderConfig()) as grader:
        for name, settings in runs.items():
            settings.max_new_tokens = config.max_new_tokens
            settings.prompt_template = formats.SOLVER_TEMPLATE
            settings.chunk_size = max(1, config.batch_size // settings.num_samples)
            (out_dir / name).mkdir(parents=True, exist_ok=True)
            samples = out_dir / name / "samples.jsonl"
            samples.unlink(missing_ok=True)  # a demo rerun into the same directory starts over
            report = evaluate(
                engine, tokenizer, problems, settings, grader, samples_path=samples, progress=progress
            )
            results[name] = build_results(
                report, settings_dict(settings), label=f"solver ({name})", model=str(model_dir)
            )
            write_run_outputs(out_dir / name, results[name])
    band = band_shares(out_dir / "sampled" / "samples.jsonl")
    summary = {
        # per problem, so a change can be given a paired interval (`changes`)
        "scores": {name: scores_by_problem(out_dir / name / "samples.jsonl") for name in runs},
        "model": str(model_dir),
        "band": list(BAND),
        "per_tier": {
            tier: {
                "greedy_acc": g["avg@k"],
                "sampled_avg": results["sampled"]["per_source"][tier]["avg@k"],
                "sampled_pass": results["sampled"]["per_source"][tier]["pass@k"],
                "in_band": band[tier],
                "n": g["n"],
            }
            for tier, g in results["greedy"]["per_source"].items()
        },
        "settings": {name: r["settings"] for name, r in results.items()},
    }
    write_json_atomic(out_dir / "results.json", summary)
    table = tier_table(summary, config.num_samples)
    write_text_atomic(
        out_dir / "results.md",
        f"# Solver per tier\n\n{table}\n\n"
        f"Sampled: k={config.num_samples}, temperature={config.temperature}; model `{model_dir}`.\n",
    )
    return summary


def _copy_checkpoints(models, run_dir: Path) -> Path:
    """Copy the SFT checkpoints into the run directory; returns the Solver's copy."""
    dest = run_dir / "checkpoints"
    for source in {models.proposer_dir, models.solver_dir}:
        shutil.copytree(source, dest / source.name, dirs_exist_ok=True)
    return dest / models.solver_dir.name


def run_dualplay(
    config: DemoConfig, run_dir: Path, cache: str | Path | None, *, quiet: bool = True, name: str = "dualplay"
) -> Path:
    """A short online dual-play run from the SFT models into `run_dir/name`; returns its final Solver (HF folder).
    `quiet`: no per-step console line."""
    from pasodoble.checkpoint import latest_checkpoint
    from pasodoble.runs.train import TrainConfig, run_train

    recipe = find_recipe(config.dualplay.recipe)
    out = run_dir / name
    shutil.rmtree(out, ignore_errors=True)  # a demo rerun into the same directory starts over
    steps = f"schedule.steps={config.dualplay.steps}"
    train = load_config(
        TrainConfig, recipe, [*config.dualplay.overrides, steps, f"logging.quiet={str(quiet).lower()}"]
    )
    train.run_dir, train.world, train.sft = str(out), config.world, config.sft
    train.cache_dir = str(cache) if cache is not None else None
    run_train(train)
    return latest_checkpoint(out) / "solver" / "model"


def tiers_above_sft(world: WorldConfig) -> list[str]:
    """The tiers the SFT data does not teach outright: the next tier (a small share) and every tier above it."""
    return [t for t in TIERS if t not in world.sft_tiers]


def change_table(before: dict, after: dict, above: list[str]) -> str:
    """Markdown: per tier, the SFT start and the dual-play Solver, greedy and sampled, with the change in points
    and its paired bootstrap 95% interval over the tier's problems."""
    lines = [
        "| Tier | n | Greedy SFT | Greedy after | change [95%] | Sampled SFT | Sampled after | change [95%] "
        "| In band SFT | In band after |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    delta = changes(before, after)
    for tier, b in before["per_tier"].items():
        a, c = after["per_tier"][tier], delta[tier]
        mark = " (above SFT)" if tier in above else ""
        lines.append(
            f"| {tier}{mark} | {int(b['n'])} | {100 * b['greedy_acc']:.1f} | {100 * a['greedy_acc']:.1f} "
            f"| {points(Interval(**c['greedy_interval']))} | {100 * b['sampled_avg']:.1f} "
            f"| {100 * a['sampled_avg']:.1f} | {points(Interval(**c['sampled_interval']))} "
            f"| {100 * b['in_band']:.0f}% | {100 * a['in_band']:.0f}% |"
        )
    return "\n".join(lines)


def changes(before: dict, after: dict) -> dict[str, dict]:
    """Per tier: after minus before, greedy and sampled, as fractions, with paired bootstrap intervals."""
    out = {}
    for tier, b in before["per_tier"].items():
        out[tier] = {
            key: after["per_tier"][tier][key] - b[key] for key in ("greedy_acc", "sampled_avg", "in_band")
        }
        for name in ("greedy", "sampled"):
            iv = paired_by_key(before["scores"][name], after["scores"][name], prefix=f"{tier}/")
            out[tier][f"{name}_interval"] = iv.as_dict()
    return out


def verdict_line(tier: str, change: dict) -> str:
    """`t3 (above the SFT data): greedy +1.0 [-5.0, +7.0] points, within noise; sampled ...`."""
    parts = []
    for name in ("greedy", "sampled"):
        iv = Interval(**change[f"{name}_interval"])
        parts.append(f"{name} {points(iv)} points, {verdict(iv)}")
    return f"[demo] {tier} (above the SFT data) over the SFT start, 95% paired bootstrap: " + "; ".join(parts)


def _log_eval(tracker: Tracker, summary: dict, prefix: str, step: int) -> None:
    metrics = {
        f"{prefix}_{tier}/{name}": value
        for tier, row in summary["per_tier"].items()
        for name, value in row.items()
        if name != "n"
    }
    tracker.log(metrics, step=step)


def run_demo(config: DemoConfig, *, progress: bool = True) -> Path:
    """Run every phase (module docstring); returns the run directory."""
    run_dir = Path(config.run_dir or f"runs/demo-{time.strftime('%Y%m%d-%H%M%S')}")
    run_dir.mkdir(parents=True, exist_ok=True)
    if config.sft.num_threads is not None:
        torch.set_num_threads(config.sft.num_threads)  # evaluation too, not only SFT (a cache hit skips SFT)
    save_config(config, run_dir / "config.yaml")
    (run_dir / "metrics.jsonl").unlink(missing_ok=True)
    started = time.perf_counter()
    log.info("[demo] run directory %s", run_dir)
    eval_dir = run_dir / "eval"

    def note(summary: dict) -> str:
        return "  ".join(
            f"{t} greedy {r['greedy_acc']:.2f} band {r['in_band']:.2f}"
            for t, r in summary["per_tier"].items()
        )

    with Tracker(run_dir) as tracker:
        with _Phase("world+sft") as phase:
            cache = run_dir / "cache" if config.fresh else config.cache_dir
            models = ensure_sft_models(cache, config.world, config.sft, progress=progress)
            for row in read_jsonl(models.sft_metrics):
                tracker.log({k: v for k, v in row.items() if k != "step"}, step=row["step"])
            solver_dir = _copy_checkpoints(models, run_dir)
            phase.note = f"models in {models.solver_dir.parent}"
        problems = load_tier_problems(models.world.tiers, config.eval.problems_per_tier)
        with _Phase("eval sft") as phase:
            before = evaluate_solver(solver_dir, problems, config.eval, eval_dir / "sft", progress=progress)
            _log_eval(tracker, before, "solver/sft_eval", config.sft.max_steps)
            phase.note = note(before)
        after = None
        if config.dualplay.steps > 0:
            with _Phase("dual-play") as phase:
                solver_dir = run_dualplay(config, run_dir, cache)
                phase.note = f"{config.dualplay.steps} online steps in {run_dir / 'dualplay'}"
            with _Phase("eval after") as phase:
                after = evaluate_solver(
                    solver_dir, problems, config.eval, eval_dir / "dualplay", progress=progress
                )
                phase.note = note(after)
        final = after or before
        _log_eval(tracker, final, "solver/eval", config.sft.max_steps + config.dualplay.steps)
        above = tiers_above_sft(config.world)
        summary = {"sft": before, "dualplay": after, "tiers_above_sft": above}
        if after is not None:
            summary["change"] = changes(before, after)
            table = change_table(before, after, above)
            title = f"Solver per tier: SFT start vs after {config.dualplay.steps} online dual-play steps"
        else:
            table = tier_table(before, config.eval.num_samples)
            title = "Solver per tier after SFT (no dual-play run)"
        write_json_atomic(eval_dir / "results.json", summary)
        k, temp = config.eval.num_samples, config.eval.temperature
        write_text_atomic(
            eval_dir / "results.md",
            f"# {title}\n\n{table}\n\nGreedy accuracy and sampled avg@{k} at temperature {temp} (%), change in "
            f"points; in band: share of problems whose sampled pass rate is in (0.2, 1).\n",
        )
        with _Phase("plot"):
            plot_sft_loss(run_dir / "metrics.jsonl", run_dir / "sft_loss.png")
    log.info("[demo] %s (%s)", title, eval_dir / "results.md")
    for line in table.splitlines():
        log.info("%s", line)
    if after is not None:
        for tier in above:
            log.info("%s", verdict_line(tier, summary["change"][tier]))
    log.info("[demo] done in %.1fs", time.perf_counter() - started)
    runs = [run_dir / "dualplay"] if after is not None else []
    tour = "pasodoble train --config recipes/tiny-online.yaml run_dir=runs/tour"
    log.info("%s", demo_next(runs, [(tour, "the tour: 40 online dual-play steps (README)")]))
    return run_dir
