"""vLLM's weight-transfer protocol over a gloo group: the `weight_sync: gloo` backend, registered as `pasodoble_gloo`.

What: vLLM's dense NCCL engine (`vllm.distributed.weight_transfer.nccl_engine`) with the data plane swapped for a
torch.distributed gloo group, so the same trainer -> server path runs where NCCL cannot: a CPU (the vLLM CPU build,
where the project's tests run it for real) or a server that is reached over TCP only. Everything but the wire is
vLLM's: the HTTP routes (`/init_weight_transfer_engine`, `/start_weight_update`, `/update_weights`,
`/finish_weight_update`), the update info (names, dtype names, shapes), the layer-wise reload around the load
(`start_weight_update` / `finish_weight_update`) and the trainer's metadata check.

How: the group is built from a TCPStore that the trainer (rank 0) hosts and the server's workers (ranks 1...) join,
never from the default group (a vLLM worker has its own); each tensor is broadcast from rank 0 one at a time and
loaded at once, so a worker holds one received tensor beyond its model. `register()` adds both halves to vLLM's
factories; the worker extension (`rollout.vllm_worker`) calls it inside the server, `rollout.transfer` in the trainer.

Departs from the NCCL engine: no packing into buffers (gloo has no streams to overlap), no device synchronisation
(a CPU has none), and a timeout on every broadcast (`timeout_s`), so a peer that dies raises instead of hanging.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch.distributed import BroadcastOptions, PrefixStore, ProcessGroupGloo, TCPStore
from vllm.distributed.weight_transfer.base import TrainerInitInfo, WeightTransferInitInfo
from vllm.distributed.weight_transfer.factory import (
    WeightTransferEngineFactory,
    WeightTransferTrainerFactory,
)
from vllm.distributed.weight_transfer.nccl_engine import (
    NCCLTrainerWeightTransferEngine,
    NCCLWeightTransferEngine,
    NCCLWeightTransferUpdateInfo,
)

from pasodoble.rollout.hosts import local_address

BACKEND = "pasodoble_gloo"  # settings.TRANSFER_BACKENDS["gloo"]


def open_group(address: str, port: int, rank: int, world_size: int, timeout_s: float) -> ProcessGroupGloo:
    """A gloo group of `world_size` ranks over a TCPStore at `address:port` that rank 0 hosts."""
    timeout = datetime.timedelta(seconds=timeout_s)
    store = TCPStore(address, port, world_size, is_master=rank == 0, timeout=timeout, wait_for_workers=False)
    options = ProcessGroupGloo._Options()
    options._timeout = timeout
    options._devices = [ProcessGroupGloo.create_device(hostname=local_address(address))]
    return ProcessGroupGloo(PrefixStore(BACKEND, store), rank, world_size, options)


def broadcast(group: ProcessGroupGloo, tensor: torch.Tensor) -> None:
    """`tensor` from rank 0 to every rank of `group`, in place (blocks until done or the group's timeout)."""
    options = BroadcastOptions()
    options.rootRank = 0
    group.broadcast([tensor], options).wait()


@dataclass(kw_only=True)
class GlooInitInfo(WeightTransferInitInfo):
    """What a worker needs to join the group (the trainer sends it to `/init_weight_transfer_engine`)."""

    master_address: str
    master_port: int
    rank_offset: int
    world_size: int
    timeout_s: float = 300.0


@dataclass
class GlooTrainerInitInfo(TrainerInitInfo):
    """The trainer's side of the group: it hosts the store at `master_address:master_port` as rank 0."""

    backend: ClassVar[str] = BACKEND

    master_address: str
    master_port: int
    world_size: int
    timeout_s: float = 300.0


class GlooWeightTransferEngine(NCCLWeightTransferEngine):
    """Worker side: vLLM's dense NCCL engine receiving over gloo, one tensor at a time."""

    init_info_cls = GlooInitInfo
    update_info_cls = NCCLWeightTransferUpdateInfo

    def init_transfer_engine(self, init_info: GlooInitInfo) -> None:
        parallel = self.parallel_config
        rank = parallel.data_parallel_index * parallel.world_size + parallel.rank + init_info.rank_offset
        self.model_update_group = open_group(
            init_info.master_address, init_info.master_port, rank, init_info.world_size, init_info.timeout_s
        )

    def update_weights(self, update_info: dict) -> None:
        self.receive_weights(self.parse_update_info(update_info))  # no device to synchronise

    def receive_weights(self, update_info: NCCLWeightTransferUpdateInfo) -> None:
        if self.model_update_group is None:
            raise RuntimeError("gloo weight transfer not initialised; call init_weight_transfer_engine first")
        for name, dtype_name, shape in zip(
            update_info.names, update_info.dtype_names, update_info.shapes, strict=True
        ):
            weight = torch.empty(shape, dtype=getattr(torch, dtype_name), device=self.device)
            broadcast(self.model_update_group, weight)
            self.model.load_weights([(name, weight)])

    def shutdown(self) -> None:
        self.model_update_group = None  # a gloo group closes when its last reference goes


class GlooTrainerWeightTransferEngine(NCCLTrainerWeightTransferEngine):
    """Trainer side: vLLM's NCCL trainer engine (its round trip and metadata check) broadcasting over gloo."""

    init_info_cls = GlooTrainerInitInfo

    @classmethod
    def trainer_init(cls, init_info: GlooTrainerInitInfo, *, client, source=None):
        from concurrent.futures import ThreadPoolExecutor

        if source is None:
            raise ValueError("the gloo weight transfer needs a WeightSource")
        engine = cls(client=client, source=source, is_sender=init_info.is_sender, packed=False)
        if not engine.is_sender:
            return engine
        worker = GlooInitInfo(
            master_address=init_info.master_address,
            master_port=init_info.master_port,
            rank_offset=1,
            world_size=init_info.world_size,
            timeout_s=init_info.timeout_s,
        )
        # The workers block in init_weight_transfer_engine until every rank has joined: ask on a side thread.
        with ThreadPoolExecutor(max_workers=1) as pool:
            future = pool.submit(client.init_weight_transfer_engine, vars(worker))
            engine.model_update_group = open_group(
                init_info.master_address, init_info.master_port, 0, init_info.world_size, init_info.timeout_s
            )
            future.result()
        return engine

    def _broadcast(self, source, meta) -> None:
        if not self.is_sender:
            for _ in source:
                pass
            return
        for _name, tensor in self._checked_iter(source, meta):
            broadcast(self.model_update_group, tensor.contiguous())

    def shutdown(self) -> None:
        self.model_update_group = None


def register() -> None:
    """Add `pasodoble_gloo` to vLLM's worker and trainer factories (idempotent)."""
    for factory, cls in (
        (WeightTransferEngineFactory, GlooWeightTransferEngine),
        (WeightTransferTrainerFactory, GlooTrainerWeightTransferEngine),
    ):
        if BACKEND not in factory._registry:
            factory.register_engine(BACKEND, cls)
