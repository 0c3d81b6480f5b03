"""The trusted runner: runs inside the jail, reads one JSON job, runs the program, writes one JSON verdict.

    python3 -s -S -B /sandbox/runner.py VERDICT_FD < two length-prefixed JSON frames

Three processes, so that nothing the program does can write or forge the verdict:
- the runner reads the public frame (program, call arguments, limits), forks the candidate, and only then reads the
  secret frame (expected values, test code), so the candidate's memory never holds them;
- the candidate closes stdin and the verdict descriptor, lowers its rlimits, runs the program and answers calls
  over a socket with plain data only (`values.py`); its stdout goes to a size-capped file;
- for assert-style tests (HumanEval's `check(candidate)`) a tester process runs the test code with `candidate`
  bound to a proxy that calls across the socket, so an object whose `__eq__` always says True never reaches it.
The runner is the jail's init (pid 1: signals from inside the jail without a handler never reach it) and is not
dumpable (no /proc/PID/mem, no descriptor copies, no ptrace by the same uid), and so are its forks. Its own folder
leaves the import path once `values` is in, so the runner and the tester import only the read-only standard
library. Every size is capped in bytes: a reply past `max_verdict_bytes` is not read, and a verdict past it is
`output_too_large`. Standard library only, Python 3.8 syntax.
"""

import ctypes
import io
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import contextlib

from values import canonical, decode, encode

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]  # trusted imports: the stdlib only

MAX_FRAME = 64 << 20
OUT_PATH = ".candidate-output"  # in the working directory: the jail's capped tmpfs
PR_SET_DUMPABLE = 4
LIMITS = {
    "as_mb": resource.RLIMIT_AS,
    "cpu_s": resource.RLIMIT_CPU,
    "nproc": resource.RLIMIT_NPROC,
    "fsize_mb": resource.RLIMIT_FSIZE,
    "nofile": resource.RLIMIT_NOFILE,
}


class Deadline(Exception):
    pass


class TooLarge(Exception):
    """A reply or a verdict past `max_verdict_bytes`: the verdict is `output_too_large`."""


def too_large(what, limit):
    detail = f"a return value or the outputs together passed {limit} bytes (max_verdict_bytes): {what}"
    return {"status": "output_too_large", "detail": detail, "outputs": []}


def read_exact(fd, n, sock=None):
    chunks, got = [], 0
    while got < n:
        part = sock.recv(min(n - got, 1 << 20)) if sock is not None else os.read(fd, min(n - got, 1 << 20))
        if not part:
            raise EOFError(f"channel closed after {got} of {n} bytes")
        chunks.append(part)
        got += len(part)
    return b"".join(chunks)


def read_frame(fd=None, sock=None, limit=MAX_FRAME, too_large_error=ValueError):
    (n,) = struct.unpack(">Q", read_exact(fd, 8, sock))
    if n > limit:
        raise too_large_error(f"frame of {n} bytes exceeds {limit}")
    return json.loads(read_exact(fd, n, sock).decode("utf-8"))


def frame(obj):
    data = json.dumps(obj).encode("utf-8")
    return struct.pack(">Q", len(data)) + data


def set_limits(limits):
    for name, value in limits.items():
        scale = (1 << 20) if name.endswith("_mb") else 1
        resource.setrlimit(LIMITS[name], (value * scale, value * scale))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def become_child(keep, limits):
    """After fork: close every descriptor but `keep`, stdout/stderr to the capped file, limits down."""
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    out = os.open(OUT_PATH, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(out, 1)
    os.dup2(out, 2)
    for fd in open_fds():
        if fd > 2 and fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
    sys.stderr = sys.stdout
    set_limits(limits)


def open_fds():
    try:
        return [int(x) for x in os.listdir("/proc/self/fd")]
    except OSError:
        return list(range(3, 1024))


def candidate_main(job, sock):
    """Run the program; then answer calls of its entry point until the socket closes."""
    namespace = {"__name__": "__main__" if job.get("entry_point") is None else "__candidate__"}
    if job.get("entry_point") is None:
        sys.stdin = io.StringIO(job.get("stdin") or "")
    me = os.getpid()  # a process the program forked must not speak for it: it leaves silently
    try:
        exec(compile(job["program"], "<program>", "exec"), namespace)
        if os.getpid() != me:
            os._exit(0)
        fn = namespace.get(job["entry_point"]) if job.get("entry_point") else None
        if job.get("entry_point") and not callable(fn):
            raise NameError("the program defines no function {!r}".format(job["entry_point"]))
        sock.sendall(frame({"ready": True}))
    except BaseException as e:  # the program's own failure is data, reported to the runner
        if os.getpid() != me:
            os._exit(1)
        sock.sendall(frame({"raise": type(e).__name__, "msg": str(e)[:300]}))
        return
    while True:
        try:
            request = read_frame(sock=sock)
        except EOFError:
            return
        try:
            reply = {"value": encode(fn(*decode(request["args"])))}
        except BaseException as e:
            reply = {"raise": type(e).__name__, "msg": str(e)[:300]}
        sys.stdout.flush()
        sock.sendall(frame(reply))


class CandidateRaised(Exception):
    pass


def call(sock, args, deadline, limit):
    sock.settimeout(max(0.01, deadline - time.monotonic()))
    try:
        sock.sendall(frame({"args": encode(list(args))}))
        reply = read_frame(sock=sock, limit=limit, too_large_error=TooLarge)
    except socket.timeout:  # noqa: UP041 (an alias of TimeoutError only from Python 3.10)
        raise Deadline() from None
    except (EOFError, OSError) as e:
        raise CandidateRaised(f"the program's process died ({e})") from e
    if isinstance(reply, dict) and "raise" in reply:
        raise CandidateRaised("{}: {}".format(reply.get("raise"), reply.get("msg")))
    try:
        return decode(reply["value"])
    except Exception as e:  # a frame the program forged on its own socket
        raise CandidateRaised(f"the program's reply was not plain data ({type(e).__name__})") from None


def tester_main(job, secret, sock, report_fd, deadline):
    """Run trusted test code with `candidate` calling across the socket; report pass or the first failure."""

    def candidate(*args):
        return call(sock, args, deadline, int(job["max_verdict_bytes"]))

    namespace = {"__name__": "__tests__", "candidate": candidate}
    if job.get("entry_point"):
        namespace[job["entry_point"]] = candidate
    result = {"status": "passed", "detail": ""}
    try:
        if secret.get("context"):
            exec(compile(secret["context"], "<context>", "exec"), namespace)
            namespace[job["entry_point"]] = candidate
        exec(compile(secret["tests"], "<tests>", "exec"), namespace)
        if callable(namespace.get("check")):
            namespace["check"](candidate)
    except Deadline:
        result = {"status": "timeout", "detail": "tests ran past the time limit"}
    except TooLarge as e:
        result = too_large(str(e), job["max_verdict_bytes"])
    except AssertionError:
        result = {"status": "failed", "detail": "assert failed: " + last_line(secret["tests"])}
    except CandidateRaised as e:
        result = {"status": "error", "detail": str(e)[:300]}
    except BaseException as e:
        result = {"status": "error", "detail": (f"{type(e).__name__}: {e}")[:300]}
    os.write(report_fd, json.dumps(result).encode())


def last_line(source):
    tb = traceback.extract_tb(sys.exc_info()[2])
    frames = [f for f in tb if f.filename == "<tests>"]
    if not frames:
        return "?"
    lines = source.splitlines()
    n = frames[-1].lineno
    return lines[n - 1].strip()[:200] if 0 < n <= len(lines) else "?"


def fork_child(keep, limits, body):
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            become_child(keep, limits)
            body()
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    return pid


def wait_report(fd, deadline):
    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        part = os.read(fd, 65536)
        if not part:
            return json.loads(b"".join(chunks).decode()) if chunks else None
        chunks.append(part)


def run_calls(job, secret, sock, deadline):
    outputs, failed, size = [], None, 0
    expected = secret.get("expected") or []
    limit = int(job["max_verdict_bytes"])
    for i, args in enumerate(job.get("calls") or []):
        try:
            got = call(sock, decode(args), deadline, limit)
        except CandidateRaised as e:
            return outputs, {"status": "error", "detail": str(e)[:300]}
        except TooLarge as e:
            return [], too_large(f"call {i}, {e}", limit)
        outputs.append(canonical(encode(got)))
        size += len(outputs[-1])
        if size > limit:
            return [], too_large(f"{size} bytes after call {i}", limit)
        if i < len(expected) and failed is None and not same(decode(expected[i]["v"]), got):
            failed = {"status": "failed", "detail": f"call {i} returned {outputs[-1][:200]}"}
    return outputs, failed


def same(want, got):
    """Python's `==` on plain data (both sides are exact built-in types, `values.py`, so no `__eq__` of the
    program's runs): dict order does not matter, -0.0 == 0.0, 1 == 1.0 == True, NaN equals nothing, no float
    tolerance (a test that wants one writes its own assert)."""
    return want == got


def candidate_signal(pid):
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    return os.WTERMSIG(status) if done and os.WIFSIGNALED(status) else None


def judge(job, secret, run_sock, cand_pid, deadline):
    run_sock.settimeout(max(0.01, deadline - time.monotonic()))
    try:
        ready = read_frame(sock=run_sock, limit=int(job["max_verdict_bytes"]))
    except socket.timeout:  # noqa: UP041 (an alias of TimeoutError only from Python 3.10)
        return {"status": "timeout", "detail": "the program ran past the time limit"}
    if not isinstance(ready, dict):
        return {"status": "error", "detail": "the program wrote garbage on its channel"}
    if "raise" in ready:
        return {"status": "error", "detail": "{}: {}".format(ready.get("raise"), ready.get("msg"))[:300]}
    outputs, result = run_calls(job, secret, run_sock, deadline)
    if result is None and secret.get("tests"):
        rd, wr = os.pipe()
        limits = job.get("limits") or {}
        pid = fork_child(
            [run_sock.fileno(), wr], limits, lambda: tester_main(job, secret, run_sock, wr, deadline)
        )
        os.close(wr)
        result = wait_report(rd, deadline) or {"status": "timeout", "detail": "tests ran past the time limit"}
        kill(pid)
    verdict = result or {"status": "passed", "detail": ""}
    verdict["outputs"] = outputs
    return verdict


def kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def read_output(limit):
    try:
        with open(OUT_PATH, "rb") as f:
            data = f.read(limit + 1)
    except OSError:
        return ""
    return data[:limit].decode("utf-8", errors="replace")


def main():
    verdict_fd = int(sys.argv[1])
    signal.signal(
        signal.SIGINT, signal.SIG_DFL
    )  # as pid 1, a signal without a handler from inside is dropped
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    job = read_frame(fd=0)
    limits = job.get("limits") or {}
    deadline = time.monotonic() + float(job.get("timeout_s", 10))
    run_sock, cand_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    cand_pid = fork_child([cand_sock.fileno()], limits, lambda: candidate_main(job, cand_sock))
    cand_sock.close()
    secret = read_frame(fd=0)
    try:
        verdict = judge(job, secret, run_sock, cand_pid, deadline)
    except Deadline:
        verdict = {"status": "timeout", "detail": "the program ran past the time limit", "outputs": []}
    except (EOFError, OSError) as e:
        verdict = {"status": "error", "detail": f"the program's process died ({e})", "outputs": []}
    except ValueError as e:  # a frame that is not JSON, or too long: the program wrote on its socket
        verdict = {
            "status": "error",
            "detail": f"the program wrote garbage on its channel ({e})"[:300],
            "outputs": [],
        }
    verdict.setdefault("outputs", [])
    run_sock.close()
    if job.get("entry_point") is None:
        verdict["outputs"] = [read_output(int(job.get("max_output_bytes", 65536)))]
    signum = candidate_signal(cand_pid)
    kill(cand_pid)
    if signum is not None and verdict["status"] != "passed":
        verdict["status"] = "crashed"
        verdict["detail"] = f"the program was killed by signal {signum} ({signal.Signals(signum).name})"
    data = json.dumps(verdict).encode()
    limit = int(job["max_verdict_bytes"])
    if len(data) > limit:
        data = json.dumps(too_large(f"a verdict of {len(data)} bytes", limit)).encode()
    os.write(verdict_fd, data)


if __name__ == "__main__":
    main()
