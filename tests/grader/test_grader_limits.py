"""Hard limits: pathological inputs cost at most the time limit, from any thread, and the grader goes on.

The limit is CPU time, so wall-clock bounds here are hang guards only (generous; a loaded machine must pass them):
`test_grader_load.py` checks that load does not change verdicts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from pasodoble.grader import Grader, GraderConfig

LIMIT_S = 1.0
HANG_GUARD_S = 60.0  # far above any limit here: only a hang can reach it
TOWER = "\\boxed{9^{9^{9^{9}}}}"
NESTED = "\\boxed{" + "{" * 50_000 + "1" + "}" * 50_000 + "}"  # 100 KB of nested braces


@pytest.fixture(scope="module")
def strict_grader():
    with Grader(GraderConfig(timeout_s=LIMIT_S, num_workers=3, cache_size=0)) as grader:
        warm = grader.grade(["a+b", "a+c", "a+d"], ["\\boxed{b+a}", "\\boxed{c+a}", "\\boxed{d+a}"])
        assert [v.correct for v in warm.verdicts] == [True, True, True]  # all three workers are up
        yield grader


def _timed_grade(grader: Grader, gold: str, response: str):
    start = time.perf_counter()
    batch = grader.grade([gold], [response])
    return time.perf_counter() - start, batch


def test_pathological_inputs_from_several_threads_each_return_within_the_limit(strict_grader):
    inputs = [("1", TOWER), ("1", NESTED), ("2", TOWER)]
    with ThreadPoolExecutor(max_workers=len(inputs)) as pool:
        results = list(pool.map(lambda pair: _timed_grade(strict_grader, *pair), inputs))
    for seconds, batch in results:
        assert seconds < HANG_GUARD_S, seconds
        verdict = batch.verdicts[0]
        assert verdict.correct is False
        assert verdict.status in ("timeout", "error")  # never a hang, never a silent "ok"
        assert batch.counters["timeouts"] + batch.counters["errors"] == 1
    assert sum(batch.verdicts[0].status == "timeout" for _, batch in results) >= 2  # the towers
    after = strict_grader.grade(["x^2-1"], ["\\boxed{(x-1)(x+1)}"])
    assert after.verdicts[0].correct is True and after.verdicts[0].status == "ok"


def test_a_stuck_worker_does_not_block_other_callers(strict_grader):
    stuck = threading.Thread(target=strict_grader.grade, args=(["1"], [TOWER]))
    stuck.start()
    time.sleep(0.1)
    _, batch = _timed_grade(strict_grader, "2y+1", "\\boxed{1+2y}")  # 0.01 s of CPU against the tower's 1 s
    answered_first = stuck.is_alive()
    stuck.join()
    assert batch.verdicts[0].correct is True
    assert answered_first


def test_a_dying_worker_is_an_error_and_is_replaced():
    with Grader(GraderConfig(timeout_s=30.0, num_workers=1)) as grader:
        grader.grade(["a"], ["\\boxed{b}"])  # start the worker
        pool = grader._workers()
        (worker,) = pool._workers

        def kill_when_busy() -> None:
            while pool._idle.qsize():  # until the tower's check holds the worker
                time.sleep(0.01)
            time.sleep(0.2)
            os.kill(worker.process.pid, signal.SIGKILL)

        killer = threading.Thread(target=kill_when_busy)
        killer.start()
        seconds, batch = _timed_grade(grader, "1", TOWER)
        killer.join()
        assert seconds < HANG_GUARD_S
        assert batch.verdicts[0].status == "error"
        assert batch.counters["errors"] == 1 and batch.counters["worker_restarts"] == 1
        again = grader.grade(["x^2-1"], ["\\boxed{(x-1)(x+1)}"])
        assert again.verdicts[0].correct is True


def test_a_timeout_is_cached_and_still_reported():
    with Grader(GraderConfig(timeout_s=LIMIT_S, num_workers=1)) as grader:
        first = grader.grade(["1"], [TOWER])
        _, second = _timed_grade(grader, "1", TOWER)
    assert first.verdicts == second.verdicts and first.verdicts[0].status == "timeout"
    assert second.counters["timeouts"] == 1 and second.counters["cache_hits"] == 1
    assert second.counters["math_verify"] == 0


def test_a_slow_comparison_times_out_inside_its_worker_which_stays_up():
    gold = (
        "m l \\ddot{\\theta}(t)-m g \\sin \\theta(t)=f(t) \\cos \\theta(t)"  # SymPy's solve runs for seconds
    )
    with Grader(GraderConfig(timeout_s=0.5, num_workers=1, cache_size=0)) as grader:
        grader.start()
        seconds, batch = _timed_grade(grader, gold, f"\\boxed{{{gold}+1}}")
        assert batch.verdicts[0].status == "timeout" and batch.verdicts[0].correct is False
        assert batch.counters["timeouts"] == 1 and batch.counters["worker_restarts"] == 0
        assert seconds < HANG_GUARD_S, seconds
        again = grader.grade(["x^2-1"], ["\\boxed{(x-1)(x+1)}"])
        assert again.verdicts[0].correct is True and again.counters["worker_restarts"] == 0


_STUCK_IN_C = """
import hashlib, resource, signal
from pasodoble.grader import worker
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
signal.signal(signal.SIGPROF, worker._on_timer)
# About 20 s of CPU inside OpenSSL, which never lets Python's signal handlers run: C code deaf to the timer.
worker.check = lambda gold, pred: hashlib.pbkdf2_hmac("sha256", b"x", b"y", 10**8)
worker.timed_check("1", "1", 0.3)
"""


def test_a_check_stuck_in_c_code_is_ended_by_its_cpu_rlimit():
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", _STUCK_IN_C], timeout=HANG_GUARD_S, capture_output=True)
    assert done.returncode == -signal.SIGXCPU, done.stderr[-500:]
    assert time.monotonic() - start < HANG_GUARD_S


def test_a_worker_ended_by_its_cpu_rlimit_is_a_timeout_and_is_replaced():
    with Grader(GraderConfig(timeout_s=30.0, num_workers=1, cache_size=0)) as grader:
        grader.start()
        pool = grader._workers()
        (worker,) = pool._workers

        def signal_when_busy() -> None:
            while pool._idle.qsize():
                time.sleep(0.01)
            time.sleep(0.2)
            os.kill(worker.process.pid, signal.SIGXCPU)  # what the kernel sends at the CPU rlimit

        sender = threading.Thread(target=signal_when_busy)
        sender.start()
        batch = grader.grade(["1"], [TOWER])
        sender.join()
        assert batch.verdicts[0].status == "timeout" and batch.verdicts[0].correct is False
        assert batch.counters["timeouts"] == 1 and batch.counters["worker_restarts"] == 1
        assert grader.grade(["x^2-1"], ["\\boxed{(x-1)(x+1)}"]).verdicts[0].correct is True
