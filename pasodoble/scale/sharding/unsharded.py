"""One process: the model as is, `loss.backward()`, torch's gradient clipping (every default of `Sharding`)."""

from __future__ import annotations

from pasodoble.scale.sharding.base import Sharding


class Unsharded(Sharding):
    """One process: plain PyTorch."""

    backend = "none"
    grad_scale = 1.0
