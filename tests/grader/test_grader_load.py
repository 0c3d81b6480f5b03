"""Verdicts do not depend on machine load: checks run under a CPU-time limit, with a wall-clock backstop.

`busy_cpu` oversubscribes the CPU with busy-loop processes (four per core, each ending by itself after two minutes,
killed by PID when the block ends) while symbolic pairs are graded under a tight limit: every verdict must be the unloaded
one and nothing may time out. With a wall-clock limit the starved workers ran past it and correct answers came
back "timeout". Also here: a worker that hangs without using CPU is caught by the backstop (counted as
`wall_timeouts`, not cached), an answer identical to a gold too long to parse is right without a parse, and a
restart is counted once however many threads were waiting on it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from pasodoble.grader import Grader, GraderConfig

# Correct pairs whose checks cost math-verify 0.01-0.15 s of CPU each.
SYMBOLIC = [
    ("x^2-1", "(x-1)(x+1)"),
    ("(a+b)^2", "a^2+2ab+b^2"),
    ("\\frac{1}{x}+\\frac{1}{y}", "\\frac{x+y}{xy}"),
    ("(x-1)(x-2)(x-3)", "x^3-6x^2+11x-6"),
    ("\\frac{x^2-4}{x-2}", "x+2"),
    ("\\sqrt{8}", "2\\sqrt{2}"),
]
WRONG = [("x^2-1", "(x-1)(x+2)"), ("(a+b)^2", "a^2+b^2")]
LIMIT_S = 0.5  # CPU seconds: several times what any pair above needs
SLOW_GOLD = (
    "m l \\ddot{\\theta}(t)-m g \\sin \\theta(t)=f(t) \\cos \\theta(t)"  # SymPy's solve runs for seconds
)
_BUSY_LOOP = "import time\nend = time.time() + 120\nwhile time.time() < end:\n    pass\n"


@contextmanager
def busy_cpu() -> Iterator[list[subprocess.Popen]]:
    """Four busy-loop processes per core while the block runs."""
    loops = [subprocess.Popen([sys.executable, "-c", _BUSY_LOOP]) for _ in range(4 * (os.cpu_count() or 1))]
    try:
        yield loops
    finally:
        for loop in loops:
            loop.kill()
            loop.wait(timeout=10)


def test_symbolic_pairs_keep_their_verdicts_on_an_oversubscribed_cpu():
    pairs = SYMBOLIC + WRONG
    golds = [gold for gold, _ in pairs]
    answers = [f"\\boxed{{{answer}}}" for _, answer in pairs]
    expected = [True] * len(SYMBOLIC) + [False] * len(WRONG)
    with Grader(GraderConfig(timeout_s=LIMIT_S, num_workers=2, cache_size=0)) as grader:
        grader.start()  # start-up has its own limit; started before the load to keep the test short
        # The unloaded verdicts first: this also warms both workers (SymPy loads parts of itself on first use,
        # a one-time cost near the tight limit that a check under load would otherwise pay inflated).
        batches = [grader.grade(golds, answers), grader.grade(golds, answers)]
        with busy_cpu() as loops:
            batches.append(grader.grade(golds, answers))
            assert all(loop.poll() is None for loop in loops)  # the CPU was oversubscribed throughout
    for i, batch in enumerate(batches):  # 0 and 1 unloaded, 2 under load
        assert [v.correct for v in batch.verdicts] == expected, f"batch {i}"
        assert {v.status for v in batch.verdicts} == {"ok"}, f"batch {i}"
        assert batch.counters["timeouts"] == batch.counters["wall_timeouts"] == 0
        assert batch.counters["math_verify"] == len(pairs)  # all of them went to a worker


def test_an_answer_identical_to_a_gold_too_long_to_parse_is_right_without_a_parse():
    gold = "7" * 10**6
    with Grader(GraderConfig(timeout_s=LIMIT_S, num_workers=1)) as grader:
        batch = grader.grade([gold, gold], [f"\\boxed{{{gold}}}", f"\\boxed{{{gold[:-1]}8}}"], extract=True)
        assert batch.verdicts[0].correct is True and batch.verdicts[0].status == "ok"
        assert batch.counters["fast_path"] == 1 and batch.counters["timeouts"] <= 1
        assert batch.verdicts[1].correct is False


def _worker_pids(grader: Grader) -> list[int]:
    return [worker.process.pid for worker in grader._workers()._workers]


def test_a_worker_that_hangs_without_cpu_is_stopped_by_the_wall_clock_backstop_and_not_cached():
    config = GraderConfig(timeout_s=LIMIT_S, wall_limit_factor=2.0, num_workers=1)
    with Grader(config) as grader:
        grader.start()
        (pid,) = _worker_pids(grader)
        os.kill(pid, signal.SIGSTOP)  # alive but never scheduled: its CPU clock stands still
        start = time.monotonic()
        hung = grader.grade([SLOW_GOLD], [f"\\boxed{{{SLOW_GOLD}+1}}"])
        seconds = time.monotonic() - start
        assert hung.verdicts[0].status == "timeout" and hung.verdicts[0].correct is False
        assert hung.counters["wall_timeouts"] == 1 and hung.counters["timeouts"] == 0
        assert hung.counters["worker_restarts"] == 1
        assert seconds < 60  # hang guard: the backstop is 2 s
        again = grader.grade([SLOW_GOLD], [f"\\boxed{{{SLOW_GOLD}+1}}"])  # not cached: checked again
        assert again.counters["cache_hits"] == 0 and again.counters["math_verify"] == 1
        assert again.verdicts[0].status == "timeout" and again.counters["timeouts"] == 1
        assert again.counters["wall_timeouts"] == 0 and again.counters["worker_restarts"] == 0


def test_one_restart_is_counted_once_however_many_threads_wait_on_it():
    with Grader(GraderConfig(timeout_s=60.0, num_workers=1, cache_size=0)) as grader:
        grader.start()
        pool = grader._workers()
        (pid,) = _worker_pids(grader)
        batches = {}

        def grade(name: str, gold: str, answer: str) -> None:
            batches[name] = grader.grade([gold], [f"\\boxed{{{answer}}}"])

        slow = threading.Thread(target=grade, args=("slow", SLOW_GOLD, f"{SLOW_GOLD}+1"))
        slow.start()
        while pool._idle.qsize():  # until the slow check holds the only worker
            time.sleep(0.01)
        time.sleep(0.2)
        waiting = [
            threading.Thread(target=grade, args=(f"wait{i}", gold, answer))
            for i, (gold, answer) in enumerate(SYMBOLIC[:3])
        ]
        for thread in waiting:
            thread.start()
        time.sleep(0.5)  # all three wait for the worker
        os.kill(pid, signal.SIGKILL)
        for thread in [slow, *waiting]:
            thread.join(timeout=120)
        assert pool.restarts == 1
        assert batches["slow"].verdicts[0].status == "error"
        assert all(batches[f"wait{i}"].verdicts[0].correct for i in range(3))
        assert sum(batch.counters["worker_restarts"] for batch in batches.values()) == 1
