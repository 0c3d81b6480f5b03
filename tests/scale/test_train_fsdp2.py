"""`pasodoble train` with `distributed.backend=fsdp2` (torch's fully_shard on CPU/gloo): the whole dual-play loop.

Every rank generates, solves and trains on its share with its weights sharded between phases and gathered once
per phase (`pasodoble.scale.sharding.fsdp2.FullyShard`). The tests run the tiny online recipe on 2 ranks under DDP and under
FSDP2 from the same seed and compare them: every rank's decisions log identical line by line, the same decisions
under both backends, and final weights and AdamW states equal within float rounding (the gradient is averaged by
an all-reduce under DDP and by a reduce-scatter under FSDP2, which may add the ranks' terms in another order; with
2 ranks a sum of two is order-free and the runs agree bit for bit). Then both runs' checkpoints are resumed on 3
ranks under their own backend: the FSDP2 checkpoint (gathered full state dicts, the same format as DDP's) loads
into 3-way shards and continues as the DDP one does, with shares that make the ranks call generate() a different
number of times (transformers would sync every decoded token of an FSDP module across ranks: a hang).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.scale.test_train_distributed import (
    SMALL,
    accelerate,
    assert_rank0_wrote_the_run,
    assert_ranks_agree,
    rows,
    run,
)
from tests.worlds import BUILD_BUDGET_S

pytestmark = [
    pytest.mark.distributed,
    pytest.mark.usefixtures("tiny_world"),
    pytest.mark.timeout(BUILD_BUDGET_S),
]

BIN = Path(sys.executable).parent
RECIPE = ["--config", "recipes/tiny-online.yaml", "schedule.steps=2", "schedule.keep_last=null"]
# The in-training evaluation (rank 0 generates alone) at steps 0 and 2, on 4 problems per tier.
EVAL = ["eval.problems_file=tiny:tiers", "eval.limit=4", "schedule.eval_every=2"]
# Float rounding of a few summed gradient terms after a few AdamW steps of the tiny models (lr 1e-4): AdamW moves an
# entry whose gradient is float noise by up to ~lr; 7e-6 was measured on a Zen 3 (AVX2) core and 2.09e-5 on a Zen 5
# (AVX-512) one, the same with the code before and after the one-pass decode step; a missing gradient share or a
# stale optimizer state moves weights by ~lr = 1e-4 per step, twice this bound.
TOLERANCE = 5e-5


def torchrun(n: int, *args: str) -> list[str]:
    return [
        str(BIN / "torchrun"),
        "--standalone",
        "--nproc_per_node",
        str(n),
        "-m",
        "pasodoble",
        "train",
        *args,
    ]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """The same 2-rank run under DDP and under FSDP2, both through the documented accelerate launch."""
    root = tmp_path_factory.mktemp("fsdp2")
    out = {"ddp": root / "ddp", "fsdp2": root / "fsdp2"}
    for backend, run_dir in out.items():
        run(accelerate(2, *RECIPE, *EVAL, *SMALL, f"distributed.backend={backend}", f"run_dir={run_dir}"))
    return out


def checkpoint_diff(a: Path, b: Path, step: int) -> float:
    """Max |difference| of the two runs' saved weights and AdamW moments at `step` (same files, same keys)."""
    worst = 0.0
    for role in ("proposer", "solver"):
        folder_a, folder_b = (d / "checkpoints" / f"step-{step}" / role for d in (a, b))
        wa, wb = (load_file(f / "model" / "model.safetensors") for f in (folder_a, folder_b))
        assert wa.keys() == wb.keys(), role
        worst = max([worst] + [(wa[k] - wb[k]).abs().max().item() for k in wa])
        sa, sb = (torch.load(f / "trainer_state.pt", weights_only=True) for f in (folder_a, folder_b))
        assert sa["updates"] == sb["updates"]
        oa, ob = sa["optimizer"], sb["optimizer"]
        assert oa["param_groups"] == ob["param_groups"] and oa["state"].keys() == ob["state"].keys()
        for i, state in ob["state"].items():
            assert torch.equal(oa["state"][i]["step"], state["step"])
            for key in ("exp_avg", "exp_avg_sq"):
                assert oa["state"][i][key].shape == state[key].shape  # full, not one rank's shard
                worst = max(worst, (oa["state"][i][key] - state[key]).abs().max().item())
    return worst


def test_fsdp2_on_two_ranks_takes_the_ddp_run_s_decisions_and_weights(runs):
    logs = {backend: assert_ranks_agree(run_dir, 2, 2) for backend, run_dir in runs.items()}
    assert [r["decision"] for r in logs["fsdp2"]] == [r["decision"] for r in logs["ddp"]]
    assert_rank0_wrote_the_run(runs["fsdp2"], 2)
    evals = {b: [m for m in rows(d / "metrics.jsonl") if "phase" not in m] for b, d in runs.items()}
    assert [m["step"] for m in evals["fsdp2"]] == [0, 2]
    assert evals["fsdp2"] == evals["ddp"]  # greedy, on the same gathered weights
    assert "backend: fsdp2" in (runs["fsdp2"] / "config.yaml").read_text()
    for step in (1, 2):
        assert checkpoint_diff(runs["fsdp2"], runs["ddp"], step) <= TOLERANCE
    saved = (runs["fsdp2"] / "checkpoints" / "step-2" / "solver" / "model" / "config.json").read_text()
    assert '"Qwen3ForCausalLM"' in saved  # loadable by any Hugging Face tool, not an FSDP class name


def test_an_fsdp2_checkpoint_resumes_on_three_ranks_as_the_ddp_one(runs, tmp_path):
    resumed = {}
    for backend, run_dir in runs.items():
        resumed[backend] = tmp_path / backend
        shutil.copytree(run_dir, resumed[backend])
        # 4 passages x 6 proposals over 3 ranks: rank 0 samples 6 + 2 of two prompts (two generate() calls),
        # rank 1 4 + 4 (one call), so no collective may run per call or per decoded token.
        run(
            torchrun(3, "--resume", str(resumed[backend]), "schedule.steps=3", "schedule.passages_per_step=4")
        )
        assert "world_size: 3" in (resumed[backend] / "config.yaml").read_text()
        assert_ranks_agree(resumed[backend], 3, 3, first=3)  # rank 2 joined at the checkpoint
        assert_rank0_wrote_the_run(resumed[backend], 3)
    log = {b: rows(d / "decisions" / "rank-0.jsonl") for b, d in resumed.items()}
    assert [r["decision"] for r in log["fsdp2"]] == [r["decision"] for r in log["ddp"]]
    assert checkpoint_diff(resumed["fsdp2"], resumed["ddp"], 3) <= TOLERANCE
