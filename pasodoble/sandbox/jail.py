"""One launch of the trusted runner inside the jail: the command line, the channels, the wall-clock kill.

What: `launch(public, secret, config, seed, layers)` runs `runner.py` once and returns its verdict as a dict.
The command is `sh` (joins the per-check cgroup) -> `setpriv` (uid/gid 65534, when the launcher is root, so that
RLIMIT_NPROC counts) -> `bwrap` (every namespace unshared, new session, dies with its parent, read-only /usr and
friends, a size-capped tmpfs as /tmp and everything else remounted read-only, a cleared environment with a fixed
PYTHONHASHSEED, the seccomp filter from a memfd, the runner as the jail's pid 1) -> the system Python running the
runner, whose source is copied in from memfds, so the jail needs no read access to where this package is
installed. The verdict comes back on a pipe whose write end only the runner holds (`runner.py`), read up to
`max_verdict_bytes` and no further. Past `timeout_s` plus a grace the session and the cgroup are killed with
SIGKILL.

`layers` names the layers in use; tests remove one at a time to show what each one stops (docs/SANDBOX.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path

from pasodoble.sandbox import seccomp
from pasodoble.sandbox.cgroup import Cgroup

HERE = Path(__file__).resolve().parent
NOBODY = 65534
GRACE_S = 2.0
JOIN_CGROUP = 'for f in $PASODOBLE_CGROUP_PROCS; do echo $$ > "$f" || exit 125; done; exec "$@"'
SYSTEM_DIRS = ("/usr", "/etc/alternatives")
SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/localtime")
MERGED_LINKS = ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
ALL_LAYERS = (
    "bwrap", "cgroup", "uid", "rlimits", "seccomp", "network", "pid_namespace", "minimal_root", "read_only", "tmpfs_cap",
    "clearenv",
)  # fmt: skip


def frame(obj) -> bytes:
    data = json.dumps(obj).encode()
    return len(data).to_bytes(8, "big") + data


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name)  # close-on-exec: only pass_fds hands it to the launch
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _root_mounts(layers: frozenset[str], python: str) -> list[str]:
    """Only the system folders (and the interpreter's prefix when it lives elsewhere), read-only; without
    `minimal_root` the host's whole tree, writable. The interpreter must be readable by uid 65534."""
    if "minimal_root" not in layers:
        return ["--bind", "/", "/"]
    bind = "--ro-bind" if "read_only" in layers else "--bind"
    prefix = str(Path(os.path.realpath(python)).parent.parent)
    extra = () if prefix == "/" or prefix.startswith("/usr") else (prefix,)
    args = []
    for path in (*SYSTEM_DIRS, *SYSTEM_FILES, *extra):
        args += [f"{bind}-try", path, path]
    for link in MERGED_LINKS:
        if os.path.islink(link):
            args += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            args += [bind, link, link]
    return args


def runner_dir(layers: frozenset[str]) -> str:
    """Where the runner's files appear: a new /sandbox, or inside the jail's /tmp when / is the host's."""
    return "/sandbox" if "minimal_root" in layers else "/tmp/.sandbox"


def bwrap_args(config, seed: int, layers: frozenset[str], fds: dict[str, int]) -> list[str]:
    """The bubblewrap command line for one launch (`fds`: seccomp, runner and values memfds)."""
    args = [config.bwrap, "--unshare-user", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    args += ["--unshare-pid"] if "pid_namespace" in layers else []
    args += ["--unshare-net"] if "network" in layers else []
    args += ["--uid", str(NOBODY), "--gid", str(NOBODY), "--hostname", "jail"]
    args += ["--new-session", "--die-with-parent", "--cap-drop", "ALL"]
    args += _root_mounts(layers, config.python) + ["--proc", "/proc", "--dev", "/dev"]
    size = ["--size", str(config.tmpfs_mb << 20)] if "tmpfs_cap" in layers else []
    where = runner_dir(layers)
    args += ["--perms", "1777", *size, "--tmpfs", "/tmp", "--dir", where, "--chdir", "/tmp"]
    args += ["--ro-bind-data", str(fds["runner"]), f"{where}/runner.py"]
    args += ["--ro-bind-data", str(fds["values"]), f"{where}/values.py"]
    if "read_only" in layers:  # last: the capped /tmp is then the only place the program can write
        args += ["--remount-ro", "/dev"] + (["--remount-ro", "/"] if "minimal_root" in layers else [])
    if "pid_namespace" in layers:  # the runner is the jail's init: no dumpable reaper holding its descriptors
        args += ["--as-pid-1"]
    if "seccomp" in fds:
        args += ["--seccomp", str(fds["seccomp"])]
    if "clearenv" in layers:
        args += ["--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp"]
        args += ["--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONHASHSEED", str(seed)]
    return args


def _limits(config, layers: frozenset[str]) -> dict:
    if "rlimits" not in layers:
        return {}
    return {
        "as_mb": config.memory_mb,
        "cpu_s": int(config.timeout_s) + 1,
        "nproc": config.nproc,
        "fsize_mb": config.output_mb,
        "nofile": config.nofile,
    }


def _env(layers: frozenset[str], seed: int, cgroup: Cgroup | None) -> dict[str, str]:
    # no PYTHON* variable but the seed: the runner's interpreter reads them (it cannot run under -E, see `command`)
    env = (
        {"PATH": "/usr/bin:/bin"}
        if "clearenv" in layers
        else {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    )
    env["PYTHONHASHSEED"] = str(seed)
    if cgroup is not None:
        env["PASODOBLE_CGROUP_PROCS"] = " ".join(cgroup.procs_files)
    return env


def command(config, seed: int, layers: frozenset[str], fds: dict[str, int], verdict_fd: int, scratch: str):
    # -s -S -B, not -I: -I implies -E, which ignores PYTHONHASHSEED and so each run's hash seed; the environment
    # holds no other PYTHON* variable (`_env`, bwrap's --clearenv) and the runner puts its own folder on sys.path
    runner = [config.python, "-s", "-S", "-B"]
    if "bwrap" not in layers:  # no jail at all: the runner from the package, in a scratch folder
        return [*runner, str(HERE / "runner.py"), str(verdict_fd)], scratch
    cmd = [*runner, f"{runner_dir(layers)}/runner.py", str(verdict_fd)]
    if "uid" in layers and os.geteuid() == 0:
        cmd = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--", *bwrap_args(
            config, seed, layers, fds), *cmd]  # fmt: skip
    else:
        cmd = [*bwrap_args(config, seed, layers, fds), *cmd]
    return cmd, "/"


def launch(public: dict, secret: dict, config, seed: int, layers: frozenset[str], scratch: str) -> dict:
    """Run the runner once on the two frames; the verdict dict (a `crashed` one when none came back)."""
    public = {**public, "limits": _limits(config, layers), "timeout_s": config.timeout_s}
    fds = {
        "runner": _memfd("runner.py", (HERE / "runner.py").read_bytes()),
        "values": _memfd("values.py", (HERE / "values.py").read_bytes()),
    }
    bpf = seccomp.build_filter() if "seccomp" in layers else None
    if bpf is not None:
        fds["seccomp"] = _memfd("seccomp", bpf)
    cgroup = Cgroup.create(config.pids, config.cgroup_memory_mb << 20) if "cgroup" in layers else None
    read_end, write_end = os.pipe()
    proc = None
    try:
        cmd, cwd = command(config, seed, layers, fds, write_end, scratch)
        if cgroup is not None:
            cmd = ["/bin/sh", "-c", JOIN_CGROUP, "sh", *cmd]
        proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd,
            env=_env(layers, seed, cgroup), pass_fds=(write_end, *fds.values()), start_new_session=True,
        )  # fmt: skip
        os.close(write_end)
        write_end = -1
        try:
            proc.stdin.write(frame(public) + frame(secret))
            proc.stdin.close()
        except BrokenPipeError:
            pass
        raw = _read_until(read_end, time.monotonic() + config.timeout_s + GRACE_S, config.max_verdict_bytes)
    finally:
        _end(proc, cgroup)
        for fd in (read_end, write_end, *fds.values()):
            if fd >= 0:
                os.close(fd)
    return _parse(raw, proc)


def _read_until(fd: int, deadline: float, limit: int) -> bytes | int | None:
    """The verdict's bytes; None past the deadline; the count read so far once it passes `limit` (the reader
    never holds more than `limit` plus one read)."""
    chunks, size = [], 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        part = os.read(fd, 1 << 16)
        if not part:
            return b"".join(chunks)
        size += len(part)
        if size > limit:
            return size
        chunks.append(part)


def _end(proc: subprocess.Popen | None, cgroup: Cgroup | None) -> None:
    if proc is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    if cgroup is not None:
        cgroup.destroy()


def _parse(raw: bytes | int | None, proc: subprocess.Popen | None) -> dict:
    if raw is None:
        return {
            "status": "timeout",
            "detail": "the jail ran past the time limit and was killed",
            "outputs": [],
        }
    if isinstance(raw, int):
        detail = f"the verdict channel passed max_verdict_bytes ({raw} bytes read, the rest not)"
        return {"status": "output_too_large", "detail": detail, "outputs": []}
    err = proc.stderr.read(2000).decode(errors="replace").strip() if proc is not None and proc.stderr else ""
    if proc is not None and proc.stderr:
        proc.stderr.close()
    if not raw:
        why = err.splitlines()[-1] if err else f"exit status {proc.returncode if proc else '?'}"
        return {"status": "crashed", "detail": f"no verdict came back ({why})", "outputs": []}
    try:
        verdict = json.loads(raw.decode())
    except (UnicodeDecodeError, ValueError):
        return {"status": "crashed", "detail": "the verdict channel held no JSON", "outputs": []}
    return verdict
