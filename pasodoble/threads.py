"""Torch CPU thread counts that fit the process: the default is the CPUs it may actually run on.

Why: torch's own default counts the machine's cores, not the ones this process may use (a `taskset`, a container
or a scheduler's CPU set), and more threads than free cores is much slower than fewer: on a loaded 2-core
machine one tiny-world update took 23.1 s with 2 threads against 4.1 s with 1 thread pinned to one core. So
`num_threads: null` means `len(os.sched_getaffinity(0))`, and the start line warns when the machine's load
already fills those CPUs, naming the fix (`num_threads=1`, or several processes each pinned with `taskset`).
"""

from __future__ import annotations

import os


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def resolve_num_threads(requested: int | None) -> int:
    """The thread count to use: `requested`, or when None the usable CPUs shared among the processes a launcher
    started on this node (`LOCAL_WORLD_SIZE`, set by torchrun and accelerate launch)."""
    if requested is not None:
        return requested
    local_procs = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    return max(1, usable_cpus() // local_procs)


def busy_warning(threads: int) -> str | None:
    """A one-line hint when the load average already occupies the CPUs the threads would use, else None."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    cpus = usable_cpus()
    if threads > 1 and load >= cpus:
        return (
            f"note: load average {load:.1f} on {cpus} usable CPUs; {threads} torch threads will compete with "
            "other work: num_threads=1 is often several times faster on a busy machine"
        )
    return None
