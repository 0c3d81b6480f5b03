"""The one-page summary figure: drawn from metrics.jsonl alone, with every panel's data, on short and long runs."""

from __future__ import annotations

import pytest

from pasodoble.cli import main
from pasodoble.reports.series import moving_average
from pasodoble.reports.summary_plot import reward_rule, smooth_window
from pasodoble.reports.tracking import Tracker


def _fake_run(run_dir, steps=60, with_eval=True):
    with Tracker(run_dir) as t:
        for s in range(1, steps + 1):
            learn = s / steps
            t.log(
                {
                    "proposer/reward/mean": 0.3 + 0.2 * learn,
                    "proposer/pass_rate/mean": 0.7 - 0.2 * learn,
                    "proposer/diversity/mean": 0.9,
                    "proposer/valid/fraction": 0.95,
                    "proposer/pass_rate_hist/eq0": 0.1,
                    "proposer/pass_rate_hist/low": 0.1,
                    "proposer/pass_rate_hist/learnable": 0.2 + 0.4 * learn,
                    "proposer/pass_rate_hist/eq1": 0.6 - 0.4 * learn,
                    "solver/reward/mean": 0.8,
                    "solver/correct/mean": 0.7,
                },
                s,
            )
            if with_eval and s % 20 == 0:
                t.log({"eval/t3/avg@k": 0.5 + learn / 10, "eval/average/avg@k": 0.6}, s)
    (run_dir / "config.yaml").write_text("schedule:\n  mode: online\nrewards:\n  pass_rate_low: 0.25\n")


def test_pieces():
    assert smooth_window(10) == 1 and smooth_window(200) == 10
    assert moving_average([1, 2, 3, 4], 2) == [1, 1.5, 2.5, 3.5]
    assert reward_rule({}) == "reward = 1.1 - p + 0.2 d; 0 if p <= 0.2 or d <= 0.3"
    assert reward_rule({"rewards": {"proposer_reward": "rzero"}}) == "reward = min(p, 1-p); 0 if p <= 0.2"
    assert reward_rule({"rewards": {"use_diversity": False}}) == "reward = 1.1 - p; 0 if p <= 0.2"


@pytest.mark.parametrize("with_eval", [True, False])
def test_plot_draws_the_summary_with_its_six_panels(tmp_path, monkeypatch, with_eval):
    import matplotlib.figure

    run = tmp_path / "my-run"
    run.mkdir()
    _fake_run(run, with_eval=with_eval)
    figures = []
    original = matplotlib.figure.Figure.savefig

    def keep(fig, *args, **kwargs):
        figures.append(fig)
        return original(fig, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    assert main(["plot", str(run)]) == 0
    summary = run / "plots" / "summary.png"
    assert summary.read_bytes()[:4] == b"\x89PNG" and (run / "plots" / "proposer.png").is_file()
    fig = next(f for f in figures if f._suptitle is not None and f._suptitle.get_text().startswith("my-run"))
    assert "online" in fig._suptitle.get_text() and "smoothed over 3 steps" in fig._suptitle.get_text()
    axes = fig.axes
    assert [ax.get_title().split("\n")[0][:3] for ax in axes] == ["(a)", "(b)", "(c)", "(d)", "(e)", "(f)"]
    assert "p <= 0.25" in axes[1].get_title()  # the run's own gate, from config.yaml
    assert len(axes[1].collections) == 3  # the stacked bands: too hard / learnable / solved
    assert all(ax.get_xlabel() == "step (dual-play updates)" for ax in axes[:5])
    assert all(ax.get_ylabel() for ax in axes[:5])
    lines = axes[0].get_lines()
    assert len(lines) == 6 and min(line.get_alpha() or 1 for line in lines) == 0.25  # raw faint + smoothed
    held = axes[5]
    if with_eval:
        assert {line.get_label() for line in held.get_lines()} >= {"t3", "average"}
    else:
        assert "no held-out evaluation" in held.texts[0].get_text()


def test_plot_of_a_run_without_roles_draws_no_summary(tmp_path):
    with Tracker(tmp_path) as t:
        t.log({"sft/loss": 1.0}, 1)
    assert main(["plot", str(tmp_path)]) == 0
    assert not (tmp_path / "plots" / "summary.png").exists()
