"""Host memory between phases: `release_freed` gives a fragmented heap's free pages back to the kernel, in a fresh
interpreter so that the heap holds only what the test made."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pasodoble import allocator
from pasodoble.accel import host_memory

_FRAGMENT = """
import json
from pathlib import Path
import torch
from pasodoble import allocator
from pasodoble.accel import host_memory

def anon_mb():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024

# 3,000 tensors of 96 KB (under glibc's mmap threshold: from the heap), every other one freed: the freed half
# cannot leave the heap by itself, since a live block sits above each hole
blocks = [torch.ones(24 * 1024) for _ in range(3000)]
del blocks[::2]
before, free = anon_mb(), host_memory.free_heap_bytes()
small = host_memory.release_freed(min_bytes=1 << 40)  # over the threshold: nothing done
released = host_memory.release_freed(min_bytes=16 << 20)
after = anon_mb()
assert all(float(b[0]) == 1.0 for b in blocks)  # the live half is intact
print(json.dumps({"before": before, "after": after, "free": free, "small": small, "released": released,
                  "malloc": allocator.active()}))
"""


@pytest.mark.skipif(host_memory._glibc() is None, reason="needs glibc's mallinfo2 and malloc_trim")
@pytest.mark.parametrize("malloc", ["system", "tcmalloc"])
def test_a_fragmented_heap_is_given_back_and_the_live_blocks_stay(malloc):
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", allocator.GUARD)}
    if malloc == "tcmalloc":  # the pasodoble command's allocator where installed: its own release call
        if allocator.find("tcmalloc") is None:
            pytest.skip("TCMalloc is not installed (make allocator-env)")
        env = allocator.launch_env("tcmalloc", env)
    out = subprocess.run(
        [sys.executable, "-c", _FRAGMENT], capture_output=True, text=True, check=True, timeout=300, env=env
    )
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert figures["free"] >= 100 << 20  # about 140 MB freed inside the heap
    assert figures["small"] == 0  # under the threshold nothing is trimmed
    assert figures["released"] >= 100 << 20  # the freed bytes it found when it trimmed
    assert figures["before"] - figures["after"] >= 100  # MB back to the kernel
    assert figures["malloc"] == malloc


def test_under_the_threshold_nothing_is_trimmed():
    assert host_memory.release_freed(min_bytes=1 << 60) == 0
