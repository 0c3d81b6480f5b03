"""Tiny-world online runs with vLLM engines: both roles on `engine=vllm`, and both as adapters of one base.

The tiny world here has 32-wide attention heads (the smallest the vLLM CPU build runs; the default world's are 24),
otherwise the default one; it is built and cached on first use like the default one. A vLLM run is compared with the
same run on the HF engine: the samples differ (different samplers), so the check is on the per-step means of pass
rate, rewards and valid fraction over the 20 steps: |mean_vllm - mean_hf| must stay within 3 standard errors of the
difference plus 0.05 (seed noise), and vLLM's log-probs must match the trainer's on every update
(`rollout/logprob_diff/max` < 1e-3). Markers `vllm` and `slow`: run with `make test-vllm-all`.
"""

from __future__ import annotations

import json
import math

import pytest

from tests.worlds import VLLM_WORLD

pytest.importorskip("vllm")
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.usefixtures("tiny_world_vllm"),
    pytest.mark.timeout(5400),
]  # 20-step runs: 10-20 min each

from pasodoble.config import load_config  # noqa: E402
from pasodoble.runs.train import TrainConfig, run_train  # noqa: E402

WORLD = VLLM_WORLD  # cached once (tests/conftest.py `tiny_world_vllm`)
CHEAP = [
    "schedule.passages_per_step=1",
    "proposer.num_generations=4",
    "solver.num_generations=4",
    "logging.quiet=true",
]
RUN = ["schedule.steps=20", "schedule.checkpoint_every=10", *CHEAP]
COMPARED = (
    "proposer/pass_rate/mean",
    "proposer/reward/mean",
    "proposer/valid/fraction",
    "solver/reward/mean",
)


def run(tmp_path, name: str, *overrides: str) -> list[dict]:
    cfg = load_config(TrainConfig, "recipes/tiny-online.yaml", [*WORLD, *RUN, *overrides])
    cfg.run_dir = str(tmp_path / name)
    run_train(cfg)
    lines = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
    return [row for row in map(json.loads, lines) if "eval/" not in "".join(row)]


def within_seed_noise(a: list[dict], b: list[dict], key: str) -> tuple[bool, str]:
    xs, ys = [r[key] for r in a if key in r], [r[key] for r in b if key in r]
    if not xs or not ys:
        return False, f"{key}: missing ({len(xs)} vs {len(ys)} rows)"
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = lambda v, m: sum((x - m) ** 2 for x in v) / max(len(v) - 1, 1)  # noqa: E731
    se = math.sqrt(var(xs, mx) / len(xs) + var(ys, my) / len(ys))
    return abs(mx - my) <= 3 * se + 0.05, f"{key}: hf {mx:.3f} vs vllm {my:.3f} (3se {3 * se:.3f})"


@pytest.fixture(scope="module")
def hf_rows(tmp_path_factory):
    return run(tmp_path_factory.mktemp("hf"), "hf")


def check_against_hf(hf_rows, rows):
    assert len(rows) == len(hf_rows) == 20
    verdicts = [within_seed_noise(hf_rows, rows, k) for k in COMPARED]
    assert all(ok for ok, _ in verdicts), "; ".join(msg for _, msg in verdicts)
    updates = [r for r in rows if "rollout/logprob_diff/max" in r]
    assert updates and max(r["rollout/logprob_diff/max"] for r in updates) < 1e-3
    assert all(r["time/weight_sync_s"] > 0 for r in updates)


def test_online_run_with_vllm_engines_matches_the_hf_engine(tmp_path, hf_rows):
    rows = run(tmp_path, "vllm", "proposer.engine=vllm", "solver.engine=vllm")
    check_against_hf(hf_rows, rows)


LORA = [
    "roles.shared_base=true",
    "proposer.lora.rank=8",
    "solver.lora.rank=8",
    "proposer.lora.alpha=16",
    "solver.lora.alpha=16",
]


def test_shared_base_adapters_on_one_vllm_engine_match_the_hf_engine(tmp_path):
    hf = run(tmp_path, "shared-hf", *LORA)
    rows = run(tmp_path, "shared", *LORA, "proposer.engine=vllm", "solver.engine=vllm")
    check_against_hf(hf, rows)
    assert (tmp_path / "shared" / "checkpoints").is_dir()
