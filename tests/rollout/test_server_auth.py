"""The token guard of started vLLM servers, their health check's proof, remote binds and the client's headers.

The guard (`TokenGuard`) is driven as an ASGI app with a stub app behind it (pure logic; the vLLM test
tests/rollout/test_vllm_server_auth.py runs it inside a real server). The client side talks to real loopback HTTP
servers that record what reaches them."""

from __future__ import annotations

import asyncio
import http.server
import threading
from types import SimpleNamespace

import pytest

from pasodoble.cli import main
from pasodoble.errors import ConfigError, UserError
from pasodoble.rollout.server import EngineUnavailable, VLLMServerEngine, check_bind, wait_until_healthy
from pasodoble.rollout.server_auth import (
    CHALLENGE_HEADER,
    TOKEN_ENV,
    TokenGuard,
    auth_headers,
    proof_refusal,
)
from pasodoble.rollout.settings import VLLMConfig

TOKEN = "s3cret-run-token"


@pytest.fixture
def guard(monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    ran, sent = [], []

    async def app(scope, receive, send):
        ran.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    g = TokenGuard(app)

    def request(path, headers=(), kind="http"):
        ran.clear()
        sent.clear()

        async def receive():
            return {"type": "http.request", "body": b""}

        async def send(message):
            sent.append(message)

        scope = {"type": kind, "path": path, "headers": [(k.encode(), v.encode()) for k, v in headers]}
        asyncio.run(g(scope, receive, send))
        return list(ran), list(sent)

    return request


def test_every_route_but_health_needs_the_runs_token(guard):
    bearer = ("authorization", f"Bearer {TOKEN}")
    for path in (
        "/collective_rpc",
        "/v1/load_lora_adapter",
        "/v1/completions",
        "/reset_prefix_cache",
        "/docs",
    ):
        for headers in ([], [("authorization", "Bearer wrong")], [bearer, ("authorization", "Bearer x")]):
            ran, sent = guard(path, headers)
            assert ran == [] and sent[0]["status"] == 401, (path, headers)
        ran, sent = guard(path, [bearer])
        assert ran == [path] and sent[0]["status"] == 200
    ran, sent = guard("/ws", [], kind="websocket")
    assert ran == [] and sent == [{"type": "websocket.close", "code": 1008}]


def test_health_answers_a_challenge_with_a_proof_only_the_token_holder_can_give(guard):
    import os

    ran, sent = guard("/health", [(CHALLENGE_HEADER, "c1")])
    assert ran == ["/health"]
    headers = {k.decode(): v.decode() for k, v in sent[0]["headers"]}
    assert proof_refusal(headers, TOKEN, "c1", pid=os.getpid()) is None
    assert proof_refusal(headers, "another-token", "c1") == "a wrong proof"
    assert proof_refusal(headers, TOKEN, "c2") == "a wrong proof"  # a replayed answer to another challenge
    assert proof_refusal(headers, TOKEN, "c1", pid=1) == f"process {os.getpid()} answered, not 1"
    assert proof_refusal({}, TOKEN, "c1") == "no proof in its answer"


def test_a_guard_without_a_token_refuses_to_run(monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with pytest.raises(RuntimeError, match=TOKEN_ENV):
        TokenGuard(lambda *a: None)


def test_a_remote_bind_needs_the_flag_and_warns():
    for host in ("127.0.0.1", "::1", "localhost", "127.0.0.2"):
        assert check_bind(host, allow_remote=False) is None
    for host in ("0.0.0.0", "::", "", "10.1.2.3", "node7"):
        with pytest.raises(UserError, match="set vllm.allow_remote"):
            check_bind(host, allow_remote=False)
    assert "other machines can reach it" in check_bind("0.0.0.0", allow_remote=True)
    with pytest.raises(ConfigError, match="vllm.server_host.*vllm.allow_remote=true"):
        VLLMConfig(server_host="0.0.0.0").validate()
    VLLMConfig(server_host="0.0.0.0", allow_remote=True).validate()


def test_serve_refuses_all_interfaces_without_allow_remote(tmp_path, capsys):
    code = main(["serve", "--model", str(tmp_path), "--host", "0.0.0.0", "--out", str(tmp_path / "s")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--allow-remote" in err[0]


class Recorder(http.server.BaseHTTPRequestHandler):
    """Records each request's path and headers; answers by `self.server.reply(handler)`."""

    def do_GET(self):
        self._answer()

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._answer()

    def _answer(self):
        self.server.seen.append((self.path, dict(self.headers)))
        status, headers = self.server.reply(self)
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        body = getattr(self.server, "body", b"{}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def recorder():
    servers = []

    def make(reply=lambda h: (200, {})):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
        server.seen, server.reply = [], reply
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server, f"http://127.0.0.1:{server.server_address[1]}"

    yield make
    for server in servers:
        server.shutdown()
        server.server_close()


def engine(url, token=None):
    return VLLMServerEngine(url, None, VLLMConfig(request_timeout_s=10), token=token)


def test_the_client_sends_the_runs_token_or_vllm_api_key_and_skips_proxies(recorder, monkeypatch):
    server, url = recorder()
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # nothing listens there: a proxied request fails
    monkeypatch.setenv("VLLM_API_KEY", "users-key")
    e = engine(url, token=TOKEN)
    e._post("/reset_prefix_cache", {})
    e.close()
    e = engine(url)  # a server this run did not start (vllm.server_url): VLLM_API_KEY
    e._post("/reset_prefix_cache", {})
    e.close()
    assert [h["Authorization"] for _, h in server.seen] == [f"Bearer {TOKEN}", "Bearer users-key"]
    assert auth_headers(None) == {}


def test_the_client_follows_no_redirect_and_names_the_key_on_a_401(recorder):
    other, other_url = recorder()
    server, url = recorder(lambda h: (302, {"Location": other_url + "/collective_rpc"}))
    e = engine(url, token=TOKEN)
    with pytest.raises(RuntimeError, match="answered 302"):
        e._post("/collective_rpc", {})
    assert other.seen == []  # the token never reached another origin
    e.close()
    _, refusing = recorder(lambda h: (401, {}))
    e = engine(refusing, token="stale")
    with pytest.raises(EngineUnavailable, match="refused the run's token.*VLLM_API_KEY"):
        e._post("/v1/completions", {})
    e.close()


def test_a_process_holding_the_port_fails_the_health_check_and_never_sees_the_token(recorder):
    squatter, url = recorder()  # answers /health with 200, as any HTTP server would
    started = SimpleNamespace(process=SimpleNamespace(pid=12345, poll=lambda: None))
    with pytest.raises(EngineUnavailable, match="not the server this run started .no proof in its answer."):
        wait_until_healthy(url, 30, process=started, token=TOKEN)
    path, headers = squatter.seen[0]
    assert path == "/health" and "Authorization" not in headers and TOKEN not in str(headers)


def test_a_plain_text_answer_is_not_parsed_as_json(recorder):
    """vLLM answers a LoRA load with plain text ("Success: LoRA adapter ... added")."""

    def text(handler):
        return 200, {"Content-Type": "text/plain; charset=utf-8"}

    server, url = recorder(text)
    server.body = b"Success: LoRA adapter 'a' added successfully."
    e = engine(url, token=TOKEN)
    assert e._post("/v1/load_lora_adapter", {"lora_name": "a", "lora_path": "/x"}) == {}
    e.close()
