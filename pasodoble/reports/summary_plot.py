"""One summary figure of a dual-play run (`RUN_DIR/plots/summary.png`), the picture to put in a report.

Six panels against the training step, each smoothed (moving average) with the raw values faint behind:
(a) the Proposer's reward, with its parts (mean pass rate p and diversity d of the valid questions, and the
reward rule read from the run's config.yaml); (b) where the valid questions fall, as a stacked area of shares:
too hard (p <= the low gate: no reward), learnable (between the gates: the Solver trains on these) and solved
(p = 1); (c) the share of valid proposals; (d) diversity; (e) the Solver's training reward and accuracy; (f) its
accuracy on held-out problems (`eval/...` rows; the panel says how to turn them on when the run has none).

Like the per-group PNGs (`plotting.py`), it is drawn from `metrics.jsonl` alone (plus config.yaml for labels),
so it works on a finished, crashed, resumed or copied run.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from pasodoble.reports.series import load_series, moving_average

HIST = "proposer/pass_rate_hist/"


def smooth_window(n_points: int) -> int:
    """Moving-average window: about a twentieth of the run, at least 1 (no smoothing on short runs)."""
    return max(1, n_points // 20)


def reward_rule(config: dict) -> str:
    """The Proposer reward in words, from the run's `rewards` section (defaults: the paper's)."""
    r = config.get("rewards") or {}
    name = r.get("proposer_reward", "pasodoble")
    low, d_low = r.get("pass_rate_low", 0.2), r.get("diversity_low", 0.3)
    if name == "rzero":
        return f"reward = min(p, 1-p); 0 if p <= {low:g}"
    if name == "spice":
        return f"reward = p(1-p); 0 if p <= {low:g}"
    offset, weight = r.get("difficulty_offset", 1.1), r.get("diversity_weight", 0.2)
    if r.get("use_diversity", True):
        return f"reward = {offset:g} - p + {weight:g} d; 0 if p <= {low:g} or d <= {d_low:g}"
    return f"reward = {offset:g} - p; 0 if p <= {low:g}"


def _read_config(run_dir: Path) -> dict:
    path = run_dir / "config.yaml"
    if not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}


def _line(ax, series, key, label, *, scale=1.0, color=None, window=1):
    if key not in series:
        return False
    steps, values = series[key]
    values = [v * scale for v in values]
    w = min(window, max(1, len(values)))
    (raw,) = ax.plot(steps, values, lw=0.8, alpha=0.25 if w > 1 else 0.9, color=color)
    if w > 1:
        ax.plot(steps, moving_average(values, w), lw=1.8, color=raw.get_color(), label=label)
    else:
        raw.set_label(label)
        raw.set_marker("." if len(steps) < 40 else None)
    return True


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=8, wrap=True, transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def draw_summary(run_dir: str | Path, out_path: str | Path) -> Path:
    """Render the summary figure of `run_dir` into `out_path` (PNG); returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    run_dir = Path(run_dir)
    series = load_series(run_dir / "metrics.jsonl")
    config = _read_config(run_dir)
    train_steps = series.get("proposer/reward/mean", series.get("solver/reward/mean", ([], [])))[0]
    window = smooth_window(len(train_steps))
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.2))
    (a, b, c), (d, e, f) = axes

    _line(a, series, "proposer/reward/mean", "reward (mean)", color="C0", window=window)
    _line(a, series, "proposer/pass_rate/mean", "part: pass rate p", color="C1", window=window)
    _line(a, series, "proposer/diversity/mean", "part: diversity d", color="C2", window=window)
    a.set_title(f"(a) Proposer reward\n{reward_rule(config)}", fontsize=9)
    a.set_ylabel("reward, p, d (0-1 scale)")

    bands = [
        ("too hard (no reward)", ["eq0", "low"], "#d95f02"),
        ("learnable (Solver trains)", ["learnable"], "#1b9e77"),
        ("solved (p = 1)", ["eq1"], "#7570b3"),
    ]
    if all(HIST + name in series for _, names, _ in bands for name in names):
        steps = series[HIST + "learnable"][0]
        stacks = []
        for _, names, _ in bands:
            values = [100 * sum(v) for v in zip(*(series[HIST + n][1] for n in names))]
            stacks.append(moving_average(values, window))
        b.stackplot(steps, *stacks, labels=[x[0] for x in bands], colors=[x[2] for x in bands], alpha=0.85)
        b.set_ylim(0, 100)
        b.set_ylabel("share of valid questions (%)")
    else:
        _empty(b, "no pass-rate histogram in metrics.jsonl")
    low = (config.get("rewards") or {}).get("pass_rate_low", 0.2)
    b.set_title(f"(b) Pass rate p of the Proposer's questions\ntoo hard: p <= {low:g}", fontsize=9)

    if not _line(c, series, "proposer/valid/fraction", "valid", scale=100, color="C3", window=window):
        _empty(c, "no Proposer in this run")
    c.set_title("(c) Valid proposals (parsed, no leaked answer)", fontsize=9)
    c.set_ylabel("share of proposals (%)")
    c.set_ylim(0, 104)

    if not _line(d, series, "proposer/diversity/mean", "diversity d", color="C2", window=window):
        _empty(d, "no diversity logged")
    d.set_title("(d) Diversity against recent questions", fontsize=9)
    d.set_ylabel("d (0 = repeat, 1 = new)")
    d.set_ylim(0, 1.04)

    drawn = _line(e, series, "solver/reward/mean", "reward (mean)", color="C0", window=window)
    drawn |= _line(e, series, "solver/correct/mean", "answers correct", color="C4", window=window)
    if not drawn:
        _empty(e, "no Solver rows")
    e.set_title("(e) Solver on its training questions", fontsize=9)
    e.set_ylabel("reward / share correct (0-1)")

    held = sorted(k for k in series if k.startswith("eval/") and k.endswith("/avg@k"))
    if held:
        for i, key in enumerate(held):
            name = key[len("eval/") : -len("/avg@k")]
            _line(f, series, key, name, scale=100, color=f"C{i % 10}")
        f.set_ylabel("accuracy, avg@k (%)")
    else:
        _empty(f, "no held-out evaluation in this run:\nset eval.problems_file and schedule.eval_every")
    f.set_title("(f) Solver on held-out problems", fontsize=9)

    for ax in axes.flat:
        if ax.get_xticks().size:
            ax.set_xlabel("step (dual-play updates)")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best")
        ax.tick_params(labelsize=8)
    schedule = config.get("schedule") or {}
    facts = ", ".join(
        x
        for x in (
            schedule.get("mode"),
            f"{len(train_steps)} steps" if train_steps else None,
            f"smoothed over {window} steps (raw faint)" if window > 1 else None,
        )
        if x
    )
    fig.suptitle(f"{run_dir.resolve().name}" + (f"  ({facts})" if facts else ""), fontsize=12)
    fig.tight_layout()
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    return out_path
