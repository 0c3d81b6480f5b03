"""Which sandbox layers this machine has, found once per process by trying each.

    python -m pasodoble.sandbox          # prints the probe as JSON, exit 1 without the essential layers

Essential: bubblewrap that can make a user namespace with every other namespace (tried by running `true` in one)
and rlimits. Without them `check` refuses to run code unless `allow_unsandboxed_code_execution` is set, and then
it logs a warning on every check. The others (cgroup, seccomp, a uid change) are reported; a missing one is logged
once and the jail runs without it.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys

from pasodoble.sandbox import cgroup, seccomp

ESSENTIAL = ("bwrap", "namespaces", "rlimits")


def default_python() -> str:
    """The jail's interpreter: the system Python (world-readable, outside any home folder) when present."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return os.path.realpath(getattr(sys, "_base_executable", sys.executable))


def _namespaces_work(bwrap: str) -> tuple[bool, str]:
    cmd = [bwrap, "--unshare-all", "--uid", "65534", "--gid", "65534", "--ro-bind", "/usr", "/usr"]
    for link in ("/bin", "/lib", "/lib64"):
        if os.path.islink(link):
            cmd += ["--symlink", os.readlink(link), link]
    cmd += ["--new-session", "--die-with-parent", "--", "/usr/bin/true"]
    if os.geteuid() == 0 and shutil.which("setpriv"):
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", *cmd]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    return done.returncode == 0, done.stderr.strip()[-200:]


@functools.cache
def probe(bwrap: str = "bwrap") -> dict:
    """{layer: bool, ...} plus `why` notes for the missing ones and `essential_ok`."""
    path = shutil.which(bwrap)
    found = {"bwrap": path is not None, "rlimits": sys.platform.startswith("linux")}
    why = {}
    if path is None:
        found["namespaces"] = False
        why["bwrap"] = "bubblewrap is not installed (make sandbox-env)"
    else:
        found["namespaces"], note = _namespaces_work(path)
        if not found["namespaces"]:
            why["namespaces"] = f"bwrap could not make the namespaces: {note or 'no message'}"
    found["seccomp"] = seccomp.available()
    if not found["seccomp"]:
        why["seccomp"] = "libseccomp.so.2 not found (Debian: libseccomp2)"
    version = cgroup.detect()
    found["cgroup"] = version is not None
    if version is None:
        why["cgroup"] = "no writable cgroup with pids and memory controllers"
    found["uid"] = os.geteuid() != 0 or shutil.which("setpriv") is not None
    if not found["uid"]:
        why["uid"] = "running as root without setpriv: processes would count against root's RLIMIT_NPROC"
    return {
        **found,
        "cgroup_version": version,
        "bwrap_path": path,
        "python": default_python(),
        "essential_ok": all(found[k] for k in ESSENTIAL),
        "why": why,
    }
