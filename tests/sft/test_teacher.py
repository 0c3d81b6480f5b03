"""Teachers: retries with backoff on 429 / 5xx / timeouts / dropped connections, no retry on other 4xx, the rate
limit, the key read from a named variable and never shown, and the local teacher through the rollout engine."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pasodoble.errors import ConfigError
from pasodoble.sft.teacher import LocalTeacher, OpenAITeacher, RateLimiter, Teacher, TeacherConfig

KEY = "sk-test-teacher-9f3a"
MESSAGES = [{"role": "user", "content": "What is 1 + 1?"}]


class Scripted:
    """A loopback endpoint answering each request by the next status of a script ("drop", "slow" or a code)."""

    def __init__(self, script: list, slow_s: float = 1.0):
        self.script, self.slow_s, self.requests, self.auth = list(script), slow_s, 0, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.auth.append(self.headers.get("Authorization"))
                step = outer.script[min(outer.requests, len(outer.script) - 1)]
                outer.requests += 1
                if step == "drop":
                    self.connection.shutdown(2)
                    return
                if step == "slow":
                    time.sleep(outer.slow_s)
                    step = 200
                payload = {"choices": [{"message": {"content": f"\\boxed{{2}} n={body['n']}"}}] * body["n"]}
                data = json.dumps(payload if step == 200 else {"error": "x"}).encode()
                self.send_response(step)
                if step == 429:
                    self.send_header("Retry-After", "0")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError):  # a client past its deadline hung up
                    self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def scripted():
    servers = []

    def make(script, **kw):
        servers.append(Scripted(script, **kw))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def teacher(url, sleeps=None, **kw) -> OpenAITeacher:
    cfg = TeacherConfig(model="m", base_url=url, backoff_s=0.5, max_backoff_s=4.0, **kw)
    return OpenAITeacher(cfg, sleep=(sleeps.append if sleeps is not None else time.sleep))


def test_retries_transient_failures_with_capped_jittered_backoff(scripted):
    server = scripted([429, 500, 503, "drop", "slow", 200], slow_s=1.0)
    sleeps: list[float] = []
    t = teacher(server.url, sleeps, timeout_s=0.3, max_retries=6)
    (reply,) = t.complete([MESSAGES], n=2, temperature=0.5, max_tokens=8)
    assert reply.error is None and reply.texts == ["\\boxed{2} n=2"] * 2
    assert server.requests == 6
    assert len(sleeps) == 5
    assert all(0 <= s <= min(4.0, 0.5 * 2**i) for i, s in enumerate(sleeps))  # full jitter under the cap
    reasons = {k: v for k, v in t.counters.items() if k.startswith("retry/")}
    assert reasons == {
        "retry/http_429": 1,
        "retry/http_500": 1,
        "retry/http_503": 1,
        "retry/connection": 1,
        "retry/timeout": 1,
    }


def test_gives_up_after_max_retries_and_does_not_retry_client_errors(scripted):
    server = scripted([500])
    (reply,) = teacher(server.url, [], max_retries=2).complete([MESSAGES])
    assert reply.texts == [] and reply.error == "http_500 after 3 tries" and server.requests == 3
    server = scripted([400])
    (reply,) = teacher(server.url, []).complete([MESSAGES])
    assert reply.error == "http_400 (not retried)" and server.requests == 1


def test_connection_refused_is_an_error_reply_not_an_exception():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    (reply,) = teacher(f"http://127.0.0.1:{port}/v1", [], max_retries=1).complete([MESSAGES])
    assert reply.error == "connection after 2 tries"


def test_key_comes_from_the_named_variable_and_is_never_shown(scripted, monkeypatch):
    monkeypatch.setenv("PASODOBLE_TEST_KEY", KEY)
    server = scripted([200])
    t = teacher(server.url, api_key_env="PASODOBLE_TEST_KEY")
    t.complete([MESSAGES, MESSAGES])
    assert server.auth == [f"Bearer {KEY}"] * 2
    assert KEY not in repr(t) and KEY not in repr(t.cfg) and KEY not in json.dumps(t.counters)
    monkeypatch.delenv("PASODOBLE_TEST_KEY")
    with pytest.raises(ConfigError, match="PASODOBLE_TEST_KEY is not set"):
        TeacherConfig(model="m", base_url=server.url, api_key_env="PASODOBLE_TEST_KEY").validate()


def test_concurrent_requests_keep_order_and_the_rate_limit_spaces_them(scripted):
    server = scripted([200])
    t = teacher(server.url, concurrency=4)
    replies = t.complete([[{"role": "user", "content": str(i)}] for i in range(8)], n=1)
    assert len(replies) == 8 and all(r.error is None for r in replies)
    limiter, calls = RateLimiter(rate=1000.0), []
    for _ in range(5):
        limiter.wait()
        calls.append(time.monotonic())
    assert calls[-1] - calls[0] >= 4 / 1000 * 0.9


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match="teacher.base_url"):
        TeacherConfig(model="m", base_url="localhost:8000").validate()
    with pytest.raises(ConfigError, match="checker.kind"):
        TeacherConfig(kind="vllm", model="m").validate("checker")
    with pytest.raises(ConfigError, match="teacher.model"):
        TeacherConfig(base_url="http://x").validate()


def test_local_teacher_generates_through_the_rollout_engine(tiny_lm):
    model, tokenizer, _ = tiny_lm
    local = LocalTeacher(model, tokenizer)
    assert isinstance(local, Teacher) and isinstance(teacher("http://127.0.0.1:1/v1"), Teacher)
    a = local.complete([MESSAGES, MESSAGES], n=2, temperature=1.0, max_tokens=6, seeds=[3, 4])
    b = local.complete([MESSAGES, MESSAGES], n=2, temperature=1.0, max_tokens=6, seeds=[3, 4])
    assert [r.texts for r in a] == [r.texts for r in b]  # seeded
    assert all(len(r.texts) == 2 and r.error is None for r in a)
