"""What a verdict means and how big it may be: call-mode comparisons as Python's `==`, and byte caps on the
verdict in the runner and in the launcher's reader."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time

import pytest

from pasodoble.sandbox import Job, SandboxConfig, check
from pasodoble.sandbox.jail import _parse, _read_until

# (returned, expected, status): what `assert candidate(...) == expected` would say in Python
GOLDEN = [
    ({"b": 1, "a": 2}, {"a": 2, "b": 1}, "passed"),
    (-0.0, 0.0, "passed"),
    ([0.0, -0.0], [-0.0, 0.0], "passed"),
    (1.0, 1, "passed"),
    (True, 1, "passed"),
    ({1: [2, (3,)]}, {1: [2, (3,)]}, "passed"),
    ({3, 1, 2}, {1, 2, 3}, "passed"),
    (frozenset({1}), {1}, "passed"),
    (0.1 + 0.2, 0.3, "failed"),  # no float tolerance
    (math.nan, math.nan, "failed"),  # NaN equals nothing
    ([1, 2], (1, 2), "failed"),
    ("1", 1, "failed"),
    (None, 0, "failed"),
    ({"a": 1}, {"a": 1, "b": 2}, "failed"),
    (b"x", "x", "failed"),
]


@pytest.mark.sandbox
def test_call_mode_compares_as_python_equality_golden_cases():
    returns = repr([g[0] for g in GOLDEN]).replace("nan", "float('nan')")
    program = f"def f(i):\n    return RETURNS[i]\n\nRETURNS = {returns}\n"
    got = [  # one launch per case: a verdict is the first mismatch only
        check(Job(program=program, entry_point="f", calls=((i,),), expected=(want,)), SandboxConfig()).status
        for i, (_, want, _) in enumerate(GOLDEN)
    ]
    assert got == [g[2] for g in GOLDEN]
    assert [
        ("passed" if ret == want else "failed") for ret, want, _ in GOLDEN
    ] == got  # the table is Python's


def test_the_reader_stops_at_the_cap():
    read_end, write_end = os.pipe()
    writer = threading.Thread(target=lambda: (os.write(write_end, b"x" * (3 << 20)), os.close(write_end)))
    writer.start()
    got = _read_until(read_end, time.monotonic() + 30, 1 << 20)
    os.close(read_end)
    writer.join()
    assert isinstance(got, int) and (1 << 20) < got <= (1 << 20) + (1 << 16)
    verdict = _parse(got, None)
    assert verdict["status"] == "output_too_large" and verdict["outputs"] == []


@pytest.mark.sandbox
def test_a_huge_return_value_is_output_too_large_and_costs_the_reader_at_most_the_cap():
    """The issue's attack: 60 MiB from each of 5 calls. Run in a fresh interpreter so its peak RSS is this check's."""
    code = (
        "import resource, sys\nfrom pasodoble.sandbox import Job, SandboxConfig, check\n"
        "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "v = check(Job(program=\"def f(i):\\n    return 'x' * (60 << 20)\", entry_point='f', "
        "calls=tuple((i,) for i in range(5))), SandboxConfig(timeout_s=30.0))\n"
        "peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print(v.status, len(v.outputs), (peak - base) * 1024)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    status, outputs, grown = out.stdout.split()
    assert (status, outputs) == ("output_too_large", "0")
    assert int(grown) <= SandboxConfig().max_verdict_bytes


@pytest.mark.sandbox
def test_a_huge_value_seen_by_assert_style_tests_is_output_too_large():
    job = Job(
        program="def f(x):\n    return 'x' * (8 << 20)",
        entry_point="f",
        tests="def check(candidate):\n    assert candidate(1) == 'x'\n",
    )
    verdict = check(job, SandboxConfig())
    assert verdict.status == "output_too_large" and verdict.detail.startswith("a return value or the outputs")
