"""The check that runs inside a grader worker process: math-verify's `parse` + `verify` on one pair.

Why a separate process: math-verify's own timeouts use `signal.alarm`, which only works in the main thread, and a
SymPy computation cannot be interrupted from outside. So workers call math-verify with its timeouts disabled and run
each whole check (both parses and the comparison) under one interval timer of their own, in their main thread: at the
limit the timer raises `CheckTimeout` (a `BaseException`, so math-verify's `except Exception` cannot swallow it) and
the worker answers "timeout" and goes on, warm, like math-verify after its own timeouts. Work stuck inside C code
(a huge integer power) never sees the signal; for that the parent (`pool.py`) kills the process a grace period
later. The pool runs this module as `python -m pasodoble.grader.worker FD MEMORY_LIMIT_MB`, FD being its end of a
socket pair; not meant for users. Inside, math-verify runs with two verdict-keeping helpers installed: two-stage
parsing (`sll.py`) and the simplify disproof and solve memo (`shortcuts.py`).

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

import logging
import resource
import signal
import socket
import sys
from functools import lru_cache
from multiprocessing.connection import Connection
from typing import Any

import math_verify.parser as math_verify_parser
from math_verify import parse, verify
from sympy import Basic, MatrixBase

from pasodoble.grader import shortcuts, sll


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
    """Raised by the interval timer when a check passes its limit."""


def _on_timer(signum: int, frame: Any) -> None:
    raise CheckTimeout


def timed_check(gold: str, pred: str, timeout_s: float) -> tuple[bool, dict[str, int]]:
    """`check` under a wall-clock limit; raises `CheckTimeout` past it. Main thread only (it uses SIGALRM)."""
    signal.setitimer(signal.ITIMER_REAL, timeout_s)  # one-shot: once fired, nothing is left to cancel
    try:
        return check(gold, pred)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _answer(gold: str, pred: str, timeout_s: float) -> tuple[str, bool, dict[str, int], str]:
    """(status, correct, counters, message) of one check; "timeout" and "error" are never correct."""
    try:
        correct, counters = timed_check(gold, pred, timeout_s)
    except CheckTimeout:
        return "timeout", False, {}, f"no verdict within {timeout_s:g} s"
    except (Exception, RecursionError, MemoryError) as error:  # reported to the parent as status "error"
        return "error", False, {}, f"{type(error).__name__}: {str(error)[:200]}"
    return "ok", correct, counters, ""


def serve(conn: Connection, memory_limit_mb: int | None) -> None:
    """Worker loop: answer `(job_id, gold, pred, timeout_s)` with `(job_id, status, correct, counters, message)`."""
    if memory_limit_mb is not None:
        limit = memory_limit_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    _install_counter()
    install_probe()  # counts partial parses; results unchanged
    sll.install()  # same parse results, a third less parse time (see sll.py)
    shortcuts.install()  # same verdicts, less time in simplify and solve (see shortcuts.py)
    signal.signal(signal.SIGALRM, _on_timer)
    # Load the ANTLR parser and SymPy's lazy parts now, so the first real check is not charged for them.
    check("\\frac{1}{2}", "x^2+1")
    _parse_gold.cache_clear()
    conn.send(("ready",))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        job_id, gold, pred, timeout_s = message
        conn.send((job_id, *_answer(gold, pred, timeout_s)))


if __name__ == "__main__":
    fd, memory_mb = int(sys.argv[1]), int(sys.argv[2])
    serve(Connection(socket.socket(fileno=fd).detach()), memory_mb or None)
