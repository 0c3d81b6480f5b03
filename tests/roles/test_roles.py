"""Role: prompt ids, batch layout, GRPO update with micro-batches, reference model, save/restore."""

from __future__ import annotations

import pytest
import torch

from pasodoble.errors import ConfigError
from pasodoble.roles.role import Role, RoleConfig, Sample, collate
from pasodoble.rollout import Completion
from tests.loop_helpers import make_model, make_tokenizer


def make_role(seed: int = 0, **overrides) -> Role:
    tokenizer = make_tokenizer()
    cfg = RoleConfig(
        **{
            "model": "test",
            "num_generations": 3,
            "temperature": 1.0,
            "max_completion_length": 8,
            "lr": 1e-2,
            "micro_batch_size": 4,
            **overrides,
        }
    )
    return Role("solver", cfg, make_model(tokenizer, seed=seed), tokenizer)


def params(role: Role) -> list[torch.Tensor]:
    return [p.detach().clone() for p in role.model.parameters()]


def test_prompt_ids_apply_chat_template_and_keep_the_end():
    role = make_role(max_prompt_length=12)
    ids = role.prompt_ids([{"role": "user", "content": "What is 2+3?"}])
    assert len(ids) == 12
    assert role.tokenizer.decode(ids) == "\n<|im_start|>assistant\n"
    full = make_role(max_prompt_length=512).prompt_ids([{"role": "user", "content": "What is 2+3?"}])
    assert full[-12:] == ids and role.tokenizer.decode(full).startswith("<|im_start|>user\nWhat is 2+3?")


def test_collate_places_completion_logprobs_on_their_tokens():
    s1 = Sample([5, 6, 7], Completion("ab", [8, 9], [-0.5, -0.25], "stop"))
    s2 = Sample([5], Completion("c", [10], [-1.0], "length"))
    b = collate([s1, s2], pad_id=0)
    assert b["input_ids"].tolist() == [[5, 6, 7, 8, 9], [5, 10, 0, 0, 0]]
    assert b["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    assert b["completion_mask"].tolist() == [[0, 0, 0, 1, 1], [0, 1, 0, 0, 0]]
    assert b["old_logps"].tolist() == [[0, 0, 0, -0.5, -0.25], [0, -1.0, 0, 0, 0]]
    dtypes = [b[k].dtype for k in ("input_ids", "attention_mask", "completion_mask", "old_logps")]
    assert dtypes == [torch.long, torch.long, torch.float32, torch.float32]
    empty = collate([Sample([], Completion("", [], [], "stop"))], pad_id=0)
    assert [tuple(v.shape) for v in empty.values()] == [(1, 0)] * 4


def test_collate_refuses_a_completion_with_fewer_logprobs_than_tokens():
    with pytest.raises(ValueError, match="2 tokens carries 1 log-probs"):
        collate([Sample([5], Completion("ab", [8, 9], [-0.5], "stop"))], pad_id=0)


def sampled(role: Role, prompts: list[str], seed: int = 0) -> tuple[list[Sample], list[float]]:
    ids = [role.prompt_ids([{"role": "user", "content": p}]) for p in prompts]
    groups = role.generate(ids, seed)
    samples = [Sample(ids[i], c) for i, group in enumerate(groups) for c in group]
    advantages = [(-1.0) ** k * (1 + k % 3) / 2 for k in range(len(samples))]
    return samples, advantages


def test_update_changes_weights_and_first_ratio_is_one():
    role = make_role()
    samples, adv = sampled(role, ["1+1", "2+2"])
    before = params(role)
    stats = role.update(samples, adv)
    assert any(not torch.equal(a, b) for a, b in zip(before, role.model.parameters()))
    assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-4)  # on-policy: engine log-probs = fresh ones
    assert stats["clip_fraction"] == 0.0 and stats["grad_norm"] > 0 and stats["samples"] == 6
    assert role.updates == 1 and stats["lr"] == pytest.approx(1e-2)


@pytest.mark.parametrize("loss_type", ["dr_grpo", "grpo", "dapo"])
def test_micro_batches_accumulate_to_the_full_batch_step(loss_type):
    big = make_role(micro_batch_size=6, loss_type=loss_type, max_grad_norm=None)
    small = make_role(micro_batch_size=1, loss_type=loss_type, max_grad_norm=None)
    samples, adv = sampled(big, ["1+1", "2+2"])
    sa, sb = big.update(samples, adv), small.update(samples, adv)
    assert sa["loss"] == pytest.approx(sb["loss"], abs=1e-6)
    # the same gradient (Adam's first step is ~lr * sign(g), too sensitive to float noise to compare weights)
    assert sa["grad_norm"] == pytest.approx(sb["grad_norm"], rel=1e-4)


def test_num_iterations_takes_that_many_steps_against_the_generating_policy():
    once, twice = make_role(), make_role(num_iterations=2)
    samples, adv = sampled(once, ["1+1", "2+2"])  # same seed: both roles start from the same weights
    first, second = once.update(samples, adv), once.update(samples, adv)
    both = twice.update(samples, adv)
    assert twice.updates == 2 and second["ratio_mean"] != pytest.approx(1.0, abs=1e-4)  # the policy moved
    assert both["ratio_mean"] == pytest.approx((first["ratio_mean"] + second["ratio_mean"]) / 2, abs=1e-6)
    # Adam at lr 1e-2 moves an entry whose gradient is float noise by up to ~lr: the paths agree to ~5e-5 here
    for a, b in zip(once.model.parameters(), twice.model.parameters()):
        assert torch.allclose(a, b, atol=2e-4)


def test_frozen_role_cannot_update_and_has_no_optimizer():
    role = make_role(trainable=False)
    samples, adv = sampled(role, ["1+1"])
    assert role.optimizer is None
    with pytest.raises(RuntimeError, match="frozen"):
        role.update(samples, adv)


def test_reference_model_only_with_kl_and_reports_kl():
    assert make_role().reference is None
    role = make_role(beta=0.1)
    assert role.reference is not None and not any(p.requires_grad for p in role.reference.parameters())
    samples, adv = sampled(role, ["1+1"])
    role.update(samples, adv)
    stats = role.update(samples, adv)  # second step: policy moved away from the reference
    assert stats["kl"] > 0


def test_save_and_load_state_restore_weights_optimizer_and_counter(tmp_path):
    role = make_role()
    samples, adv = sampled(role, ["1+1", "3+4"])
    role.update(samples, adv)
    role.save(tmp_path / "solver")
    fresh = make_role()
    fresh.load_state(tmp_path / "solver")
    for a, b in zip(role.model.parameters(), fresh.model.parameters()):
        assert torch.equal(a, b)
    assert fresh.updates == 1
    role.update(samples, adv)
    fresh.update(samples, adv)  # identical optimizer moments -> identical second step
    for a, b in zip(role.model.parameters(), fresh.model.parameters()):
        assert torch.equal(a, b)
    assert (tmp_path / "solver" / "model" / "config.json").exists()


def test_role_config_validation_names_the_field():
    with pytest.raises(ConfigError, match="loss_type"):
        RoleConfig(loss_type="ppo").validate()
    with pytest.raises(ConfigError, match="num_generations"):
        RoleConfig(num_generations=0).validate()
    with pytest.raises(ConfigError, match="dtype"):
        RoleConfig(dtype="int8").validate()
    with pytest.raises(ConfigError, match="num_iterations"):
        RoleConfig(num_iterations=0).validate()


def test_top_k_and_min_p_are_validated_and_reach_the_engine():
    from pasodoble.config import load_config
    from pasodoble.runs.train import TrainConfig

    cfg = load_config(TrainConfig, overrides=["solver.top_k=5", "solver.min_p=0.1", "schedule.mode=oracle"])
    assert (cfg.solver.top_k, cfg.solver.min_p) == (5, 0.1)
    assert (RoleConfig().top_k, RoleConfig().min_p) == (None, None)  # off unless asked for
    for bad in ("solver.top_k=-1", "solver.top_k=2.5", "solver.min_p=1.0", "solver.min_p=-0.5"):
        with pytest.raises(ConfigError, match=bad.split("=")[0]):
            load_config(TrainConfig, overrides=[bad, "schedule.mode=oracle"])
    role = make_role(top_k=5, min_p=0.1)
    sampling = role.sampling(seed=0)
    assert (sampling.top_k, sampling.min_p) == (5, 0.1)


def test_truncated_importance_sampling_is_a_no_op_when_engine_and_trainer_agree():
    plain, tis = make_role(), make_role(tis_cap=2.0)
    samples, adv = sampled(plain, ["1+1", "2+2"])
    a, b = plain.update(samples, adv), tis.update(samples, adv)
    assert a["logprob_diff_max"] < 1e-4 and b["logprob_diff_max"] < 1e-4
    assert a["loss"] == pytest.approx(b["loss"], abs=1e-5)
    assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-3)
    with pytest.raises(ConfigError, match="tis_cap"):
        RoleConfig(tis_cap=0.0).validate()
