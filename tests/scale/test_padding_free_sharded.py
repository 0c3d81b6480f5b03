"""The padding-free update under DDP, FSDP2 and DeepSpeed ZeRO-1/2/3 on 2 gloo ranks (`tests.scale.padding_free_worker`):
forced on this CPU, one update on each rank's share gives the weights, loss and gradient norm of the padded path
under the same backend; its forwards run through the wrapper (DDP, the DeepSpeed engine), under ZeRO-3 with the LM
head inside the forward. The control, positions that run on across a row's samples, moves the weights by a whole
AdamW step where a gradient's sign changes: the comparison would see it. Marker `distributed`."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from tests.scale.test_distributed import ROOT, free_port, last_json, rank_env

pytestmark = pytest.mark.distributed

# One AdamW step at lr 1e-2 moves a weight by about 1e-2 (the sign of its gradient); float rounding between the two
# layouts leaves at most 1e-5 (measured: 6e-6 to 1e-5), a changed gradient sign 2e-2.
TOLERANCE = 1e-4
WRAPPED = {"ddp", "zero1", "zero2", "zero3"}  # the forward runs through a wrapper whose `module` is the model
DEEPSPEED = ["zero1", "zero2", "zero3"]
HANG_GUARD_S = 900  # one launch; the DeepSpeed one took 8 minutes on two CPU cores shared with other work


def launch(backends: list[str]) -> dict:
    """Both ranks' results; they must agree (every rank compares the full weights after the reduction)."""
    port, procs = free_port(), []
    for rank in range(2):
        env = {**os.environ, **rank_env(rank, 2, port), "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "tests.scale.padding_free_worker", *backends],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    (rc0, out0), (rc1, out1) = (last_json(p, timeout=HANG_GUARD_S) for p in procs)
    assert rc0 == rc1 == 0 and out0 == out1
    return out0


@pytest.fixture(scope="module")
def results() -> dict:
    out = launch(["ddp", "fsdp2"])
    if importlib.util.find_spec("deepspeed") is not None:
        out.update(launch(DEEPSPEED))
    return out


@pytest.fixture(params=["ddp", "fsdp2", *DEEPSPEED])
def ran(request, results) -> tuple[str, dict]:
    """A backend's name and its results."""
    if request.param not in results:
        pytest.skip("the deepspeed extra is not installed (make deepspeed-env)")
    return request.param, results[request.param]


@pytest.mark.timeout(2 * HANG_GUARD_S)
def test_a_padding_free_update_equals_the_padded_one_under_the_same_backend(ran):
    backend, out = ran
    flat, padded = out["padding_free"], out["padded"]
    calls = flat["calls"]["padding_free"]
    assert calls >= 2 and padded["calls"]["padding_free"] == 0  # several micro-batches a rank
    assert flat["calls"]["through_wrapper"] == (calls if backend in WRAPPED else 0)
    assert flat["calls"]["head_in_forward"] == (calls if backend == "zero3" else 0)
    assert flat["loss"] == pytest.approx(padded["loss"], rel=1e-5, abs=1e-7)
    assert flat["grad_norm"] == pytest.approx(padded["grad_norm"], rel=1e-5)
    assert out["max_abs_diff"]["padding_free"] < TOLERANCE
    assert out["moved"] > 50 * TOLERANCE  # the step happened: the comparison is not of untouched weights


@pytest.mark.timeout(2 * HANG_GUARD_S)
def test_without_restarting_positions_the_comparison_fails(ran):
    _, out = ran
    control, padded = out["control"], out["padded"]
    assert control["calls"]["padding_free"] == out["padding_free"]["calls"]["padding_free"]
    assert control["grad_norm"] != pytest.approx(padded["grad_norm"], rel=1e-3)
    assert out["max_abs_diff"]["control"] > 10 * TOLERANCE
