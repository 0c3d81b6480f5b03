"""Resume reproduces an uninterrupted run: in process (fast, scripted rollouts) and with SIGKILL at random moments,
checkpoint writes included (slow, real CLI); a run directory on a full disk stops with one line (slow, tmpfs).

The resume tests compare every metric outside `time/` and `proc/` (wall clock and process-local caches) and every
weight.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from pasodoble.checkpoint import latest_checkpoint, list_checkpoints, verify_checkpoint
from pasodoble.core.knowledge import KnowledgeConfig, Passage, PassageSampler
from pasodoble.core.prompts import PromptConfig
from pasodoble.core.rewards import RewardConfig
from pasodoble.core.step_metrics import deterministic
from pasodoble.dualplay import DualPlay, ScheduleConfig
from pasodoble.io import read_jsonl
from pasodoble.reports.tracking import Tracker
from pasodoble.roles.role import Role, RoleConfig
from pasodoble.runs.train import prepare_resume, write_checkpoint
from tests.loop_helpers import ExactGrader, ScriptedEngine, make_model, make_tokenizer

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = PromptConfig(proposer_template="{passage}?", solver_template="{question}=")
PASSAGES = [Passage(f"p{i}", f"passage number {i} about sums and products") for i in range(5)]


def seeded_script(options):
    """Completion j of a call is drawn from `options` with torch's RNG, which the engine seeds per call."""

    def script(prompt: str, j: int) -> str:
        return options(prompt)[int(torch.randint(len(options(prompt)), (1,)))]

    return script


def proposer_options(prompt: str) -> list[str]:
    return [
        f"<problem>What is {a}+{b}?</problem><answer>\\boxed{{{a + b}}}</answer>"
        for a, b in ((1, 2), (3, 4), (5, 6), (7, 1))
    ] + ["no tags"]


def solver_options(prompt: str) -> list[str]:
    return ["\\boxed{3}", "\\boxed{7}", "\\boxed{11}", "\\boxed{8}", "\\boxed{0}"]


class SeededEngine(ScriptedEngine):
    def generate(self, prompt_ids, sampling, on_batch=None, on_progress=None):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(sampling.seed)
            return super().generate(prompt_ids, sampling, on_batch, on_progress)


def build_loop(run_dir: Path, steps: int) -> tuple[DualPlay, PassageSampler]:
    roles = []
    for name, options, seed in (("proposer", proposer_options, 1), ("solver", solver_options, 2)):
        tok = make_tokenizer()
        model = make_model(tok, seed=seed)
        cfg = RoleConfig(
            model="test",
            num_generations=4,
            temperature=1.0,
            max_completion_length=64,
            lr=1e-2,
            micro_batch_size=8,
        )
        roles.append(
            Role(
                name,
                cfg,
                model,
                tok,
                engine=SeededEngine(model, tok, seeded_script(options)),
                total_updates=steps,
            )
        )
    sampler = PassageSampler(KnowledgeConfig(seed=3), passages=PASSAGES)
    schedule = ScheduleConfig(
        steps=steps, checkpoint_every=1, keep_last=2, samples_every=1, passages_per_step=2
    )
    loop = DualPlay(
        roles[0],
        roles[1],
        ExactGrader(),
        schedule=schedule,
        rewards=RewardConfig(use_diversity=False),
        prompts=PROMPTS,
        sampler=sampler,
        seed=7,
        run_dir=run_dir,
        tracker=Tracker(run_dir),
        verbose=False,
    )
    loop.on_checkpoint = lambda dp: write_checkpoint(dp, sampler, run_dir, 2)
    return loop, sampler


def weights(loop: DualPlay) -> dict[str, torch.Tensor]:
    return {
        f"{r.name}.{k}": v.clone()
        for r in (loop.proposer, loop.solver)
        for k, v in r.model.state_dict().items()
    }


def assert_same_run(
    full_dir: Path, full: DualPlay, cut_dir: Path, resumed: DualPlay, steps: int
) -> list[dict]:
    """The resumed run's metrics (outside time/ and proc/) and weights equal the uninterrupted run's."""
    rows_full = [deterministic(r) for r in read_jsonl(full_dir / "metrics.jsonl")]
    rows_cut = [deterministic(r) for r in read_jsonl(cut_dir / "metrics.jsonl")]
    assert rows_full == rows_cut and len(rows_full) == steps
    a, b = weights(full), weights(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)
    return rows_full


def test_in_process_resume_matches_uninterrupted_run(tmp_path):
    full, _ = build_loop(tmp_path / "full", steps=4)
    full.run()
    interrupted, _ = build_loop(tmp_path / "cut", steps=4)
    interrupted.schedule.steps = 2  # stops after step 2's checkpoint, as a crash right after it would
    interrupted.run()
    resumed, sampler = build_loop(tmp_path / "cut", steps=4)
    assert prepare_resume(tmp_path / "cut", resumed, sampler) == 2
    resumed.run()
    rows_full = assert_same_run(tmp_path / "full", full, tmp_path / "cut", resumed, 4)
    assert sum(r["solver/update/applied"] for r in rows_full) >= 1  # the comparison covers real updates
    assert read_jsonl(tmp_path / "full" / "samples.jsonl") == read_jsonl(tmp_path / "cut" / "samples.jsonl")
    assert resumed.proposer.updates == full.proposer.updates


@pytest.fixture(scope="module")
def minimal_models(tmp_path_factory):
    from pasodoble.sft import SFTConfig
    from pasodoble.sft.tiny import ensure_sft_models
    from pasodoble.world import WorldConfig
    from pasodoble.world.model import ModelConfig

    # The default model size on t1-only data: big enough that some oracle t1 questions land in the learnable band
    # (0 < p < 1), so the oracle comparison covers real Solver updates (the smallest model never answers one).
    world = replace(
        WorldConfig.minimal(),
        sft_solver_examples=2000,
        sft_tiers=["t1"],
        sft_tier_weights=None,
        model=ModelConfig(),
    )
    sft = SFTConfig(max_steps=300, batch_size=16, log_every=50, num_threads=1)
    return ensure_sft_models(tmp_path_factory.mktemp("cache"), world, sft, progress=False)


def train_cmd(models, run_dir: Path, mode: str, steps: int) -> list[str]:
    m = models.solver_dir
    return [
        sys.executable,
        "-m",
        "pasodoble",
        "train",
        "--config",
        str(ROOT / "recipes" / "tiny-online.yaml"),
        f"run_dir={run_dir}",
        f"proposer.model={m}",
        f"solver.model={m}",
        f"knowledge.path={models.world.corpus}",
        f"schedule.mode={mode}",
        f"schedule.steps={steps}",
        "schedule.checkpoint_every=1",
        "schedule.keep_last=2",
        "schedule.samples_every=1",
        "schedule.oracle_questions=32",
        "oracle.tiers=[t1]",
        "num_threads=1",
        "proposer.max_completion_length=48",
        "solver.max_completion_length=64",
        "logging.quiet=true",
    ]


def run(cmd: list[str]) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(cmd, check=True, env=env, cwd=ROOT, timeout=600, capture_output=True)


def _kill_at(proc, run_dir: Path, moment: str, rows: int, rng: random.Random) -> bool:
    """SIGKILL `proc` once it has written `rows` metric rows: `mid-step` after a further random delay, `checkpoint`
    a few milliseconds after the next `step-N.tmp/` folder appears (while it is being written). Returns whether a
    partial checkpoint folder was left behind, i.e. the kill landed inside a checkpoint write."""
    metrics, root = run_dir / "metrics.jsonl", run_dir / "checkpoints"
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= rows:
            break
        time.sleep(0.01)
    if moment == "mid-step":
        time.sleep(rng.uniform(0.0, 1.0))
    else:
        while time.time() < deadline and proc.poll() is None:
            if root.is_dir() and any(p.name.endswith(".tmp") for p in root.iterdir()):
                time.sleep(rng.uniform(0.0, 0.02))
                break
            time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return root.is_dir() and any(p.name.endswith(".tmp") for p in root.iterdir())


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["oracle", "online"])
def test_sigkill_at_random_moments_then_resume_matches(minimal_models, tmp_path, mode):
    """Killed four times (twice inside a checkpoint write, twice mid-step) and resumed each time, the run ends with
    the metrics and weights of an uninterrupted one; no kill ever leaves a damaged `step-N`."""
    steps, seed = 5, random.randrange(1 << 30)
    rng = random.Random(seed)
    run(train_cmd(minimal_models, tmp_path / "full", mode, steps))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cut = tmp_path / "cut"
    first = train_cmd(minimal_models, cut, mode, steps)
    resume = [*first[:4], "--resume", str(cut)]
    landed, log = 0, []
    for i, moment in enumerate(("checkpoint", "mid-step", "checkpoint", "mid-step")):
        done = len(read_jsonl(cut / "metrics.jsonl")) if (cut / "metrics.jsonl").exists() else 0
        rows = min(steps - 1, done + rng.randint(0, 1))
        cmd = first if i == 0 else resume
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        in_write = _kill_at(proc, cut, moment, rows, rng)
        landed += in_write and moment == "checkpoint"
        log.append(f"{moment}@{rows}{'(in write)' if in_write else ''}")
        for _, ckpt in list_checkpoints(cut):  # a kill never leaves a damaged checkpoint under a step-N name
            assert verify_checkpoint(ckpt) == (None, True), (seed, log, ckpt)
    run(resume)
    why = f"seed {seed}, kills {log}"
    print(why)  # shown with -rP: which kills landed inside a checkpoint write
    assert landed >= 1, f"no kill landed inside a checkpoint write ({why})"
    full = [deterministic(r) for r in read_jsonl(tmp_path / "full" / "metrics.jsonl")]
    resumed = [deterministic(r) for r in read_jsonl(cut / "metrics.jsonl")]
    assert full == resumed and len(full) == steps, why
    if mode == "oracle":
        assert sum(r["solver/update/applied"] for r in full) >= 1
    for role in ("solver",) if mode == "oracle" else ("proposer", "solver"):
        a = load_file(latest_checkpoint(tmp_path / "full") / role / "model" / "model.safetensors")
        b = load_file(latest_checkpoint(cut) / role / "model" / "model.safetensors")
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), why
    assert json.loads((latest_checkpoint(cut) / "state.json").read_text())["loop"]["step"] == steps


@pytest.fixture()
def small_tmpfs(tmp_path):
    """A 20 MB tmpfs (needs the right to mount; skipped where there is none), unmounted afterwards."""
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(mount)],
            check=True,
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError) as err:
        pytest.skip(f"cannot mount a 20 MB tmpfs here ({err}); run as root to include this test")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True, timeout=30)


@pytest.mark.slow
def test_full_disk_stops_with_one_line_and_no_partial_checkpoint(minimal_models, small_tmpfs):
    run_dir = small_tmpfs / "run"
    cmd = [*train_cmd(minimal_models, run_dir, "online", 30), "schedule.keep_last=null"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(cmd, env=env, cwd=ROOT, timeout=900, capture_output=True, text=True)
    assert done.returncode == 2, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("pasodoble train: error: no space left on device writing " + str(run_dir)), last
    root = run_dir / "checkpoints"
    assert not [p.name for p in root.iterdir() if p.name.endswith((".tmp", ".del"))]
    assert list_checkpoints(run_dir), "the disk should fill after some checkpoints, not before the first"
    for _, ckpt in list_checkpoints(run_dir):
        assert verify_checkpoint(ckpt) == (None, True)
    rows = read_jsonl(run_dir / "metrics.jsonl", strict=True)  # intact: every line a whole row
    assert [r["step"] for r in rows if "step" in r] == sorted(r["step"] for r in rows if "step" in r)
