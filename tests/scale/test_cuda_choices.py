"""What changes on a CUDA machine, tested here without one: AdamW fused only when every parameter is on CUDA, and
the CLI's allocator relaunch leaving a CUDA run (and the vLLM/NCCL processes it starts) on their own allocators."""

from __future__ import annotations

from types import SimpleNamespace

from pasodoble import allocator
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


def installed(path: str = "libtcmalloc_minimal.so.4"):
    return lambda name: path if name == "tcmalloc" else None


def test_auto_never_preloads_tcmalloc_into_a_cuda_run():
    assert allocator.launch_env("auto", {}, installed(), cuda=True) is None
    assert (
        allocator.launch_env("auto", {}, installed(), cuda=False)["LD_PRELOAD"] == "libtcmalloc_minimal.so.4"
    )
    asked = allocator.launch_env("tcmalloc", {}, installed(), cuda=True)  # named: the user's choice stands
    assert asked is not None and asked["LD_PRELOAD"] == "libtcmalloc_minimal.so.4"


def test_a_cuda_machine_is_a_loaded_driver_with_a_visible_gpu(tmp_path):
    driver = tmp_path / "version"
    assert not allocator.sees_cuda({}, driver)
    driver.write_text("NVRM version: 570")
    assert allocator.sees_cuda({}, driver) and allocator.sees_cuda({"CUDA_VISIBLE_DEVICES": "0,1"}, driver)
    assert not allocator.sees_cuda({"CUDA_VISIBLE_DEVICES": ""}, driver)
    assert not allocator.sees_cuda({"CUDA_VISIBLE_DEVICES": "-1"}, driver)
