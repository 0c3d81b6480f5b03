"""`engine: auto` and sleep mode's default: vLLM where CUDA and vLLM are present, else the HF loop; the HF loop on a
GPU with long completions only when asked, with one warning line; sleep on by default for a GPU engine only."""

from __future__ import annotations

import pytest
import torch

from pasodoble.roles.role import RoleConfig
from pasodoble.rollout import settings
from pasodoble.rollout.factory import build_engine, chosen_engine
from pasodoble.rollout.hf import HFEngine
from pasodoble.rollout.settings import (
    LONG_COMPLETION_TOKENS,
    VLLMConfig,
    hf_on_gpu_warning,
    resolve_engine,
    sleeps,
)


@pytest.mark.parametrize(
    ("cuda", "vllm", "expected"),
    [(True, True, "vllm"), (True, False, "hf"), (False, True, "hf"), (False, False, "hf")],
)
def test_auto_is_vllm_only_with_cuda_and_vllm(cuda, vllm, expected):
    assert resolve_engine("auto", cuda=cuda, vllm=vllm) == expected


@pytest.mark.parametrize("named", ["hf", "vllm", "vllm_server"])
def test_a_named_engine_is_kept_whatever_the_machine(named):
    assert resolve_engine(named, cuda=True, vllm=True) == named
    assert resolve_engine(named, cuda=False, vllm=False) == named


def test_the_role_default_is_auto():
    assert RoleConfig().engine == "auto"


def test_hf_on_a_gpu_warns_in_one_line_for_long_completions_only():
    line = hf_on_gpu_warning("hf", cuda=True, max_completion_length=6144, role="solver")
    assert line is not None and "\n" not in line and "solver.engine=auto" in line
    assert (
        hf_on_gpu_warning("hf", cuda=True, max_completion_length=LONG_COMPLETION_TOKENS - 1, role="s") is None
    )
    assert hf_on_gpu_warning("hf", cuda=False, max_completion_length=6144, role="s") is None
    assert hf_on_gpu_warning("auto", cuda=True, max_completion_length=6144, role="s") is None
    assert hf_on_gpu_warning("vllm", cuda=True, max_completion_length=6144, role="s") is None


def test_sleep_mode_defaults_on_for_a_gpu_engine_and_obeys_a_setting():
    assert sleeps(VLLMConfig(), cuda=True) and not sleeps(VLLMConfig(), cuda=False)
    assert not sleeps(VLLMConfig(sleep_mode=False), cuda=True)
    assert sleeps(VLLMConfig(sleep_mode=True), cuda=True)


def test_sleep_mode_asked_for_on_a_cpu_is_one_config_error():
    from pasodoble.errors import ConfigError

    settings.validate_engine("hf", VLLMConfig(sleep_mode=True), on_cpu=True)  # the HF engine ignores it
    with pytest.raises(ConfigError, match="sleep mode is not supported on a CPU"):
        settings.validate_engine(
            "vllm_server", VLLMConfig(sleep_mode=True, server_url="http://127.0.0.1:1"), on_cpu=True
        )


def test_auto_on_a_cpu_model_builds_the_hf_engine_even_with_vllm_installed(tiny_lm, monkeypatch, capsys):
    model, tokenizer, path = tiny_lm
    monkeypatch.setattr(settings, "vllm_available", lambda: True)
    cfg = RoleConfig(model=str(path), engine="auto", max_completion_length=8192, device="cpu")
    assert chosen_engine("solver", cfg, model) == "hf"
    assert isinstance(build_engine("solver", cfg, model, tokenizer, path), HFEngine)
    assert capsys.readouterr().err == ""  # no warning off the GPU


def test_auto_on_a_cuda_model_chooses_vllm(monkeypatch):
    monkeypatch.setattr(settings, "vllm_available", lambda: True)
    model = torch.nn.Linear(2, 2)
    monkeypatch.setattr("pasodoble.rollout.factory.on_cuda", lambda m: m is model)
    assert chosen_engine("solver", RoleConfig(engine="auto"), model) == "vllm"
    monkeypatch.setattr(settings, "vllm_available", lambda: False)
    assert chosen_engine("solver", RoleConfig(engine="auto"), model) == "hf"


def test_hf_asked_for_on_a_cuda_model_warns_once(monkeypatch, capsys):
    model = torch.nn.Linear(2, 2)
    monkeypatch.setattr("pasodoble.rollout.factory.on_cuda", lambda m: True)
    assert chosen_engine("proposer", RoleConfig(engine="hf", max_completion_length=6144), model) == "hf"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: proposer.engine=hf")
