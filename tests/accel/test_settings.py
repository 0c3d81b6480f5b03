"""The `accel:` section: a key per fast path, `PASODOBLE_ACCEL=off` over all of them, the old variables with a note."""

from __future__ import annotations

import pytest
import torch

from pasodoble import accel
from pasodoble.accel import cpu_matmul, settings
from pasodoble.accel.settings import AccelConfig, resolve
from pasodoble.config import from_dict, validate_tree
from pasodoble.errors import ConfigError
from pasodoble.runs.train import TrainConfig

KEYS = ("decode_kernel", "train_attention", "fused_layers", "fused_blocks", "narrow_matmul", "layer_groups")


def test_every_fast_path_is_auto_by_default_and_each_key_turns_one_off():
    assert resolve(AccelConfig(), {}) == {**dict.fromkeys(KEYS, "auto"), "cpu_matmul": "auto"}
    modes = resolve(AccelConfig(fused_blocks="off", cpu_matmul="off"), {})
    assert modes["fused_blocks"] == "off" and modes["cpu_matmul"] == "blas"  # off: torch's own products
    assert {k for k, v in modes.items() if v == "auto"} == set(KEYS) - {"fused_blocks"}


def test_the_one_override_turns_every_fast_path_off_whatever_the_config():
    modes = resolve(AccelConfig(fused_layers="on"), {"PASODOBLE_ACCEL": "off"})
    assert modes == {**dict.fromkeys(KEYS, "off"), "cpu_matmul": "blas"}
    with pytest.raises(ConfigError, match="PASODOBLE_ACCEL: unknown 'fast'"):
        resolve(AccelConfig(), {"PASODOBLE_ACCEL": "fast"})


def test_an_old_variable_still_turns_its_path_off_with_one_note(capsys, monkeypatch):
    monkeypatch.setattr(settings, "_noted", set())
    for old, key in settings.OLD_ENV.items():
        assert resolve(AccelConfig(), {old: "off"})[key] == "off"
        assert resolve(AccelConfig(), {old: "off"})[key] == "off"  # a second time: no second note
    notes = capsys.readouterr().err.splitlines()
    assert notes == [
        f"pasodoble: {old}=off is deprecated; use accel.{key}=off" for old, key in settings.OLD_ENV.items()
    ]


def test_the_section_is_checked_like_every_other():
    with pytest.raises(ConfigError, match="accel.fused_block: unknown key; did you mean 'fused_blocks'"):
        from_dict(TrainConfig, {"accel": {"fused_block": "off"}})
    with pytest.raises(ConfigError, match="accel.narrow_matmul: unknown 'of'; use one of auto, on, off"):
        validate_tree(from_dict(TrainConfig, {"accel": {"narrow_matmul": "of"}}))
    with pytest.raises(ConfigError, match="accel.cpu_matmul: unknown 'mkl'"):
        validate_tree(from_dict(TrainConfig, {"accel": {"cpu_matmul": "mkl"}}))


def test_a_roles_cpu_matmul_becomes_the_section_key_with_a_note(capsys):
    cfg = from_dict(TrainConfig, {"proposer": {"cpu_matmul": "blas"}, "solver": {"cpu_matmul": "blas"}})
    validate_tree(cfg)
    assert cfg.accel.cpu_matmul == "blas"
    assert "pasodoble: solver.cpu_matmul is deprecated; use accel.cpu_matmul=blas" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="solver.cpu_matmul: is deprecated and set apart per role"):
        validate_tree(
            from_dict(TrainConfig, {"proposer": {"cpu_matmul": "blas"}, "solver": {"cpu_matmul": "onednn"}})
        )


def test_configure_reloads_a_kernel_loaded_under_other_modes(monkeypatch):
    from pasodoble.accel import fused_layers

    monkeypatch.setitem(settings._current, "cfg", AccelConfig())
    monkeypatch.setattr(accel, "_loaded_under", {"modes": resolve(AccelConfig(), {})})
    monkeypatch.setattr(fused_layers, "_state", {"lib": "a library", "why": None})
    accel.configure(AccelConfig())  # the same modes: kept
    assert fused_layers._state == {"lib": "a library", "why": None}
    accel.configure(AccelConfig(fused_layers="off"))
    assert fused_layers._state == {}
    assert fused_layers.status() == "off (accel.fused_layers)"


def test_the_door_turns_a_model_and_reports_what_it_turned(tmp_path, accel_switch):
    from transformers import AutoModelForCausalLM

    from tests.loop_helpers import save_tiny

    model = AutoModelForCausalLM.from_pretrained(save_tiny(tmp_path / "m", seed=0))
    turned = accel.apply(model)
    assert set(turned) == {"grouped_attention", "cpu_matmul", "fused_layers", "fused_blocks"}
    assert turned["fused_layers"] > 0 and turned["fused_blocks"] > 0
    accel_switch(fused_blocks="off", cpu_matmul="blas")
    other = AutoModelForCausalLM.from_pretrained(save_tiny(tmp_path / "n", seed=0))
    # the fused layers' kernels check their own switch as they run (`accel.native.load`); blocks and products here
    assert accel.apply(other) == {**turned, "cpu_matmul": 0, "fused_blocks": 0}
    assert "blocks off (accel.fused_blocks)" in accel.status(threads=1)
    assert accel.status(threads=2) == "decode off (2 torch threads), attention off, layers off, blocks off"


@pytest.mark.skipif(not cpu_matmul.available(), reason="this torch build has no oneDNN linear")
def test_a_models_own_cpu_matmul_is_its_alone_and_the_override_still_wins(accel_switch, monkeypatch):
    accel_switch()
    assert accel.apply(torch.nn.Sequential(torch.nn.Linear(8, 4)), cpu_matmul="onednn")["cpu_matmul"] == 1
    assert settings.current() == AccelConfig()  # the process's settings are as they were
    monkeypatch.setenv("PASODOBLE_ACCEL", "off")
    assert accel.apply(torch.nn.Sequential(torch.nn.Linear(8, 4)), cpu_matmul="onednn")["cpu_matmul"] == 0
