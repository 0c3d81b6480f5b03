"""The teacher client against a hostile loopback endpoint (`hostile_server.py`): redirects, trickles, endless and
huge bodies, huge Retry-After values, 401/403, deeply nested JSON, CRLF and misplaced keys, proxies, and Ctrl-C
during a trickle. Each test checks the fate or error, that it ended (times are bounded by hang guards only), memory
where a body could grow, and that the key is in nothing written or printed."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from pasodoble.cli import main
from pasodoble.errors import ConfigError
from pasodoble.io import read_jsonl
from pasodoble.sft.teacher import OpenAITeacher, TeacherConfig, TeacherStopped

sys.path.insert(0, str(Path(__file__).parent))
from hostile_server import HostileServer, sft_data_recipe, wait_for

KEY = "sk-hostile-7c1e55aa90"
KEY_ENV = "PASODOBLE_HOSTILE_KEY"
MESSAGES = [{"role": "user", "content": "QUESTION: What is 4 + 1?"}]
GUARD_S = 120.0  # hang guard: a bounded request ends in seconds; an unbounded one runs past this


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    for name in (
        "http_proxy",
        "https_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "no_proxy",
        "NO_PROXY",
        "all_proxy",
    ):
        monkeypatch.delenv(name, raising=False)


@contextlib.contextmanager
def children_take_ctrl_c():
    """A background job starts with SIGINT ignored and its children inherit that, so Python in them installs no
    KeyboardInterrupt handler and a Ctrl-C test would hang; a handler here is reset to the default at exec."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def teacher(url: str, **kw) -> OpenAITeacher:
    fields = {"model": "m", "base_url": url, "api_key_env": KEY_ENV, "max_retries": 0, "timeout_s": 2.0, **kw}
    return OpenAITeacher(TeacherConfig(**fields))


def timed(fn):
    start = time.monotonic()
    out = fn()
    return out, time.monotonic() - start


def figures(name: str, capfd=None, **values) -> None:
    """One line of measured figures, past any capture (shown with `pytest -s`)."""
    text = ", ".join(f"{k}={round(v, 2) if isinstance(v, float) else v}" for k, v in values.items())
    with capfd.disabled() if capfd is not None else contextlib.nullcontext():
        print(f"\n{name}: {text}")


def assert_no_key(*texts: str, folder: Path | None = None) -> None:
    for text in texts:
        assert KEY not in text
    for path in folder.rglob("*") if folder is not None else ():
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


@pytest.mark.parametrize("code", [301, 302, 303])
def test_redirects_are_not_followed_and_the_key_stays_home(key, code, capfd):
    with HostileServer() as elsewhere:
        target = f"{elsewhere.base_url}/chat/completions"
        with HostileServer(lambda i, p: f"redirect:{code}:{target}") as server:
            t = teacher(server.base_url)
            start = time.monotonic()
            with pytest.raises(
                TeacherStopped, match=f"answered {code} \\(a redirect, not followed\\)"
            ) as err:
                t.complete([MESSAGES])
            figures(f"redirect {code}", capfd, seconds=time.monotonic() - start, error=str(err.value))
        assert elsewhere.requests == []  # the other port saw nothing, so never the key
    assert [r["auth"] for r in server.requests] == [f"Bearer {KEY}"]
    assert "\n" not in str(err.value) and "teacher.base_url" in str(err.value)
    assert_no_key(str(err.value), *capfd.readouterr())


@pytest.mark.parametrize("mode", ["trickle_head", "trickle_body"])
def test_a_trickle_is_cut_at_the_total_deadline(key, mode, capfd):
    with HostileServer(lambda i, p: mode) as server:
        t = teacher(server.base_url, timeout_s=2.0, max_retries=1, backoff_s=0.01)
        (reply,), seconds = timed(lambda: t.complete([MESSAGES]))
    figures(f"trickle {mode}", capfd, seconds=seconds, error=reply.error)
    assert reply.error == "timeout after 2 tries" and len(server.requests) == 2
    assert t.counters["retry/timeout"] == 2
    assert seconds < GUARD_S  # about 2 x timeout_s; unbounded, a 1 byte/s reply of 100 kB takes a day
    assert_no_key(reply.error, json.dumps(t.counters), *capfd.readouterr())


@pytest.mark.parametrize("mode", ["endless", "huge_length", "big_valid"])
def test_a_body_past_the_byte_cap_is_a_counted_error_in_bounded_memory(key, mode, capfd):
    with HostileServer(lambda i, p: mode) as server:
        t = teacher(server.base_url, timeout_s=60.0, max_retries=3)
        tracemalloc.start()
        try:
            (reply,), seconds = timed(lambda: t.complete([MESSAGES], max_tokens=16))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    cap = (1 << 20) + 64 * 16
    figures(
        f"body {mode}",
        capfd,
        seconds=seconds,
        peak_mib=peak / 2**20,
        server_sent_mib=server.sent_bytes / 2**20,
    )
    assert reply.error == f"reply over {cap} bytes (not retried)" and len(server.requests) == 1
    assert t.counters["failures"] == 1
    assert peak < 8 * 2**20, peak  # the cap (1 MiB) and a chunk, not the body; unbounded: all of it
    assert seconds < GUARD_S
    assert_no_key(reply.error, *capfd.readouterr())


@pytest.mark.parametrize("after", ["99999", str(10**30), "9" * 5000])
def test_a_huge_retry_after_is_capped_at_max_backoff(key, after):
    with HostileServer(lambda i, p: f"status:429:{after}" if i == 0 else "ok") as server:
        sleeps: list[float] = []
        cfg = TeacherConfig(model="m", base_url=server.base_url, api_key_env=KEY_ENV, max_backoff_s=3.0)
        t = OpenAITeacher(cfg, sleep=sleeps.append)
        (reply,) = t.complete([MESSAGES])
    assert reply.error is None and reply.texts == ["The sum is \\boxed{5}."]
    figures(f"Retry-After {after[:12]}", slept=sleeps)
    assert sleeps == [3.0]  # the cap, not 27 hours and no OverflowError


def test_deeply_nested_json_is_counted_as_bad_json(key):
    with HostileServer(lambda i, p: "nested") as server:
        (reply,), seconds = timed(
            lambda: teacher(server.base_url, max_retries=1, backoff_s=0.01).complete([MESSAGES])
        )
    figures("nested", seconds=seconds, error=reply.error)
    assert reply.error == "bad_json after 2 tries" and seconds < GUARD_S


def recipe(tmp_path: Path, base_url: str, teacher: dict | None = None, **kw) -> Path:
    return sft_data_recipe(tmp_path, {"base_url": base_url, "api_key_env": KEY_ENV, **(teacher or {})}, **kw)


@pytest.mark.parametrize("code", [401, 403])
def test_401_and_403_stop_the_run_with_one_line(key, code, tmp_path, capfd):
    with HostileServer(lambda i, p: f"status:{code}") as server:
        path = recipe(tmp_path, server.base_url, max_passages=400, target_kept=400)
        exit_code, seconds = timed(lambda: main(["sft-data", "--config", str(path), "--no-progress"]))
    out, err = capfd.readouterr()
    figures(f"status {code}", capfd, seconds=seconds, requests=len(server.requests), stderr=err.strip())
    assert exit_code == 2 and len(server.requests) <= 2 and seconds < GUARD_S  # not 400 passages of 401s
    assert err.count("\n") == 1 and KEY_ENV in err and server.base_url in err and f"answered {code}" in err
    assert_no_key(out, err, folder=tmp_path / "out")


def test_a_stop_ends_the_wave_without_waiting_for_slower_requests_submitted_before_it(key):
    """The first conversation trickles (its deadline 60 s away), the second gets a 401: the stop is raised at once,
    not after the first request's deadline, and the trickling request is ended with it."""

    def mode(number, path):
        content = server.requests[number]["body"]["messages"][0]["content"]
        return "trickle_body" if content.endswith("slow") else "status:401"

    slow = [{"role": "user", "content": "QUESTION: What is 7 + 1? slow"}]
    with HostileServer(mode) as server:
        client = teacher(server.base_url, timeout_s=60.0, concurrency=2)
        (stopped, seconds) = timed(lambda: pytest.raises(TeacherStopped, client.complete, [slow, MESSAGES]))
    assert "answered 401" in str(stopped.value) and seconds < 30, seconds


def test_a_crlf_key_is_stripped_and_bad_keys_are_refused_without_showing_them(
    key, monkeypatch, tmp_path, capfd
):
    monkeypatch.setenv(KEY_ENV, KEY + "\r\n")
    with HostileServer() as server:
        (reply,) = teacher(server.base_url).complete([MESSAGES])
        assert reply.error is None and server.requests[0]["auth"] == f"Bearer {KEY}"
        errors = []
        for bad in (KEY[:6] + "\r" + KEY[6:], KEY + "\x1b[0m", "key with spaces " + KEY):
            monkeypatch.setenv(KEY_ENV, bad)
            with pytest.raises(ConfigError, match="holds spaces, control or non-ASCII") as err:
                teacher(server.base_url)
            errors.append(str(err.value))
        monkeypatch.setenv(KEY_ENV, KEY)
        path = recipe(tmp_path, server.base_url)
        assert main(["sft-data", "--config", str(path), f"teacher.api_key_env={KEY}"]) == 2
        out, err = capfd.readouterr()
        assert "must be the NAME of an environment variable" in err and err.count("\n") == 1
        assert not (tmp_path / "out").exists() and len(server.requests) == 1
        assert_no_key(out, err, *errors, folder=tmp_path)


def test_loopback_skips_proxies_and_other_hosts_use_them(key, monkeypatch):
    with HostileServer() as proxy, HostileServer() as server:
        monkeypatch.setenv("http_proxy", proxy.base_url.removesuffix("/v1"))
        (reply,) = teacher(server.base_url).complete([MESSAGES])
        assert reply.error is None and len(server.requests) == 1 and proxy.requests == []
        (reply,) = teacher("http://teacher.example/v1").complete([MESSAGES])
        assert (
            reply.error is None and proxy.requests[0]["path"] == "http://teacher.example/v1/chat/completions"
        )


def test_credentials_or_a_query_in_base_url_are_refused_without_showing_them():
    for url, what in [
        ("http://me:s3cr3t@127.0.0.1:9/v1", "holds credentials"),
        ("http://h/v1?key=s3cr3t", "query"),
    ]:
        with pytest.raises(ConfigError, match=what) as err:
            TeacherConfig(model="m", base_url=url).validate()
        assert "s3cr3t" not in str(err.value) and str(err.value).startswith("teacher.base_url")


# Runs in a child process: the teacher's request trickles while a timer sends SIGINT to the pool's worker thread
# (as the kernel may when a process gets Ctrl-C: any thread can take it), not to the main thread.
CTRL_C_TO_A_WORKER = """
import signal, sys, threading, time
from pasodoble.sft.teacher import OpenAITeacher, TeacherConfig

def interrupt_a_worker():
    while not (workers := [t for t in threading.enumerate() if t.name.startswith("ThreadPoolExecutor")]):
        time.sleep(0.05)
    time.sleep(1.0)  # into the trickle
    signal.pthread_kill(workers[0].ident, signal.SIGINT)

cfg = TeacherConfig(model="m", base_url=sys.argv[1], api_key_env=sys.argv[2], max_retries=0, timeout_s=600.0)
threading.Thread(target=interrupt_a_worker, daemon=True).start()
try:
    OpenAITeacher(cfg).complete([[{"role": "user", "content": "What is 4 + 1?"}]])
except KeyboardInterrupt:
    sys.exit(130)
sys.exit(1)
"""


def test_ctrl_c_taken_by_a_worker_thread_still_interrupts_at_once(key):
    """The main thread waits for the requests in slices, so a SIGINT the kernel hands to a worker thread runs its
    handler within a slice; an untimed wait slept on through the trickle (found by the test below under load)."""
    with HostileServer(lambda i, p: "trickle_body") as server:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        cmd = [sys.executable, "-c", CTRL_C_TO_A_WORKER, server.base_url, KEY_ENV]
        with children_take_ctrl_c():
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            _, err = proc.communicate(timeout=GUARD_S)  # unbounded: the trickle's 600 s deadline
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail("the interrupt taken by a worker thread did not end the wait")
    assert proc.returncode == 130, err[-2000:]
    assert len(server.requests) == 1


def test_ctrl_c_during_a_trickle_exits_within_seconds_keeping_finished_waves(key, tmp_path, capfd):
    """SIGINT to `pasodoble sft-data` while the second wave's request trickles: it says "interrupted" and exits
    (130) at once, the first wave's rows on disk; a rerun against a restarted server (another port) resumes."""
    with HostileServer(lambda i, p: "ok" if i < 2 else "trickle_body") as server:
        path = recipe(tmp_path, server.base_url, teacher={"timeout_s": 600})
        # PYTHONFAULTHANDLER: a hang past the guard is ended with SIGABRT, which prints every thread's stack
        env = {
            **os.environ,
            "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
            "PYTHONFAULTHANDLER": "1",
        }
        cmd = [sys.executable, "-m", "pasodoble", "sft-data", "--config", str(path), "--no-progress"]
        with children_take_ctrl_c():
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines: list[tuple[float, str]] = []
        outs: list[
            str
        ] = []  # each stream has one reader (communicate() would race the stderr thread for lines)
        reader = threading.Thread(target=lambda: lines.extend((time.monotonic(), x) for x in proc.stderr))
        out_reader = threading.Thread(target=lambda: outs.extend(proc.stdout))
        reader.start()
        out_reader.start()
        try:
            wait_for(
                lambda: len(server.requests) >= 3 or proc.poll() is not None, 600, "the trickling request"
            )
            time.sleep(1.0)  # a byte or two into the trickle
            assert proc.poll() is None, "".join(x for _, x in lines)
            proc.send_signal(signal.SIGINT)
            start = time.monotonic()
            try:
                proc.wait(timeout=GUARD_S)  # unbounded: the trickle (600 s deadline, 100 kB at 1 B/s)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGABRT)  # the stacks of the hung process, for the failure message
                proc.wait(timeout=30)
                reader.join(timeout=30)
                pytest.fail(
                    "no exit within the guard after SIGINT; its threads:\n" + "".join(x for _, x in lines)
                )
            seconds = time.monotonic() - start
        finally:
            proc.kill()
            reader.join()
            out_reader.join()
    out = "".join(outs)
    err = "".join(x for _, x in lines)
    said = next((t - start for t, x in lines if "interrupted" in x), None)
    figures(
        "ctrl-c",
        capfd,
        said_interrupted_s=said,
        exited_s=seconds,
        code=proc.returncode,
        stderr=err.strip()[-200:],
    )
    assert proc.returncode == 130 and err.strip() == "pasodoble sft-data: interrupted", err[-2000:]
    rows = read_jsonl(tmp_path / "out" / "candidates.jsonl")
    assert [(r["key"], r["fate"]) for r in rows] == [("0:0", "kept")]
    assert_no_key(out, err, folder=tmp_path / "out")
    with HostileServer() as restarted:
        again = recipe(tmp_path, restarted.base_url)
        assert main(["sft-data", "--config", str(again), "--no-progress"]) == 0
    rows = read_jsonl(tmp_path / "out" / "candidates.jsonl")
    assert [r["key"] for r in rows] == ["0:0", "1:0", "2:0", "3:0"] and len(restarted.requests) == 6
    assert_no_key(*capfd.readouterr(), folder=tmp_path / "out")
