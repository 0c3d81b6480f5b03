"""PNG plots of a run's training dynamics, rendered from `metrics.jsonl` alone.

`pasodoble plot RUN_DIR` groups metrics by their first name segment (`proposer/...`, `solver/...`, `grader/...`,
`time/...`) and draws one figure per group, one panel per metric, against the step, with an optional moving
average; for a dual-play run it also draws the one-page summary (`summary.png`, see `summary_plot.py`). Because it reads only the
file, it works the same on a finished, crashed or resumed run, and on a run directory copied off a cluster.
"""

from __future__ import annotations

import argparse
import fnmatch
import math
from collections import defaultdict
from pathlib import Path

from pasodoble.errors import UserError
from pasodoble.reports.series import load_series, moving_average
from pasodoble.reports.summary_plot import draw_summary

PANELS_PER_FIGURE = 12


def plot_metrics(
    metrics_path: str | Path, out_dir: str | Path, *, patterns: list[str] | None = None, smooth: int = 1
) -> list[Path]:
    """Render one PNG per metric group (split into pages of 12 panels); returns the written paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = load_series(Path(metrics_path))
    if patterns:
        series = {k: v for k, v in series.items() if any(fnmatch.fnmatch(k, p) for p in patterns)}
    groups: dict[str, list[str]] = defaultdict(list)
    for key in sorted(series):
        groups[key.split("/", 1)[0] if "/" in key else "misc"].append(key)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for group, keys in groups.items():
        for page in range(0, len(keys), PANELS_PER_FIGURE):
            chunk = keys[page : page + PANELS_PER_FIGURE]
            cols = min(3, len(chunk))
            rows = math.ceil(len(chunk) / cols)
            fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.8 * rows), squeeze=False)
            for ax, key in zip(axes.flat, chunk):
                steps, values = series[key]
                ax.plot(
                    steps,
                    values,
                    lw=0.8,
                    alpha=0.35 if smooth > 1 else 1.0,
                    marker="." if len(steps) < 30 else None,
                )
                if smooth > 1:
                    ax.plot(steps, moving_average(values, smooth), lw=1.5)
                ax.set_title(key, fontsize=9)
                ax.set_xlabel("step", fontsize=8)
                ax.tick_params(labelsize=7)
                ax.grid(alpha=0.3)
            for ax in list(axes.flat)[len(chunk) :]:
                ax.axis("off")
            fig.tight_layout()
            suffix = f"-{page // PANELS_PER_FIGURE + 1}" if len(keys) > PANELS_PER_FIGURE else ""
            path = out_dir / f"{group.replace('/', '_')}{suffix}.png"
            fig.savefig(path, dpi=110)
            plt.close(fig)
            written.append(path)
    return written


def is_dual_play(series: dict) -> bool:
    """Whether the metrics are a dual-play run's: rows of either role (`proposer/...`, `solver/...`)."""
    return any(key.split("/", 1)[0] in ("proposer", "solver") for key in series)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "plot",
        help="render PNG plots of a run from its metrics.jsonl",
        description="Render summary.png (the run on one page) and one PNG per metric group (proposer, solver, "
        "grader, time, ...) from RUN_DIR/metrics.jsonl into RUN_DIR/plots/.",
    )
    p.add_argument("run_dir", type=Path, help="a run directory holding metrics.jsonl")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: RUN_DIR/plots)")
    p.add_argument(
        "--metrics",
        default=None,
        help="comma-separated glob patterns of metric names to plot (e.g. 'proposer/*,solver/reward/*')",
    )
    p.add_argument("--smooth", type=int, default=1, help="moving-average window in steps (default: 1, none)")
    p.set_defaults(func=run_plot)


def run_plot(args: argparse.Namespace) -> int:
    metrics = args.run_dir / "metrics.jsonl"
    if not metrics.is_file():
        raise UserError(f"{metrics} not found; pass a run directory written by 'pasodoble train' or 'demo'")
    if args.smooth < 1:
        raise UserError("--smooth must be >= 1")
    patterns = [p.strip() for p in args.metrics.split(",")] if args.metrics else None
    out = args.out or args.run_dir / "plots"
    paths = plot_metrics(metrics, out, patterns=patterns, smooth=args.smooth)
    if not paths:
        raise UserError(
            f"{metrics} has no numeric metrics" + (f" matching {args.metrics}" if patterns else "")
        )
    if is_dual_play(load_series(metrics)):  # the summary too
        paths.insert(0, draw_summary(args.run_dir, out / "summary.png"))
    for path in paths:
        print(path)
    return 0
