"""A pool of killable worker processes that run math-verify checks under a CPU-time limit and a wall-clock backstop.

Why: a SymPy computation (`9^{9^{9^{9}}}`, 100 KB of nested braces) can run for hours and cannot be interrupted, and
math-verify's `signal.alarm` timeout fails off the main thread. Here every check runs in a worker process. The limit
is the worker's CPU time, not the wall clock, so a verdict does not depend on how busy the machine is: a worker
starved by other processes simply takes longer. The worker stops its own check at the limit and answers `timeout`
(`worker.py`), staying warm; work stuck in C code, deaf to the worker's timer, runs into the worker's CPU rlimit
`KILL_GRACE_S` later (rounded up to whole seconds) and the kernel ends it; the pool reports `timeout` and starts a
replacement. Against hangs that use no CPU (a worker that stopped reading, a stopped process) the calling thread
looks again every `wall_limit_factor` times the limit of wall clock: a worker whose CPU time has grown since the
last look is starved, not hung, and keeps its check (its CPU limit still ends it); one whose CPU time stood still is
killed (SIGKILL), replaced, and its check reported as `wall_timeout`, which the grader counts apart and does not
cache. Where `/proc` cannot tell a process's CPU time, the first look kills. A worker that dies otherwise (segfault,
out of memory) is reported as `error` and replaced. Any number of threads may call `run` at once: workers are
borrowed from a shared idle queue one check at a time, so a stuck worker holds up nobody but its own check.

How: `WorkerPool(num_workers).run([(gold, pred), ...], timeout_s)`; processes start lazily on first use and stop in
`close()`. A worker is a fresh interpreter (`python -m pasodoble.grader.worker FD ...`) talking over a socket pair,
not a `multiprocessing` child: nothing is forked from a threaded parent and the caller's `__main__` module is never
re-imported, so a grader works from any script, thread or notebook. Workers are started from the main thread or
from one long-lived spawner thread, never from a short-lived caller thread, because Linux's parent-death signal
(which a worker asks for, so it never outlives this process) fires when the *thread* that started it ends. POSIX
only (pass_fds). A replacement imports math-verify again (about a second of CPU) while the other workers go on. The
limit counts from the moment a ready worker receives the check; start-up has its own, larger wall-clock limit. Each
result says how many workers were replaced for it (`CheckResult.restarts`), so every restart is counted once, by
the call that caused it.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_for_pipes
from pathlib import Path
from typing import Any

WORKER_MODULE = "pasodoble.grader.worker"

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
_IDLE_POLL_S = 0.05  # how often a caller with waiting checks looks for a free worker
KILL_GRACE_S = (
    0.5  # CPU time past its limit a check may take to answer "timeout" itself before the kernel stops it
)
_RLIMIT_ROUNDING_S = 1.0  # the CPU rlimit counts whole seconds


_InFlight = tuple[
    "_Worker", int, float, "int | None"
]  # worker, pair index, backstop deadline, its CPU ticks then


@dataclass
class CheckResult:
    """What a worker said about one pair."""

    status: str  # "ok" | "timeout" (CPU-time limit) | "wall_timeout" (wall-clock backstop) | "error"
    correct: bool = False
    counters: dict[str, int] = field(default_factory=dict)
    message: str = ""
    restarts: int = 0  # workers killed or found dead, and replaced, while this pair was being checked


def _worker_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
    env["OMP_NUM_THREADS"] = "1"  # a worker is one core's worth of SymPy
    return env


def wall_limit_s(timeout_s: float, wall_limit_factor: float) -> float:
    """Wall-clock seconds of the backstop period, never shorter than the CPU limit could take to fire."""
    return max(timeout_s * wall_limit_factor, timeout_s + KILL_GRACE_S + _RLIMIT_ROUNDING_S)


def cpu_ticks(pid: int) -> int | None:
    """CPU time a process has used so far (user + system, in clock ticks), or None where /proc cannot tell."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None


class _Spawner:
    """Starts processes from one long-lived daemon thread (one per process id, so a forked copy makes its own)."""

    _lock = threading.Lock()
    _queue: queue.SimpleQueue | None = None
    _pid: int | None = None

    @classmethod
    def popen(cls, command: list[str], **kwargs: Any) -> subprocess.Popen:
        if threading.current_thread() is threading.main_thread():
            return subprocess.Popen(command, **kwargs)
        future: Future = Future()
        cls._requests().put((command, kwargs, future))
        return future.result()

    @classmethod
    def _requests(cls) -> queue.SimpleQueue:
        with cls._lock:
            if cls._pid != os.getpid():
                cls._queue, cls._pid = queue.SimpleQueue(), os.getpid()
                threading.Thread(
                    target=cls._serve, args=(cls._queue,), name="grader-spawner", daemon=True
                ).start()
            return cls._queue

    @staticmethod
    def _serve(requests: queue.SimpleQueue) -> None:
        while True:
            command, kwargs, future = requests.get()
            try:
                future.set_result(subprocess.Popen(command, **kwargs))
            except BaseException as error:  # handed to the waiting caller, which raises it
                future.set_exception(error)


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
            str(os.getpid()),
        ]
        self.process = _Spawner.popen(
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
        wall_limit_factor: float = 10.0,
    ):
        self._workers = [_Worker(memory_limit_mb) for _ in range(num_workers)]
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        for worker in self._workers:
            self._idle.put(worker)
        self._startup_timeout_s = startup_timeout_s
        self._wall_limit_factor = wall_limit_factor
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
        """Check every (gold, pred) pair with math-verify, each under `timeout_s` seconds of the worker's CPU time."""
        if self._closed:
            raise RuntimeError("the grader pool is closed")
        results: list[CheckResult | None] = [None] * len(pairs)
        in_flight: dict[Any, _InFlight] = {}
        try:
            self._drive(pairs, timeout_s, results, in_flight)
        except BaseException:
            for worker, *_ in in_flight.values():  # their answers can no longer be matched to a request
                self._replace(worker)
                self._idle.put(worker)
            raise
        return [result for result in results if result is not None]

    def _drive(
        self,
        pairs: list[tuple[str, str]],
        timeout_s: float,
        results: list[CheckResult | None],
        in_flight: dict[Any, _InFlight],
    ) -> None:
        pending = deque(range(len(pairs)))
        wall_s = wall_limit_s(timeout_s, self._wall_limit_factor)
        resent: set[int] = set()  # pairs whose first worker had died while idle
        while pending or in_flight:
            while pending:
                worker = self._acquire(block=not in_flight)
                if worker is None:
                    break
                index = pending.popleft()
                try:
                    worker.conn.send((index, *pairs[index], timeout_s))
                except OSError:  # died while idle (killed, out of memory): the check never started
                    if index not in resent:
                        resent.add(index)
                        self._replace(worker)
                        self._idle.put(worker)
                        pending.appendleft(index)
                        continue
                    # a second dead worker in a row: _receive reads its end of file and reports an error
                in_flight[worker.conn] = (
                    worker,
                    index,
                    time.monotonic() + wall_s,
                    cpu_ticks(worker.process.pid),
                )
            wait_s = min(deadline for _, _, deadline, _ in in_flight.values()) - time.monotonic()
            if pending:
                wait_s = min(wait_s, _IDLE_POLL_S)  # a worker may become free or ready meanwhile
            for conn in wait_for_pipes(list(in_flight), timeout=max(0.0, wait_s)):
                worker, index, *_ = in_flight.pop(conn)
                results[index] = self._receive(worker, timeout_s)
                results[index].restarts += index in resent
            now = time.monotonic()
            for conn, (worker, index, deadline, ticks) in list(in_flight.items()):
                if now >= deadline:
                    ticks_now = cpu_ticks(worker.process.pid)
                    if ticks is not None and ticks_now is not None and ticks_now > ticks:
                        in_flight[conn] = (worker, index, now + wall_s, ticks_now)  # starved, not hung
                        continue
                    del in_flight[conn]
                    self._replace(worker)
                    self._idle.put(worker)
                    results[index] = CheckResult(
                        "wall_timeout",
                        message=f"its worker used no CPU for {wall_s:g} s of wall clock (hung)",
                        restarts=1,
                    )

    def _receive(self, worker: _Worker, timeout_s: float) -> CheckResult:
        try:
            _, status, correct, counters, message = worker.conn.recv()
        except (EOFError, OSError):
            try:
                code = worker.process.wait(timeout=5) if worker.process is not None else None
            except subprocess.TimeoutExpired:
                code = None  # closed its end but still running: _replace kills it
            self._replace(worker)
            self._idle.put(worker)
            if code == -signal.SIGXCPU:  # its CPU rlimit: stuck past the limit inside C code
                return CheckResult(
                    "timeout", message=f"no verdict within {timeout_s:g} s of CPU time", restarts=1
                )
            return CheckResult("error", message=f"grader worker died (exit code {code})", restarts=1)
        self._idle.put(worker)
        return CheckResult(status, correct, counters, message)

    def close(self) -> None:
        """Stop every worker process; idempotent."""
        self._closed = True
        for worker in self._workers:
            worker.stop()
