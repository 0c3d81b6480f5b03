"""`bench/gpu_dualplay.py` through the sharding backends on CPU ranks: the path the GPU check takes with `--backend`
(the GPU run itself is a device check, not a test). Marker `distributed`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.distributed

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--device", "cpu", "--tiny", "--engine", "hf", "--steps", "1", "--generations", "2"]
SMALL += ["--max-new-tokens", "16", "--prompt-words", "20"]


@pytest.mark.parametrize("backend", ["ddp", "fsdp2"])
def test_two_ranks_train_both_roles_and_rank_0_reports_the_sum(backend, tmp_path):
    out = tmp_path / "report.json"
    cmd = [str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc_per_node", "2"]
    cmd += ["bench/gpu_dualplay.py", *SMALL, "--backend", backend, "--json", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"backend={backend} ranks=2" in done.stdout
    report = json.loads(out.read_text())
    assert report["world_size"] == 2 and report["train_tokens_per_s"] > 0
    assert report["solver/logprob_diff_max"] < 1e-3  # the HF engine scores with the weights it sampled from
