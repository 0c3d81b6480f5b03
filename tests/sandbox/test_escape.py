"""The escape and robustness suite: every case gets its exact verdict and leaves the world outside unchanged."""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from pasodoble.sandbox import SandboxConfig, check
from tests.sandbox.cases import CASES, OUTSIDE_TMP, SECRET_ENV, Context, jail_processes, verdict_matches

pytestmark = pytest.mark.sandbox
HANG_GUARD_S = 120  # generous: the machine may be loaded; only a jail that never ends should trip it


@pytest.fixture
def ctx(monkeypatch):
    monkeypatch.setenv(SECRET_ENV, "s3cr3t")
    context = Context(Path(tempfile.mkdtemp(prefix="pasodoble-escape-", dir=OUTSIDE_TMP)))
    yield context
    context.close()
    shutil.rmtree(context.tmp)


def run_case(case, ctx, **config):
    cfg = SandboxConfig(**{"timeout_s": 5.0, **case.config, **config})
    before = ctx.snapshot()
    start = time.monotonic()
    verdict = check(case.make(ctx), cfg)
    assert time.monotonic() - start < HANG_GUARD_S
    assert ctx.snapshot() == before, "something outside the jail changed"
    return verdict


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_gets_its_exact_verdict(case, ctx):
    before = set(
        jail_processes()
    )  # only new ones count (another sandbox run at the same time would still show)
    verdict = run_case(case, ctx)
    assert verdict_matches(case, verdict), (case.expect, verdict)
    assert outliving(before) == set()  # nothing outlives its check (double-forked daemons included)


def outliving(before: set[int], grace_s: float = 30.0) -> set[int]:
    """Runner processes that started during the check and are still alive `grace_s` later. Another sandbox run on
    the machine may have started runners meanwhile: those end within their own time limit, while the escaped
    daemon under test sleeps for 120 s, so the grace changes no verdict."""
    left = set(jail_processes()) - before
    deadline = time.monotonic() + grace_s
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left &= set(jail_processes())
    return left


def test_removing_seccomp_changes_a_verdict(ctx):
    """The suite can fail: without the seccomp layer kill(-1) is made, and finds no process it may signal (the
    runner is the jail's init, which kill(-1) skips), so the case's verdict changes."""
    case = next(c for c in CASES if c.name == "kill_all")
    verdict = run_case(case, ctx, _layers_off=("seccomp",))
    assert not verdict_matches(case, verdict)
    assert (verdict.status, verdict.outputs) == ("passed", ("ESRCH\n",))


def test_no_sandbox_refuses_unless_allowed(caplog, tmp_path):
    from pasodoble.sandbox import Job
    from pasodoble.sandbox.probe import probe

    job = Job(program="print(6 * 7)")
    refused = check(job, SandboxConfig(bwrap="pasodoble-no-such-bwrap"))
    assert refused.status == "refused" and "allow_unsandboxed_code_execution" in refused.detail
    allowed = check(
        job, SandboxConfig(bwrap="pasodoble-no-such-bwrap", allow_unsandboxed_code_execution=True)
    )
    assert (allowed.status, allowed.outputs) == ("passed", ("42\n",))
    assert "WITHOUT A SANDBOX" in caplog.text
    assert probe("pasodoble-no-such-bwrap")["essential_ok"] is False


def test_check_never_raises_on_a_broken_launcher():
    from pasodoble.sandbox import Job

    verdict = check(Job(program="print(1)"), SandboxConfig(python="/nonexistent/python3"))
    assert verdict.status in ("crashed", "sandbox_error") and not verdict.passed


def test_outputs_and_calls_in_one_launch():
    from pasodoble.sandbox import Job

    job = Job(
        program="def f(x):\n    return [x, x * 2.5, str(x), (x,), {x}]", entry_point="f", calls=((1,), (2,))
    )
    verdict = check(job, SandboxConfig())
    assert verdict.status == "passed"
    assert verdict.outputs[0] == '[1,2.5,"1",{"$tuple":[1]},{"$set":[1]}]'
    assert len(verdict.outputs) == 2


def test_layers_are_named_in_the_config():
    names = {f.name for f in dataclasses.fields(SandboxConfig)}
    assert "_layers_off" in names and "allow_unsandboxed_code_execution" in names
    assert os.environ.get(SECRET_ENV) is None


@pytest.mark.parametrize(
    "program,entry,detail",
    [
        ("def f(x):\n    return x +", "f", "SyntaxError"),
        ("import numpy", "f", "ModuleNotFoundError"),
        ("g = 1", "f", "NameError: the program defines no function 'f'"),
        ("def f(x):\n    return x\nwhile True:\n    pass", "f", ""),
    ],
)
def test_a_program_that_never_gets_to_its_calls_has_a_verdict(program, entry, detail):
    from pasodoble.sandbox import Job

    verdict = check(Job(program=program, entry_point=entry, calls=((1,),)), SandboxConfig(timeout_s=2.0))
    assert verdict.status == ("timeout" if not detail else "error")
    assert verdict.detail.startswith(detail) and verdict.outputs == ()


@pytest.mark.parametrize("off", [(), ("cgroup",)], ids=["cgroup_on", "cgroup_off"])
def test_nothing_outside_tmp_takes_a_byte_with_or_without_the_cgroup(off, ctx):
    """Every place but the capped /tmp is read-only: whether a cgroup also caps memory or not."""
    case = next(c for c in CASES if c.name == "fill_outside_tmp")
    verdict = run_case(case, ctx, _layers_off=off)
    assert (verdict.status, verdict.outputs) == ("passed", ("outside 0 tmp within cap True\n",))


@pytest.mark.parametrize("off", [(), ("cgroup",)], ids=["cgroup_on", "cgroup_off"])
def test_a_write_past_the_caps_is_a_verdict(off):
    """An uncaught write to a read-only place or past /tmp's cap ends as an `error` verdict naming it."""
    from pasodoble.sandbox import Job

    cfg = SandboxConfig(timeout_s=5.0, _layers_off=off)
    root = check(Job(program="open('/pasodoble-escape', 'w')"), cfg)
    assert (root.status, root.detail) == (
        "error",
        "OSError: [Errno 30] Read-only file system: '/pasodoble-escape'",
    )
    full = check(
        Job(program="for i in range(4):\n    open('/tmp/x%d' % i, 'wb').write(b'x' * (6 << 20))"), cfg
    )
    assert (full.status, full.detail) == ("error", "OSError: [Errno 28] No space left on device")
