"""The chunked LM-head log-probs under DDP: the head is taken from the wrapper's inner model and the forward still
runs through the wrapper, so two ranks take the chunked path and the same step as one rank on all samples (before,
DDP fell back to the full logits). Marker `distributed` (2 gloo ranks)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.scale.test_distributed import ROOT, free_port, last_json, rank_env

pytestmark = pytest.mark.distributed


def test_ddp_ranks_score_through_the_chunked_head_and_match_one_rank():
    port, procs = free_port(), []
    for rank in range(2):
        env = {**os.environ, **rank_env(rank, 2, port), "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
        cmd = [sys.executable, "-m", "tests.scale.chunked_worker"]
        procs.append(
            subprocess.Popen(
                cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    for rc, out in [last_json(p) for p in procs]:
        assert rc == 0
        assert out["chunked_calls"]["wrapped"] > 0  # the DDP role's micro-batches
        assert out["max_abs_diff"] < 1e-4
        for sharded, single in out["grad_norms"] + out["losses"]:
            assert sharded == pytest.approx(single, rel=1e-4, abs=1e-6)


def test_ddp_and_fsdp2_chunk_the_head():
    from pasodoble.scale.sharding.ddp import Accelerated
    from pasodoble.scale.sharding.fsdp2 import FullyShard
    from pasodoble.scale.sharding.unsharded import Unsharded

    assert all(backend.head_outside_forward for backend in (Unsharded, Accelerated, FullyShard))


def test_zero3_keeps_the_full_logits_and_zero2_chunks():
    pytest.importorskip("deepspeed")
    from pasodoble.scale.sharding.deepspeed import DeepSpeedZero

    assert DeepSpeedZero(2, zero_stage=2).head_outside_forward
    assert not DeepSpeedZero(2, zero_stage=3).head_outside_forward  # its head weight is a partition there
