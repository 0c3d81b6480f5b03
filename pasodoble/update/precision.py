"""Mixed precision for a role: float32 master weights and optimizer states, forward passes autocast to `dtype`.

What: `weights_dtype` (the dtype a role's model is stored in), `autocast` (the context its forward passes run
under) and `grad_scaler` (loss scaling, on for float16 only).

Why: AdamW stepping bfloat16 weights directly loses the update. Near |w| = 0.01 adjacent bfloat16 values are
6e-5 apart, and an lr-1e-6 Adam step moves w by about 1e-6, so the rounded result is w again: five such steps on
a tiny Qwen3 changed 0.7% of its parameters. Keeping the weights (and so AdamW's moments) in float32 and running
only the matrix products in bfloat16 is the standard remedy (Accelerate's `mixed_precision="bf16"` does the same).

How: a trainable role's model lives in float32; its loss forward and the Hugging Face engine's sampling and
log-prob passes run under `torch.autocast(device_type, dtype)`, so the matmuls see `dtype` as before while
softmax, norms and the loss stay in float32. The backward runs outside the context, as torch recommends. A frozen
role and the KL reference model never step, so they are stored in `dtype` itself. float16 also scales the loss
(`torch.amp.GradScaler`) so small gradients do not flush to zero; bfloat16 has float32's range and needs none.
An engine that holds its own copy of the weights (vLLM) casts them to `dtype` when it syncs.

Departures: compared with a model stored in bfloat16, checkpoints hold the float32 master weights (twice the
bytes, and a resume continues exactly), and the ops autocast keeps in float32 are a little more precise.
"""

from __future__ import annotations

import contextlib

import torch

from pasodoble.update.dtype_names import DTYPE_NAMES

DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}


def weights_dtype(dtype: str, trainable: bool) -> torch.dtype:
    """float32 for a model the optimizer steps (master weights); `dtype` itself for one that only runs."""
    return torch.float32 if trainable else DTYPES[dtype]


def autocast(device: torch.device, dtype: torch.dtype | None):
    """`torch.autocast` to `dtype` on `device`'s type; a no-op for None or float32."""
    if dtype is None or dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def grad_scaler(device: torch.device, dtype: torch.dtype) -> torch.amp.GradScaler:
    """Dynamic loss scaling for float16; a pass-through (scale 1, every step taken) for the other dtypes."""
    return torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
