"""A CPU run prints no per-GPU memory table: `train` shows it only where a role sits on a visible GPU."""

from __future__ import annotations

from pasodoble.runs.train import TrainConfig, trains_on_gpu
from pasodoble.scale.layout import Launch


def test_memory_table_only_where_a_role_is_on_a_gpu():
    cfg = TrainConfig()
    assert not trains_on_gpu(cfg, Launch(visible_gpus=0))
    assert trains_on_gpu(cfg, Launch(visible_gpus=1, gpu_memory_gb=80.0))
    cfg.proposer.device = cfg.solver.device = "cpu"
    assert not trains_on_gpu(cfg, Launch(visible_gpus=1, gpu_memory_gb=80.0))
    cfg.solver.device = "cuda:0"
    assert trains_on_gpu(cfg, Launch(visible_gpus=1, gpu_memory_gb=80.0))
