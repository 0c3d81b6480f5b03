"""Hand the host memory a phase freed back to the operating system, between a role's phases.

What: `release_freed(min_bytes)` asks glibc how many freed bytes its heap holds (`mallinfo2`) and, when they are at
least `min_bytes`, calls `malloc_trim(0)`, which gives every whole free page in the heap back to the kernel. It
returns the free bytes it found when it trimmed, else 0. Under TCMalloc (which the `pasodoble` command preloads
when installed, `pasodoble.allocator`) it reads the page heap's free bytes and calls
`MallocExtension_ReleaseFreeMemory` instead. Under another allocator, or a C library that is not glibc 2.33 or
later, it does nothing and returns 0. The Role calls it at the end of `generate` and of `update`,
on any device (only the host's heap is touched, and only past the threshold).

Why: torch's CPU tensors come from malloc. glibc serves any allocation under its mmap threshold (which grows with
the largest block freed, up to 32 MB) from its heap and keeps the freed blocks resident for reuse. After one update
of SmolLM2-135M (16 prompts x 4, 128 new tokens, one core) the process stayed at 3,641 MB resident for 1,830 MB of
weights, AdamW states and libraries; trimming brought it to 1,940 MB. Generation left about 600 MB more. A vLLM server
or another process on the node can use that memory. (A second role in the same process gains nothing: without the
trim it reuses the first role's freed heap, and two SmolLM2 roles taking turns peaked at 5,497 MB with it, 5,523
without.) The trim took under 0.1 CPU-s there, and the next phase's CPU time did not move (40.0 / 77.6 CPU-s for the
next generation / update, against 39.8 / 77.7 without). It does not lower a phase's own peak: that comes from the
heap's fragmentation inside the update (docs/PERFORMANCE.md). `MIN_FREE_BYTES` keeps small models from paying page
faults every phase to refill what was trimmed: the tiny anchor's heap holds 109-143 MB freed after each phase (at 48
and at 200 new tokens), which a trim would give back only for the next phase to take again. Below the threshold
a call costs one `mallinfo2`, about 60 us with 1,500 free blocks in the heap.

Run: `release_freed()`; tests in tests/accel/test_host_memory.py.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

MIN_FREE_BYTES = 256 << 20  # trim only when the heap holds at least this much freed memory


class _Mallinfo2(ctypes.Structure):
    _fields_ = [  # glibc's struct mallinfo2: every field a size_t
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
        )
    ] + [("keepcost", ctypes.c_size_t)]


@functools.cache
def _glibc():
    """The C library when it is glibc with `mallinfo2` and `malloc_trim`, else None."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        info, trim = libc.mallinfo2, libc.malloc_trim
    except (OSError, AttributeError):
        return None
    info.restype, info.argtypes = _Mallinfo2, []
    trim.restype, trim.argtypes = ctypes.c_int, [ctypes.c_size_t]
    return libc


@functools.cache
def _tcmalloc():
    """TCMalloc's C API when the process runs on it (`pasodoble.allocator` preloads it), else None."""
    try:
        lib = ctypes.CDLL(None)  # the process's global symbols: a preloaded TCMalloc's among them
        get, release = lib.MallocExtension_GetNumericProperty, lib.MallocExtension_ReleaseFreeMemory
    except (OSError, AttributeError):
        return None
    get.restype, get.argtypes = ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t)]
    release.restype, release.argtypes = None, []
    return lib


def free_heap_bytes() -> int:
    """Freed bytes the allocator holds for reuse: under TCMalloc its page heap's free pages still mapped
    (`tcmalloc.pageheap_free_bytes`), else glibc's heap (`fordblks`); 0 under any other allocator."""
    tc = _tcmalloc()
    if tc is not None:
        value = ctypes.c_size_t(0)
        return (
            int(value.value)
            if tc.MallocExtension_GetNumericProperty(b"tcmalloc.pageheap_free_bytes", value)
            else 0
        )
    libc = _glibc()
    return int(libc.mallinfo2().fordblks) if libc is not None else 0


def release_freed(min_bytes: int = MIN_FREE_BYTES) -> int:
    """Give the allocator's free pages back to the kernel when it holds at least `min_bytes` freed; returns the
    freed bytes found when it did, else 0."""
    free = free_heap_bytes()
    if free < min_bytes or free == 0:  # 0: nothing freed, or an allocator it cannot read
        return 0
    tc = _tcmalloc()
    if tc is not None:
        tc.MallocExtension_ReleaseFreeMemory()
    else:
        _glibc().malloc_trim(0)
    return free
