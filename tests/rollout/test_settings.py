"""Engine settings: each impossible vLLM setting is one ConfigError line naming the field, before anything loads."""

from __future__ import annotations

import json

import pytest

from pasodoble.core.step_metrics import role_update_metrics, rollout_totals
from pasodoble.errors import ConfigError
from pasodoble.roles.role import RoleConfig
from pasodoble.rollout import settings
from pasodoble.rollout.settings import VLLMConfig, validate_engine


def model_dir(tmp_path, heads=4, kv=2, head_dim=32):
    (tmp_path / "config.json").write_text(
        json.dumps({"num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": head_dim})
    )
    return tmp_path


@pytest.fixture
def with_vllm(monkeypatch):
    monkeypatch.setattr(settings, "vllm_available", lambda: True)


def test_engine_vllm_without_vllm_says_how_to_install(monkeypatch):
    monkeypatch.setattr(settings, "vllm_available", lambda: False)
    with pytest.raises(ConfigError, match=r"engine=vllm needs the vllm package.*make vllm-env"):
        validate_engine("vllm", VLLMConfig())
    with pytest.raises(ConfigError, match="engine"):
        RoleConfig(engine="vllm").check_machine()
    validate_engine("vllm_server", VLLMConfig(server_url="http://127.0.0.1:8000"))  # a given server: fine
    with pytest.raises(ConfigError, match="unknown 'sglang'"):
        validate_engine("sglang", VLLMConfig())


def test_tensor_parallel_must_divide_the_heads(tmp_path, with_vllm):
    d = model_dir(tmp_path, heads=4, kv=2)
    validate_engine("vllm", VLLMConfig(tensor_parallel_size=2), model_dir=d, on_cpu=False)
    with pytest.raises(
        ConfigError, match=r"vllm.tensor_parallel_size: 3 does not divide .* 4 attention heads"
    ):
        validate_engine("vllm", VLLMConfig(tensor_parallel_size=3), model_dir=d, on_cpu=False)
    with pytest.raises(ConfigError, match="vllm.tensor_parallel_size"):
        RoleConfig(model=str(d), engine="vllm", vllm=VLLMConfig(tensor_parallel_size=3)).check_machine()


def test_memory_share_lora_rank_sleep_mode_and_cpu_head_size(tmp_path, with_vllm):
    for bad in (0.0, 1.5, -0.1):
        with pytest.raises(ConfigError, match="gpu_memory_utilization"):
            VLLMConfig(gpu_memory_utilization=bad).validate()
    VLLMConfig(gpu_memory_utilization=1.0).validate()
    with pytest.raises(ConfigError, match=r"lora.rank: rank 32 is above vllm.max_lora_rank=16"):
        validate_engine("vllm", VLLMConfig(), lora_rank=32)
    with pytest.raises(ConfigError, match="sleep_mode"):
        validate_engine("vllm", VLLMConfig(sleep_mode=True), on_cpu=True)
    with pytest.raises(ConfigError, match="head_dim=24"):
        validate_engine("vllm", VLLMConfig(), model_dir=model_dir(tmp_path, head_dim=24), on_cpu=True)
    validate_engine("vllm", VLLMConfig(), model_dir=model_dir(tmp_path, head_dim=24), on_cpu=False)
    given = VLLMConfig(server_url="http://127.0.0.1:8000")  # a given server need not run on this CPU
    validate_engine("vllm_server", given, model_dir=model_dir(tmp_path, head_dim=24), on_cpu=True)


def test_cli_bad_engine_setting_is_one_line_exit_2(tmp_path, capsys, with_vllm):
    from pasodoble.cli import main

    code = main(["train", "--config", "recipes/tiny-online.yaml", "solver.vllm.gpu_memory_utilization=2"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "solver.vllm.gpu_memory_utilization" in err


def test_weight_sync_and_logprob_gap_metrics():
    row = {
        **role_update_metrics(
            "proposer", {"weight_sync_s": 0.5, "logprob_diff_mean": 0.1, "logprob_diff_max": 0.3}
        ),
        **role_update_metrics(
            "solver", {"weight_sync_s": 0.25, "logprob_diff_mean": 0.2, "logprob_diff_max": 0.2}
        ),
    }
    assert row["time/proposer/weight_sync_s"] == 0.5 and row["solver/logprob_diff/max"] == 0.2
    totals = rollout_totals(row)
    assert totals["time/weight_sync_s"] == 0.75
    assert (
        totals["rollout/logprob_diff/mean"] == pytest.approx(0.15)
        and totals["rollout/logprob_diff/max"] == 0.3
    )
    assert rollout_totals({}) == {}


def test_weight_sync_auto_resolves_by_engine_and_device():
    auto, tp2 = VLLMConfig(), VLLMConfig(tensor_parallel_size=2)
    assert settings.engine_sync(auto, "vllm_server", cuda=True) == "nccl"  # no /dev/shm: any node
    assert settings.engine_sync(auto, "vllm_server", cuda=False) == "shm"  # the CPU fallback
    assert settings.engine_sync(auto, "vllm", cuda=True) == "direct"
    assert settings.engine_sync(tp2, "vllm", cuda=True) == "shm"
    assert settings.engine_sync(auto, "vllm", cuda=False) == "shm"
    assert settings.engine_sync(VLLMConfig(weight_sync="gloo"), "vllm_server", cuda=True) == "gloo"
    assert settings.direct_sync(auto, cuda=True) and not settings.direct_sync(auto, cuda=False)


@pytest.mark.parametrize(
    ("engine", "overrides", "on_cpu", "match"),
    [
        ("vllm_server", {"weight_sync": "nccl"}, True, "nccl needs a CUDA device"),
        ("vllm_server", {"weight_sync": "direct"}, False, "direct is for engine=vllm"),
        ("vllm", {"weight_sync": "nccl"}, False, "nccl is for engine=vllm_server"),
        ("vllm", {"weight_sync": "gloo"}, True, "gloo is for engine=vllm_server"),
        (
            "vllm_server",
            {"weight_sync": "shm", "server_url": "http://10.1.2.3:8000"},
            True,
            "shm needs the server on this machine.*10.1.2.3",
        ),
    ],
)
def test_a_weight_sync_the_engine_cannot_use_is_one_config_error(with_vllm, engine, overrides, on_cpu, match):
    with pytest.raises(ConfigError, match=match) as e:
        validate_engine(engine, VLLMConfig(**overrides), on_cpu=on_cpu)
    assert e.value.where == "vllm.weight_sync"


def test_the_possible_weight_syncs_pass(with_vllm):
    validate_engine("vllm_server", VLLMConfig(weight_sync="gloo"), on_cpu=True)
    validate_engine(
        "vllm_server", VLLMConfig(weight_sync="nccl", server_url="http://10.1.2.3:8000"), on_cpu=False
    )
    validate_engine(
        "vllm_server", VLLMConfig(weight_sync="shm", server_url="http://127.0.0.1:8000"), on_cpu=True
    )
    validate_engine("vllm", VLLMConfig(weight_sync="direct"), on_cpu=False)


def test_a_transfer_without_vllm_in_the_trainer_says_how_to_install(monkeypatch):
    monkeypatch.setattr(settings, "vllm_available", lambda: False)
    given = VLLMConfig(weight_sync="gloo", server_url="http://127.0.0.1:8000")  # a given server needs no vllm
    with pytest.raises(ConfigError, match="gloo sends weights with vLLM's transfer engine.*make vllm-env"):
        validate_engine("vllm_server", given, on_cpu=True)
    validate_engine(
        "vllm_server", VLLMConfig(server_url="http://127.0.0.1:8000"), on_cpu=True
    )  # shm: no vllm


def test_cli_nccl_on_a_cpu_is_one_line_exit_2(capsys, with_vllm):
    import torch

    from pasodoble.cli import main

    if torch.cuda.is_available():
        pytest.skip("nccl is possible where CUDA is visible")

    code = main(
        [
            "train",
            "--config",
            "recipes/tiny-online.yaml",
            "solver.engine=vllm_server",
            "solver.vllm.weight_sync=nccl",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "solver.vllm.weight_sync" in err and "CUDA" in err
