"""Collectives: where the ranks of one run agree, and how a step's work is shared out among them.

What: the `Collective` protocol the dual-play loop talks to (broadcast, all-gather of Python objects and tensors,
barrier), `SingleProcess` (one rank, every call an identity) and `TorchDistributed` (`torch.distributed`, gloo on
CPU, NCCL on GPU; Python objects always travel over a gloo group so they never touch GPU memory). `from_env()`
picks one from the launcher's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, as set by
`torchrun` and `accelerate launch`). `share(n, world_size, rank)` cuts n work items into contiguous ragged shares
(the first n % world_size ranks take one more), so any world size works with any batch.

Why: every rank must take the same decisions (rewards, skips, diversity history, buffer) from the same data, and a
rank that dies must stop the others instead of leaving them blocked forever. Every operation runs under the process
group's timeout (`distributed.timeout_s`) and a failure becomes one error line naming the rank, the operation and
what it was exchanging, and the rank exits at once with code 1 (see `TorchDistributed.fail` for why it does not
unwind); `barrier` is gloo's monitored barrier, which also names the missing ranks.

How: `collective = from_env(timeout_s=600)`; `collective.all_gather(obj, "solver answers")` -> list by rank.
Tests: tests/scale/test_distributed.py (shares, a 2-process gloo group, a dead and a silent peer).

Departures from the reference code: no rank holds state the others lack (the reference kept the diversity history
on rank 0 only), and no divisibility rule ties the number of training processes to the batch.
"""

from __future__ import annotations

import datetime
import os
import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn, Protocol

import torch

from pasodoble.errors import UserError

LAUNCH_HINT = (
    "start N ranks with `torchrun --standalone --nproc_per_node N -m pasodoble train ...` or "
    "`accelerate launch --multi_gpu --num_processes N -m pasodoble train ...` (the latter also on CPU-only machines)"
)


class CollectiveError(UserError):
    """A collective operation failed or timed out (a peer rank died or stopped answering); exit code 1. Ranks
    under `TorchDistributed` print its line and exit rather than raise it (`TorchDistributed.fail`)."""

    exit_code = 1


class Collective(Protocol):
    """Where rank-dependent values are made identical on every rank."""

    rank: int
    world_size: int

    def broadcast(self, obj: Any, what: str = "") -> Any:
        """Return rank 0's `obj` on every rank."""
        ...

    def all_gather(self, obj: Any, what: str = "") -> list[Any]:
        """Every rank's `obj`, in rank order, on every rank."""
        ...

    def barrier(self, what: str = "") -> None:
        """Wait until every rank has arrived."""
        ...

    def fail_on_peer_loss(self, error: BaseException, where: str) -> None:
        """End this rank with one error line when `error` is a lost peer seen by another engine's collective."""
        ...

    def rank0_first(self, what: str, work: Callable[[], Any], budget_s: float) -> None:
        """Rank 0 runs `work` (a one-time preparation such as the tiny world's build); the other ranks wait for
        it for up to `budget_s` seconds, with progress lines, outside any collective timeout."""
        ...


class SingleProcess:
    """One rank: every collective is an identity."""

    rank, world_size = 0, 1

    def broadcast(self, obj: Any, what: str = "") -> Any:
        return obj

    def all_gather(self, obj: Any, what: str = "") -> list[Any]:
        return [obj]

    def barrier(self, what: str = "") -> None:
        return None

    def close(self) -> None:
        return None

    def fail_on_peer_loss(self, error: BaseException, where: str) -> None:
        return None

    def rank0_first(self, what: str, work: Callable[[], Any], budget_s: float) -> None:
        work()


_STARTED = False  # a TorchDistributed was made in this process (see `end_process`)
PEER_LOST = (
    "gloo",
    "nccl",
    "connection reset by peer",
    "connection closed by peer",
    "processgroup",
    "socket timeout",
)


def peer_lost(error: BaseException) -> bool:
    """Whether `error` is torch.distributed reporting a dead or silent peer (a collective outside `Collective`:
    DDP's gradient all-reduce, FSDP2's gathers, DeepSpeed's reductions)."""
    text = str(error).lower()
    return isinstance(error, (RuntimeError, OSError)) and any(marker in text for marker in PEER_LOST)


def end_process(code: int) -> int:
    """The exit of a process that ran torch.distributed: flush the output, then `os._exit(code)`.

    Python's normal exit after a gloo run sometimes aborts in torch's C++ teardown ("terminate called without an
    active exception", SIGABRT) after all work and output are done: measured in 2 of 24 two-rank processes of the
    FSDP2 update test on a loaded 2-core CPU, torch 2.13.0, and the launcher then reports the whole run failed.
    Ending the process directly skips that teardown; everything the run writes is closed before this point.
    Processes that never started torch.distributed return `code` and exit normally."""
    if not _STARTED:
        return code
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class TorchDistributed:
    """`torch.distributed` over the launcher's env:// rendezvous; every operation bounded by `timeout_s`."""

    def __init__(self, timeout_s: float = 600.0):
        import torch.distributed as dist

        global _STARTED
        _STARTED = True

        self.dist, self.timeout_s = dist, float(timeout_s)
        self._rank0_first_calls = 0
        timeout = datetime.timedelta(seconds=self.timeout_s)
        self.backend = "nccl" if torch.cuda.is_available() else "gloo"
        if not dist.is_initialized():
            if self.backend == "nccl":
                torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            dist.init_process_group(self.backend, timeout=timeout)
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        # Objects (and barriers) over gloo: CPU memory, and gloo's monitored barrier names a missing rank.
        self.objects = (
            None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo", timeout=timeout)
        )

    def _run(self, op: str, what: str, fn):
        try:
            return fn()
        except (RuntimeError, ValueError, OSError) as e:  # gloo/NCCL report peer loss and timeouts this way
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            label = f"{op}({what})" if what else op
            self.fail(
                f"rank {self.rank} of {self.world_size}: {label} failed (timeout {self.timeout_s:g}s): "
                f"a peer rank died or stopped answering [{first[:300]}]"
            )

    def fail(self, message: str) -> NoReturn:
        """Print the error line and end this process now.

        Unwinding normally is not safe after a failed collective: tearing down the process group (from DDP's
        reducer, as the frames holding the roles are freed) joins gloo's worker thread while that thread waits
        for the GIL to release the failed operation's tensors, and the rank hangs forever instead of exiting."""
        print(f"pasodoble: error: {message}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(CollectiveError.exit_code)

    def broadcast(self, obj: Any, what: str = "") -> Any:
        box = [obj]
        self._run("broadcast", what, lambda: self.dist.broadcast_object_list(box, src=0, group=self.objects))
        return box[0]

    def all_gather(self, obj: Any, what: str = "") -> list[Any]:
        out: list[Any] = [None] * self.world_size
        self._run("all_gather", what, lambda: self.dist.all_gather_object(out, obj, group=self.objects))
        return out

    def barrier(self, what: str = "") -> None:
        timeout = datetime.timedelta(seconds=self.timeout_s)
        self._run(
            "barrier",
            what,
            lambda: self.dist.monitored_barrier(group=self.objects, timeout=timeout, wait_all_ranks=True),
        )

    def close(self) -> None:
        if self.dist.is_initialized():
            self.dist.destroy_process_group()

    def fail_on_peer_loss(self, error: BaseException, where: str) -> None:
        """One error line and exit, as for this class's own operations, when a collective of a sharding backend
        (not run through this class) lost a peer; any other error is left to the caller."""
        if peer_lost(error):
            first = str(error).strip().splitlines()[0]
            self.fail(
                f"rank {self.rank} of {self.world_size}: a collective in {where} failed (timeout "
                f"{self.timeout_s:g}s): a peer rank died or stopped answering [{first[:300]}]"
            )

    def rank0_first(self, what: str, work: Callable[[], Any], budget_s: float) -> None:
        """Through the launcher's key-value store, not a collective: a build may outlast `timeout_s`, which bounds
        every collective. Rank 0 posts "ok" or its error's first line; the others poll the key (`store.check`,
        which never times out), saying every `WAIT_NOTE_S` seconds that they wait, and end with one line on rank
        0's failure, on losing the store, or past `budget_s`."""
        key = f"pasodoble/rank0_first/{self._rank0_first_calls}"
        self._rank0_first_calls += 1
        store = self.dist.distributed_c10d._get_default_store()
        if self.rank == 0:
            try:
                work()
            except BaseException as e:
                store.set(key, f"failed: {_first_line(e)}")
                deadline = (
                    time.monotonic() + FAILURE_ACK_S
                )  # the store may live in this process: let them read
                while store.add(f"{key}/read", 0) < self.world_size - 1 and time.monotonic() < deadline:
                    time.sleep(0.1)
                raise
            store.set(key, "ok")
            return
        who = f"rank {self.rank} of {self.world_size}"
        start, next_note = time.monotonic(), WAIT_FIRST_NOTE_S
        while True:
            try:
                if store.check([key]):
                    break
            except Exception as e:  # the store's host is gone: the launcher is ending the run
                self.fail(f"{who}: lost the run while waiting for rank 0's {what} [{_first_line(e)[:300]}]")
            waited = time.monotonic() - start
            if waited >= budget_s:
                self.fail(
                    f"{who}: rank 0's {what} took longer than {budget_s:g}s; raise distributed.prepare_timeout_s "
                    "or run the preparation once on one process first"
                )
            if waited >= next_note:
                print(f"{who}: waiting for rank 0's {what} ({waited:.0f} s so far, at most {budget_s:g} s)",
                      file=sys.stderr, flush=True)  # fmt: skip
                next_note = waited + WAIT_NOTE_S
            time.sleep(WAIT_POLL_S)
        answer = store.get(key).decode()
        store.add(f"{key}/read", 1)
        if answer != "ok":
            self.fail(f"{who}: rank 0's {what} {answer}")


WAIT_POLL_S = 0.5  # how often a waiting rank looks at the store
WAIT_FIRST_NOTE_S = 2.0  # a quiet wait when rank 0 finds its preparation already done
WAIT_NOTE_S = 30.0  # then one progress line this often
FAILURE_ACK_S = 10.0  # a failed rank 0 waits this long for the others to read its error line


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _accelerate_cpu_single_launch() -> bool:
    """`accelerate launch --cpu --num_processes N>1` without mpirun starts ONE process with MASTER_ADDR set and no
    rank information; training would silently run on one rank."""
    return (
        os.environ.get("ACCELERATE_USE_CPU", "").lower() == "true"
        and "MASTER_ADDR" in os.environ
        and "WORLD_SIZE" not in os.environ
        and not any(k in os.environ for k in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"))
    )


def from_env(timeout_s: float = 600.0) -> SingleProcess | TorchDistributed:
    """The run's collective: `TorchDistributed` when the launcher started several ranks, else `SingleProcess`."""
    if _accelerate_cpu_single_launch():
        raise UserError(
            "accelerate launch --cpu --num_processes N started a single process (Accelerate runs several CPU "
            f"processes only under mpirun); {LAUNCH_HINT}"
        )
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return SingleProcess()
    missing = [k for k in ("RANK", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise UserError(f"WORLD_SIZE={world_size} but {', '.join(missing)} not set; {LAUNCH_HINT}")
    return TorchDistributed(timeout_s)


def share(n: int, world_size: int, rank: int) -> range:
    """Rank `rank`'s contiguous share of n items: sizes differ by at most one, the first n % world_size larger."""
    base, extra = divmod(n, world_size)
    lo = rank * base + min(rank, extra)
    return range(lo, lo + base + (1 if rank < extra else 0))


def share_sizes(n: int, world_size: int) -> list[int]:
    return [len(share(n, world_size, r)) for r in range(world_size)]
