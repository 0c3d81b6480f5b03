"""LoRA roles and a shared base (peft, HF engine, CPU): what trains, what stays frozen, checkpoints, export."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from pasodoble.errors import ConfigError, UserError
from pasodoble.roles import adapters
from pasodoble.roles.adapters import AdapterView, LoraConfig
from pasodoble.roles.role import Role, RoleConfig, Sample
from pasodoble.roles.shared_base import build_shared_roles
from pasodoble.runs.export import export_role
from tests.loop_helpers import save_tiny

LORA = LoraConfig(rank=4, alpha=8.0, target_modules=["q_proj", "v_proj", "up_proj"])


def role_cfg(**kw) -> RoleConfig:
    base = dict(model="test", num_generations=3, temperature=1.0, max_completion_length=8, lr=1e-2, lora=LORA)
    return RoleConfig(**{**base, **kw})


@pytest.fixture
def base_dir(tmp_path):
    return save_tiny(tmp_path / "base", seed=0)


def sampled(role: Role, seed: int = 0):
    ids = [role.prompt_ids([{"role": "user", "content": p}]) for p in ("1+1", "2+3")]
    samples = [Sample(ids[i], c) for i, g in enumerate(role.generate(ids, seed)) for c in g]
    return samples, [(-1.0) ** k * (1 + k % 3) / 2 for k in range(len(samples))]


def base_params(view: AdapterView) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in view.peft.named_parameters() if "lora_" not in n}


def adapter_params(view: AdapterView, name: str) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in view.peft.named_parameters() if f".{name}." in n}


def changed(a: dict, b: dict) -> bool:
    return any(not torch.equal(a[k], b[k]) for k in a)


def test_lora_role_trains_its_adapter_and_leaves_the_base(base_dir):
    role = Role.from_pretrained("solver", role_cfg(), base_dir)
    assert isinstance(role.model, AdapterView)
    names = {id(p) for p in role.optimizer.param_groups[0]["params"]}
    assert names == {id(p) for p in role.model.parameters()} and len(names) > 0
    base, adapter = base_params(role.model), adapter_params(role.model, "solver")
    samples, adv = sampled(role)
    stats = role.update(samples, adv)
    assert changed(adapter, adapter_params(role.model, "solver"))
    assert not changed(base, base_params(role.model))
    assert stats["logprob_diff_max"] < 1e-4 and stats["weight_sync_s"] >= 0


def test_lora_checkpoint_holds_the_adapter_and_resumes(base_dir, tmp_path):
    role = Role.from_pretrained("solver", role_cfg(), base_dir)
    samples, adv = sampled(role)
    role.update(samples, adv)
    role.save(tmp_path / "ckpt" / "solver")
    saved = tmp_path / "ckpt" / "solver" / "model"
    assert (saved / adapters.ADAPTER_FILE).is_file() and not (saved / "model.safetensors").exists()
    fresh = Role.from_pretrained("solver", role_cfg(), base_dir)
    fresh.load_state(tmp_path / "ckpt" / "solver")
    assert not changed(adapter_params(role.model, "solver"), adapter_params(fresh.model, "solver"))
    role.update(samples, adv)
    fresh.update(samples, adv)  # same adapter and optimizer moments -> the same next step
    for (_, a), (_, b) in zip(role.model.named_parameters(), fresh.model.named_parameters()):
        assert torch.allclose(a, b, atol=1e-7)
    full = Role.from_pretrained("solver", role_cfg(lora=None), base_dir)
    with pytest.raises(UserError, match="LoRA adapter"):
        full.load_state(tmp_path / "ckpt" / "solver")


def test_export_merge_writes_a_plain_model_with_the_same_logits(base_dir, tmp_path):
    role = Role.from_pretrained("solver", role_cfg(), base_dir)
    with torch.no_grad():  # a non-trivial adapter (peft starts B at zero)
        for p in role.model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    role.save(tmp_path / "solver")
    what = export_role(tmp_path / "solver", str(base_dir), tmp_path / "out", merge=True)
    assert what == "merged LoRA model"
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    ids = torch.tensor([role.prompt_ids([{"role": "user", "content": "7+8"}])])
    role.model.eval()
    with torch.no_grad():
        torch.testing.assert_close(
            merged(input_ids=ids).logits, role.model(input_ids=ids).logits, atol=1e-5, rtol=0
        )
    plain = AutoModelForCausalLM.from_pretrained(base_dir).eval()
    with torch.no_grad():
        assert not torch.allclose(plain(input_ids=ids).logits, merged(input_ids=ids).logits, atol=1e-3)


def test_shared_base_holds_one_base_and_updates_touch_one_adapter(base_dir):
    proposer, solver = build_shared_roles(role_cfg(), role_cfg(), str(base_dir), updates=(4, 4))
    assert proposer.model.peft is solver.model.peft  # one frozen base in memory
    assert {id(p) for p in proposer.model.parameters()}.isdisjoint({id(p) for p in solver.model.parameters()})
    base = base_params(proposer.model)
    p_before, s_before = adapter_params(proposer.model, "proposer"), adapter_params(solver.model, "solver")
    samples, adv = sampled(proposer)
    proposer.update(samples, adv)
    assert changed(p_before, adapter_params(proposer.model, "proposer"))
    assert not changed(s_before, adapter_params(solver.model, "solver"))
    assert not changed(base, base_params(proposer.model))
    p_after = adapter_params(proposer.model, "proposer")
    samples, adv = sampled(solver, seed=1)  # the Solver samples and trains with its own adapter
    solver.update(samples, adv)
    assert changed(s_before, adapter_params(solver.model, "solver"))
    assert not changed(p_after, adapter_params(proposer.model, "proposer"))


def test_shared_base_needs_both_adapters(base_dir):
    with pytest.raises(ConfigError, match="roles.shared_base"):
        build_shared_roles(role_cfg(), role_cfg(lora=None), str(base_dir), updates=(1, 1))
