"""The CPU fast paths, behind one door: `apply(model, settings)` turns a loaded model onto them, `status()` says which
run.

What: the project's compiled kernels and the layers that call them: the decode attention over a shared prompt
(`decode_kernel`), the update's and prefills' attention (`train_attention`, through `grouped_attention`), RMSNorm,
rotary embedding and SiLU gate (`fused_layers`), a decoder layer as one autograd node (`fused_block`), narrow float32
linear layers and their groups (`narrow_matmul`), oneDNN's products for wide ones (`cpu_matmul`); the C sources in
`csrc/`, built on first use by `native`. `host_memory` hands freed heap back to the kernel. Each module's docstring
states the gain it was measured to bring (figures in docs/PERFORMANCE.md). Every fast path computes what the stock
path computes, to float rounding, and takes the stock path where it does not apply (another dtype or device, more
than one torch thread, no C compiler).

How: `configure(cfg)` makes an `AccelConfig` (the `accel:` config section, one key per fast path, `auto` by default)
the process's; `PASODOBLE_ACCEL=off` turns every fast path off (`settings`). `apply(model, settings=None)` then
turns the model's attention, linear layers, norms and decoder layers onto the fast paths that are on, and plugs the
kernels into update batching and decoding (`update.fast_paths`), which sit below this package and import none of it.
Model code (the Role, the shared base, evaluation, SFT) calls this door and no kernel module.

Run: nothing to call beyond the door; tests in tests/accel/.
"""

from __future__ import annotations

import dataclasses

import torch

from pasodoble.accel import (
    decode_kernel,
    fused_block,
    fused_layers,
    grouped_attention,
    host_memory,
    narrow_matmul,
    settings,
    train_attention,
)
from pasodoble.accel.cpu_matmul import use_cpu_matmul
from pasodoble.accel.settings import AccelConfig
from pasodoble.update import fast_paths

__all__ = ["AccelConfig", "apply", "configure", "release_freed", "status"]

_COMPILED = (
    decode_kernel,
    train_attention,
    fused_layers,
    narrow_matmul,
)  # each keeps its loaded library in `_state`
_loaded_under: dict[str, dict[str, str]] = {}  # "modes": the modes the compiled kernels were loaded under


def configure(cfg: AccelConfig | None) -> dict[str, str]:
    """Makes `cfg` the process's fast-path settings (None: the defaults); returns each fast path's mode. A kernel
    loaded under other modes is loaded again on its next use."""
    modes = settings.configure(cfg)
    if _loaded_under.get("modes", modes) != modes:
        for module in _COMPILED:
            module._state.clear()
    _loaded_under["modes"] = modes
    return modes


def apply(
    model: torch.nn.Module, cfg: AccelConfig | None = None, *, cpu_matmul: str | None = None
) -> dict[str, int]:
    """Turns `model` onto the fast paths that are on (`cfg`, when given, becomes the process's settings first);
    returns how many modules each turned. `cpu_matmul`: a role's own choice (its deprecated `cpu_matmul`), for this
    model only (`PASODOBLE_ACCEL=off` still wins). The attention interface is always installed: the update's packed
    and shared-prompt layouts read it (it takes SDPA where the kernel is off)."""
    if cfg is not None:
        configure(cfg)
    own = None if cpu_matmul is None else dataclasses.replace(settings.current(), cpu_matmul=cpu_matmul)
    return {
        "grouped_attention": int(grouped_attention.use_grouped_attention(model)),
        "cpu_matmul": use_cpu_matmul(
            model, settings.resolve(own)["cpu_matmul"] if own else settings.mode("cpu_matmul")
        ),
        "fused_layers": fused_layers.use_fused_layers(model),
        "fused_blocks": fused_block.use_fused_blocks(model),
    }


def status(threads: int | None = None) -> str:
    """Which compiled kernels run, for the start line: 'decode on, attention on, layers on, blocks on' (or why
    not); with more than one torch thread (`threads`, None: torch's count) the kernels stand aside."""
    threads = torch.get_num_threads() if threads is None else threads
    parts = {
        "decode": decode_kernel,
        "attention": train_attention,
        "layers": fused_layers,
        "blocks": fused_block,
    }
    if threads != 1:
        return ", ".join(
            f"{name} off ({threads} torch threads)" if name == "decode" else f"{name} off" for name in parts
        )
    return ", ".join(f"{name} {module.status()}" for name, module in parts.items())


def release_freed() -> int:
    """Hands the heap's freed memory back to the kernel (`host_memory.release_freed`); returns the bytes."""
    return host_memory.release_freed()


fast_paths.train_attention = train_attention
fast_paths.decode = decode_kernel
fast_paths.reuse_transposes = narrow_matmul.reuse_transposes
