"""Metrics sink: `metrics.jsonl` always, TensorBoard and Weights & Biases when asked.

Every number a run produces goes through `Tracker.log(metrics, step)`, which appends one JSON row to
`RUN_DIR/metrics.jsonl` (flushed and fsynced, so a killed run keeps every step it logged) and forwards the same
row to the optional backends. Plots (`pasodoble plot RUN_DIR`) are rendered from that file, never from in-memory
state, so a finished, crashed or resumed run plots the same way. Metric names are `role/group/name`.
"""

from __future__ import annotations

import math
from pathlib import Path

from pasodoble.io import append_jsonl


def _finite(v):
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)  # JSON has no NaN/inf; keep the fact rather than drop the key
    return v


class Tracker:
    def __init__(
        self,
        run_dir: str | Path,
        *,
        tensorboard: bool = False,
        wandb_project: str | None = None,
        wandb_run_name: str | None = None,
        config: dict | None = None,
    ):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / "metrics.jsonl"
        self._tb = self._wandb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(self.run_dir / "tensorboard"))
        if wandb_project:
            try:
                import wandb
            except ImportError as e:
                from pasodoble.errors import UserError

                raise UserError(
                    "logging.wandb_project is set but wandb is not installed: "
                    "pip install 'pasodoble[wandb]' or unset it"
                ) from e
            self._wandb = wandb.init(
                project=wandb_project, name=wandb_run_name, dir=str(self.run_dir), config=config or {}
            )

    def log(self, metrics: dict[str, float | int | str], step: int) -> None:
        row = {"step": int(step), **{k: _finite(v) for k, v in metrics.items()}}
        append_jsonl(self.path, [row])
        numeric = {
            k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        if self._tb is not None:
            for k, v in numeric.items():
                self._tb.add_scalar(k, v, step)
        if self._wandb is not None:
            self._wandb.log(numeric, step=step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
