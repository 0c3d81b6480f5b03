"""`bench/decode_kernel.py`: its medians, paired ratios and table on literal runs. Figures are asserted on their
consistency, never on their size; the bench itself runs in `make bench`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench_modules import load_bench

ROOT = Path(__file__).resolve().parents[2]


bench = load_bench("decode_kernel")


def run(arm: str, r: int, generate: float, step: float, tokens: int = 100) -> dict:
    return {
        "arm": arm,
        "round": r,
        "generate_cpu_s": generate,
        "update_cpu_s": step - generate,
        "step_cpu_s": step,
        "completion_tokens": tokens,
        "peak_rss_mb": 500.0,
    }


def test_medians_over_rounds_and_ratios_paired_round_by_round():
    runs = [
        run("kernel", 0, 1.0, 3.0),
        run("off", 0, 1.5, 3.5),
        run("kernel", 1, 2.0, 6.0),  # a slow round: the pairing divides it by its own round's kernel arm
        run("off", 1, 2.4, 6.6),
        run("kernel", 2, 1.0, 3.0),
        run("off", 2, 1.3, 3.3, tokens=101),
    ]
    summary = bench.summarise(runs)
    assert summary["kernel"]["generate_cpu_s"] == 1.0 and summary["off"]["generate_cpu_s"] == 1.5
    assert summary["off"]["generate_cpu_s_over_kernel"] == pytest.approx(1.3)  # median of 1.5, 1.2, 1.3
    assert summary["off"]["update_cpu_s_over_kernel"] == pytest.approx(1.0)  # median of 1.0, 1.05, 1.0
    assert summary["off"]["step_cpu_s_over_kernel"] == pytest.approx(1.1)  # median of 3.5/3, 1.1, 1.1
    assert summary["off"]["completion_tokens"] == 100
    assert "generate_cpu_s_over_kernel" not in summary["kernel"]


def test_the_report_names_both_arms_and_the_command():
    runs = [run("kernel", 0, 1.0, 3.0), run("off", 0, 1.5, 3.5)]
    results = {
        "date": "2026-12-05 18:00 UTC",
        "cpu": "a CPU",
        "core": 1,
        "load_before": [0.1],
        "load_after": [0.2],
        "versions": {"torch": "2.13.0"},
        "command": "python bench/decode_kernel.py --shape tiny",
        "shape_name": "tiny",
        "shape": {"prompts": 32, "num_generations": 8, "max_new_tokens": 48},
        "seed": 0,
        "rounds": 1,
        "summary": bench.summarise(runs),
    }
    text = bench.report(results)
    assert "| kernel | 1.00 | 2.00 | 3.00 | 100 | 500 | - | - | - |" in text
    assert "| off | 1.50 | 2.00 | 3.50 | 100 | 500 | 1.500 | 1.000 | 1.167 |" in text
    assert "python bench/decode_kernel.py --shape tiny" in text
    assert "accel.decode_kernel=off" in text
    results["kernel"] = "attention"
    assert "accel.train_attention=off" in bench.report(results)


def test_rounds_must_be_positive():
    with pytest.raises(SystemExit):
        bench.parse_args(["--rounds", "0"])
