"""`pasodoble eval` on 2 and 3 CPU ranks (torchrun, gloo): the results of one process, each problem written once,
a killed rank ends the run in one line and the run resumes on another number of ranks without recomputing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.scale.test_distributed import free_port, rank_env

pytestmark = pytest.mark.distributed

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


@pytest.fixture()
def sums(tmp_path):
    path = tmp_path / "sums.jsonl"
    path.write_text("".join(json.dumps({"question": f"{i}+{i}?", "answer": 2 * i}) + "\n" for i in range(10)))
    return path


def eval_args(model, data, out, *extra) -> list[str]:
    return ["eval", "--model", str(model), "--dataset", str(data), "--out", str(out), "--no-progress"] + [
        "--chunk-size",
        "2",
        "--distributed-timeout-s",
        "60",
        *extra,
    ]


def torchrun(n: int, args: list[str]) -> subprocess.CompletedProcess:
    cmd = [str(BIN / "torchrun"), "--standalone", "--nproc_per_node", str(n), "-m", "pasodoble", *args]
    done = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]


def by_key(out: Path) -> dict:
    found = rows(out)
    keys = [(r["id"], r["sample"]) for r in found]
    assert len(keys) == len(set(keys)), "a problem was written twice"
    return {(r["id"], r["sample"]): (r["response"], r["extracted"], r["correct"]) for r in found}


def test_two_ranks_give_the_results_of_one_process_and_write_each_problem_once(tiny_lm, sums, tmp_path):
    from pasodoble.cli import main

    one, two = tmp_path / "one", tmp_path / "two"
    assert main(eval_args(tiny_lm[2], sums, one, "--max-new-tokens", "8")) == 0
    done = torchrun(2, eval_args(tiny_lm[2], sums, two, "--max-new-tokens", "8"))
    assert done.stdout.count("| Model |") == 1  # rank 0 alone reports
    assert "on 2 ranks" in done.stdout
    assert len(rows(two)) == 10
    assert by_key(two) == by_key(one)
    results = [json.loads((d / "results.json").read_text()) for d in (one, two)]
    assert results[0]["per_source"] == results[1]["per_source"]
    assert results[1]["counters"]["grader/checks"] == results[0]["counters"]["grader/checks"]


def spawn_ranks(world: int, args: list[str]) -> list[subprocess.Popen]:
    """The ranks as a launcher would start them, without one (so no launcher kills the survivors for us)."""
    port = free_port()
    return [
        subprocess.Popen(
            [sys.executable, "-m", "pasodoble", *args],
            cwd=ROOT,
            env={**env(), **rank_env(rank, world, port)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(world)
    ]


def test_a_killed_rank_ends_the_run_in_one_line_and_three_ranks_resume_it(tiny_lm, tmp_path):
    data = tmp_path / "many.jsonl"
    data.write_text("".join(json.dumps({"question": f"{i}+1?", "answer": i + 1}) + "\n" for i in range(40)))
    out = tmp_path / "run"
    args = eval_args(tiny_lm[2], data, out, "--max-new-tokens", "48", "--chunk-size", "1")
    procs = spawn_ranks(2, args)
    samples, deadline = out / "samples.jsonl", time.monotonic() + 600
    while time.monotonic() < deadline:
        if samples.exists() and len(samples.read_text().splitlines()) >= 4:
            break
        assert procs[0].poll() is None, procs[0].communicate()[1][-2000:]
        time.sleep(0.05)
    procs[1].send_signal(signal.SIGKILL)
    _, err = procs[0].communicate(timeout=300)
    procs[1].communicate()
    assert procs[0].returncode == 1, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("pasodoble: error: rank 0 of 2: ") and "a peer rank died" in last, last
    kept = samples.read_text().splitlines()
    assert 4 <= len(kept) < 40, "the run finished before it could be killed; make it longer"
    torchrun(3, args)
    after = samples.read_text().splitlines()
    assert after[: len(kept)] == kept  # finished problems are kept as written, not recomputed
    assert len(after) == 40 and len({json.loads(line)["id"] for line in after}) == 40
    counters = json.loads((out / "results.json").read_text())["counters"]
    assert counters["eval/resumed_problems"] == len(kept)
    assert counters["grader/checks"] == 40 - len(kept)  # only the others were generated and graded
