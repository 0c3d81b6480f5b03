"""The dual-play loop on tiny random models with scripted rollouts: what gets updated, skipped, buffered, logged."""

from __future__ import annotations

import json
import random
import re

import pytest
import torch

from pasodoble.core.buffer import BufferItem
from pasodoble.core.knowledge import KnowledgeConfig, Passage, PassageSampler
from pasodoble.core.prompts import PromptConfig
from pasodoble.core.rewards import RewardConfig
from pasodoble.dualplay import DualPlay, ScheduleConfig, derive_seed
from pasodoble.errors import ConfigError
from pasodoble.reports.tracking import Tracker
from pasodoble.roles.role import Role, RoleConfig
from tests.loop_helpers import ExactGrader, ScriptedEngine, make_model, make_tokenizer

PROMPTS = PromptConfig(
    proposer_template="Fact: {passage}\nAsk.",
    proposer_template_no_passage="Ask.",
    solver_template="{question}=",
)
PROPOSALS = [
    "<problem>What is 1+1?</problem><answer>\\boxed{2}</answer>",
    "What is 2+2? \\boxed{4}",  # invalid: no tags
    "<problem>What is 3+3?</problem><answer>\\boxed{6}</answer>",
    "<problem>What is 4+4?</problem><answer>\\boxed{8}</answer>",
]
# question -> how many of the J=4 Solver answers are correct
CORRECT_OF_4 = {"1+1": 3, "3+3": 4, "4+4": 1}
ANSWER = {"1+1": "2", "3+3": "6", "4+4": "8"}


def proposer_script(prompt: str, j: int) -> str:
    return PROPOSALS[j % len(PROPOSALS)]


def solver_script(prompt: str, j: int, table=CORRECT_OF_4) -> str:
    key = re.search(r"(\d\+\d)", prompt).group(1)
    return f"so \\boxed{{{ANSWER[key] if j < table[key] else 0}}}"


def make_role(name: str, script, *, seed: int, n: int, **cfg) -> Role:
    tokenizer = make_tokenizer()
    model = make_model(tokenizer, seed=seed)
    role_cfg = RoleConfig(
        model="test",
        num_generations=n,
        temperature=1.0,
        max_completion_length=64,
        lr=1e-2,
        micro_batch_size=3,
        **cfg,
    )
    return Role(name, role_cfg, model, tokenizer, engine=ScriptedEngine(model, tokenizer, script))


def make_loop(
    tmp_path, *, solver_table=CORRECT_OF_4, schedule=None, rewards=None, role_cfg=None, **kwargs
) -> DualPlay:
    """`role_cfg`: RoleConfig fields both roles take."""
    role_cfg = role_cfg or {}
    proposer = make_role("proposer", proposer_script, seed=1, n=4, **role_cfg)
    solver = make_role("solver", lambda p, j: solver_script(p, j, solver_table), seed=2, n=4, **role_cfg)
    sampler = PassageSampler(
        KnowledgeConfig(), passages=[Passage("p0", "one plus one is two, said the book")]
    )
    return DualPlay(
        proposer,
        solver,
        ExactGrader(),
        schedule=schedule or ScheduleConfig(samples_every=1),
        rewards=rewards or RewardConfig(),
        prompts=PROMPTS,
        sampler=sampler,
        seed=0,
        run_dir=tmp_path,
        tracker=Tracker(tmp_path),
        verbose=False,
        **kwargs,
    )


def params(role: Role) -> list[torch.Tensor]:
    return [p.detach().clone() for p in role.model.parameters()]


def changed(before, role: Role) -> bool:
    return any(not torch.equal(a, b) for a, b in zip(before, role.model.parameters()))


def test_online_step_updates_both_roles_and_logs_hand_computed_rewards(tmp_path):
    loop = make_loop(tmp_path)
    p0, s0 = params(loop.proposer), params(loop.solver)
    row = loop.online_step()
    assert changed(p0, loop.proposer) and changed(s0, loop.solver)
    # rewards: p=.75,d=1 -> 1.1-.75+.2=.55; invalid -> 0; p=1 -> .3; p=.25 -> 1.05
    assert row["proposer/reward/mean"] == pytest.approx((0.55 + 0 + 0.3 + 1.05) / 4)
    assert row["proposer/valid/fraction"] == 0.75
    assert row["proposer/invalid/no_problem_tag"] == 1.0
    assert row["proposer/pass_rate/mean"] == pytest.approx((0.75 + 1 + 0.25) / 3)
    assert row["proposer/learnable/count"] == 2.0
    assert row["solver/reward/mean"] == pytest.approx(4 / 8)  # learnable questions only: 3 + 1 correct of 8
    assert row["skip/skipped"] == 0.0 and row["proposer/update/applied"] == 1.0
    assert row["solver/update/samples"] == 8.0 and row["proposer/update/samples"] == 4.0
    logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert logged[0]["step"] == 1 and logged[0]["proposer/reward/mean"] == row["proposer/reward/mean"]
    samples = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert [s["proposer_reward"] for s in samples] == pytest.approx([0.55, 0.0, 0.3, 1.05])
    assert (
        samples[0]["passage"] == "one plus one is two, said the book"
        and len(samples[0]["solver_answers"]) == 4
    )


def test_step_with_all_pass_rates_zero_or_one_is_skipped_and_updates_nothing(tmp_path):
    loop = make_loop(tmp_path, solver_table={"1+1": 4, "3+3": 0, "4+4": 4})
    p0, s0 = params(loop.proposer), params(loop.solver)
    row = loop.online_step()
    assert not changed(p0, loop.proposer) and not changed(s0, loop.solver)
    assert loop.proposer.optimizer.state == {} and loop.solver.optimizer.state == {}
    assert loop.proposer.updates == loop.solver.updates == 0
    assert row["skip/skipped"] == 1.0 and row["skip/no_learnable_question"] == 1.0
    assert row["proposer/update/applied"] == 0.0 and row["solver/update/applied"] == 0.0
    assert loop.state.skipped == 1 and loop.state.inner_step == 1


def test_offline_iteration_fills_buffer_with_solver_frozen_then_trains_solver(tmp_path):
    sched = ScheduleConfig(
        mode="offline", proposer_phase_updates=2, solver_phase_updates=0, samples_every=None
    )
    # no diversity term: the scripted Proposer repeats its questions, which the diversity gate would zero
    loop = make_loop(tmp_path, schedule=sched, rewards=RewardConfig(use_diversity=False))
    p0, s0 = params(loop.proposer), params(loop.solver)
    loop.offline_iteration()
    assert changed(p0, loop.proposer) and not changed(s0, loop.solver)
    assert len(loop.state.buffer) == 4  # 2 learnable questions x 2 successful Proposer steps
    assert {it.question for it in loop.state.buffer.take(4)} == {"What is 1+1?", "What is 4+4?"}
    row = loop.buffer_step([BufferItem("What is 1+1?", "2", 0.75, 0)])
    assert row["phase"] == "solver" and row["solver/update/applied"] == 1.0 and changed(s0, loop.solver)


def test_offline_proposer_phase_is_bounded_when_every_step_is_skipped(tmp_path):
    sched = ScheduleConfig(mode="offline", proposer_phase_max_attempts=3, samples_every=None)
    loop = make_loop(tmp_path, solver_table={"1+1": 4, "3+3": 4, "4+4": 4}, schedule=sched)
    loop.offline_iteration()
    assert loop.state.inner_step == 3 and loop.state.skipped == 3 and len(loop.state.buffer) == 0


def test_oracle_step_trains_solver_on_true_answers(tmp_path):
    sched = ScheduleConfig(mode="oracle", oracle_questions=2, samples_every=None)
    solver = make_role("solver", solver_script, seed=2, n=4)
    loop = DualPlay(
        None,
        solver,
        ExactGrader(),
        schedule=sched,
        rewards=RewardConfig(),
        prompts=PROMPTS,
        question_source=lambda step, n: [("What is 1+1?", "2"), ("What is 3+3?", "6")][:n],
        verbose=False,
    )
    s0 = params(solver)
    row = loop.oracle_step()
    assert changed(s0, solver) and row["solver/learnable/fraction"] == 0.5
    assert row["solver/pass_rate/mean"] == pytest.approx((0.75 + 1.0) / 2)


def test_random_solver_reward_ablation_replaces_only_solver_reward(tmp_path):
    loop = make_loop(tmp_path, rewards=RewardConfig(solver_reward="random"))
    row = loop.online_step()
    assert row["proposer/reward/mean"] == pytest.approx((0.55 + 0 + 0.3 + 1.05) / 4)  # still real pass rates
    rng = random.Random(derive_seed(0, 0, "solver_reward"))
    expected = [1.0 if rng.random() < 0.5 else 0.0 for _ in range(8)]  # 2 learnable questions x 4 answers
    assert row["solver/reward/mean"] == pytest.approx(sum(expected) / 8)


def test_run_drives_schedule_and_calls_checkpoint_hook(tmp_path):
    calls = []
    loop = make_loop(
        tmp_path,
        schedule=ScheduleConfig(steps=3, checkpoint_every=2, samples_every=None),
        on_checkpoint=lambda dp: calls.append(dp.state.step),
    )
    loop.run()
    assert loop.state.step == 3 and calls == [2, 3]


def test_derive_seed_is_stable_across_processes():
    assert derive_seed(0, 5, "solver") == derive_seed(0, 5, "solver")
    assert derive_seed(0, 5, "solver") != derive_seed(0, 5, "proposer")
    assert derive_seed(1, 2, "x") == 665542637


def test_schedule_validation_names_the_field():
    with pytest.raises(ConfigError, match="schedule.mode"):
        ScheduleConfig(mode="both").validate()
    with pytest.raises(ConfigError, match="buffer_max_size"):
        ScheduleConfig(buffer_eviction="fifo").validate()


WRONG_LABEL_PROPOSALS = [*PROPOSALS[:3], "<problem>What is 4+4?</problem><answer>\\boxed{9}</answer>"]


@pytest.mark.parametrize("check", [False, True])
def test_label_accuracy_is_measured_before_the_check_and_the_check_rejects_wrong_labels(tmp_path, check):
    from pasodoble.domains.labels import LabelConfig

    loop = make_loop(tmp_path, labels=LabelConfig(check=check))
    loop.proposer.engine.script = lambda prompt, j: WRONG_LABEL_PROPOSALS[j % 4]
    row = loop.online_step()
    # three valid proposals, all checkable; 1+1=2 and 3+3=6 right, 4+4=9 wrong: measured with the check on or off
    assert row["proposer/label/checkable"] == 1.0
    assert row["proposer/label/correct"] == pytest.approx(2 / 3)
    assert row["proposer/operands/2"] == 1.0
    assert row["proposer/valid/fraction"] == (0.5 if check else 0.75)
    assert row.get("proposer/invalid/wrong_label") == (1.0 if check else None)
    assert row["proposer/advantage/nonzero"] == 1.0 and row["solver/no_answer/fraction"] == 0.0
