"""The token a vLLM server this project starts demands on every route, and the proof its health check gives.

Why: vLLM's `--api-key` guards only `/v1`, and the project's servers run with the dev routes (`/collective_rpc`,
which reloads weights) and runtime LoRA loading on, so without this any local user could swap the served weights.

How: the starter draws a random token (`new_token`) and hands it to the server in its environment (never on the
command line, which every user can read). vLLM loads `TokenGuard` as ASGI middleware (`--middleware`): every
request needs `Authorization: Bearer <token>` (401 otherwise), except `/health`, which stays open so the health
check never sends the token to whoever holds the port. It sends a random challenge instead, and the server answers
with `proof(token, challenge, pid)`: a process that took the freed port cannot forge it. The same token is
vLLM's own API key, so a `VLLM_API_KEY` in the environment never contradicts it.

This module must stay light: the server process imports it.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import secrets

TOKEN_ENV = "PASODOBLE_SERVER_TOKEN"
CHALLENGE_HEADER = "x-pasodoble-challenge"
PROOF_HEADER = "x-pasodoble-proof"
PID_HEADER = "x-pasodoble-pid"
MIDDLEWARE = "pasodoble.rollout.server_auth.TokenGuard"


def new_token() -> str:
    return secrets.token_urlsafe(32)


def client_token() -> str | None:
    """The token for a server this run did not start (`vllm.server_url`): `VLLM_API_KEY`, if set."""
    return os.environ.get("VLLM_API_KEY", "").strip() or None


def auth_headers(token: str | None) -> dict[str, str]:
    """Headers of a request to a server guarded by `token` (None: no token, e.g. an unguarded server_url)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def proof(token: str, challenge: str, pid: int | str) -> str:
    return hmac.new(token.encode(), f"{challenge}|{pid}".encode(), hashlib.sha256).hexdigest()


def proof_refusal(headers, token: str, challenge: str, pid: int | None = None) -> str | None:
    """Why a /health answer (its `headers`) does not prove the server holds `token` (None: it does).
    `pid`: the process this run started, which must be the one answering."""
    got, their_pid = headers.get(PROOF_HEADER), headers.get(PID_HEADER)
    if not got or not their_pid:
        return "no proof in its answer"
    if not hmac.compare_digest(got, proof(token, challenge, their_pid)):
        return "a wrong proof"
    if pid is not None and their_pid != str(pid):
        return f"process {their_pid} answered, not {pid}"
    return None


def is_loopback(host: str) -> bool:
    """Whether a server listening on `host` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class TokenGuard:
    """ASGI middleware (see module docstring); reads the token from `PASODOBLE_SERVER_TOKEN`."""

    def __init__(self, app):
        self.app = app
        token = os.environ.get(TOKEN_ENV, "")
        if not token:
            raise RuntimeError(f"{TOKEN_ENV} is not set: the server would run unguarded")
        self.token = token
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = scope.get("headers") or []
        if scope["type"] == "http" and scope.get("path") == "/health":
            challenge = next((v for k, v in headers if k == CHALLENGE_HEADER.encode()), None)
            if challenge is None or len(challenge) > 128:
                return await self.app(scope, receive, send)
            signed = proof(self.token, challenge.decode("latin-1"), os.getpid()).encode()

            async def send_with_proof(message):
                if message["type"] == "http.response.start":
                    extra = [
                        (PROOF_HEADER.encode(), signed),
                        (PID_HEADER.encode(), str(os.getpid()).encode()),
                    ]
                    message = {**message, "headers": [*message.get("headers", []), *extra]}
                await send(message)

            return await self.app(scope, receive, send_with_proof)
        given = [v for k, v in headers if k == b"authorization"]
        if len(given) == 1 and hmac.compare_digest(given[0], self.expected):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 1008})
        body = b'{"error": "this server needs the token of the run that started it"}'
        start = {
            "type": "http.response.start",
            "status": 401,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
        await send(start)
        await send({"type": "http.response.body", "body": body})
