"""CLI plumbing and `pasodoble plot`: help works, user mistakes exit 2 with one line, plots are written."""

from __future__ import annotations

import subprocess
import sys

from pasodoble.cli import main
from pasodoble.reports.series import load_series
from pasodoble.reports.tracking import Tracker


def test_help_lists_commands(capsys):
    assert main([]) == 2
    assert "plot" in capsys.readouterr().out


def test_plot_writes_pngs_and_reads_only_the_file(tmp_path):
    with Tracker(tmp_path) as t:
        for step in range(5):
            t.log(
                {"proposer/reward/mean": step * 0.1, "solver/reward/mean": 1 - step * 0.1, "note": "x"}, step
            )
        t.log({"proposer/reward/mean": float("nan")}, 5)
    series = load_series(tmp_path / "metrics.jsonl")
    assert series["proposer/reward/mean"][0] == [0, 1, 2, 3, 4]
    assert main(["plot", str(tmp_path), "--smooth", "2"]) == 0
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "proposer.png",
        "solver.png",
        "summary.png",
    ]
    assert (tmp_path / "plots" / "proposer.png").read_bytes()[:4] == b"\x89PNG"


def test_plot_user_errors_are_one_line(tmp_path, capsys):
    assert main(["plot", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "metrics.jsonl not found" in err[0]


def test_module_entry_point_runs_as_a_process():
    out = subprocess.run(
        [sys.executable, "-m", "pasodoble", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.startswith("pasodoble ")
