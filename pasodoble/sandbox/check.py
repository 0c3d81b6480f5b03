"""`check(job, config) -> Verdict`: run model-written code in the jail; never raises, bounded in time.

    from pasodoble.sandbox import Job, SandboxConfig, check
    v = check(Job(program="def f(x):\n    return x + 1", entry_point="f", calls=((1,), (2,)), expected=(2, 3)))
    v.status == "passed"; v.outputs == ("2", "3")      # canonical JSON of each return value

A job is a program plus either calls of its entry point (`calls`, and `expected` to compare against), assert-style
`tests` (HumanEval's `def check(candidate)`, or top-level asserts on `candidate`), or neither (the program runs as a
script on `stdin`; its stdout is the one output). All of it goes into one launch. With two `hash_seeds` the job runs
twice and any difference in status or outputs is `nondeterministic`: hash order and clocks are refused.

Statuses: passed, failed (a wrong value or a failed assert, as Python's `==` judges it), error (the program raised
or defined no entry point), timeout, crashed (killed by a signal, or no verdict came back), output_too_large (a
return value, the outputs together or the verdict past `max_verdict_bytes`: neither the runner nor this reader
holds more), nondeterministic, refused (no sandbox here and `allow_unsandboxed_code_execution` is off),
sandbox_error (the launcher itself failed; the detail says why).
"""

from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import dataclass, field

from pasodoble.sandbox import jail
from pasodoble.sandbox.probe import ESSENTIAL, default_python, probe
from pasodoble.sandbox.values import encode

log = logging.getLogger("pasodoble.sandbox")
_warned: set[str] = set()  # optional layers already reported as missing (once per process)
STATUSES = (
    "passed", "failed", "error", "timeout", "crashed", "output_too_large", "nondeterministic", "refused",
    "sandbox_error",
)  # fmt: skip


@dataclass(frozen=True)
class SandboxConfig:
    timeout_s: float = 10.0  # wall clock for one launch (CPU rlimit: this + 1 s; the launcher kills at + 2 s)
    memory_mb: int = 1024  # RLIMIT_AS of the program's process
    cgroup_memory_mb: int = 2048  # memory cap of the whole check (cgroup), all processes together
    pids: int = 64  # processes and threads of the whole check (cgroup)
    nproc: int = 256  # RLIMIT_NPROC: processes of uid 65534 machine-wide, so above pids
    output_mb: int = 8  # RLIMIT_FSIZE: the program's stdout and any file it writes
    nofile: int = 64  # RLIMIT_NOFILE
    tmpfs_mb: int = 16  # size of the jail's /tmp
    max_output_bytes: int = 65536  # stdout kept as a script's output
    max_verdict_bytes: int = (
        1 << 20
    )  # one verdict's JSON; a return value or outputs past it: output_too_large
    hash_seeds: tuple[int, ...] = (0,)  # PYTHONHASHSEED of each run; two seeds check determinism
    python: str = field(default_factory=default_python)  # the jail's interpreter (standard library only)
    bwrap: str = "bwrap"
    allow_unsandboxed_code_execution: bool = False  # run without bwrap/namespaces when the probe finds none
    _layers_off: tuple[str, ...] = ()  # tests only: layers removed to show what each stops


@dataclass(frozen=True)
class Job:
    program: str  # model-written source: never run outside the jail
    entry_point: str | None = None  # function to call; None runs the program as a script
    calls: tuple = ()  # argument tuples of the entry point, plain values
    expected: tuple | None = None  # the return value of each call; None reports outputs only
    tests: str = ""  # trusted test code run against `candidate` in a separate process
    context: str = ""  # trusted helpers the tests need (HumanEval's prompt), run before `tests`
    stdin: str = ""  # the script's standard input


@dataclass(frozen=True)
class Verdict:
    status: str
    detail: str = ""
    outputs: tuple[str, ...] = ()  # canonical JSON per call, or the script's stdout
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def _frames(job: Job, config: SandboxConfig) -> tuple[dict, dict]:
    public = {
        "program": job.program,
        "entry_point": job.entry_point,
        "calls": [encode(list(args)) for args in job.calls],
        "stdin": job.stdin,
        "max_output_bytes": config.max_output_bytes,
        "max_verdict_bytes": config.max_verdict_bytes,
    }
    expected = [] if job.expected is None else [{"v": encode(v)} for v in job.expected]
    return public, {"tests": job.tests, "context": job.context, "expected": expected}


def layers_for(config: SandboxConfig) -> tuple[frozenset[str], str | None]:
    """The layers a launch uses here, and a refusal reason when the essential ones are missing."""
    found = probe(config.bwrap)
    wanted = set(jail.ALL_LAYERS) - set(config._layers_off)
    for name in ("cgroup", "seccomp", "uid"):
        if not found[name]:
            wanted.discard(name)
            if name not in _warned:
                _warned.add(name)
                log.warning("sandbox layer %s is missing here: %s", name, found["why"].get(name, "?"))
    if not found["essential_ok"]:
        missing = ", ".join(k for k in ESSENTIAL if not found[k])
        if not config.allow_unsandboxed_code_execution:
            return frozenset(), (
                f"no sandbox on this machine ({missing} missing: {found['why']}); install bubblewrap "
                "(make sandbox-env) or set allow_unsandboxed_code_execution"
            )
        log.warning("RUNNING MODEL-WRITTEN CODE WITHOUT A SANDBOX (%s missing)", missing)
        wanted -= {"bwrap", "network", "pid_namespace", "minimal_root", "read_only", "tmpfs_cap", "seccomp"}
    return frozenset(wanted), None


def _one(public: dict, secret: dict, config: SandboxConfig, seed: int, layers: frozenset[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="pasodoble-check-") as scratch:
        verdict = jail.launch(public, secret, config, seed, layers, scratch)
    status = verdict.get("status")
    outputs = verdict.get("outputs")
    if (
        status not in STATUSES
        or not isinstance(outputs, list)
        or not all(isinstance(o, str) for o in outputs)
    ):
        return {"status": "crashed", "detail": "the verdict was malformed", "outputs": []}
    return verdict


def check(job: Job, config: SandboxConfig | None = None) -> Verdict:
    """The verdict of `job`; any failure of the launcher itself becomes `sandbox_error`, never an exception."""
    config = config or SandboxConfig()
    start = time.monotonic()
    try:
        layers, refusal = layers_for(config)
        if refusal is not None:
            return Verdict("refused", refusal)
        public, secret = _frames(job, config)
        runs = [_one(public, secret, config, seed, layers) for seed in config.hash_seeds]
    except (
        Exception
    ) as e:  # the contract: a verdict, whatever broke (a full disk, a missing binary, bad args)
        return Verdict("sandbox_error", f"{type(e).__name__}: {e}"[:300], (), time.monotonic() - start)
    first = runs[0]
    for other in runs[1:]:
        if (other["status"], other["outputs"]) != (first["status"], first["outputs"]):
            return Verdict(
                "nondeterministic", "two hash seeds gave different results", (), time.monotonic() - start
            )
    detail = str(first.get("detail", ""))[:500]
    return Verdict(first["status"], detail, tuple(first["outputs"]), time.monotonic() - start)
