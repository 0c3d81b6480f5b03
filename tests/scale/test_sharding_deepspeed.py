"""DeepSpeed ZeRO behind `Role`: the refusals (default suite) and, on a one-rank gloo group in this process, ZeRO-1,
2 and 3 roles that train, checkpoint and load as an unsharded one, and ZeRO-3's once-per-phase gather
(`distributed`: it needs the deepspeed extra).
Several ranks run in tests/scale/test_train_deepspeed.py.
"""

from __future__ import annotations

import sys

import pytest
import torch

from pasodoble.errors import ConfigError
from pasodoble.roles.role import RoleConfig
from pasodoble.scale.sharding import check_roles
from pasodoble.scale.sharding.deepspeed import engine_config, import_deepspeed
from tests.roles.test_roles import sampled
from tests.scale.test_sharding import one_rank_group, role_with  # noqa: F401 (a fixture)
from tests.worlds import BUILD_BUDGET_S

# CPU Adam compiles on first use unless `make deepspeed-env` built it: the two tests that step it get the build budget
COMPILES = pytest.mark.timeout(BUILD_BUDGET_S)


def test_zero3_on_several_ranks_is_accepted_and_its_refusals_remain():
    check_roles("deepspeed", 2, {"solver": RoleConfig()})  # ZeRO-3 included: phases gather once (gathered())
    with pytest.raises(ConfigError, match=r"^solver.dtype: float16 with distributed.backend=deepspeed"):
        check_roles("deepspeed", 2, {"solver": RoleConfig(dtype="float16")})
    with pytest.raises(ConfigError, match=r"^solver.lora: LoRA with distributed.backend=deepspeed on 2"):
        check_roles("deepspeed", 2, {"solver": RoleConfig(lora={"rank": 8})})


def test_float16_roles_are_refused_under_deepspeed_and_bfloat16_is_not():
    with pytest.raises(
        ConfigError, match=r"^proposer.dtype: float16 with distributed.backend=deepspeed .* bfloat16"
    ):
        check_roles("deepspeed", 2, {"proposer": RoleConfig(dtype="float16")})
    check_roles("deepspeed", 2, {"proposer": RoleConfig(dtype="float16", trainable=False)})  # never wrapped
    check_roles("deepspeed", 2, {"proposer": RoleConfig(dtype="bfloat16", engine="vllm")})  # full weights
    check_roles("ddp", 2, {"proposer": RoleConfig(dtype="float16")})


def test_lora_is_refused_under_deepspeed_on_several_ranks():
    with pytest.raises(
        ConfigError, match=r"^solver.lora: LoRA with distributed.backend=deepspeed on 2 ranks"
    ):
        check_roles("deepspeed", 2, {"solver": RoleConfig(lora={"rank": 8})})
    check_roles("deepspeed", 2, {"solver": RoleConfig(lora={"rank": 8}, trainable=False)})
    check_roles("ddp", 2, {"proposer": RoleConfig(dtype="float16")})


def test_a_missing_deepspeed_install_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "deepspeed", None)  # import deepspeed raises ImportError
    with pytest.raises(
        ConfigError, match=r"^distributed.backend: deepspeed is not installed .*pasodoble\[deepspeed\]"
    ):
        import_deepspeed()


def test_a_bfloat16_role_gets_deepspeed_s_bf16_section_with_float32_reduction():
    cfg = engine_config(2, False, 1.0, bf16=True)
    assert cfg["bf16"] == {"enabled": True} and cfg["communication_data_type"] == "fp32"
    assert cfg["data_types"] == {"grad_accum_dtype": "fp32"}
    assert not {"bf16", "communication_data_type", "data_types"} & engine_config(2, False, 1.0).keys()


def test_engine_config_carries_clipping_accumulation_and_offload():
    cfg = engine_config(2, True, 1.0)
    assert (
        cfg["zero_force_ds_cpu_optimizer"] and not engine_config(2, False, 1.0)["zero_force_ds_cpu_optimizer"]
    )
    assert cfg["zero_optimization"] == {"stage": 2, "offload_optimizer": {"device": "cpu"}}
    assert cfg["gradient_clipping"] == 1.0 and cfg["gradient_accumulation_steps"] == 1
    assert engine_config(1, False, None)["gradient_clipping"] == 0.0  # DeepSpeed's "off"
    assert "offload_optimizer" not in engine_config(1, False, None)["zero_optimization"]
    assert engine_config(3, False, None)["zero_optimization"]["stage3_param_persistence_threshold"] == 0


@pytest.fixture
def zero(one_rank_group, monkeypatch):  # noqa: F811
    """`DeepSpeedZero` on the one-rank group (LOCAL_RANK: what a launcher sets)."""
    pytest.importorskip("deepspeed", reason="the deepspeed extra is not installed (make deepspeed-env)")
    from pasodoble.scale.sharding.deepspeed import DeepSpeedZero

    monkeypatch.setenv("LOCAL_RANK", "0")
    return DeepSpeedZero


def max_diff(a: dict, b: dict) -> float:
    return max((a[k] - v).abs().max().item() for k, v in b.items())


@pytest.mark.distributed
@COMPILES
def test_cpu_adam_steps_as_torch_s_adamw_and_follows_its_scheduler():
    """The offloaded optimizer: DeepSpeed's compiled CPU Adam on torch's parameter groups (compiled on first use)."""
    pytest.importorskip("deepspeed", reason="the deepspeed extra is not installed (make deepspeed-env)")
    import_deepspeed()
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    from pasodoble.scale.sharding.deepspeed import cpu_adam

    torch.manual_seed(0)
    a, b = (torch.nn.Parameter(torch.randn(300)) for _ in range(2))
    b.data.copy_(a.data)
    plain = torch.optim.AdamW([a], lr=1e-2, weight_decay=0.1)
    torch_s = torch.optim.AdamW([b], lr=1e-2, weight_decay=0.1)
    adam = cpu_adam(torch_s)
    assert isinstance(adam, DeepSpeedCPUAdam)
    for step in range(3):
        grad = torch.randn(300)
        a.grad, b.grad = grad.clone(), grad.clone()
        plain.step(), adam.step()
        for opt in (plain, torch_s):  # what the role's scheduler, built on torch's optimizer, does
            opt.param_groups[0]["lr"] = 1e-2 * 0.5 ** (step + 1)
        assert adam.param_groups[0]["lr"] == plain.param_groups[0]["lr"]
    assert torch.allclose(a, b, atol=1e-6) and not torch.equal(a, torch.zeros(300))
    assert adam.state[b]["step"] == 3


@pytest.mark.distributed
@COMPILES
def test_a_zero_role_trains_saves_and_loads_as_an_unsharded_one(zero, tmp_path):
    """ZeRO-2, ZeRO-1 with the optimizer offloaded, and ZeRO-3 (with and without), in one process group (DeepSpeed keeps the group it first
    saw for the life of the process); then bfloat16 roles, DeepSpeed's bf16 engines."""
    for stage, offload in [(2, False), (1, True), (3, False), (3, True)]:
        trains_saves_and_loads(zero, tmp_path / f"zero{stage}{offload}", stage, offload, "float32")
    zero3_gathers_once_per_phase(zero)
    for stage, offload in [(1, False), (2, False), (3, False), (2, True)]:
        bf16_engine_trains_and_resumes_from_float32_masters(
            zero, tmp_path / f"bf16{stage}{offload}", stage, offload
        )


def bf16_engine_trains_and_resumes_from_float32_masters(zero, tmp_path, stage, offload):
    """A bfloat16 role under DeepSpeed is DeepSpeed's bf16 engine (the module in bfloat16, float32 masters), not
    autocast over a float32 engine: it takes the plain autocast role's steps up to bfloat16 rounding, and its
    checkpoint holds the float32 masters, which a fresh engine resumes from exactly."""
    ds, plain = (
        role_with(s, dtype="bfloat16") for s in (zero(1, zero_stage=stage, offload_optimizer=offload), None)
    )
    assert ds.train_model.bfloat16_enabled()
    assert all(p.dtype == torch.bfloat16 for p in ds.model.parameters())
    start = {k: v.clone() for k, v in plain.model.state_dict().items()}
    samples, advantages = sampled(plain, ["a", "bb"], seed=0)
    a, b = ds.update(samples, advantages), plain.update(samples, advantages)
    # the module's own norms and residual stream run in bfloat16 where autocast keeps them in float32
    assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=5e-2) and a["grad_norm"] > 0
    masters = ds.full_state()["model"]
    assert all(v.dtype == torch.float32 for v in masters.values())
    assert any(
        not torch.equal(v, v.bfloat16().float()) for v in masters.values()
    )  # more than the module holds
    # AdamW's first step moves each weight by about lr in its gradient's sign: the same direction as the plain role
    moved = [(masters[k] - w).sign() == (plain.model.state_dict()[k] - w).sign() for k, w in start.items()]
    assert torch.cat([m.flatten() for m in moved]).float().mean() > 0.9
    ds.save(tmp_path, ds.full_state())
    fresh = role_with(zero(1, zero_stage=stage, offload_optimizer=offload), dtype="bfloat16")
    fresh.load_state(tmp_path)
    assert max_diff(fresh.full_state()["model"], masters) == 0
    samples, advantages = sampled(plain, ["c"], seed=1)
    ds.update(samples, advantages), fresh.update(samples, advantages)
    assert max_diff(fresh.full_state()["model"], ds.full_state()["model"]) == 0


def zero3_gathers_once_per_phase(zero):
    """Between phases a ZeRO-3 module's parameters are empty (partitioned); inside `gathered` they are full,
    ZeRO-3's hooks are off (no forward communicates) and the module computes what the plain one does; nested
    entries gather once, and the weights read inside and outside a phase are the same."""
    ds, plain = role_with(zero(1, zero_stage=3)), role_with(None)
    offload = ds.train_model.optimizer.parameter_offload
    assert all(p.numel() == 0 for p in ds.model.parameters()) and offload.forward_hooks
    ids = torch.tensor([[1, 2, 3, 4]])
    with ds.gathered():
        with ds.gathered():
            assert not offload.forward_hooks and not offload.backward_hooks
            logits = ds.model(ids).logits
        assert all(p.numel() > 0 for p in ds.model.parameters())
        inside = ds.weights()
    assert all(p.numel() == 0 for p in ds.model.parameters()) and offload.forward_hooks
    assert torch.equal(logits, plain.model(ids).logits)
    assert max_diff(ds.weights(), inside) == 0 and max_diff(inside, plain.model.state_dict()) == 0
    samples, advantages = sampled(plain, ["a", "bb"], seed=0)
    a, b = ds.update(samples, advantages), plain.update(samples, advantages)  # the hooks train again
    assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-5) and a["grad_norm"] > 0


def trains_saves_and_loads(zero, tmp_path, stage, offload, dtype):
    ds = role_with(zero(1, zero_stage=stage, offload_optimizer=offload), num_iterations=2, dtype=dtype)
    plain = role_with(None, num_iterations=2, dtype=dtype)
    assert (type(ds.train_model.optimizer.optimizer).__name__ == "DeepSpeedCPUAdam") == offload
    before = ds.full_state()  # no step yet: the hyperparameters only, as torch's own state dict
    assert before["optimizer"] == {**plain.optimizer.state_dict(), "state": {}}
    for step in range(2):
        samples, advantages = sampled(plain, ["a", "bb"], seed=step)
        a, b = ds.update(samples, advantages), plain.update(samples, advantages)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-5) and a["grad_norm"] > 0
    # ZeRO sums the tied embedding/LM-head gradient in another order than the plain role (which adds the
    # embedding's rows in place) and ZeRO-3's hooked head keeps the stock log-prob expression where the plain role
    # fuses it (update/fused_head.py, as accurate against float64); an lr-1e-2 AdamW step turns the rounding of a ~0
    # gradient into a step of up to lr: measured 3.1e-5 after two steps at ZeRO-2, float32, 1.2e-6 before the fusion
    tolerance = 5e-5
    assert max_diff(ds.weights(), plain.model.state_dict()) <= tolerance
    ds.save(tmp_path / "ds", ds.full_state())
    plain.save(tmp_path / "plain")
    ta, tb = (torch.load(tmp_path / d / "trainer_state.pt", weights_only=True) for d in ("ds", "plain"))
    assert ta["optimizer"]["param_groups"] == tb["optimizer"]["param_groups"]
    assert ta["optimizer"]["state"].keys() == tb["optimizer"]["state"].keys()
    for i, state in tb["optimizer"]["state"].items():
        assert torch.equal(ta["optimizer"]["state"][i]["step"], state["step"])
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.allclose(ta["optimizer"]["state"][i][key], state[key], atol=1e-6)
    samples, advantages = sampled(plain, ["c"], seed=5)
    plain.update(samples, advantages)
    for source in ("plain", "ds"):  # either checkpoint into a fresh engine, which has no AdamW state yet
        fresh = role_with(zero(1, zero_stage=stage, offload_optimizer=offload), num_iterations=2, dtype=dtype)
        fresh.load_state(tmp_path / source)
        assert fresh.updates == 4
        loaded = fresh.full_state()["optimizer"]["state"]  # gathered again after a load, before any step
        assert all(
            torch.allclose(loaded[i]["exp_avg_sq"], s["exp_avg_sq"])
            for i, s in tb["optimizer"]["state"].items()
        )
        fresh.update(
            samples, advantages
        )  # the loaded master weights and moments take the step, not stale ones
        assert max_diff(fresh.weights(), plain.model.state_dict()) <= tolerance
