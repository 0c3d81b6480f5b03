"""`pasodoble train` with `distributed.backend=deepspeed` (ZeRO-1/2/3 on CPU/gloo): the whole dual-play loop.

Every rank generates, solves and trains on its share; each trainable role is one DeepSpeed engine
(`pasodoble.scale.sharding.deepspeed.DeepSpeedZero`) that accumulates the micro-batches, reduces, clips and steps AdamW
on its partition. The tests run the tiny online recipe on 2 ranks under DDP and under ZeRO-2 from the same seed:
every rank's decisions log identical line by line, the same decisions under both backends, and final weights and
AdamW moments equal within float rounding (a micro-batch's gradient lost to DeepSpeed's accumulation, or a stale
optimizer state, moves weights by ~lr = 1e-4 a step). ZeRO-1, and ZeRO-2 with the optimizer offloaded (the 3B/4B
recipes' setting), run the same loop. ZeRO-3, whose weights are partitioned too, runs it with the in-training
evaluation on rank 0 alone (without the phase-wide gather of `gathered` the ranks' per-forward gathers disagree
and the run fails). Then checkpoints cross backends and world sizes: the DDP checkpoint resumes on 3 ranks under
ZeRO-2, the ZeRO-2 one on 3 ranks under DDP, and the ZeRO-3 one on 3 ranks under ZeRO-3 (4 passages: ragged
shares), each continuing as the DDP checkpoint does under DDP."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.scale.test_train_distributed import (
    SMALL,
    accelerate,
    assert_rank0_wrote_the_run,
    assert_ranks_agree,
    rows,
    run,
)
from tests.scale.test_train_fsdp2 import EVAL, RECIPE, checkpoint_diff, torchrun
from tests.worlds import BUILD_BUDGET_S

pytest.importorskip("deepspeed", reason="the deepspeed extra is not installed (make deepspeed-env)")

pytestmark = [
    pytest.mark.distributed,
    pytest.mark.usefixtures("tiny_world"),
    pytest.mark.timeout(BUILD_BUDGET_S),
]

# Float rounding carried through a few AdamW steps of the tiny models: ZeRO-2 reduces each micro-batch's gradient
# and sums the reduced ones, DDP sums locally and reduces once (measured: 1.4e-7; ZeRO-1 matches DDP bit for bit).
# DeepSpeed keeping only the last micro-batch's gradient moves the weights by 8e-4.
TOLERANCE = 1e-5
# Several micro-batches per update (the recipe's 64 would make one): DeepSpeed must accumulate all of them, and
# ranks with fewer run zero-weight fillers.
MICRO = ["proposer.micro_batch_size=2", "solver.micro_batch_size=3"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """The same 2-rank run under DDP, ZeRO-2, ZeRO-1 and ZeRO-3, through the documented accelerate launch."""
    root = tmp_path_factory.mktemp("deepspeed")
    backends = {
        "ddp": ["distributed.backend=ddp"],
        "zero2": ["distributed.backend=deepspeed", "distributed.zero_stage=2"],
        "zero1": ["distributed.backend=deepspeed", "distributed.zero_stage=1"],
        "zero3": ["distributed.backend=deepspeed", "distributed.zero_stage=3"],
        "zero2_offload": [
            "distributed.backend=deepspeed",
            "distributed.zero_stage=2",
            "distributed.offload_optimizer=true",
        ],
    }
    out = {}
    for label, overrides in backends.items():
        out[label] = root / label
        evals = EVAL if label in ("ddp", "zero2", "zero3") else []
        run(accelerate(2, *RECIPE, *evals, *SMALL, *MICRO, *overrides, f"run_dir={out[label]}"))
    return out


def test_zero2_on_two_ranks_takes_the_ddp_run_s_decisions_and_weights(runs):
    logs = {b: assert_ranks_agree(runs[b], 2, 2) for b in ("ddp", "zero2")}
    assert [r["decision"] for r in logs["zero2"]] == [r["decision"] for r in logs["ddp"]]
    assert_rank0_wrote_the_run(runs["zero2"], 2)
    evals = {b: [m for m in rows(runs[b] / "metrics.jsonl") if "phase" not in m] for b in ("ddp", "zero2")}
    assert [m["step"] for m in evals["zero2"]] == [0, 2]
    assert evals["zero2"] == evals["ddp"]  # greedy, on weights within float rounding of each other
    config = (runs["zero2"] / "config.yaml").read_text()
    assert "backend: deepspeed" in config and "zero_stage: 2" in config
    for step in (1, 2):
        assert checkpoint_diff(runs["zero2"], runs["ddp"], step) <= TOLERANCE
    saved = (runs["zero2"] / "checkpoints" / "step-2" / "solver" / "model" / "config.json").read_text()
    assert '"Qwen3ForCausalLM"' in saved  # a Hugging Face folder, not a DeepSpeed checkpoint


def test_zero3_on_two_ranks_takes_the_ddp_run_s_decisions_weights_and_evaluations(runs):
    """ZeRO-3 partitions the weights too: each generation phase gathers them once (ranks make different numbers
    of generate() calls, and the evaluation runs on rank 0 alone), updates gather per forward."""
    logs = {b: assert_ranks_agree(runs[b], 2, 2) for b in ("ddp", "zero3")}
    assert [r["decision"] for r in logs["zero3"]] == [r["decision"] for r in logs["ddp"]]
    assert_rank0_wrote_the_run(runs["zero3"], 2)
    evals = {b: [m for m in rows(runs[b] / "metrics.jsonl") if "phase" not in m] for b in ("ddp", "zero3")}
    assert [m["step"] for m in evals["zero3"]] == [0, 2]
    assert evals["zero3"] == evals["ddp"]
    assert "zero_stage: 3" in (runs["zero3"] / "config.yaml").read_text()
    for step in (1, 2):
        assert checkpoint_diff(runs["zero3"], runs["ddp"], step) <= TOLERANCE


@pytest.mark.parametrize(
    ("label", "setting"), [("zero1", "zero_stage: 1"), ("zero2_offload", "offload_optimizer: true")]
)
def test_zero1_and_zero2_with_offload_on_two_ranks_train_as_ddp(runs, label, setting):
    logs = {b: assert_ranks_agree(runs[b], 2, 2) for b in ("ddp", label)}
    assert [r["decision"] for r in logs[label]] == [r["decision"] for r in logs["ddp"]]
    assert setting in (runs[label] / "config.yaml").read_text()
    for step in (1, 2):
        assert checkpoint_diff(runs[label], runs["ddp"], step) <= TOLERANCE


def test_checkpoints_cross_between_ddp_and_zero2_and_zero3_resumes_on_three_ranks(runs, tmp_path):
    """DDP -> ZeRO-2, ZeRO-2 -> DDP and ZeRO-3 -> ZeRO-3, each on 3 ranks, against DDP -> DDP."""
    resumed = {}
    for label, source, backend, stage in [
        ("ddp", "ddp", "ddp", 2),
        ("ddp_to_zero2", "ddp", "deepspeed", 2),
        ("zero2_to_ddp", "zero2", "ddp", 2),
        ("zero3_to_zero3", "zero3", "deepspeed", 3),
    ]:
        resumed[label] = tmp_path / label
        shutil.copytree(runs[source], resumed[label])
        # 4 passages over 3 ranks: ranks sample different numbers of prompts (no per-forward collective may run)
        args = ["schedule.steps=3", "schedule.passages_per_step=4", f"distributed.backend={backend}"]
        args.append(f"distributed.zero_stage={stage}")
        run(torchrun(3, "--resume", str(resumed[label]), *args))
        assert "world_size: 3" in (resumed[label] / "config.yaml").read_text()
        assert f"backend: {backend}" in (resumed[label] / "config.yaml").read_text()
        assert_ranks_agree(resumed[label], 3, 3, first=3)  # rank 2 joined at the checkpoint
        assert_rank0_wrote_the_run(resumed[label], 3)
    log = {b: rows(d / "decisions" / "rank-0.jsonl") for b, d in resumed.items()}
    for label in ("ddp_to_zero2", "zero2_to_ddp", "zero3_to_zero3"):
        assert [r["decision"] for r in log[label]] == [r["decision"] for r in log["ddp"]]
        assert checkpoint_diff(resumed[label], resumed["ddp"], 3) <= TOLERANCE
