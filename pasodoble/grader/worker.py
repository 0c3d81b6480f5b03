"""The check that runs inside a grader worker process: math-verify's `parse` + `verify` on one pair.

Why a separate process: math-verify's own timeouts use `signal.alarm`, which only works in the main thread, and a
SymPy computation cannot be interrupted from outside. So workers call math-verify with its timeouts disabled and
run each whole check (both parses and the comparison) under one CPU-time budget of their own, in their main thread:
a profiling interval timer (`ITIMER_PROF`, which counts the worker's CPU time, not the wall clock, so a busy
machine that starves the worker does not use up its budget) raises `CheckTimeout` at the limit (a `BaseException`,
so math-verify's `except Exception` cannot swallow it) and the worker answers "timeout" and goes on, warm, like
math-verify after its own timeouts. Work stuck inside one C call (a huge power with gmpy2 installed) never sees
that signal; for it the worker also sets its CPU rlimit (`RLIMIT_CPU`, whole seconds) to the budget plus
`pool.KILL_GRACE_S`, rounded up, so the kernel stops it (SIGXCPU) even when nobody is left to kill it, and the
parent (`pool.py`) reports "timeout" and starts a replacement. The pool runs this module as `python -m
pasodoble.grader.worker FD MEMORY_LIMIT_MB PARENT_PID`, FD being its end of a socket pair; not meant for users. A
worker never outlives the parent: on Linux it asks for SIGKILL when its parent goes (`PR_SET_PDEATHSIG`),
everywhere a watchdog thread exits when its parent PID changes, and a pipe broken by a parent's death ends the loop
without a traceback. Inside, math-verify runs with two verdict-keeping helpers installed: two-stage parsing
(`sll.py`) and the simplify disproof and solve memo (`shortcuts.py`).

Partial parses: when the whole `\\boxed{...}` does not parse, math-verify quietly tries smaller matches inside it
and takes the first that does, so `\\frac{1}{3} E_{1}+\\frac{2}{3} E_{2}` is read as `2/3` (its grammar rejects
`E_{1}`) and any answer whose value is 2/3 is then "correct". Verdicts stay math-verify's, but a probe on its
match extraction counts every answer (`partial_parses`) and gold (`gold_partial_parses`) whose value came from a
part only, so such verdicts can be found and checked.

Nothing is swallowed silently: math-verify catches the exceptions of its comparisons and logs them at debug level;
a logging handler counts those records (`mv_exceptions`) without changing the verdict. A prediction (or gold) that
math-verify cannot turn into a SymPy value is counted as a parse failure.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import math
import os
import resource
import signal
import socket
import sys
import threading
import time
from functools import lru_cache
from multiprocessing.connection import Connection
from typing import Any

import math_verify.parser as math_verify_parser
from math_verify import parse, verify
from sympy import Basic, MatrixBase

from pasodoble.grader import shortcuts, sll
from pasodoble.grader.pool import KILL_GRACE_S

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_PARENT_POLL_S = 0.5  # how often the watchdog looks for a changed parent PID


class _ExceptionCounter(logging.Handler):
    """Counts the log records that carry an exception (math-verify's swallowed comparison errors)."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.count += 1


_COUNTER = _ExceptionCounter()


def _install_counter() -> None:
    for name in ("math_verify.grader", "math_verify.parser"):
        logger = logging.getLogger(name)
        logger.handlers = [_COUNTER]
        logger.setLevel(logging.DEBUG)
        logger.propagate = (
            False  # the "timeout is disabled" warning is expected here: the parent owns the limit
        )


def wrap(answer: str) -> str:
    """The text math-verify parses for an answer string (gold or extracted prediction)."""
    return f"\\boxed{{{answer}}}"


_ORIGINAL_EXTRACT_MATCH = math_verify_parser.extract_match


class _Matches:
    """Matches math-verify tried and could not turn into a value, in the current parse."""

    failed = 0


def _probed_extract_match(match: Any, target_type: Any) -> Any:
    value, text = _ORIGINAL_EXTRACT_MATCH(match, target_type)
    if value is None:
        _Matches.failed += 1
    return value, text


def install_probe() -> None:
    """Count failed matches in math-verify's extraction (idempotent; results unchanged)."""
    math_verify_parser.extract_match = _probed_extract_match


def uninstall_probe() -> None:
    math_verify_parser.extract_match = _ORIGINAL_EXTRACT_MATCH


def _has_value(parsed: Any) -> bool:
    return any(isinstance(item, (Basic, MatrixBase)) for item in parsed)


def parse_answer(answer: str) -> tuple[tuple[Any, ...], bool]:
    """math-verify's parse of `\\boxed{answer}`, and whether its value came from only a part of it.

    Partial means a match math-verify tried first (the whole box) gave no value and a later, smaller one did; it
    is only detected while the probe is installed (`install_probe`, done by every worker).
    """
    _Matches.failed = 0
    parsed = tuple(parse(wrap(answer), parsing_timeout=None))
    return parsed, _Matches.failed > 0 and _has_value(parsed)


_parse_gold = lru_cache(maxsize=4096)(parse_answer)


def check(gold: str, pred: str) -> tuple[bool, dict[str, int]]:
    """math-verify's verdict for (gold answer, extracted prediction), with what went wrong on the way."""
    before = _COUNTER.count
    disproofs, solve_hits = shortcuts.stats()
    gold_parsed, gold_partial = _parse_gold(gold)
    pred_parsed, pred_partial = parse_answer(pred)
    correct = bool(verify(list(gold_parsed), list(pred_parsed), timeout_seconds=None))
    disproofs_after, solve_hits_after = shortcuts.stats()
    counters = {
        "parse_failures": int(not _has_value(pred_parsed)),
        "gold_parse_failures": int(not _has_value(gold_parsed)),
        "partial_parses": int(pred_partial),
        "gold_partial_parses": int(gold_partial),
        "mv_exceptions": _COUNTER.count - before,
        "simplify_skipped": disproofs_after - disproofs,
        "solve_reused": solve_hits_after - solve_hits,
    }
    return correct, counters


class CheckTimeout(BaseException):
    """Raised by the interval timer when a check has used up its CPU-time budget."""


def _on_timer(signum: int, frame: Any) -> None:
    raise CheckTimeout


def _set_cpu_rlimit(seconds: float | None) -> None:
    """Let the kernel stop this process once its total CPU time passes `seconds` (None: no limit of ours)."""
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = hard if seconds is None else math.ceil(seconds)
    if hard != resource.RLIM_INFINITY and soft != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def timed_check(gold: str, pred: str, timeout_s: float) -> tuple[bool, dict[str, int]]:
    """`check` under a CPU-time budget; raises `CheckTimeout` past it. Main thread only (it uses SIGPROF).

    Past the budget plus `KILL_GRACE_S` (work deaf to the signal, inside C code) the kernel ends the process.
    """
    _set_cpu_rlimit(time.process_time() + timeout_s + KILL_GRACE_S)
    signal.setitimer(signal.ITIMER_PROF, timeout_s)  # one-shot: once fired, nothing is left to cancel
    try:
        return check(gold, pred)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        _set_cpu_rlimit(None)


def _answer(gold: str, pred: str, timeout_s: float) -> tuple[str, bool, dict[str, int], str]:
    """(status, correct, counters, message) of one check; "timeout" and "error" are never correct."""
    try:
        correct, counters = timed_check(gold, pred, timeout_s)
    except CheckTimeout:
        return "timeout", False, {}, f"no verdict within {timeout_s:g} s of CPU time"
    except (Exception, RecursionError, MemoryError) as error:  # reported to the parent as status "error"
        return "error", False, {}, f"{type(error).__name__}: {str(error)[:200]}"
    return "ok", correct, counters, ""


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(_PARENT_POLL_S)
        if os.getppid() != parent_pid:
            os._exit(0)  # orphaned: nobody will read the verdict


def die_with_parent(parent_pid: int) -> None:
    """End this process when the process `parent_pid` that started it ends (at once on Linux, else within 0.5 s).

    The watchdog thread also covers systems without `prctl`; it cannot run while the main thread is inside C code
    that holds the GIL, which the Linux signal and the CPU rlimit cover.
    """
    if sys.platform.startswith("linux"):
        with contextlib.suppress(
            OSError, AttributeError
        ):  # no prctl in this libc: the watchdog still ends it
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(0)
    threading.Thread(target=_watch_parent, args=(parent_pid,), name="parent-watchdog", daemon=True).start()


def serve(conn: Connection, memory_limit_mb: int | None) -> None:
    """Worker loop: answer `(job_id, gold, pred, timeout_s)` with `(job_id, status, correct, counters, message)`.

    Returns (quietly) when the parent closes its end or goes away.
    """
    if memory_limit_mb is not None:
        limit = memory_limit_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a check stopped by the CPU rlimit leaves no core file
    signal.signal(
        signal.SIGINT, signal.SIG_IGN
    )  # Ctrl-C is the parent's to handle; it then stops its workers
    _install_counter()
    install_probe()  # counts partial parses; results unchanged
    sll.install()  # same parse results, a third less parse time (see sll.py)
    shortcuts.install()  # same verdicts, less time in simplify and solve (see shortcuts.py)
    signal.signal(signal.SIGPROF, _on_timer)
    # Load the ANTLR parser and SymPy's lazy parts now, so the first real check is not charged for them: a plain
    # comparison, then a polynomial and a rational identity (expansion and simplification). Without the identities
    # the first symbolic check of a worker cost 0.26 CPU-s against 0.02-0.2 for later ones.
    check("\\frac{1}{2}", "x^2+1")
    check("(y+1)^2", "\\boxed{y^2+2y+1}")
    check("\\frac{1}{y}+1", "\\boxed{\\frac{y+1}{y}}")
    _parse_gold.cache_clear()
    try:
        conn.send(("ready",))
        while True:
            message = conn.recv()
            if message is None:
                return
            job_id, gold, pred, timeout_s = message
            conn.send((job_id, *_answer(gold, pred, timeout_s)))
    except (EOFError, OSError):  # the parent closed the pipe or died (BrokenPipeError, ConnectionResetError)
        return


if __name__ == "__main__":
    fd, memory_mb, parent = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    die_with_parent(parent)
    serve(Connection(socket.socket(fileno=fd).detach()), memory_mb or None)
