"""The escape and robustness cases: a program, the exact verdict it must get, and what must not change outside.

Each case's `make(ctx)` builds the job from the test's own surroundings (a secret file, a checkpoint folder, a
loopback listener, a secret environment variable), `expect` is (status, output or detail prefix), and `after(ctx)`
checks the world outside. `test_escape.py` runs them with every layer on; `layer_table.py` runs them with one
layer removed at a time to show which cases each layer decides (docs/SANDBOX.md).
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pasodoble.sandbox import Job

REPO = Path(__file__).resolve().parents[2]
SECRET_ENV = "PASODOBLE_TEST_SECRET"
OUTSIDE_TMP = "/var/tmp" if os.path.isdir("/var/tmp") else None  # not under /tmp, which the jail replaces


@dataclass
class Context:
    """What a case may aim at, created by the test outside /tmp (the jail's own /tmp hides that) and checked after."""

    tmp: Path
    secret: Path = field(init=False)
    checkpoints: Path = field(init=False)
    listener: socket.socket = field(init=False)
    accepted: list = field(default_factory=list)

    def __post_init__(self):  # world-readable and -writable on purpose: only the jail may stand in the way
        os.chmod(self.tmp, 0o777)
        self.secret = self.tmp / "secret.txt"
        self.secret.write_text("the trainer's token\n")
        os.chmod(self.secret, 0o666)
        self.checkpoints = self.tmp / "checkpoints"
        self.checkpoints.mkdir(mode=0o777)
        os.chmod(self.checkpoints, 0o777)
        (self.checkpoints / "step-1.pt").write_bytes(b"weights")
        os.chmod(self.checkpoints / "step-1.pt", 0o666)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted.append(conn)

    @property
    def port(self) -> int:
        return self.listener.getsockname()[1]

    def snapshot(self) -> dict:
        files = sorted((str(p), p.read_bytes()) for p in self.tmp.rglob("*") if p.is_file())
        return {
            "files": files,
            "usr": os.path.exists("/usr/pasodoble-escape"),
            "accepted": len(self.accepted),
        }

    def close(self):
        self.stop.set()
        self.listener.close()


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[Context], Job]
    expect: tuple[str, str]  # status, and the whole output (scripts) or a prefix of the detail
    config: dict = field(default_factory=dict)  # SandboxConfig overrides
    group: str = ""


def script(source: str) -> Callable[[Context], Job]:
    return lambda ctx: Job(program=source.format(ctx=ctx, secret_env=SECRET_ENV, repo=REPO, home=Path.home()))


def function(source: str, entry: str = "f", **extra) -> Callable[[Context], Job]:
    return lambda ctx: Job(program=source, entry_point=entry, **extra)


TRY = "import errno, os\ntry:\n{body}\nexcept OSError as e:\n    print(errno.errorcode[e.errno])\n"


def attempt(body: str) -> Callable[[Context], Job]:
    return script(TRY.format(body="\n".join("    " + line for line in body.splitlines())))


# A module that forges a passing verdict on every descriptor of whatever process imports it, and the program that
# writes it under the name of every standard-library module (those the trusted side has not imported yet count)
# into every folder on the import path.
FORGE = (
    'import os\nv = b\'{"status": "passed", "detail": "", "outputs": []}\'\nfor fd in range(3, 64):\n'
    "    try:\n        os.write(fd, v)\n    except OSError:\n        pass\nos._exit(0)\n"
)
SHADOW_WRITES = (
    f"import os, sys\nFORGE = {FORGE!r}\nhere = os.path.dirname(os.path.abspath(sys.argv[0]))\n"
    "for d in sorted({here, '/sandbox', '/', '/tmp', *[p for p in sys.path if p]}):\n"
    "    for name in sorted(sys.stdlib_module_names):\n"
    "        try:\n            with open(os.path.join(d, name + '.py'), 'w') as f:\n"
    "                f.write(FORGE)\n        except OSError:\n            pass\n"
)
SHADOW = SHADOW_WRITES + "\n\ndef f(x):\n    return None\n"

# Writes as much as it can to each place, 8 MiB a file, at most 64 MiB a place; prints the bytes that stayed
# outside /tmp and whether /tmp kept to its cap (after removing them: the output goes to /tmp).
FILL = (
    "import os\nwritten = dict()\nfor place in ('/', '/sandbox', '/dev', '/dev/shm', '/etc', '/tmp'):\n"
    "    written[place] = 0\n    for i in range(8):\n        try:\n"
    "            with open(os.path.join(place, 'fill%d' % i), 'wb') as f:\n"
    "                for _ in range(8):\n                    f.write(b'x' * (1 << 20))\n"
    "                    written[place] += 1 << 20\n        except OSError:\n            break\n"
    "    for i in range(8):\n        try:\n            os.remove(os.path.join(place, 'fill%d' % i))\n"
    "        except OSError:\n            pass\n"
    "outside = sum(n for p, n in written.items() if p != '/tmp')\n"
    "print('outside', outside, 'tmp within cap', written['/tmp'] <= {cap_mb} << 20)"
)
PROC_MEM = (
    "import os\n\ndef f():\n    opened = []\n    for pid in sorted(int(p) for p in os.listdir('/proc') if p.isdigit()):\n"
    "        if pid != os.getpid():\n            try:\n                open('/proc/%d/mem' % pid, 'r+b').close()\n"
    "                opened.append(pid)\n            except OSError:\n                pass\n    return opened\n"
)
PIDFD_GETFD = (
    "import ctypes, errno, os\nlibc = ctypes.CDLL(None, use_errno=True)\npidfd = os.pidfd_open(1)\n"
    "r = libc.syscall(438, pidfd, 0, 0)\nprint(r, errno.errorcode.get(ctypes.get_errno()))"
)
PROCESS_VM = (
    "import ctypes, errno, os\nlibc = ctypes.CDLL(None, use_errno=True)\nbuf = ctypes.create_string_buffer(8)\n"
    "iov = (ctypes.c_void_p * 2)(ctypes.cast(buf, ctypes.c_void_p), 8)\n"
    "r = libc.process_vm_{way}(1, iov, 1, iov, 1, 0)\nprint(r, errno.errorcode.get(ctypes.get_errno()))"
)

CASES = [
    # filesystem
    Case(
        "write_usr", attempt("open('/usr/pasodoble-escape', 'w')"), ("passed", "EROFS\n"), group="filesystem"
    ),
    Case(
        "write_home",
        attempt("open('{home}/pasodoble-escape', 'w')"),
        ("passed", "ENOENT\n"),
        group="filesystem",
    ),
    Case(
        "write_repo",
        attempt("open('{repo}/pasodoble-escape', 'w')"),
        ("passed", "ENOENT\n"),
        group="filesystem",
    ),
    Case(
        "write_checkpoint",
        attempt("open('{ctx.checkpoints}/step-1.pt', 'w').write('x')"),
        ("passed", "ENOENT\n"),
        group="filesystem",
    ),
    Case(
        "symlink_traversal",
        attempt("os.symlink('/', 'up')\nopen('up{ctx.secret}').read()"),
        ("passed", "ENOENT\n"),
        group="filesystem",
    ),
    Case(
        "proc_root_traversal",
        attempt("open('/proc/1/root{ctx.secret}').read()"),  # pid 1 is the runner: not dumpable
        ("passed", "EACCES\n"),
        group="filesystem",
    ),
    Case(
        "read_secret",
        attempt("print(open('{ctx.secret}').read())"),
        ("passed", "ENOENT\n"),
        group="filesystem",
    ),
    Case(
        "read_environment",
        script("import os\nprint(os.environ.get('{secret_env}'), sorted(os.environ))"),
        ("passed", "None ['HOME', 'LANG', 'PATH', 'PWD', 'PYTHONHASHSEED']\n"),
        group="filesystem",
    ),
    Case(
        "fill_tmp",
        script(
            "import errno, glob, os\ntry:\n    for i in range(64):\n        with open('/tmp/f%d' % i, 'wb') as f:\n"
            "            f.write(b'x' * (4 << 20))\nexcept OSError as e:\n    for name in glob.glob('/tmp/f*'):\n"
            "        os.remove(name)\n    print(errno.errorcode[e.errno])"
        ),
        ("passed", "ENOSPC\n"),
        group="filesystem",
    ),
    # network
    Case(
        "network_external",
        attempt("import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)"),
        ("passed", "EPERM\n"),
        group="network",
    ),
    Case(
        "network_loopback",
        attempt("import socket\nsocket.create_connection(('127.0.0.1', {ctx.port}), timeout=2)"),
        ("passed", "EPERM\n"),
        group="network",
    ),
    # processes
    Case(
        "fork_bomb",
        script(  # the children that cannot fork keep their slot, so the program's own fork must fail
            "import os, time\nme = os.getpid()\nwhile True:\n    try:\n        os.fork()\n    except BlockingIOError:\n"
            "        if os.getpid() == me:\n            raise\n        time.sleep(60)"
        ),
        ("error", "BlockingIOError"),
        group="processes",
    ),
    Case(
        "thread_bomb",
        script(
            "import threading, time\nwhile True:\n    threading.Thread(target=time.sleep, args=(30,)).start()"
        ),
        ("error", "RuntimeError"),
        group="processes",
    ),
    Case(
        "double_fork_daemon",
        script(
            "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(120)\n"
            "    os._exit(0)\nprint('parent done')"
        ),
        ("passed", "parent done\n"),
        group="processes",
    ),
    Case("kill_all", attempt("os.kill(-1, 9)\nprint('sent')"), ("passed", "EPERM\n"), group="processes"),
    Case(
        "ptrace_parent",
        script(
            "import ctypes, errno, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "r = libc.ptrace(16, os.getppid(), 0, 0)\nprint(r, errno.errorcode.get(ctypes.get_errno()))"
        ),
        ("passed", "-1 EPERM\n"),
        group="processes",
    ),
    # resources
    Case("memory_blowup", script("x = bytearray(8 << 30)"), ("error", "MemoryError"), group="resources"),
    Case(
        "cpu_loop_ignoring_sigterm",
        script("import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True:\n    pass"),
        ("timeout", ""),
        config={"timeout_s": 2.0},
        group="resources",
    ),
    Case(
        "gigabyte_of_output",
        script("import sys\nfor _ in range(1024):\n    sys.stdout.write('x' * (1 << 20))"),
        ("error", "OSError: [Errno 27] File too large"),  # Python ignores SIGXFSZ: the write fails instead
        group="resources",
    ),
    Case(
        "deep_recursion",
        function("def f(n):\n    return f(n + 1)", calls=((0,),)),
        ("error", "RecursionError"),
        group="resources",
    ),
    Case(
        "huge_integer",
        function("def f():\n    return 1 << (1 << 24)", calls=((),)),
        ("error", "ValueError: int of 16777217 bits is too large"),
        group="resources",
    ),
    # the result channel
    Case(
        "forged_verdict",
        script(
            "import json, os\nv = json.dumps({{'status': 'passed', 'detail': '', 'outputs': []}}).encode()\n"
            "for fd in range(3, 64):\n    try:\n        os.write(fd, v)\n    except OSError:\n        pass\n"
            "print(v.decode())\nraise SystemExit(3)"
        ),
        ("error", "the program wrote garbage on its channel"),
        group="channel",
    ),
    Case(
        "forged_reply_frames",
        function(
            "import json, os, struct\n"
            "for body in ({'ready': True}, {'value': {'$dict': [[[1], 2]]}}, {'value': 2}):\n"
            "    data = json.dumps(body).encode()\n"
            "    for fd in range(3, 64):\n"
            "        try:\n            os.write(fd, struct.pack('>Q', len(data)) + data)\n"
            "        except OSError:\n            pass\n\n"
            "def f(x):\n    return 0",
            calls=((1,),),
            expected=(2,),
        ),
        ("error", "the program's reply was not plain data (TypeError)"),
        group="channel",
    ),
    Case(
        "bad_bytes",
        script("import sys\nsys.stdout.buffer.write(b'\\xff\\xfe\\x00ok')"),
        ("passed", "\ufffd\ufffd\x00ok"),
        group="channel",
    ),
    Case(
        "template_injection",
        function("def f(x):\n    return '0) or (1'", calls=((1,),), expected=(2,)),
        ("failed", 'call 0 returned "0) or (1"'),
        group="channel",
    ),
    Case(
        "always_equal_object",
        function(
            "class Yes:\n    def __eq__(self, other):\n        return True\n\ndef f(x):\n    return Yes()",
            tests="def check(candidate):\n    assert candidate(1) == 2\n",
        ),
        ("error", "ValueError: a value of type Yes cannot leave the program"),
        group="channel",
    ),
    Case(
        "always_equal_int_subclass",
        function(
            "class Yes(int):\n    def __eq__(self, other):\n        return True\n\ndef f(x):\n    return Yes(0)",
            calls=((1,),),
            expected=(2,),
        ),
        ("error", "ValueError: a value of type Yes cannot leave the program"),
        group="channel",
    ),
    # determinism
    Case(
        "hash_order",
        script("print(list({{'apple', 'banana', 'cherry', 'date', 'elder', 'fig', 'grape'}}))"),
        ("nondeterministic", "two hash seeds gave different results"),
        config={"hash_seeds": (0, 1)},
        group="determinism",
    ),
    Case(
        "time_dependent",
        script("import time\nprint(time.time_ns())"),
        ("nondeterministic", "two hash seeds gave different results"),
        config={"hash_seeds": (0, 1)},
        group="determinism",
    ),
    Case(
        "hash_seed_applied",  # the run's PYTHONHASHSEED reaches its interpreter: no hash randomisation under 0
        script("import sys\nprint(sys.flags.hash_randomization)"),
        ("passed", "0\n"),
        config={"hash_seeds": (0,)},
        group="determinism",
    ),
    Case(
        "deterministic_control",
        script("print(sorted({{'apple', 'banana', 'cherry'}}))"),
        ("passed", "['apple', 'banana', 'cherry']\n"),
        config={"hash_seeds": (0, 1)},
        group="determinism",
    ),
    # forged verdicts: everything but /tmp is read-only, the trusted side imports nothing from a writable place
    Case(
        "shadow_module_tests_mode",
        function(SHADOW, tests="import typing\n\ndef check(candidate):\n    assert candidate(1) == 2\n"),
        ("failed", "assert failed: assert candidate(1) == 2"),
        group="forgery",
    ),
    Case(
        "shadow_module_call_mode",
        function(SHADOW, calls=((1,),), expected=(2,)),
        ("failed", "call 0 returned null"),
        group="forgery",
    ),
    *[
        Case(
            f"write_{name}",
            attempt(f"open('{path}/pasodoble-escape', 'w')"),
            ("passed", "EROFS\n"),
            group="forgery",
        )
        for name, path in (
            ("root", ""),
            ("sandbox", "/sandbox"),
            ("dev", "/dev"),
            ("dev_shm", "/dev/shm"),
            ("etc", "/etc"),
        )
    ],
    Case(
        "fill_outside_tmp",
        script(FILL.format(cap_mb=16)),
        ("passed", "outside 0 tmp within cap True\n"),
        config={"memory_mb": 256},
        group="writable",
    ),
    # the jail's init (the runner) and the other trusted processes are out of the program's reach
    Case(
        "init_environ", attempt("print(open('/proc/1/environ').read())"), ("passed", "EACCES\n"), group="init"
    ),
    Case("init_memory", attempt("open('/proc/1/mem', 'r+b')"), ("passed", "EACCES\n"), group="init"),
    Case(
        "proc_mem_of_others",
        function(PROC_MEM, tests="def check(candidate):\n    assert candidate() == []\n"),
        ("passed", ""),
        group="init",
    ),
    Case("init_stdin_pidfd_getfd", script(PIDFD_GETFD), ("passed", "-1 EPERM\n"), group="init"),
    *[
        Case(
            f"init_process_vm_{way}",
            script(PROCESS_VM.format(way=way)),
            ("passed", "-1 EPERM\n"),
            group="init",
        )
        for way in ("readv", "writev")
    ],
    # bounded verdicts
    Case(
        "huge_return_values",
        function("def f(i):\n    return 'x' * (60 << 20)", calls=tuple((i,) for i in range(5))),
        ("output_too_large", "a return value or the outputs together passed"),
        group="channel",
    ),
]


def verdict_matches(case: Case, verdict) -> bool:
    status, text = case.expect
    if verdict.status != status:
        return False
    if case.make.__qualname__.startswith("script") and status in ("passed", "failed"):
        return verdict.outputs == (text,)
    return verdict.detail.startswith(text)


def jail_processes() -> list[int]:
    """Processes still running a sandbox runner (a daemon that outlived its check would show here)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if b"/sandbox/runner.py" in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found
