"""Liger's fused GRPO loss behind `pasodoble.update.liger`: where it cannot run, one clear line (not installed, or
not CUDA); the `liger` arm of bench/gpu_sections.py runs it where it can (a GPU with the extra)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from pasodoble.errors import ConfigError
from pasodoble.update import liger


def test_asking_for_liger_where_it_is_not_installed_is_one_line(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match=r"^solver.liger: liger-kernel is not installed; pip install") as e:
        liger.require_liger("cuda", "solver.liger")
    assert "\n" not in str(e.value)


def test_liger_on_a_cpu_is_refused_even_where_installed(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())  # as if installed
    assert "CUDA only; the device is cpu" in liger.liger_unavailable("cpu")
    if not torch.cuda.is_available():
        assert "no CUDA device is visible" in liger.liger_unavailable("cuda")
    with pytest.raises(ConfigError, match=r"^liger: Liger's fused GRPO loss is Triton, CUDA only"):
        liger.require_liger("cpu")


@pytest.mark.gpu
def test_liger_s_loss_builds_with_the_role_s_settings():
    pytest.importorskip("liger_kernel", reason="the liger extra is not installed")
    loss = liger.grpo_loss(
        beta=0.0, epsilon=0.2, epsilon_high=0.28, loss_type="dr_grpo", max_completion_length=8
    )
    assert (loss.epsilon_low, loss.epsilon_high, loss.use_ref_model) == (0.2, 0.28, False)
