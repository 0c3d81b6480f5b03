"""Weights an engine copies: written as safetensors on ANY rank, from a plain module or a sharded role's full copy.

What: `write_weights(model, folder)` writes `folder/model.safetensors` from `model.state_dict()` (float tensors as
they are: the engine casts to its dtype), one tensor for tied parameters (the embedding and a tied LM head share
storage; vLLM re-ties the head itself). `FullWeights(model, state_dict)` is a sharded module seen with the full
weights its sharding backend gathered (`scale.sharding.fsdp2.FullyShard.sync_engine`), so an engine reads it like a module.

`cast_tensors(model, dtype)` is the same tensors as a lazy stream of (name, tensor) pairs in the engine's dtype, for
an engine that loads them directly (`rollout.vllm`, in process: no file at all) or receives them over vLLM's weight
transfer (`rollout.transfer`, server mode).

Why not `save_pretrained`: transformers writes nothing on ranks other than 0 once torch.distributed is initialised
(`should_save_on_this_rank`), silently; every rank of a colocated layout syncs its own engine, so each must write.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch

WEIGHTS_FILE = "model.safetensors"


class FullWeights:
    """A sharded module's full weights, for an engine that copies them (`state_dict()` only)."""

    def __init__(self, model: torch.nn.Module, state_dict: dict[str, torch.Tensor]):
        self.model, self._state = model, state_dict

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self._state


def write_weights(model, folder: str | Path) -> Path:
    """`model`'s weights as `folder/model.safetensors` (see the module docstring); returns the folder."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = {name: tensor.contiguous().cpu() for name, tensor in unique_tensors(model)}
    save_file(out, str(folder / WEIGHTS_FILE), metadata={"format": "pt"})
    return folder


def unique_tensors(model) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, detached tensor) of `model.state_dict()`, each storage once: a tied parameter under its first name."""
    seen = set()
    for name, tensor in model.state_dict().items():
        tensor = tensor.detach()
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if key in seen:
            continue
        seen.add(key)
        yield name, tensor


def sent_dtype(tensor: torch.Tensor, dtype: torch.dtype) -> torch.dtype:
    """The dtype `tensor` reaches an engine in: floating tensors in the engine's `dtype`, the rest as they are."""
    return dtype if tensor.is_floating_point() else tensor.dtype


def cast_tensors(
    model, dtype: torch.dtype, device: torch.device | None = None
) -> Iterator[tuple[str, torch.Tensor]]:
    """`unique_tensors` cast to `dtype` (`sent_dtype`) and moved to `device` (None: where they are) one tensor at a
    time, as the consumer asks for them: a load holds at most the tensors of the layer it is loading in the engine's
    dtype, never a second copy of the model."""
    for name, tensor in unique_tensors(model):
        yield name, tensor.to(device=device, dtype=sent_dtype(tensor, dtype))
