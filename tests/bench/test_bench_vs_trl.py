"""`bench/vs_trl.py`: its arithmetic and tables on literal runs (fast), and the bench end to end (`slow`): the
project side alone, and against TRL when TRL's venv (`make bench-env`) is there. Figures are never asserted on
speed, only on their consistency."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from tests.bench_modules import load_bench

ROOT = Path(__file__).resolve().parents[2]
# A hang guard, not a speed bound: four processes of torch imports at nice 19 on a loaded 2-core machine.
HANG_S = 2400


stats = load_bench("vs_trl_stats")
vs_trl = load_bench("vs_trl")


def run(side: str, r: int, step: float, gen: float, tokens: int = 100, rss: float = 1000.0) -> dict:
    record = {
        "side": side,
        "round": r,
        "step_cpu_s": step,
        "generate_cpu_s": gen,
        "update_cpu_s": step - gen,
        "prompt_tokens": 50,
        "completion_tokens": tokens,
        "params": 1000,
        "peak_rss_mb": rss,
    }
    return stats.derived(record, peak_flops_per_s=1e6)


def test_median_and_spread_of_a_few_rounds():
    assert stats.median([3.0, 1.0, 2.0]) == 2.0
    assert stats.median([1.0, 2.0, 4.0, 10.0]) == 3.0
    assert stats.spread([1.0, 2.0, 3.0]) == 1.0
    assert stats.spread([5.0]) == 0.0
    with pytest.raises(ValueError):
        stats.median([])


def test_flops_and_mfu_count_2n_a_token_for_generation_and_6n_for_the_update():
    assert stats.generate_flops(10, prompt_tokens=3, completion_tokens=2) == 100
    assert stats.update_flops(10, prompt_tokens=3, completion_tokens=2) == 300
    assert stats.mfu(300, cpu_s=2.0, peak_flops_per_s=100.0) == 1.5
    assert stats.mfu(300, cpu_s=0.0, peak_flops_per_s=100.0) == 0.0
    r = run("project", 0, step=2.0, gen=0.5)
    # 150 tokens x 1000 parameters: generation 3e5 FLOPs in 0.5 s, update 9e5 in 1.5 s, at a 1e6 FLOP/s peak
    assert r["mfu_generate"] == pytest.approx(0.6)
    assert r["mfu_update"] == pytest.approx(0.6)
    assert r["mfu_step"] == pytest.approx(0.6)
    assert r["tokens_per_cpu_s"] == 50.0


def test_attention_flops_count_causal_pairs_and_shared_prompts_once():
    # one prompt of 3 tokens, two samples of 2 and 1 tokens: the prompt's 6 pairs, then 4 + 5 and 4 for the
    # completions (each token attends to the prompt, the tokens before it and itself)
    rows = [("a", 3, 2), ("a", 3, 1)]
    assert stats.causal_pairs(rows, batch=2, shared=True) == 6 + 9 + 4
    assert stats.causal_pairs(rows, batch=2, shared=False) == 2 * 6 + 9 + 4
    assert stats.causal_pairs(rows, batch=1, shared=True) == 2 * 6 + 9 + 4  # each batch runs its prompt
    # two prompts of equal length: each one's pairs count
    assert stats.causal_pairs([("a", 3, 0), ("b", 3, 0)], batch=2, shared=True) == 12
    assert stats.attention_flops(width=8, pairs=10, backward=False) == 320
    assert stats.attention_flops(width=8, pairs=10, backward=True) == 960
    r = run("project", 0, step=2.0, gen=0.5)
    assert "mfu_update_attention" not in r  # a record without the attention fields
    with_attention = {k: v for k, v in r.items() if not k.startswith(("mfu", "tokens_per"))}
    with_attention.update(attention_width=10, generate_attention_pairs=5000, update_attention_pairs=5000)
    r = stats.derived(with_attention, peak_flops_per_s=1e6)
    # generation 3e5 + 4 x 10 x 5000 = 5e5 FLOPs in 0.5 s; update 9e5 + 12 x 10 x 5000 = 1.5e6 in 1.5 s
    assert r["mfu_generate_attention"] == pytest.approx(1.0)
    assert r["mfu_update_attention"] == pytest.approx(1.0)
    assert r["mfu_step_attention"] == pytest.approx(1.0)
    assert r["mfu_update"] == pytest.approx(0.6)
    table = stats.render_table(stats.summarise([r]))
    assert "update MFU, attention counted" in table


def test_ratios_pair_the_sides_round_by_round():
    runs = [run("project", 0, 2.0, 1.0), run("trl", 0, 4.0, 2.0), run("project", 1, 1.0, 0.5)]
    runs.append(run("trl", 1, 3.0, 1.0))
    runs.append(run("trl", 2, 9.0, 1.0))  # no project run in round 2: not paired
    assert stats.paired_ratios(runs, "step_cpu_s", "trl") == [2.0, 3.0]
    summary = stats.summarise(runs)
    assert summary["sides"]["trl"]["step_cpu_s"]["median"] == 4.0
    assert summary["sides"]["trl"]["rounds"] == 3
    assert summary["ratios"]["trl"]["step_cpu_s"] == {"median": 2.5, "min": 2.0, "max": 3.0}
    assert "trl" not in summary["sides"]["project"]


def test_table_shows_each_side_its_ratio_to_the_project_and_the_speedup():
    runs = [run("project", r, 2.0, 1.0, rss=800.0) for r in range(2)]
    runs += [run("trl", 0, 4.0, 2.0, rss=1000.0), run("trl", 1, 4.4, 2.0, rss=1000.0)]
    runs += [run("trl_defaults", r, 5.0, 2.0) for r in range(2)]
    summary = stats.summarise(runs)
    table = stats.render_table(summary)
    lines = table.splitlines()
    assert lines[0] == (
        "| figure | project | TRL (ckpt off) | TRL (ckpt off) / project | TRL defaults | TRL defaults / project |"
    )
    # CPU runs have no GPU-memory row; records without attention pairs no attention-counted MFU
    assert len(lines) == 2 + len(stats.ROWS) - 1 - 3
    step = next(line for line in lines if line.startswith("| step (CPU-s)"))
    assert step == "| step (CPU-s) | 2.00 (±0%) | 4.20 (±5%) | 2.10 | 5.00 (±0%) | 2.50 |"
    rss = next(line for line in lines if line.startswith("| peak RSS"))
    assert "| 800 (±0%) | 1,000 (±0%) | 1.25 |" in rss
    assert stats.speedup_line(summary) == (
        "project tokens per CPU-second: 2.10x TRL (ckpt off), 2.50x TRL defaults"
    )
    alone = stats.summarise(runs[:2])
    assert stats.render_table(alone).splitlines()[0] == "| figure | project |"
    assert stats.speedup_line(alone).endswith("no TRL runs to compare")


def test_gpu_runs_are_titled_in_wall_clock_seconds_and_show_their_gpu_memory():
    runs = [
        {**run(side, 0, step, 1.0), "clock": "wall", "peak_gpu_mb": mb}
        for side, step, mb in (("project", 2.0, 3000.0), ("trl", 4.0, 6000.0))
    ]
    summary = stats.summarise(runs)
    assert summary["unit"] == "s"
    lines = stats.render_table(summary).splitlines()
    assert len(lines) == 2 + len(stats.ROWS) - 3  # no attention-counted MFU rows without attention pairs
    assert any(line.startswith("| step (s) | 2.00 (±0%) | 4.00 (±0%) | 2.00 |") for line in lines)
    assert any(line.startswith("| completion tokens per s |") for line in lines)
    gpu = next(line for line in lines if line.startswith("| peak GPU memory allocated (MB)"))
    assert "| 3,000 (±0%) | 6,000 (±0%) | 2.00 |" in gpu
    assert not any("CPU-s" in line for line in lines)
    assert stats.speedup_line(summary) == "project tokens per second: 2.00x TRL (ckpt off)"
    assert "step <= 2.00 s," in stats.target_line(summary) and "CPU" not in stats.target_line(summary)
    # a mixed set (a CPU run among GPU ones) keeps only the figures every run has
    assert "peak_gpu_mb" not in stats.summarise([*runs, run("trl_defaults", 0, 5.0, 2.0)])["sides"]["project"]


def test_target_line_says_what_twice_trls_speed_asks_of_the_step():
    # the project's step: 2 CPU-s, 1.2e6 FLOPs at a 1e6 FLOP/s peak (MFU 0.6); TRL's 3 and 5 CPU-s on the same work
    runs = [run("project", r, 2.0, 1.0) for r in range(2)]
    runs += [run("trl", r, 3.0, 1.0) for r in range(2)] + [run("trl_defaults", r, 5.0, 2.0) for r in range(2)]
    assert stats.target_line(stats.summarise(runs)) == (
        "2x TRL's tokens per CPU-second needs (now 2.00 CPU-s, 0.600): TRL (ckpt off): step <= 1.50 CPU-s, "
        "step MFU 0.800; TRL defaults: step <= 2.50 CPU-s, step MFU 0.480"
    )
    assert stats.target_line(stats.summarise(runs), factor=3.0).startswith("3x TRL's")
    assert "step MFU 1.200" in stats.target_line(stats.summarise(runs), factor=3.0)
    assert stats.target_line(stats.summarise(runs[:2])) == "2x TRL: no TRL runs to compare"


def test_report_states_conditions_and_one_table_per_shape():
    runs = [run("project", 0, 2.0, 1.0), run("trl", 0, 3.0, 1.0)]
    results = {
        "date": "2026-12-02 06:00 UTC",
        "command": "python bench/vs_trl.py --quick",
        "machine": {
            "cpu": "AMD EPYC",
            "core": 1,
            "load_before": [1.0, 2.0, 3.0],
            "load_after": [2.0, 2.0, 3.0],
        },
        "versions": {"project": {"torch": "2.13.0+cpu"}},
        "peak_flops_per_s": 7.1e10,
        "shapes": {
            "tiny": {
                "shape": {"prompts": 32, "num_generations": 8, "max_new_tokens": 48},
                "summary": stats.summarise(runs),
                "runs": [
                    {
                        "side": "project",
                        "settings": {"micro_batch_tokens": 2112, "logprob_chunk_tokens": 2048},
                    }
                ],
            }
        },
    }
    text = vs_trl.report(results)
    assert "rounds: 1; the project's micro_batch_tokens 2112, logprob_chunk_tokens 2048" in text
    assert "load average [1.0, 2.0, 3.0] before, [2.0, 2.0, 3.0] after" in text
    assert "71.0 GFLOP/s" in text and "`python bench/vs_trl.py --quick`" in text
    assert "## tiny: 32 prompts x 8 samples, up to 48 new tokens, rounds: 1" in text
    assert "project tokens per CPU-second: 1.50x TRL (ckpt off)" in text
    assert (
        "2x TRL's tokens per CPU-second needs (now 2.00 CPU-s, 0.600): TRL (ckpt off): step <= 1.50" in text
    )


def _results(shapes: dict) -> dict:
    return {
        "date": "2026-12-05 06:00 UTC",
        "command": "python bench/vs_trl.py --seeds 0,1",
        "machine": {"cpu": "AMD EPYC", "core": 1, "load_before": [0.1], "load_after": [0.2]},
        "versions": {},
        "peak_flops_per_s": 1e6,
        "shapes": shapes,
    }


def _shape(name: str, seed: int, runs: list[dict]) -> dict:
    shape = {"prompts": 32, "num_generations": 8, "max_new_tokens": 48}
    return {"name": name, "seed": seed, "shape": shape, "runs": runs, "summary": stats.summarise(runs)}


def test_figures_over_seeds_have_a_row_per_seed_and_their_range():
    seed0 = [run("project", 0, 2.0, 1.0, rss=500), run("trl", 0, 4.0, 2.0, rss=600)]  # 2.00x
    seed0 += [run("trl_defaults", 0, 5.0, 2.0, rss=580)]  # 2.50x, its update 3.00x
    seed1 = [
        run("project", 0, 2.0, 1.0, rss=520),
        run("trl", 0, 3.0, 1.5, rss=610),
    ]  # 1.50x, no defaults side
    row = stats.seed_row(0, stats.summarise(seed0))
    assert row["speedup_trl"] == pytest.approx(2.0) and row["speedup_trl_defaults"] == pytest.approx(2.5)
    assert row["update_ratio_trl"] == pytest.approx(2.0) and row["peak_rss_mb_project"] == 500
    table = stats.render_seed_table("tiny", [(0, stats.summarise(seed0)), (1, stats.summarise(seed1))])
    assert "tiny over seeds 0, 1:" in table
    assert (
        "| seed | project step (CPU-s) | tokens/CPU-s: x TRL (ckpt off) | tokens/CPU-s: x TRL defaults |"
        in table
    )
    assert "| 0 | 2.00 | 2.00 | 2.50 | 2.00 | 3.00 | 500 | 600 | 580 |" in table
    assert "| 1 | 2.00 | 1.50 | - | 1.50 | - | 520 | 610 | - |" in table  # a side a seed lacks is a dash
    assert (
        "| range | 2.00-2.00 | 1.50-2.00 | 2.50-2.50 | 1.50-2.00 | 3.00-3.00 | 500-520 | 600-610 | 580-580 |"
        in table
    )


def test_the_report_of_several_seeds_titles_each_and_ends_with_the_spread():
    runs = [run("project", 0, 2.0, 1.0), run("trl", 0, 3.0, 1.0)]
    shapes = {"tiny, seed 0": _shape("tiny", 0, runs), "tiny, seed 1": _shape("tiny", 1, runs)}
    text = vs_trl.report(_results(shapes))
    assert "## tiny, seed 0: 32 prompts x 8 samples" in text and "## tiny, seed 1: 32 prompts" in text
    assert text.index("## Over seeds") > text.index("## tiny, seed 1")
    assert "tiny over seeds 0, 1:" in text and "| range | 2.00-2.00 | 1.50-1.50 |" in text
    one = vs_trl.report(_results({"tiny": _shape("tiny", 0, runs)}))
    assert "## tiny: 32 prompts" in one and "Over seeds" not in one  # one seed: no spread section
    alone = [run("project", 0, 2.0, 1.0)]  # --project-only: no ratios, no spread table
    text = vs_trl.report(_results({"a": _shape("tiny", 0, alone), "b": _shape("tiny", 1, alone)}))
    assert "Over seeds" not in text


def test_seeds_flag(tmp_path, capsys):
    base = ["--out", str(tmp_path), "--quick", "--project-only"]
    assert vs_trl.parse_args(base).seeds == [0]
    assert vs_trl.parse_args([*base, "--seed", "3"]).seeds == [3]
    assert vs_trl.parse_args([*base, "--seeds", "0, 1,2"]).seeds == [0, 1, 2]
    for bad, says in (("0,x", "use comma-separated integers"), ("1,1", "each once"), (",", "at least one")):
        with pytest.raises(SystemExit):
            vs_trl.parse_args([*base, "--seeds", bad])
        assert says in capsys.readouterr().err
    with pytest.raises(SystemExit):
        vs_trl.parse_args([*base, "--seed", "1", "--seeds", "0,1"])
    assert "--seed and --seeds: give one of them" in capsys.readouterr().err


def test_the_seed_table_of_gpu_runs_shows_gpu_memory():
    runs = [
        {**run("project", 0, 2.0, 1.0), "peak_gpu_mb": 900.0},
        {**run("trl", 0, 4.0, 2.0), "peak_gpu_mb": 800.0},
    ]
    table = stats.render_seed_table("qwen3-0.6b", [(0, stats.summarise(runs)), (1, stats.summarise(runs))])
    assert "| peak GPU memory project (MB) | peak GPU memory TRL (ckpt off) (MB) |" in table
    assert table.splitlines()[-1].endswith("| 900-900 | 800-800 |")


def test_the_work_is_fixed_by_the_seed_and_checked_to_be_the_same_on_every_side():
    assert vs_trl.questions(4, seed=0) == vs_trl.questions(4, seed=0)
    assert vs_trl.questions(4, seed=0) != vs_trl.questions(4, seed=1)
    same = [{"prompt_tokens": 10, "params": 5}, {"prompt_tokens": 10, "params": 5}]
    vs_trl.check_same_work(same)
    with pytest.raises(vs_trl.UserError, match="same work"):
        vs_trl.check_same_work([*same, {"prompt_tokens": 11, "params": 5}])


def test_flags_quick_shapes_and_a_missing_trl_venv(tmp_path, capsys):
    args = vs_trl.parse_args(["--out", str(tmp_path), "--quick", "--project-only"])
    assert args.shapes == ["tiny"] and args.rounds == 2
    args = vs_trl.parse_args(["--out", str(tmp_path), "--quick", "--rounds", "1", "--project-only"])
    assert args.rounds == 1
    with pytest.raises(SystemExit):
        vs_trl.parse_args(["--out", str(tmp_path), "--shapes", "tiny,huge", "--project-only"])
    assert "--shapes: unknown ['huge']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        vs_trl.parse_args(["--out", str(tmp_path), "--trl-python", str(tmp_path / "none" / "python")])
    assert "run `make bench-env`, or pass --project-only" in capsys.readouterr().err
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(SystemExit):
            vs_trl.parse_args(["--out", str(tmp_path), "--device", "cuda", "--project-only"])
        assert "--device cuda: no CUDA device is visible here" in capsys.readouterr().err
    else:
        args = vs_trl.parse_args(["--out", str(tmp_path), "--device", "cuda", "--project-only"])
        assert args.shapes == ["qwen3-0.6b"]
    args = vs_trl.parse_args(["--out", str(tmp_path), "--quick", "--project-only", "--micro-batch", "64"])
    assert args.micro_batch == 64  # divides the anchor's 32 x 8 sequences
    for bad in ("48", "0"):
        with pytest.raises(SystemExit):
            vs_trl.parse_args(["--out", str(tmp_path), "--quick", "--project-only", "--micro-batch", bad])
        assert f"--micro-batch {bad} must divide the 256 sequences of a tiny step" in capsys.readouterr().err


def _bench_process(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess:
    """The bench on the anchor: one round of one prompt, 4 new tokens, no warm-up; it must succeed."""
    cpu = str(max(os.sched_getaffinity(0)))
    cmd = [
        sys.executable,
        "bench/vs_trl.py",
        "--quick",
        "--rounds",
        "1",
        "--prompts",
        "1",
        "--max-new-tokens",
        "4",
    ]
    cmd += ["--warmup-steps", "0", "--cpu", cpu, "--out", str(tmp_path), *flags]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=HANG_S)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "report.md").read_text() in done.stdout
    return done


def _bench(tmp_path: Path, *flags: str) -> dict:
    done = _bench_process(tmp_path, *flags)
    assert "## tiny: 1 prompts x 8 samples, up to 4 new tokens, rounds: 1" in done.stdout
    return json.loads((tmp_path / "results.json").read_text())


@pytest.mark.slow
@pytest.mark.timeout(HANG_S + 60)
def test_project_only_end_to_end(tmp_path):
    results = _bench(tmp_path, "--project-only")
    (r,) = results["shapes"]["tiny"]["runs"]
    assert r["side"] == "project" and r["completion_tokens"] <= 1 * 8 * 4
    assert r["step_cpu_s"] == pytest.approx(r["generate_cpu_s"] + r["update_cpu_s"])
    assert results["peak_flops_per_s"] > 0 and r["mfu_step"] > 0
    assert r["attention_width"] == 4 * 4 * 24  # the tiny world's layers x heads x head size
    assert (
        r["update_attention_pairs"] >= r["completion_tokens"] and r["mfu_update_attention"] > r["mfu_update"]
    )
    # the budgets default to auto, resolved from the tiny model's shape
    assert isinstance(r["settings"]["micro_batch_tokens"], int) and r["settings"]["micro_batch_tokens"] >= 64


@pytest.mark.slow
@pytest.mark.timeout(HANG_S + 60)
def test_several_seeds_run_each_on_its_own_questions_and_anchor(tmp_path):
    done = _bench_process(tmp_path, "--project-only", "--seeds", "0,1")
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["seeds"] == [0, 1] and list(results["shapes"]) == ["tiny, seed 0", "tiny, seed 1"]
    specs = [json.loads((tmp_path / f"spec-tiny-seed{s}.json").read_text()) for s in (0, 1)]
    assert [spec["seed"] for spec in specs] == [0, 1] and specs[0]["chats"] != specs[1]["chats"]
    assert [Path(spec["model_dir"]).name for spec in specs] == ["tiny-anchor-seed0", "tiny-anchor-seed1"]
    assert "## tiny, seed 1: 1 prompts x 8 samples" in done.stdout


@pytest.mark.slow
@pytest.mark.timeout(HANG_S + 60)
def test_bfloat16_on_a_cpu_trains_in_autocast_against_a_bfloat16_peak(tmp_path):
    results = _bench(tmp_path, "--project-only", "--dtype", "bfloat16")
    (r,) = results["shapes"]["tiny"]["runs"]
    assert results["dtype"] == r["settings"]["dtype"] == "bfloat16"
    assert json.loads((tmp_path / "runs" / "peak.json").read_text())["dtype"] == "bfloat16"
    text = (tmp_path / "report.md").read_text()
    assert "1 thread, bfloat16 autocast" in text and "bf16 matmul peak" in text


@pytest.mark.slow
@pytest.mark.timeout(HANG_S + 60)
def test_against_trl_end_to_end(tmp_path):
    trl_python = vs_trl.default_trl_python()
    if not trl_python.is_file():
        pytest.skip(f"no TRL venv at {trl_python}: `make bench-env` builds it")
    results = _bench(tmp_path, "--trl-python", str(trl_python))
    runs = results["shapes"]["tiny"]["runs"]
    assert [r["side"] for r in runs] == ["project", "trl", "trl_defaults"]
    assert len({(r["prompt_tokens"], r["params"]) for r in runs}) == 1  # the same work on every side
    assert results["versions"]["trl"]["trl"] == vs_trl.TRL_VERSION
    assert results["versions"]["trl"]["torch"] == results["versions"]["project"]["torch"]
    assert results["versions"]["trl"]["transformers"] == results["versions"]["project"]["transformers"]
    assert set(results["shapes"]["tiny"]["summary"]["ratios"]) == {"trl", "trl_defaults"}
    for r in runs:  # TRL's records carry the attention pairs of their own batch too
        assert (
            r["update_attention_pairs"] >= r["completion_tokens"]
            and r["mfu_update_attention"] > r["mfu_update"]
        )


@pytest.mark.slow
@pytest.mark.timeout(HANG_S + 60)
def test_the_gpu_shape_path_runs_on_a_cpu_with_a_model_built_from_a_config(tmp_path):
    cpu = str(max(os.sched_getaffinity(0)))
    cmd = [sys.executable, "bench/vs_trl.py", "--shapes", "qwen3-tiny", "--project-only", "--rounds", "1"]
    cmd += ["--warmup-steps", "0", "--cpu", cpu, "--out", str(tmp_path)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=HANG_S)
    assert done.returncode == 0, done.stderr[-3000:]
    (r,) = json.loads((tmp_path / "results.json").read_text())["shapes"]["qwen3-tiny"]["runs"]
    assert r["clock"] == "cpu" and r["device"] == "cpu" and "peak_gpu_mb" not in r
    assert r["completion_tokens"] <= 4 * 4 * 16 and r["params"] > 0
    assert (tmp_path / "models" / "qwen3-tiny" / "model-0" / "config.json").is_file()
    assert "| step (CPU-s) |" in done.stdout


def test_a_side_reports_its_own_peak_memory_not_its_parents():
    ballast = bytearray(400 << 20)  # the parent's resident size, which ru_maxrss would hand to the child
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    code = "import sys; sys.path.insert(0, 'bench'); import vs_trl_sides; print(vs_trl_sides.peak_rss_mb())"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert 0 < float(done.stdout) < 300  # a bare interpreter's own peak, well under the parent's 400 MB
    del ballast


def test_distinct_prompt_tokens_count_each_prompt_once_a_batch():
    sides = load_bench("vs_trl_sides")
    prompts = [[1, 2, 3], [4, 5]]  # 2 prompts x 3 samples: rows 3,3,3,2,2,2 tokens
    assert sides.distinct_prompt_tokens(prompts, 3, 6, shared=False) == 15
    assert sides.distinct_prompt_tokens(prompts, 3, 6, shared=True) == 5
    assert sides.distinct_prompt_tokens(prompts, 3, 4, shared=True) == 3 + 2 + 2  # batches [a a a b], [b b]
    assert sides.distinct_prompt_tokens(prompts, 1, 4, shared=True) == 5  # nothing shared: every row's own


def test_the_dualplay_cost_fit_recovers_a_known_model():
    cost = load_bench("dualplay_cost")
    grid = [
        {"I": i, "J": j, "max_completion_length": None, "step_s": 0.5 + 0.25 * i + 0.0625 * i * j}
        for i in (2, 4, 6)
        for j in (2, 8)
    ]
    lengths = [{"solver_tokens": t, "solve_s": 0.1 + 0.002 * t} for t in (100, 400)]
    model = cost.fit(grid, lengths)
    assert model["a"] == pytest.approx(0.5) and model["b"] == pytest.approx(0.25)
    assert model["c"] == pytest.approx(0.0625) and model["worst_relative_error"] < 1e-9
    assert model["solve_s_per_token"] == pytest.approx(0.002) and model["solve_s0"] == pytest.approx(0.1)


def test_decode_loop_bench_runs_every_arm_on_the_same_batch(tmp_path, capsys):
    bench = load_bench("decode_loop")
    out = tmp_path / "dl"
    assert (
        bench.main(
            [
                "--child",
                "--new-tokens",
                "6",
                "--prompts",
                "3",
                "--samples",
                "2",
                "--rounds",
                "2",
                "--context-words",
                "8",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    record = json.loads((out / "result.json").read_text())
    rows = record["results"]["6"]
    assert record["rows"] == 6 and len(rows["own"]) == len(rows["shared"]) == len(rows["generate"]) == 2
    for run in rows["own"] + rows["shared"] + rows["generate"]:
        assert 0 < run["tokens"] <= 36 and run["cpu_s"] > 0
    # generate decodes every row until the last ends; the own loop never runs more row-steps than that
    assert all(o["row_steps"] <= g["row_steps"] for o, g in zip(rows["own"], rows["generate"]))
    assert record["prompt_tokens"] > 20  # the passage came before each question
    printed = capsys.readouterr().out
    assert "generate / own" in printed and "own / shared" in printed


def test_sampling_bench_stands_the_process_trees_peak_memory_beside_each_speed():
    import time

    import psutil

    bench = load_bench("sampling")
    r = {"side": "hf", "batch": 64, "tokens": 100, "prefill_tokens": 20, "params": 1000}
    r |= {"cpu_s": 2.0, "wall_s": 2.1, "peak_rss_mb": 1234.4}
    older = {k: v for k, v in r.items() if k != "peak_rss_mb"}  # a record from before the column
    lines = bench.table([r, older], peak=1e5).splitlines()
    assert lines[0].endswith("| MFU (2N per token) | peak RSS (MB) |")
    # 2 x 1000 parameters x 120 tokens in 2 CPU-s at a 1e5 FLOP/s peak
    assert lines[2] == "| hf | 64 | 100 | 2.00 | 2.10 | 50.0 | 1.200 | 1,234 |"
    assert lines[3].endswith("| 1.200 | - |")
    alone = bench.tree_peak_rss_mb()
    assert alone >= psutil.Process().memory_info().rss / 2**20 * 0.99
    child = subprocess.Popen([sys.executable, "-c", "import time; b = b'x' * (200 * 2**20); time.sleep(60)"])
    try:
        deadline = time.monotonic() + 60  # a hang guard, not a speed bound
        while bench.tree_peak_rss_mb() < alone + 150 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert bench.tree_peak_rss_mb() >= alone + 150  # the child's 200 MB count in the tree's peak
    finally:
        child.kill()
        child.wait()


def test_sampling_bench_profiles_the_operators_of_one_call():
    from pasodoble.rollout import HFEngine, SamplingParams
    from tests.loop_helpers import make_model, make_tokenizer

    bench = load_bench("op_profile")
    tokenizer = make_tokenizer()
    engine = HFEngine(make_model(tokenizer), tokenizer, batch_size=4)
    prompts = [tokenizer("1+1=")["input_ids"], tokenizer("2+2=")["input_ids"]]
    sampling = SamplingParams(n=2, max_new_tokens=4, seed=0)
    # every operator, so that which ones lead (a matter of timing on a loaded machine) decides nothing below
    every, products = bench.op_profile(lambda: engine.generate(prompts, sampling), top=10_000)
    rows = every[:5]
    assert len(rows) == 5 and every == sorted(every, key=lambda r: -r["self_cpu_s"])
    assert 0 < sum(r["share"] for r in every) <= 1 + 1e-9
    matmuls = [r for r in every if r["gflop_per_s"]]
    assert matmuls and all(r["op"] in bench.MATMUL_OPS for r in matmuls)
    assert products["product_flops"] > 0 and 0 < products["product_share"] < 1
    table = bench.profile_table(rows).splitlines()
    assert table[0].startswith("| operator |") and len(table) == 2 + 5
    line = bench.summary_line(products, peak=1e11)
    assert "matrix products:" in line and "of the matmul peak (100.0 GFLOP/s)" in line


def test_profile_counts_the_flops_of_every_product_kernel():
    bench = load_bench("op_profile")
    assert bench.product_flops("aten::mm", [[8, 4], [4, 3]]) == 2 * 8 * 4 * 3
    assert bench.product_flops("aten::addmm", [[3], [8, 4], [4, 3]]) == 2 * 8 * 4 * 3
    assert bench.product_flops("aten::bmm", [[5, 8, 4], [5, 4, 3]]) == 2 * 5 * 8 * 4 * 3
    # oneDNN's linear: input (..., K), weight (N, K); the backward's products pass transposed operands the same way
    assert bench.product_flops("mkldnn::_linear_pointwise", [[2, 8, 4], [3, 4], [3]]) == 2 * 16 * 4 * 3
    assert bench.product_flops("aten::add", [[8, 4], [8, 4]]) == 0
    assert bench.product_flops("aten::mm", [[8, 4]]) == 0  # a shape the profiler left out


def test_update_layout_bench_times_every_arm_on_the_same_samples(tmp_path, capsys):
    bench = load_bench("update_layout")
    out = tmp_path / "ul"
    argv = [
        "--child",
        "--new-tokens",
        "6",
        "--prompts",
        "3",
        "--samples",
        "2",
        "--rounds",
        "3",
        "--out",
        str(out),
    ]
    assert bench.main(argv) == 0
    record = json.loads((out / "result.json").read_text())
    assert record["samples"] == 6 and 0 < record["completion_tokens"] <= 36
    assert all(len(record["seconds"][name]) == 3 for name in bench.ARMS)
    assert all(x > 0 for name in bench.ARMS for x in record["seconds"][name])
    printed = capsys.readouterr().out
    assert "cache_stock" in printed and "stock_head" in printed and "arm / default" in printed


def test_update_layout_bench_takes_a_budget_and_profiles_one_more_update(tmp_path, capsys):
    bench = load_bench("update_layout")
    assert [bench.token_budget(x) for x in ("auto", "None", "128")] == ["auto", None, 128]
    for bad in ("lots", "0"):
        with pytest.raises(argparse.ArgumentTypeError, match="use auto, none or a positive number"):
            bench.token_budget(bad)
    out = tmp_path / "ul"
    argv = ["--child", "--model", "qwen3-tiny", "--new-tokens", "4", "--prompts", "2", "--samples", "2"]
    argv += ["--rounds", "1", "--micro-batch-tokens", "64", "--profile", "5", "--out", str(out)]
    assert bench.main(argv) == 0
    record = json.loads((out / "result.json").read_text())
    assert record["device"] == "cpu" and record["micro_batch_tokens"] == 64
    assert len(record["profile"]) == 5 and record["matmul_peak_flops_per_s"] > 0
    assert record["profile_products"]["product_flops"] > 0
    printed = capsys.readouterr().out
    assert "its costliest operators" in printed and "| arm | CPU-s (median) |" in printed
    assert "| operator | calls |" in printed and "of the matmul peak" in printed


def test_update_layout_bench_sweeps_budgets_and_rates_the_products(tmp_path, capsys):
    bench = load_bench("update_layout")
    assert bench.budget_list("64, 4096") == [64, 4096]
    for bad in ("", "lots", "64,0"):
        with pytest.raises(argparse.ArgumentTypeError, match="positive token counts"):
            bench.budget_list(bad)
    out = tmp_path / "ul"
    argv = ["--child", "--model", "qwen3-tiny", "--new-tokens", "4", "--prompts", "2", "--samples", "2"]
    argv += ["--rounds", "2", "--micro-batch-tokens", "64", "--budgets", "16,64", "--product-rates", "2"]
    assert bench.main([*argv, "--out", str(out)]) == 0
    record = json.loads((out / "result.json").read_text())
    # the Role's own budget first, each listed one once, every round timed
    assert list(record["budgets"]) == ["64", "16"]
    small, own = record["budgets"]["16"], record["budgets"]["64"]
    assert small["micro_batches"] > own["micro_batches"] >= 1
    assert all(len(row["seconds"]) == 2 and min(row["seconds"]) > 0 for row in (small, own))
    rows, summary = record["product_rates"], record["product_rates_summary"]
    assert len(rows) == 2 and rows[0]["seconds"] >= rows[1]["seconds"]
    assert all(r["in_call"] > 0 and r["alone_cached"] > 0 and r["alone_cold"] > 0 for r in rows)
    assert summary["calls"] >= sum(r["calls"] for r in rows) and summary["flops"] > 0
    printed = capsys.readouterr().out
    assert "| micro_batch_tokens | micro-batches |" in printed and "over 64 (paired median)" in printed
    assert "alone, operands in cache" in printed and "aten.mm:" in printed


def test_product_rates_group_the_products_by_shape_and_layout():
    import torch

    bench = load_bench("product_rates")
    a, b = torch.randn(8, 4), torch.randn(4, 3)
    x, w = torch.randn(5, 4, requires_grad=True), torch.randn(6, 4, requires_grad=True)
    weights = torch.randn(5, 6)  # the output's gradient g, a (5, 6) tensor stored by rows

    def work():
        torch.mm(a, b)
        torch.mm(a, b)
        (torch.nn.functional.linear(x, w) * weights).sum().backward()  # x w^T; then dx = g w, dw = g^T x

    groups = {(g["m"], g["k"], g["n"], g["a"], g["b"]): g for g in bench.product_calls(work)}
    assert groups[(8, 4, 3, "", "")]["calls"] == 2
    assert groups[(8, 4, 3, "", "")]["flops"] == 2 * 2 * 8 * 4 * 3
    assert (5, 4, 6, "", "T") in groups and (5, 6, 4, "", "") in groups and (6, 5, 4, "T", "") in groups
    assert all(g["seconds"] >= 0 for g in groups.values())
    assert bench.alone_rate(16, 8, 4) > 0 and bench.alone_rate(16, 8, 4, "T", "T", cold_bytes=4096) > 0
    assert bench.last_level_cache_bytes() > 0


def test_product_rates_print_every_rate():
    bench = load_bench("product_rates")
    row = {"m": 2050, "k": 96, "n": 256, "a": "", "b": "T", "calls": 24, "seconds": 0.03, "flops": 2.4e9}
    row.update(in_call=8e10, alone_cached=1e11, alone_cold=9e10)
    table = bench.rates_table([row], peak=1e11).splitlines()
    assert table[2] == "| 2050 x 96 x 256 T | 24 | 0.0300 | 80.0 (0.80 of peak) | 100.0 | 90.0 | 0.80 |"
    summary = {"calls": 48, "seconds": 0.06, "flops": 4.8e9, "listed_seconds": 0.03}
    summary.update(listed_at_cached=0.024, listed_at_cold=0.0267, cold_bytes=128 << 20)
    line = bench.rates_line(summary)
    assert line.startswith(
        "aten.mm: 48 calls, 0.060 CPU-s, 4.8 GFLOP at 80.0 GFLOP/s; the listed shapes (50%"
    )
    assert "would take 0.024 at their rates alone" in line and "(128 MiB of them)" in line


def test_update_ops_bench_counts_fewer_operators_for_fewer_micro_batches(tmp_path, capsys):
    bench = load_bench("update_ops")
    out = tmp_path / "ops.json"
    argv = [
        "--prompts",
        "2",
        "--samples",
        "4",
        "--new-tokens",
        "8",
        "--budgets",
        "64,4096",
        "--micro-batch",
        "4",
    ]
    assert bench.main([*argv, "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    small, large, plain = record["rows"]
    assert small["micro_batches"] > large["micro_batches"] == 1 and plain["micro_batches"] == 2
    assert (
        small["ops"] > large["ops"] > 0 and plain["ops"] > 0
    )  # each micro-batch runs the model's operators again
    printed = capsys.readouterr().out
    assert "| arm | micro-batches | aten operator calls | / plain | CPU-s |" in printed
    assert "plain, 4 padded sequences" in printed


def test_update_layout_arms_switch_the_changes_off_and_back():
    import torch

    from pasodoble.accel import fused_block, fused_layers, narrow_matmul, train_attention
    from pasodoble.roles import role as role_module
    from pasodoble.update import chunked_logprobs, segment_attention
    from pasodoble.update.embedding_grad import rows_into_grad

    bench = load_bench("update_layout")
    train_attention.status()  # loaded (or not) before the arms switch them
    fused_layers.status()
    narrow_matmul.status()
    role = types.SimpleNamespace(entry_weight=0.5)
    head, states = torch.nn.Linear(4, 7, bias=False), torch.randn(2, 4)
    in_place = segment_attention.attends_in_place
    switched = {}
    for name in bench.ARMS:
        with bench.arm(role, name):
            switched[name] = (
                role.entry_weight is not None,
                chunked_logprobs.can_fuse(head, states),
                role_module.rows_into_grad is not rows_into_grad,
                train_attention._load() is None,
                fused_layers._load() is None,
                segment_attention.attends_in_place is in_place,
                narrow_matmul._load() is None,
                not narrow_matmul._grouping["on"],
                not fused_block._fusing["on"],
            )
        assert role.entry_weight == 0.5 and chunked_logprobs.can_fuse(head, states)
        assert narrow_matmul._grouping["on"] and fused_block._fusing["on"]
        assert segment_attention.attends_in_place is in_place
    # without a compiler every arm runs SDPA and transformers' layers
    sdpa, layers = train_attention._load() is None, fused_layers._load() is None
    blas = narrow_matmul._load() is None
    assert switched == {
        "default": (True, True, False, sdpa, layers, True, blas, False, False),
        "blas_products": (True, True, False, sdpa, layers, True, True, False, False),
        "separate_layers": (True, True, False, sdpa, layers, True, blas, True, False),
        "separate_blocks": (True, True, False, sdpa, layers, True, blas, False, True),
        "gathered": (True, True, False, sdpa, layers, False, blas, False, False),
        "sdpa": (True, True, False, True, layers, True, blas, False, False),
        "stock_layers": (True, True, False, sdpa, True, True, blas, False, False),
        "stock_head": (True, False, False, sdpa, layers, True, blas, False, False),
        "cache": (False, True, False, sdpa, layers, True, blas, False, False),
        "cache_stock": (False, False, True, sdpa, layers, True, blas, False, False),
    }
