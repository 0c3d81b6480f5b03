"""Ctrl-C in training checkpoints at the step boundary and resumes exactly; the closing lines name the outputs."""

from __future__ import annotations

import os
import signal

import pytest

from pasodoble.checkpoint import latest_checkpoint
from pasodoble.runs.run_notes import resume_hint, stop_on_interrupt, train_finished
from pasodoble.runs.train import prepare_resume
from pasodoble.threads import resolve_num_threads, usable_cpus
from tests.runs.test_resume import assert_same_run, build_loop


def _interrupt_during_call(loop, call: int, times: int = 1) -> None:
    """Send SIGINT to this process from inside the Solver's `call`-th generate (mid-step)."""
    engine = loop.solver.engine
    original, calls = engine.generate, [0]

    def generate(prompt_ids, sampling):
        calls[0] += 1
        if calls[0] == call:
            for _ in range(times):
                os.kill(os.getpid(), signal.SIGINT)
        return original(prompt_ids, sampling)

    engine.generate = generate


def test_first_ctrl_c_checkpoints_after_the_step_and_resume_matches(tmp_path, capsys):
    full, _ = build_loop(tmp_path / "full", steps=4)
    full.run()
    cut, _ = build_loop(tmp_path / "cut", steps=4)
    cut.schedule.checkpoint_every = None  # only the end (or a stop) writes one
    _interrupt_during_call(cut, call=2)  # during step 2
    with stop_on_interrupt(cut, tmp_path / "cut"):
        cut.run()
    out = capsys.readouterr().out
    assert "stopping after step 2" in out
    assert f"stopped at step 2; resume from step-2: pasodoble train --resume {tmp_path / 'cut'}" in out
    assert latest_checkpoint(tmp_path / "cut").name == "step-2"
    resumed, sampler = build_loop(tmp_path / "cut", steps=4)
    assert prepare_resume(tmp_path / "cut", resumed, sampler) == 2
    resumed.run()
    assert_same_run(tmp_path / "full", full, tmp_path / "cut", resumed, 4)


def test_second_ctrl_c_stops_now_and_names_the_checkpoint_to_resume_from(tmp_path, capsys):
    loop, _ = build_loop(tmp_path / "run", steps=4)
    _interrupt_during_call(loop, call=3, times=2)  # step 3: after step 2's checkpoint (checkpoint_every=1)
    before = signal.getsignal(
        signal.SIGINT
    )  # not always the default: a background job starts with SIGINT ignored
    with pytest.raises(KeyboardInterrupt), stop_on_interrupt(loop, tmp_path / "run"):
        loop.run()
    out = capsys.readouterr().out
    assert f"stopped mid-step; resume from step-2: pasodoble train --resume {tmp_path / 'run'}" in out
    assert signal.getsignal(signal.SIGINT) is before  # the handler was put back


def test_resume_hint_without_checkpoint_says_it_starts_over(tmp_path):
    assert "from the start (no checkpoint was written yet)" in resume_hint(tmp_path)


def test_finished_lines_name_roles_and_next_commands(tmp_path):
    loop, _ = build_loop(tmp_path / "run", steps=1)
    loop.run()
    text = train_finished(
        tmp_path / "run", roles=["proposer", "solver"], tiers=tmp_path / "tiers.jsonl", solver_template="{q}"
    )
    solver = tmp_path / "run" / "checkpoints" / "step-1" / "solver" / "model"
    assert f"trained solver: {solver} (a Hugging Face model folder)" in text
    assert f"pasodoble plot {tmp_path / 'run'}" in text and f"pasodoble inspect {tmp_path / 'run'}" in text
    assert f"pasodoble eval --model {solver} --dataset {tmp_path / 'tiers.jsonl'} --group-field tier" in text
    assert "--prompt-template '{q}'" in text


def test_default_threads_are_the_usable_cpus():
    assert resolve_num_threads(None) == usable_cpus() == len(os.sched_getaffinity(0))
    assert resolve_num_threads(3) == 3


def test_run_train_stopped_by_ctrl_c_checkpoints_then_raises_so_callers_stop(tmp_path, monkeypatch, capsys):
    import pasodoble.runs.train as train
    from pasodoble.core.rewards import RewardConfig
    from pasodoble.runs.train import TrainConfig
    from tests.runs.test_resume import PROMPTS

    loop, sampler = build_loop(tmp_path / "scratch", steps=4)
    monkeypatch.setattr(train, "build_roles", lambda cfg, *_: (loop.proposer, loop.solver))
    monkeypatch.setattr(train, "check_model_spec", lambda spec, where: None)  # the roles are given
    monkeypatch.setattr(train, "build_sampler", lambda cfg, proposer: sampler)
    _interrupt_during_call(loop, call=2)
    cfg = TrainConfig(run_dir=str(tmp_path / "run"), num_threads=1, prompts=PROMPTS)
    cfg.proposer.model = cfg.solver.model = "local"  # not tiny: (the roles are given)
    cfg.rewards = RewardConfig(use_diversity=False)
    cfg.schedule.steps, cfg.schedule.checkpoint_every, cfg.schedule.passages_per_step = 4, None, 2
    cfg.solver.num_generations = cfg.proposer.num_generations = 4
    with pytest.raises(KeyboardInterrupt):
        train.run_train(cfg)
    out = capsys.readouterr().out
    assert f"stopped at step 2; resume from step-2: pasodoble train --resume {tmp_path / 'run'}" in out
    assert f"trained solver: {tmp_path / 'run' / 'checkpoints' / 'step-2' / 'solver' / 'model'}" in out
    assert latest_checkpoint(tmp_path / "run").name == "step-2"
