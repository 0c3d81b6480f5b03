"""The shared-memory folders weight sync writes into, named after their owner so a crash leaves nothing behind.

What: `make_shm_dir(kind)` creates `/dev/shm/pasodoble-vllm-<pid>-<kind>-<random>` (the system temp folder where
there is no /dev/shm) after sweeping the folders of dead runs: `sweep_stale` removes every `pasodoble-vllm-<pid>-*`
folder that belongs to this user and whose owner PID no longer runs in this PID namespace (each folder records its
owner's namespace in `.pidns`, so containers sharing one /dev/shm never judge each other's PIDs). A SIGKILL during a sync otherwise leaves the
full weights in RAM (16 GB for a 4B fp32 model) until the machine reboots. A folder of a live process, of another
user, or without a PID in its name is never touched; a reused PID keeps a stale folder until that process ends.

`weights_folder_refusal(path, root)` is the check a server's reload method makes (`rollout.vllm_worker`): it loads
only a real folder of this user inside the run's own weights root, never through a symbolic link.

This module must stay light: vLLM's worker processes import it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

SHM_PREFIX = "pasodoble-vllm-"
WEIGHTS_ROOT_ENV = "PASODOBLE_WEIGHTS_ROOT"  # the folder a server's reload method may load from


def shm_root() -> Path:
    return Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())


def owner_pid(name: str) -> int | None:
    """The PID in a folder name `pasodoble-vllm-<pid>-...` (None: not one of ours, or an older name)."""
    if not name.startswith(SHM_PREFIX):
        return None
    head = name[len(SHM_PREFIX) :].split("-", 1)[0]
    return int(head) if head.isdigit() and int(head) > 0 else None


PIDNS_FILE = ".pidns"  # inside each folder: the owner's PID namespace, where its PID means something


def pid_namespace() -> str:
    """This process's PID namespace (`pid:[inode]`; "" where /proc cannot tell)."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def sweep_stale(
    root: str | Path, uid: int | None = None, alive: Callable[[int], bool] = pid_alive
) -> list[Path]:
    """Remove this user's `pasodoble-vllm-<pid>-*` folders under `root` whose owner is dead; returns them."""
    uid = os.getuid() if uid is None else uid
    removed = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    for entry in entries:
        pid = owner_pid(entry.name)
        if pid is None or pid == os.getpid():
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not entry.is_dir(follow_symlinks=False) or st.st_uid != uid or alive(pid):
            continue
        if _namespace_of(Path(entry.path)) not in (None, pid_namespace()):
            continue  # another container sharing /dev/shm: its PIDs are not ours to judge
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    return removed


def make_shm_dir(kind: str, root: str | Path | None = None) -> Path:
    """A fresh folder for this process's weight copies (`kind`: engine, server, ...), after sweeping dead runs'."""
    root = Path(root) if root is not None else shm_root()
    sweep_stale(root)
    folder = Path(tempfile.mkdtemp(prefix=f"{SHM_PREFIX}{os.getpid()}-{kind}-", dir=root))
    (folder / PIDNS_FILE).write_text(pid_namespace())
    return folder


def _namespace_of(folder: Path) -> str | None:
    """The PID namespace recorded in `folder` (None: none recorded, a folder of an earlier version)."""
    try:
        return (folder / PIDNS_FILE).read_text()[:200]
    except OSError:
        return None


def weights_folder_refusal(path: str, root: str | None, uid: int | None = None) -> str | None:
    """Why a reload of `path` is refused under the weights root `root` (None: it is allowed).

    Allowed: a real folder (no symbolic link on the way) of this user strictly inside `root`; where `root` is the
    shared-memory folder itself (`pasodoble serve`), inside one of its `pasodoble-vllm-*` folders."""
    uid = os.getuid() if uid is None else uid
    if not root:
        return f"the server has no weights folder ({WEIGHTS_ROOT_ENV} is not set)"
    if not os.path.isabs(path):
        return "the path is not absolute"
    norm_root, norm = os.path.normpath(root), os.path.normpath(path)
    rel = os.path.relpath(norm, norm_root)
    if rel == "." or rel == ".." or rel.startswith(".." + os.sep):
        return f"it is not inside this server's weights folder {root}"
    if not Path(norm_root).name.startswith(SHM_PREFIX) and not rel.split(os.sep)[0].startswith(SHM_PREFIX):
        return f"it is not inside a {SHM_PREFIX}* folder of {root}"
    if os.path.realpath(norm) != os.path.join(os.path.realpath(norm_root), rel):
        return "it goes through a symbolic link"
    try:
        st = os.lstat(norm)
    except OSError:
        return "it does not exist"
    if not os.path.isdir(norm) or st.st_uid != uid:
        return "it is not a folder of this server's user"
    return None
