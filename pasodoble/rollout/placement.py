"""Rollout placement: where a run's rollouts are generated when it has several ranks, and who syncs the weights.

`distributed.rollout` is `colocated` (the default: every rank generates its share on its own device, with the HF
engine, an in-process vLLM engine or a vLLM server of its own) or `dedicated` (rank 0 starts one vLLM server per
`vllm_server` role on the last `distributed.vllm_gpus` GPUs of its node, and every rank sends its prompts there:
the paper's 2 + N layout). A server all ranks share has one weight owner: rank 0 pushes the weights after each
step and the others wait at a barrier, so no rank samples from half-synced weights. Rank 0 picks the port and the
server's token and broadcasts both before the server is up; every rank then waits for `/health` itself.

How: `Placement.for_run(cfg.distributed, collective, ...)` where the roles are built; `rollout.factory` asks it for
a role's server engine (`server_engine`). Details and limits (a shared server runs on rank 0's machine): the
"Rollout placement" section of docs/SCALE.md.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field

from pasodoble.rollout.hosts import advertised_host, bind_host
from pasodoble.rollout.server import VLLMServer, VLLMServerEngine, free_port, wait_until_healthy
from pasodoble.rollout.server_auth import client_token, new_token
from pasodoble.rollout.settings import (
    PLACEMENTS as PLACEMENTS,  # re-exported: a config name, read without torch
)
from pasodoble.rollout.shm import make_shm_dir


def server_roles(roles: dict) -> list[str]:
    """Roles whose vLLM server a dedicated layout starts (engine vllm_server, no server_url), in role order."""
    return [n for n, c in roles.items() if c.engine == "vllm_server" and c.vllm.server_url is None]


def server_gpus(visible: int, vllm_gpus: int, sizes: dict[str, int]) -> dict[str, list[int]]:
    """GPU indices of each dedicated server: the last `vllm_gpus` of `visible`, `sizes[role]` each, in order.

    Raises ValueError (with the numbers) when they do not fit. No GPUs visible: every server on the CPU ([])."""
    if visible == 0:
        return {name: [] for name in sizes}
    need = sum(sizes.values())
    if need > vllm_gpus:
        parts = ", ".join(f"{n} {k}" for n, k in sizes.items())
        raise ValueError(
            f"the dedicated vLLM servers need {need} GPUs ({parts}) but distributed.vllm_gpus is {vllm_gpus}"
        )
    out, nxt = {}, visible - vllm_gpus
    for name, k in sizes.items():
        out[name] = list(range(nxt, nxt + k))
        nxt += k
    return out


@dataclass
class SharedServer:
    """What a rank holds of a server: its URL, whether this rank pushes weights, and the wait after a push."""

    url: str
    owner: bool  # this rank syncs weights (rank 0 of a shared server; every rank of its own server)
    after_sync: Callable[[], None] | None = None  # barrier of a shared server (None: nobody waits)
    server: object | None = None  # the `VLLMServer` this rank started (it stops it), else None
    token: str | None = None  # what requests carry: the run's token, or VLLM_API_KEY for a given URL


@dataclass
class Placement:
    """The run's rollout placement (see module docstring); one object for both roles."""

    mode: str = "colocated"
    collective: object | None = None  # the run's `Collective` (None: one process)
    gpus: dict[str, list[int]] = field(default_factory=dict)  # dedicated: GPU indices of each role's server
    local_gpu: int | None = None  # colocated on several GPUs: this rank's GPU
    say: Callable[[str], None] | None = None  # where rank 0 reports the servers it started (None: quiet)
    log_dir: str = "."  # where started servers write their logs (the run folder)

    @classmethod
    def for_run(
        cls, dist_cfg, collective, roles: dict, visible_gpus: int, say=None, log_dir="."
    ) -> Placement:
        mode = dist_cfg.rollout
        gpus = {}
        if mode == "dedicated":
            sizes = {n: roles[n].vllm.tensor_parallel_size for n in server_roles(roles)}
            gpus = server_gpus(visible_gpus, dist_cfg.vllm_gpus, sizes)
        local = int(os.environ.get("LOCAL_RANK", "0")) if visible_gpus and collective.world_size > 1 else None
        return cls(
            mode=mode, collective=collective, gpus=gpus, local_gpu=local, say=say, log_dir=str(log_dir)
        )

    @property
    def rank(self) -> int:
        return self.collective.rank if self.collective is not None else 0

    @property
    def world_size(self) -> int:
        return self.collective.world_size if self.collective is not None else 1

    def shared(self, role_cfg) -> bool:
        """Rank 0 starts (or was given) the role's one server and syncs it; every rank talks to it. A dedicated
        layout on one process takes this path too, so its server still goes to the dedicated GPUs."""
        if self.mode == "dedicated" and role_cfg.vllm.server_url is None:
            return True
        return self.world_size > 1 and role_cfg.vllm.server_url is not None

    def server_for(self, name: str, role_cfg, start: Callable[..., object]) -> SharedServer:
        """This rank's view of `name`'s server. `start(devices=, port=, host=, wait=, token=)` starts one (a
        `VLLMServer`) that demands `token`; a shared server's port and token come from rank 0."""
        cfg = role_cfg.vllm
        if cfg.server_url is not None:
            owner = self.rank == 0 or not self.shared(role_cfg)
            return SharedServer(cfg.server_url, owner=owner, token=client_token(), **self._wait(role_cfg))
        if not self.shared(role_cfg):
            devices = [self.local_gpu] if self.local_gpu is not None else None
            token = new_token()
            server = start(
                devices=devices, port=cfg.server_port, host=cfg.server_host, wait=True, token=token
            )
            return SharedServer(server.url, owner=True, server=server, token=token)
        port = token = None
        if self.rank == 0:
            port, token = cfg.server_port or free_port(bind_host(cfg.server_host)), new_token()
        port, token = self.collective.broadcast((port, token), f"{name} vLLM server port and token")
        url = f"http://{advertised_host(cfg.server_host)}:{port}"
        server = None
        if self.rank == 0:
            gpus = self.gpus.get(name) or None
            server = start(devices=gpus, port=port, host=cfg.server_host, wait=True, token=token)
            if self.say is not None:
                where = f"GPU {','.join(map(str, gpus))}" if gpus else "the CPU"
                self.say(
                    f"{name}: dedicated vLLM server at {url} on {where} for {self.world_size} rank(s) "
                    f"(log {server.log_path})"
                )
        else:
            who = f"the {name}'s vLLM server (started by rank 0)"
            wait_until_healthy(url, cfg.server_start_timeout_s, who=who, token=token)
        self.collective.barrier(f"{name} vLLM server up")
        return SharedServer(url, owner=self.rank == 0, server=server, token=token, **self._wait(role_cfg))

    def server_engine(
        self, name: str, role_cfg, model_path, tokenizer, *, adapters=(), max_len: int | None = None
    ) -> VLLMServerEngine:
        """The role's engine on the server this placement gives it (one process: its own server, or server_url)."""
        cfg = role_cfg.vllm
        length = max_len or role_cfg.max_sequence_length
        shm = make_shm_dir("server")  # before the start: a server it starts reloads from this folder only

        def start(**where) -> VLLMServer:
            return VLLMServer.start(
                model_path,
                cfg,
                max_model_len=length,
                dtype=role_cfg.dtype,
                adapters=adapters,
                log_dir=self.log_dir,
                weights_root=shm,
                **where,
            )

        try:
            shared = self.server_for(name, role_cfg, start)
        except BaseException:
            shutil.rmtree(shm, ignore_errors=True)  # a failed start leaves no weights folder behind
            raise
        return VLLMServerEngine(
            shared.url,
            tokenizer,
            cfg,
            server=shared.server,
            owner=shared.owner,
            after_sync=shared.after_sync,
            token=shared.token,
            shm=shm,
            dtype=role_cfg.dtype,
        )

    def _wait(self, role_cfg) -> dict:
        if not self.shared(role_cfg):
            return {}
        if self.world_size <= 1:
            return {}
        return {"after_sync": lambda: self.collective.barrier("vLLM weight sync")}
