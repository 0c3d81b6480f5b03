"""What changes on a CUDA machine, tested here without one: AdamW fused only when every parameter is on CUDA (the
allocator's CPU-only rule is tested in tests/accel/test_allocator.py)."""

from __future__ import annotations

from types import SimpleNamespace

from pasodoble.roles.role import adamw_options
from tests.loop_helpers import make_model, make_tokenizer


def test_adamw_is_fused_on_cuda_parameters_only():
    on_cuda = [SimpleNamespace(is_cuda=True)] * 2
    assert adamw_options(on_cuda) == {"fused": True}
    assert adamw_options([SimpleNamespace(is_cuda=True), SimpleNamespace(is_cuda=False)]) == {}
    assert adamw_options([]) == {}


def test_a_cpu_role_keeps_torchs_default_adamw():
    from pasodoble.roles.role import Role, RoleConfig

    tokenizer = make_tokenizer()
    role = Role("solver", RoleConfig(model="test"), make_model(tokenizer), tokenizer)
    assert not role.optimizer.defaults.get("fused")
