"""`bench/host_memory.py`: its medians, paired ratios and table on literal runs (fast), and the bench end to end on
the tiny anchor (`slow`). Figures are asserted on their consistency, never on their size."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench_modules import load_bench

ROOT = Path(__file__).resolve().parents[2]
HANG_S = 1200  # a hang guard: three processes of torch imports and two tiny steps each, on a loaded machine


bench = load_bench("host_memory")


def run(arm: str, r: int, peak: float, update: float, after_update: float = 900.0) -> dict:
    phase = {"anon_mb": 1.0, "peak_mb": peak}
    return {
        "arm": arm,
        "round": r,
        "peak_rss_mb": peak,
        "generate_cpu_s": 1.0,
        "update_cpu_s": update,
        "trimmed_mb": 0.0,
        "phases": [
            {"step": 0, "after": "generation", "rss_mb": 1.0, "heap_free_mb": 1.0, **phase},
            {"step": 0, "after": "update", "rss_mb": 2.0, "heap_free_mb": 2.0, **phase},
            {"step": 1, "after": "generation", "rss_mb": 800.0, "heap_free_mb": 3.0, **phase},
            {"step": 1, "after": "update", "rss_mb": after_update, "heap_free_mb": 4.0, **phase},
        ],
    }


def test_the_measured_steps_figures_are_the_last_steps():
    f = bench.figures(run("trim", 0, 1000.0, 2.0))
    assert f["rss_after_generation_mb"] == 800.0 and f["rss_after_update_mb"] == 900.0
    assert f["heap_free_after_update_mb"] == 4.0 and f["peak_mb"] == 1000.0


def test_medians_over_rounds_and_ratios_paired_round_by_round():
    runs = [
        run("trim", 0, 1000.0, 2.0),
        run("keep", 0, 1100.0, 2.2, after_update=1500.0),
        run("trim", 1, 1000.0, 4.0),  # a slow round: the pairing divides it by its own round's trim
        run("keep", 1, 1200.0, 4.0, after_update=1700.0),
        run("trim", 2, 1020.0, 2.0),
        run("keep", 2, 1020.0, 2.0, after_update=1600.0),
    ]
    summary = bench.summarise(runs, ["trim", "keep"])
    assert summary["trim"]["peak_mb"] == 1000.0 and summary["keep"]["rss_after_update_mb"] == 1600.0
    assert summary["keep"]["update_cpu_s_over_trim"] == pytest.approx(1.0)  # ratios 1.1, 1.0, 1.0
    assert summary["keep"]["peak_mb_over_trim"] == pytest.approx(1.1)  # ratios 1.1, 1.2, 1.0
    assert "peak_mb_over_trim" not in summary["trim"]
    assert "peak_mb_over_trim" not in bench.summarise(runs[1::2], ["keep"])["keep"]  # no trim arm: no ratio


def test_arms_flag_names_each_arm_once(capsys):
    assert bench.parse_args(["--arms", "keep,trim"]).arms == ["keep", "trim"]
    for bad in ("trim,trim", "fast", ""):
        with pytest.raises(SystemExit):
            bench.parse_args(["--arms", bad])
        assert (
            "name each of trim, keep, mmap256k, tcmalloc, tcmalloc-keep, jemalloc at most once"
            in capsys.readouterr().err
        )


@pytest.mark.slow
@pytest.mark.timeout(HANG_S + 60)
def test_every_arm_runs_the_same_work_and_only_keep_skips_the_trims(tmp_path):
    cpu = str(max(os.sched_getaffinity(0)))
    cmd = [sys.executable, "bench/host_memory.py", "--shape", "tiny", "--cpu", cpu, "--out", str(tmp_path)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=HANG_S)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "report.md").read_text() in done.stdout
    results = json.loads((tmp_path / "results.json").read_text())
    runs = {r["arm"]: r for r in results["runs"]}
    ran = [arm for arm in bench.DEFAULT_ARMS if arm not in results["skipped_arms"]]
    assert sorted(runs) == sorted(ran) and {"trim", "keep", "mmap256k"} <= set(ran)
    for arm in results["skipped_arms"]:
        assert f"The {arm} arm did not run" in done.stdout
    assert len({r["completion_tokens"] for r in runs.values()}) == 1  # the same seed, the same samples
    for arm, r in runs.items():
        assert r["release_calls"] == 4, arm  # the Role reached the bench's wrapper after each of 4 phases
        assert [(p["step"], p["after"]) for p in r["phases"]] == [
            (0, "generation"),
            (0, "update"),
            (1, "generation"),
            (1, "update"),
        ]
        assert all(0 < p["rss_mb"] <= p["peak_mb"] <= r["peak_rss_mb"] for p in r["phases"])
    for arm in set(bench.KEEP_ARMS) & set(runs):
        assert runs[arm]["trims"] == 0 and runs[arm]["trimmed_mb"] == 0
    for arm in set(runs) - {"trim", "keep", "mmap256k"}:
        assert (
            runs[arm]["versions"]["malloc"] == arm.split("-")[0]
        )  # the allocator preloaded is the one it ran on
    assert runs["trim"]["versions"]["malloc"] == "system"
    assert "| mmap256k |" in done.stdout and "peak / trim's" in done.stdout
