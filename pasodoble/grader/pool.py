"""A pool of killable worker processes that run math-verify checks under a hard wall-clock limit.

Why: a SymPy computation (`9^{9^{9^{9}}}`, 100 KB of nested braces) can run for hours and cannot be interrupted, and
math-verify's `signal.alarm` timeout fails off the main thread. Here every check runs in a worker process; the
worker stops its own check at the limit and answers `timeout` (`worker.py`), staying warm; the calling thread waits
on the worker's pipe until the deadline plus a grace period (`KILL_GRACE_S`, for work stuck in C code that the
worker's timer cannot interrupt), and past it kills the process (SIGKILL), starts a replacement and reports
`timeout`. A worker that dies (segfault, out of memory) is reported as `error` and replaced. Any number of threads may call `run` at once: workers are borrowed from a shared idle queue one check at
a time, so a stuck worker holds up nobody but its own check, and only for its limit.

How: `WorkerPool(num_workers).run([(gold, pred), ...], timeout_s)`; processes start lazily on first use and stop
in `close()`. A worker is a fresh interpreter (`python -m pasodoble.grader.worker FD`) talking over a socket pair,
not a `multiprocessing` child: nothing is forked from a threaded parent and the caller's `__main__` module is never
re-imported, so a grader works from any script, thread or notebook. POSIX only (pass_fds). A replacement imports
math-verify again (about a second of CPU) while the other workers go on. The limit counts from the moment a ready
worker receives the check; start-up has its own, larger limit.
"""

from __future__ import annotations

import os
import queue
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_for_pipes
from pathlib import Path
from typing import Any

WORKER_MODULE = "pasodoble.grader.worker"

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
_IDLE_POLL_S = 0.05  # how often a caller with waiting checks looks for a free worker
KILL_GRACE_S = (
    0.5  # how long past its limit a check may take to answer "timeout" itself before its worker is killed
)


@dataclass
class CheckResult:
    """What a worker said about one pair."""

    status: str  # "ok" | "timeout" | "error"
    correct: bool = False
    counters: dict[str, int] = field(default_factory=dict)
    message: str = ""


def _worker_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
    env["OMP_NUM_THREADS"] = "1"  # a worker is one core's worth of SymPy
    return env


class _Worker:
    """One worker process slot; (re)started on demand."""

    def __init__(self, memory_limit_mb: int | None):
        self._memory_limit_mb = memory_limit_mb
        self.process: subprocess.Popen | None = None
        self.conn: Connection | None = None
        self.ready = False

    def start(self) -> None:
        parent_end, child_end = socket.socketpair()
        command = [
            sys.executable,
            "-m",
            WORKER_MODULE,
            str(child_end.fileno()),
            str(self._memory_limit_mb or 0),
        ]
        self.process = subprocess.Popen(
            command,
            pass_fds=(child_end.fileno(),),
            env=_worker_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            close_fds=True,
        )
        child_end.close()
        self.conn, self.ready = Connection(parent_end.detach()), False

    def wait_ready(self, startup_timeout_s: float) -> bool:
        """Wait up to the limit for the ready message; 0 s asks without waiting. False if not ready yet."""
        if self.process is None:
            self.start()
        if self.ready:
            return True
        if startup_timeout_s == 0:
            if not self.conn.poll(0):
                return False
        elif not self.conn.poll(startup_timeout_s):
            self.kill()
            raise RuntimeError(f"grader worker did not start within {startup_timeout_s:.0f} s")
        try:
            self.conn.recv()
        except (EOFError, OSError) as error:
            self.kill()
            raise RuntimeError("grader worker died while starting (is math-verify installed?)") from error
        self.ready = True
        return True

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.conn.close()
        self.process, self.conn, self.ready = None, None, False

    def stop(self) -> None:
        if self.process is None:
            return
        try:
            self.conn.send(None)
            self.process.wait(timeout=1)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass  # already gone or slow to leave: kill() below ends it either way
        self.kill()


class WorkerPool:
    """`num_workers` killable math-verify processes shared by all calling threads."""

    def __init__(
        self,
        num_workers: int = 1,
        *,
        memory_limit_mb: int | None = None,
        startup_timeout_s: float = 120.0,
    ):
        self._workers = [_Worker(memory_limit_mb) for _ in range(num_workers)]
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        for worker in self._workers:
            self._idle.put(worker)
        self._startup_timeout_s = startup_timeout_s
        self._lock = threading.Lock()
        self._closed = False
        self.restarts = 0  # workers killed and replaced (timeouts and crashes)

    def start(self) -> None:
        """Start every worker now and wait until each is ready (instead of lazily at the first check)."""
        for worker in self._workers:
            if worker.process is None:
                worker.start()
        for worker in self._workers:
            worker.wait_ready(self._startup_timeout_s)

    def _acquire(self, block: bool) -> _Worker | None:
        """An idle ready worker; without `block`, None rather than wait (checks in flight have deadlines)."""
        try:
            worker = self._idle.get(block=block)
        except queue.Empty:
            return None
        try:
            ready = worker.wait_ready(self._startup_timeout_s if block else 0)
        except RuntimeError:
            self._idle.put(worker)
            raise
        if not ready:
            self._idle.put(worker)
            return None
        return worker

    def _replace(self, worker: _Worker) -> None:
        worker.kill()
        with self._lock:
            self.restarts += 1
        worker.start()  # the replacement warms up while others work; the next borrower waits until it is ready

    def run(self, pairs: list[tuple[str, str]], timeout_s: float) -> list[CheckResult]:
        """Check every (gold, pred) pair with math-verify, each under `timeout_s` seconds of wall clock."""
        if self._closed:
            raise RuntimeError("the grader pool is closed")
        results: list[CheckResult | None] = [None] * len(pairs)
        in_flight: dict[Any, tuple[_Worker, int, float]] = {}
        try:
            self._drive(pairs, timeout_s, results, in_flight)
        except BaseException:
            for worker, _, _ in in_flight.values():  # their answers can no longer be matched to a request
                self._replace(worker)
                self._idle.put(worker)
            raise
        return [result for result in results if result is not None]

    def _drive(
        self,
        pairs: list[tuple[str, str]],
        timeout_s: float,
        results: list[CheckResult | None],
        in_flight: dict[Any, tuple[_Worker, int, float]],
    ) -> None:
        pending = deque(range(len(pairs)))
        while pending or in_flight:
            while pending:
                worker = self._acquire(block=not in_flight)
                if worker is None:
                    break
                index = pending.popleft()
                worker.conn.send((index, *pairs[index], timeout_s))
                in_flight[worker.conn] = (worker, index, time.monotonic() + timeout_s + KILL_GRACE_S)
            wait_s = min(deadline for _, _, deadline in in_flight.values()) - time.monotonic()
            if pending:
                wait_s = min(wait_s, _IDLE_POLL_S)  # a worker may become free or ready meanwhile
            for conn in wait_for_pipes(list(in_flight), timeout=max(0.0, wait_s)):
                worker, index, _ = in_flight.pop(conn)
                results[index] = self._receive(worker)
            now = time.monotonic()
            for conn, (worker, index, deadline) in list(in_flight.items()):
                if now >= deadline:
                    del in_flight[conn]
                    self._replace(worker)
                    self._idle.put(worker)
                    results[index] = CheckResult("timeout", message=f"no verdict within {timeout_s:g} s")

    def _receive(self, worker: _Worker) -> CheckResult:
        try:
            _, status, correct, counters, message = worker.conn.recv()
        except (EOFError, OSError):
            code = worker.process.poll() if worker.process is not None else None
            self._replace(worker)
            self._idle.put(worker)
            return CheckResult("error", message=f"grader worker died (exit code {code})")
        self._idle.put(worker)
        return CheckResult(status, correct, counters, message)

    def close(self) -> None:
        """Stop every worker process; idempotent."""
        self._closed = True
        for worker in self._workers:
            worker.stop()
