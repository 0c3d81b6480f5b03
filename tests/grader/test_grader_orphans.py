"""Worker processes end with their parent: a parent killed in the middle of a long check leaves no worker behind and
no traceback (they used to run on until their own timer fired, then print a BrokenPipeError).

The parent starts its grader from a short-lived thread first: Linux's parent-death signal follows the thread that
started a process, so a worker started from such a thread must survive that thread's end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

_PARENT = textwrap.dedent(
    """
    import sys, threading
    from pasodoble.grader import Grader, GraderConfig

    grader = Grader(GraderConfig(timeout_s=120.0, num_workers=2, cache_size=0))
    starter = threading.Thread(target=grader.start)
    starter.start()
    starter.join()  # the thread that started the workers is gone
    assert grader.grade(["x^2-1"], ["\\\\boxed{(x-1)(x+1)}"]).verdicts[0].correct
    print(" ".join(str(worker.process.pid) for worker in grader._workers()._workers), flush=True)
    gold = "m l \\\\ddot{\\\\theta}(t)-m g \\\\sin \\\\theta(t)=f(t) \\\\cos \\\\theta(t)"
    grader.grade([gold, gold], [f"\\\\boxed{{{gold}+1}}", f"\\\\boxed{{{gold}+2}}"])  # seconds of solve each
    """
)


def _gone(pid: int) -> bool:
    """True when no process `pid` runs any more (a zombie waiting for its reaper counts as gone)."""
    stat = Path(f"/proc/{pid}/stat")
    if Path("/proc/self").exists():
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
        except FileNotFoundError:
            return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_workers_exit_quietly_when_their_parent_is_killed_mid_check(tmp_path):
    stderr_path = tmp_path / "stderr.txt"
    with stderr_path.open("w") as stderr:
        parent = subprocess.Popen(
            [sys.executable, "-c", _PARENT],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        )
        try:
            pids = [int(pid) for pid in parent.stdout.readline().split()]
            assert len(pids) == 2, stderr_path.read_text()
            time.sleep(1.0)  # both workers are inside their long checks
            assert not any(_gone(pid) for pid in pids)
            parent.send_signal(signal.SIGKILL)
            parent.wait(timeout=10)
            deadline = time.monotonic() + 10  # hang guard; the checks' own limit is 120 s
            while not all(_gone(pid) for pid in pids) and time.monotonic() < deadline:
                time.sleep(0.05)
            left = [pid for pid in pids if not _gone(pid)]
        finally:
            if parent.poll() is None:
                parent.kill()
                parent.wait(timeout=10)
    for pid in left:  # leave nothing running even when the test fails
        os.kill(pid, signal.SIGKILL)
    assert left == []
    time.sleep(0.2)
    assert "Traceback" not in stderr_path.read_text()
