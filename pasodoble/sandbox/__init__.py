"""Running model-written code: a jail of layered defences, a trusted runner inside it, one JSON verdict out.

The one place in the project that executes model-written programs (docs/SANDBOX.md: layers, threat model,
limits). `check(job, config) -> Verdict` is pure from the caller's side: it never raises and is bounded in time.
`probe()` says which layers this machine has; `python -m pasodoble.sandbox` prints it.
"""

from pasodoble.sandbox.check import STATUSES, Job, SandboxConfig, Verdict, check
from pasodoble.sandbox.probe import probe

__all__ = ["STATUSES", "Job", "SandboxConfig", "Verdict", "check", "probe"]
