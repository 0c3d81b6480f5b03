"""Trainer side of a server's weight sync over vLLM's weight-transfer API (`weight_sync: nccl` or `gloo`).

What: `Transfer(backend, url, post, ...)` holds one trainer-side vLLM transfer engine for one server. The first
`send(model)` builds the group: this process is rank 0 and hosts its rendezvous (a TCPStore on the address of the
interface that reaches the server, a free port), the server's `workers` (its tensor-parallel ranks) join after it
through `/init_weight_transfer_engine`. Each `send` then runs vLLM's round trip: `/start_weight_update`, the names,
dtypes and shapes to `/update_weights` while the tensors are broadcast (rank 0 to the workers), and
`/finish_weight_update` (the layer-wise reload's end, which re-runs the engine's weight processing). The worker
extension then re-ties a tied head (`pasodoble_retie_head`); the caller resets the prefix cache.

`nccl` is vLLM's own engine (packed buffers, GPU to GPU: no disk, no /dev/shm, the server may be on another node);
`gloo` is the project's (`rollout.gloo_transfer`: the same protocol on a CPU). Tensors are cast to the engine's dtype
and moved to the wire's device one at a time as the broadcast asks for them (`ModelSource` over
`weights.cast_tensors`), so the extra memory is one layer's tensors plus vLLM's packing buffers.

This module imports vllm: `rollout.server` imports it only for a server that syncs this way.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Iterator

import torch
from vllm.distributed.weight_transfer.base import ParamMeta, WeightSource
from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory
from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo

from pasodoble.rollout import gloo_transfer
from pasodoble.rollout.hosts import free_port, local_address
from pasodoble.rollout.weights import cast_tensors, sent_dtype, unique_tensors

gloo_transfer.register()


class ModelSource(WeightSource):
    """A model's unique tensors in the engine's dtype on `device`, declared (`metadata`) before any is cast."""

    def __init__(self, model, dtype: torch.dtype, device: torch.device):
        self.model, self.dtype, self.device = model, dtype, device

    def metadata(self) -> list[ParamMeta]:
        return [
            ParamMeta(name, sent_dtype(t, self.dtype), tuple(t.shape))
            for name, t in unique_tensors(self.model)
        ]

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        return cast_tensors(self.model, self.dtype, self.device)


class HTTPClient:
    """vLLM's `VLLMWeightSyncClient` over the server engine's own POST (its token, its one-line errors)."""

    def __init__(self, post: Callable[..., dict], timeout_s: float):
        self.post, self.timeout_s = post, timeout_s

    def init_weight_transfer_engine(self, init_info: dict) -> None:
        self.post("/init_weight_transfer_engine", {"init_info": init_info}, timeout=self.timeout_s)

    def start_weight_update(self) -> None:
        self.post("/start_weight_update", {})

    def update_weights(self, update_info: dict) -> None:
        self.post("/update_weights", {"update_info": update_info}, timeout=self.timeout_s)

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.post("/finish_weight_update", {}, timeout=self.timeout_s)


def init_info(backend: str, address: str, port: int, world_size: int, timeout_s: float):
    """The trainer's init info for `backend` (rank 0 of `world_size`, hosting the rendezvous at address:port)."""
    if backend == gloo_transfer.BACKEND:
        return gloo_transfer.GlooTrainerInitInfo(
            master_address=address, master_port=port, world_size=world_size, timeout_s=timeout_s, rank=0
        )
    return NCCLTrainerInitInfo(master_address=address, master_port=port, world_size=world_size, rank=0)


class Transfer:
    """One server's weight transfer from this process (see module docstring)."""

    def __init__(self, backend: str, url: str, post, *, workers: int, dtype: torch.dtype, timeout_s: float):
        self.backend, self.url, self.post = backend, url, post
        self.workers, self.dtype, self.timeout_s = workers, dtype, timeout_s
        self.device = torch.device("cpu") if backend == gloo_transfer.BACKEND else _cuda_device()
        self.engine = None

    def send(self, model) -> None:
        source = ModelSource(model, self.dtype, self.device)
        if self.engine is None:
            address = local_address(urllib.parse.urlsplit(self.url).hostname or "127.0.0.1")
            info = init_info(self.backend, address, free_port(address), 1 + self.workers, self.timeout_s)
            client = HTTPClient(self.post, self.timeout_s + 30)
            self.engine = WeightTransferTrainerFactory.trainer_init(info, client=client, source=source)
        self.engine.source = (
            source  # a new round's tensors (a sharded role hands a fresh full copy each time)
        )
        self.engine.send_weights()
        body = {"method": "pasodoble_retie_head", "timeout": self.timeout_s}
        self.post("/collective_rpc", body, timeout=self.timeout_s + 30)

    def close(self) -> None:
        """Release the server's side of the group (it keeps serving) and this side's communicator."""
        engine, self.engine = self.engine, None
        if engine is None:
            return
        try:
            self.post("/shutdown_weight_transfer_engine", {})
        finally:
            engine.shutdown()


def _cuda_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device())
