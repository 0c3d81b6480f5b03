"""Addresses and devices of a vLLM server process: which interface to bind, which one to advertise, which GPUs.

Used by the server that starts a process (`rollout/server.py`), by `pasodoble serve` (`check_bind`: a host other
machines reach only when allowed) and by the placement that decides where it runs (`rollout/placement.py`); pure
functions of their arguments and the environment, but `free_port` and `local_address`, which ask the network stack.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence

from pasodoble.errors import UserError
from pasodoble.rollout.server_auth import is_loopback

ANY_INTERFACE = ("0.0.0.0", "::", "")


def device_list(indices: Sequence[int], env: dict | None = None) -> str:
    """CUDA_VISIBLE_DEVICES for a child that should see `indices` of this process's visible GPUs."""
    env = os.environ if env is None else env
    parent = [d.strip() for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return ",".join(parent[i] if i < len(parent) else str(i) for i in indices)


def bind_host(host: str) -> str:
    """The address to probe for a free port on: the interface itself, or all of them."""
    return "0.0.0.0" if host in ANY_INTERFACE else host


def advertised_host(host: str, env: dict | None = None) -> str:
    """The address other ranks use for a server listening on `host` (all interfaces: the rendezvous address)."""
    env = os.environ if env is None else env
    if host in ANY_INTERFACE:
        return env.get("MASTER_ADDR", "127.0.0.1")
    return host


def check_bind(host: str, allow_remote: bool, flag: str = "vllm.allow_remote") -> str | None:
    """Refuse a non-loopback `host` without `allow_remote`; return the warning to print for an allowed one."""
    if is_loopback(host):
        return None
    if not allow_remote:
        raise UserError(
            f"a vLLM server on {host or 'all interfaces'} is reachable from other machines; "
            f"set {flag} to accept that, or listen on 127.0.0.1"
        )
    return (
        f"warning: the vLLM server listens on {host or 'all interfaces'}: other machines can reach it; its token "
        "travels unencrypted over HTTP, so use it on a trusted network only"
    )


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def local_address(towards: str) -> str:
    """This machine's address on the interface that reaches `towards` (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((socket.gethostbyname(towards), 9))
        return s.getsockname()[0]
