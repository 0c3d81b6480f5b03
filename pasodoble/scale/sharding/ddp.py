"""DDP through Accelerate (`distributed.backend: ddp`): every rank holds the full weights; gloo on CPU, NCCL on GPU."""

from __future__ import annotations

import contextlib

import torch

from pasodoble.scale.sharding.base import Sharding


class Accelerated(Sharding):
    """DDP: both roles prepared by Accelerate in the same processes, one `prepare` call per role; every rank holds
    the full weights."""

    def __init__(self, backend: str, world_size: int):
        from accelerate import Accelerator

        self.backend, self.world_size = backend, world_size
        self.grad_scale = float(world_size)  # DDP averages gradients over ranks
        self.accelerator = Accelerator(cpu=not torch.cuda.is_available())

    def prepare(
        self,
        name: str,
        model: torch.nn.Module,
        optimizer,
        *,
        max_grad_norm: float | None = None,
        compute_dtype: torch.dtype | None = None,
    ):
        return self.accelerator.prepare(model, optimizer)

    def accumulate(self, model: torch.nn.Module, last: bool):
        return contextlib.nullcontext() if last else self.accelerator.no_sync(model)

    def backward(self, loss: torch.Tensor) -> None:
        self.accelerator.backward(loss)

    def clip_grad_norm(self, model: torch.nn.Module, max_norm: float) -> float:
        norm = self.accelerator.clip_grad_norm_(model.parameters(), max_norm)
        return float(norm) if norm is not None else 0.0
