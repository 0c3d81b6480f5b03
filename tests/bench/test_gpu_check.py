"""`bench/gpu_check.py` on a CPU: every section runs with `--quick` (or says why it is skipped), the JSON is rewritten
after each section so a timeout still leaves the finished ones, a failing section is recorded and the next still
runs, and the update's plain reference loop really trains. The vLLM parts run under marker `vllm` (CPU build)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pasodoble.update.liger import liger_unavailable
from tests.bench_modules import load_bench

ROOT = Path(__file__).resolve().parents[2]
check = load_bench("gpu_check")
sections = load_bench("gpu_sections")


def run(tmp_path, *names: str) -> tuple[int, dict]:
    out = tmp_path / "report.json"
    argv = ["--device", "cpu", "--quick", "--json", str(out), "--workdir", str(tmp_path / "models")]
    code = check.main([*argv, "--sections", ",".join(names)])
    return code, json.loads(out.read_text())


def test_env_and_weight_sync_write_their_figures(tmp_path):
    code, report = run(tmp_path, "env", "weight_sync")
    assert code == 0 and report["sections"] == ["env", "weight_sync"]
    assert report["env"]["matmul_tflops"] > 0 and report["env"]["torch"] == torch.__version__
    tiny = report["weight_sync"]["tiny"]
    assert tiny["shm_write_s"] > 0 and tiny["shm_gb"] > 0
    assert "skipped" in tiny["vllm"] or tiny["vllm"]["shm_reload_s"] > 0


def test_the_json_holds_each_finished_section_before_the_next_starts(tmp_path, monkeypatch):
    seen = {}

    def spy(ctx):
        seen.update(json.loads((tmp_path / "report.json").read_text()))
        raise RuntimeError("boom")

    monkeypatch.setitem(sections.SECTIONS, "update", spy)
    code, report = run(tmp_path, "env", "update", "weight_sync")
    assert "env" in seen and "update" not in seen  # written after env, before update ran
    assert code == 1 and report["update"]["error"] == "RuntimeError: boom"
    assert "shm_write_s" in report["weight_sync"]["tiny"]  # the section after the failure still ran


def test_a_section_that_cannot_run_writes_skipped(tmp_path, monkeypatch):
    def cannot(ctx):
        raise sections.Skip("no such thing here")

    monkeypatch.setitem(sections.SECTIONS, "generation", cannot)
    code, report = run(tmp_path, "generation")
    assert code == 0 and report["generation"]["skipped"] == "no such thing here"


def test_unknown_section_and_missing_cuda_are_one_line_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        check.main(["--device", "cpu", "--sections", "env,speed"])
    assert e.value.code == 2 and "--sections: unknown speed" in capsys.readouterr().err
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit) as e:
            check.main(["--device", "cuda"])
        assert e.value.code == 2 and "no CUDA device" in capsys.readouterr().err


def test_the_plain_reference_loop_trains_and_counts_host_syncs(tmp_path):
    from transformers import AutoModelForCausalLM

    ctx = {"device": "cpu", "shape": check.QUICK_SHAPE, "root": tmp_path}
    path, _ = sections.model_dir(ctx, check.TINY, 0)
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    samples, advantages = sections.synthetic_batch(check.QUICK_SHAPE, check.TINY["vocab_size"], seed=0)
    before = [p.detach().clone() for p in model.parameters()]
    run_plain = sections.plain_update(
        model, samples, advantages, pad_id=0, micro_batch=2, new_tokens=8, dtype="float32"
    )
    ops, syncs, in_step = sections.profile_counts(run_plain)
    assert ops > 0 and set(syncs) == set(in_step) == set(sections.HOST_SYNC_OPS)
    # torch's CPU AdamW reads each parameter's step count back: counted inside the step, not outside it
    assert in_step["aten::_local_scalar_dense"] == len(list(model.parameters()))
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters()))


def test_the_update_section_compares_every_arm(tmp_path):
    ctx = {"device": "cpu", "shape": check.QUICK_SHAPE, "root": tmp_path, "peak_tflops": 1.0}
    out = sections.section_update(ctx)
    project, flat, plain = (out["arms"][k] for k in ("project", "padding_free", "plain"))
    assert plain["op_calls_vs_plain"] == 1.0 and project["op_calls_vs_plain"] > 0
    assert project["host_syncs_per_update"] >= 0 and project["s_per_update"] > 0 and 0 < project["mfu"] < 1
    liger = out["arms"]["liger"]
    if liger_unavailable() is None:  # Liger's chunked loss is plain torch: it runs on a CPU without Triton
        assert liger["s_per_update"] > 0 and liger["op_calls_vs_plain"] > 0 and liger["micro_batches"] >= 1
    else:
        assert liger == {"skipped": liger_unavailable()}
    # the padding-free arm at the quick shape: one micro-batch, at most 2 reads back, fewer operators than plain
    assert flat["layout"] == "padding_free" and flat["attention"] == "sdpa" and flat["micro_batches"] == 1
    assert flat["host_syncs_per_update"] <= 2 and flat["op_calls_vs_plain"] <= 1.0


@pytest.mark.slow
def test_quick_run_writes_every_section(tmp_path):
    out = tmp_path / "report.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "bench/gpu_check.py", "--device", "cpu", "--quick", "--json", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    for name in check.SECTIONS:
        assert name in report and "error" not in report[name], name
    phases = [p["phase"] for p in report["two_roles"]["phases"]]
    assert phases[-1] == "proposer generated after its sync" and all(
        "rss_gb" in p for p in report["two_roles"]["phases"]
    )


@pytest.mark.vllm
def test_vllm_sections_on_the_cpu_build(tmp_path):
    code, report = run(tmp_path, "weight_sync", "generation")
    assert code == 0, report
    sync = report["weight_sync"]["tiny"]["vllm"]
    assert sync["shm_reload_s"] > 0 and sync["sync_changed_logprobs"]
    assert sync["direct_load_s"] > 0 and sync["direct_vs_shm_logprob_gap"] < 1e-4
    assert report["generation"]["vllm"]["16"]["tokens_per_s"] > 0
