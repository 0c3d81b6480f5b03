"""The sharding backends behind `Role`: refusals, and FSDP2's phase lifecycle and full state dicts on one rank.

`FullyShard` is exercised here in this process on a one-rank gloo group (fully_shard, DTensor parameters, the
gather/reshard lifecycle, gathered state dicts and their loading); several ranks run in tests/scale/test_distributed.py
and tests/scale/test_train_fsdp2.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from safetensors.torch import load_file

from pasodoble.errors import ConfigError
from pasodoble.roles.role import Role, RoleConfig
from pasodoble.rollout.weights import write_weights
from pasodoble.scale.sharding import check_roles
from pasodoble.scale.sharding.base import _by_index, _by_name, _tie
from pasodoble.scale.sharding.fsdp2 import FullyShard
from tests.loop_helpers import make_model, make_tokenizer
from tests.roles.test_roles import sampled
from tests.scale.test_distributed import free_port


def test_fsdp2_refuses_lora_on_several_ranks_and_takes_vllm_engines():
    check_roles("fsdp2", 2, {"solver": RoleConfig(engine="vllm")})  # synced from gathered full weights
    lora = RoleConfig(lora={"rank": 8})
    with pytest.raises(ConfigError, match=r"^proposer.lora: LoRA with distributed.backend=fsdp2"):
        check_roles("fsdp2", 2, {"proposer": lora})
    check_roles("fsdp2", 1, {"solver": RoleConfig(engine="vllm")})  # one rank: nothing is sharded
    check_roles("ddp", 2, {"solver": RoleConfig(engine="vllm")})
    check_roles("fsdp2", 2, {"solver": RoleConfig(engine="vllm", trainable=False)})  # never sharded


def test_optimizer_state_by_name_and_by_index_round_trip():
    by_name = {
        "state": {"b.weight": {"step": torch.tensor(2.0)}, "a.weight": {"step": torch.tensor(1.0)}},
        "param_groups": [{"lr": 0.1, "betas": (0.9, 0.99), "params": ["a.weight", "b.weight"]}],
    }
    by_index = _by_index(by_name)
    assert by_index["param_groups"] == [{"lr": 0.1, "betas": (0.9, 0.99), "params": [0, 1]}]
    assert by_index["state"][1]["step"] == 2.0 and by_index["state"][0]["step"] == 1.0
    assert _by_name(by_index, ["a.weight", "b.weight"]) == by_name
    assert _by_index({}) == {}  # a rank that received nothing (cpu_offload: rank 0 only)


def test_tied_weights_are_aliased_again_so_save_pretrained_writes_them_once(tmp_path):
    tokenizer = make_tokenizer()
    model = make_model(tokenizer)
    gathered = {
        k: v.clone() for k, v in model.state_dict().items()
    }  # what gathering returns: separate copies
    tied = _tie(model, gathered)
    assert tied["lm_head.weight"] is tied["model.embed_tokens.weight"]
    model.save_pretrained(tmp_path / "gathered", state_dict=tied)
    model.save_pretrained(tmp_path / "live")
    a, b = (load_file(tmp_path / d / "model.safetensors") for d in ("gathered", "live"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture
def one_rank_group():
    """A one-rank gloo process group in this process (torch's FSDP2 needs a device mesh)."""
    if dist.is_initialized():
        pytest.skip("a process group already exists in this process")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def role_with(sharding, **overrides) -> Role:
    tokenizer = make_tokenizer()
    cfg = RoleConfig(
        model="test", num_generations=3, temperature=1.0, max_completion_length=8, lr=1e-2, micro_batch_size=2
    )
    # Sharded roles never share a prompt's prefill in the update (update.shared_prefix), so the plain role they are
    # compared with runs the same per-sample forward; prompt sharing has its own tests.
    cfg.share_prompt_prefill = False
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return Role("solver", cfg, make_model(tokenizer), tokenizer, sharding=sharding)


def test_fully_shard_role_trains_saves_and_loads_as_an_unsharded_one(one_rank_group, tmp_path):
    sharded, plain = role_with(FullyShard(1), num_iterations=2), role_with(None, num_iterations=2)
    assert any(hasattr(p, "full_tensor") for p in sharded.model.parameters())  # DTensor shards
    for step in range(2):
        samples, advantages = sampled(plain, ["a", "bb"], seed=step)
        with sharded.gathered():  # a phase: the registered parameters are the gathered plain tensors
            assert not any(hasattr(p, "full_tensor") for p in sharded.model.parameters())
        a, b = sharded.update(samples, advantages), plain.update(samples, advantages)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-5) and a["grad_norm"] > 0
    assert any(hasattr(p, "full_tensor") for p in sharded.model.parameters())  # resharded after the phase
    weights = sharded.weights()
    assert all(torch.allclose(weights[k], v, atol=1e-6) for k, v in plain.model.state_dict().items())
    sharded.save(tmp_path / "sharded", sharded.full_state())
    plain.save(tmp_path / "plain")
    ta, tb = (torch.load(tmp_path / d / "trainer_state.pt", weights_only=True) for d in ("sharded", "plain"))
    assert ta["optimizer"]["param_groups"] == tb["optimizer"]["param_groups"]
    for i, state in tb["optimizer"]["state"].items():
        assert torch.allclose(ta["optimizer"]["state"][i]["exp_avg"], state["exp_avg"], atol=1e-6)
    fresh = role_with(FullyShard(1), num_iterations=2)
    fresh.load_state(tmp_path / "plain")  # an unsharded checkpoint into shards
    assert fresh.updates == plain.updates
    assert all(torch.equal(fresh.weights()[k], v) for k, v in plain.model.state_dict().items())
    samples, advantages = sampled(plain, ["c"], seed=5)
    fresh.update(samples, advantages), plain.update(samples, advantages)  # same Adam moments: same step
    assert all(torch.allclose(fresh.weights()[k], v, atol=1e-6) for k, v in plain.model.state_dict().items())


def test_fsdp2_offload_on_a_cpu_only_machine_trains_in_place(one_rank_group):
    """`distributed.offload_optimizer` asks FSDP2 to keep the shards in CPU memory: on CPU they are already there
    (torch's CPUOffloadPolicy would ask for an accelerator and fail)."""
    role = role_with(FullyShard(1, offload=True))
    samples, advantages = sampled(role_with(None), ["a"], seed=0)
    assert role.update(samples, advantages)["grad_norm"] > 0


class CopyingEngine:
    """Records what a weight-copying engine (vLLM's kind) is handed after each update, as files it would load."""

    copies_weights = True

    def __init__(self, folder):
        self.folder, self.synced = folder, 0

    def update_weights(self, model) -> None:
        self.synced += 1
        write_weights(model, self.folder / f"v{self.synced}")


def test_a_weight_copying_engine_gets_the_full_weights_of_a_sharded_role(one_rank_group, tmp_path):
    sharded, plain = role_with(FullyShard(1)), role_with(None)
    sharded.engine = engine = CopyingEngine(tmp_path)
    samples, advantages = sampled(plain, ["a", "bb"], seed=0)
    sharded.update(samples, advantages), plain.update(samples, advantages)
    written = load_file(tmp_path / "v1" / "model.safetensors")
    live = plain.model.state_dict()
    assert "lm_head.weight" not in written  # tied to the embedding: written once, as save_pretrained does
    assert set(written) == set(live) - {"lm_head.weight"}
    assert engine.synced == 1 and all(torch.allclose(written[k], live[k], atol=1e-6) for k in written)
    assert not torch.equal(
        written["model.embed_tokens.weight"],
        make_model(make_tokenizer()).state_dict()["model.embed_tokens.weight"],
    )


def test_weights_are_written_on_a_rank_other_than_0(tmp_path):
    """transformers' save_pretrained writes nothing there once torch.distributed is initialised."""
    if dist.is_initialized():
        pytest.skip("a process group already exists in this process")
    from unittest import mock

    model = make_model(make_tokenizer())
    with mock.patch("transformers.distributed.mixin._is_torch_distributed_initialized", return_value=True), \
         mock.patch("transformers.distributed.mixin._get_torch_distributed_rank", return_value=1):  # fmt: skip
        model.save_pretrained(tmp_path / "hf")
        write_weights(model, tmp_path / "ours")
    assert not (tmp_path / "hf" / "model.safetensors").exists()  # the pitfall this module avoids
    assert set(load_file(tmp_path / "ours" / "model.safetensors")) == set(model.state_dict()) - {
        "lm_head.weight"
    }


def test_the_reference_model_is_sharded_and_the_kl_update_matches(one_rank_group):
    sharded, plain = role_with(FullyShard(1), beta=0.1), role_with(None, beta=0.1)
    assert all(hasattr(p, "full_tensor") for p in sharded.reference.parameters())  # DTensor shards
    assert not any(hasattr(p, "full_tensor") for p in plain.reference.parameters())
    for step in range(2):  # the second update has a policy away from the reference: a non-zero KL term
        samples, advantages = sampled(plain, ["a", "bb"], seed=step)
        a, b = sharded.update(samples, advantages), plain.update(samples, advantages)
        assert a["kl"] == pytest.approx(b["kl"], rel=1e-4, abs=1e-9)
    assert b["kl"] > 0
    weights = sharded.weights()
    assert all(torch.allclose(weights[k], v, atol=1e-6) for k, v in plain.model.state_dict().items())
