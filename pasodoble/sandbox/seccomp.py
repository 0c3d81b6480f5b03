"""The jail's seccomp deny-list, compiled to BPF by libseccomp through ctypes (no Python binding needed).

What: `build_filter() -> bytes`, a BPF program that bubblewrap loads with `--seccomp FD`. Denied with EPERM:
sockets of any family but AF_UNIX, tracing and reading other processes' memory or descriptors (`pidfd_getfd`),
storage outside any file system (memfds, SysV shared memory and message queues: no size cap of the jail's file
systems bounds them), mounts and new namespaces, signals to process groups (`kill(-1)`, `kill(-pgid)`), kernel
keyrings, modules, BPF, perf, io_uring, userfaultfd, clock and host names, reboot and swap. `clone3` answers ENOSYS so the C library falls back to
`clone`, whose namespace flags the filter can see. Other architectures' system calls kill the process
(libseccomp's default for a foreign ABI).

Why a deny-list and not an allow-list: Python's interpreter and standard library use a long, version-dependent
list of calls; the namespaces, the uid and the read-only mounts already remove what the calls above would reach,
so these rules are a second wall, not the only one. `None` from `build_filter` means libseccomp is missing; the
probe reports it and the jail runs without this layer.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os

ACT_ALLOW = 0x7FFF0000
CMP_NE, CMP_EQ, CMP_MASKED_EQ = 1, 4, 7
AF_UNIX = 1
NAMESPACE_FLAGS = (
    0x00020000,
    0x02000000,
    0x04000000,
    0x08000000,
    0x10000000,
    0x20000000,
    0x40000000,
    0x00000080,
)

DENIED = (  # noqa: SIM905
    "ptrace process_vm_readv process_vm_writev kcmp mount umount2 pivot_root chroot unshare setns "
    "fsopen fsmount fsconfig fspick move_mount open_tree mount_setattr init_module finit_module delete_module "
    "add_key request_key keyctl bpf perf_event_open userfaultfd io_uring_setup io_uring_enter io_uring_register "
    "kexec_load kexec_file_load reboot swapon swapoff syslog acct quotactl open_by_handle_at name_to_handle_at "
    "iopl ioperm uselib vhangup settimeofday clock_settime clock_adjtime adjtimex sethostname setdomainname "
    "fanotify_init lookup_dcookie personality pidfd_getfd process_madvise memfd_create memfd_secret shmget msgget"
).split()


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("a", ctypes.c_uint64), ("b", ctypes.c_uint64)]


def _errno_action(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


@functools.lru_cache(maxsize=1)
def _lib():
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError:
        return None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(_ArgCmp)
    ]  # fmt: skip
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


def available() -> bool:
    return _lib() is not None


def _rule(lib, ctx, action: int, name: str, *cmps: tuple[int, int, int, int]) -> None:
    nr = lib.seccomp_syscall_resolve_name(name.encode())
    if nr < 0:  # a call this kernel's headers do not know cannot be made either
        return
    array = (_ArgCmp * max(1, len(cmps)))(*[_ArgCmp(*c) for c in cmps])
    rc = lib.seccomp_rule_add_array(ctx, action, nr, len(cmps), array)
    if rc < 0:
        raise OSError(-rc, f"seccomp rule for {name}: {os.strerror(-rc)}")


@functools.lru_cache(maxsize=1)
def build_filter() -> bytes | None:
    """The compiled deny-list as BPF bytes, or None without libseccomp."""
    lib = _lib()
    if lib is None:
        return None
    ctx = lib.seccomp_init(ACT_ALLOW)
    if not ctx:
        raise OSError("seccomp_init failed")
    try:
        deny = _errno_action(errno.EPERM)
        for name in DENIED:
            _rule(lib, ctx, deny, name)
        for name in ("socket", "socketpair"):
            _rule(lib, ctx, deny, name, (0, CMP_NE, AF_UNIX, 0))
        for name in ("kill", "tkill", "tgkill"):  # negative pids are process groups, -1 is every process
            _rule(lib, ctx, deny, name, (0, CMP_MASKED_EQ, 0x80000000, 0x80000000))
        for flag in NAMESPACE_FLAGS:
            _rule(lib, ctx, deny, "clone", (0, CMP_MASKED_EQ, flag, flag))
        _rule(lib, ctx, _errno_action(errno.ENOSYS), "clone3")
        fd = os.memfd_create("pasodoble-seccomp")
        try:
            rc = lib.seccomp_export_bpf(ctx, fd)
            if rc < 0:
                raise OSError(-rc, "seccomp_export_bpf failed")
            os.lseek(fd, 0, os.SEEK_SET)
            return os.read(fd, 1 << 20)
        finally:
            os.close(fd)
    finally:
        lib.seccomp_release(ctx)
