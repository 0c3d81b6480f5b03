"""A small OpenAI-compatible server for tests: `/v1/chat/completions` served by a real model through `HFEngine`.

Binds 127.0.0.1 on a free port; generation is real (a tiny-world model sampled by the project's engine), not
scripted. A fault plan injects what real endpoints do: 429 and 500 answers, a reply slower than the client's
timeout, a connection closed without an answer. It checks the bearer token when given one, so a test can assert the
client sent the key (and nowhere else).

In a test: `with OpenAIServer(model_dir, key=K, faults=...) as server: server.base_url`. As a process (to be killed
mid-run): `python tests/sft/openai_server.py --model DIR --port-file FILE [--key-env NAME]`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FAULTS = ("ok", "429", "500", "slow", "drop")


class OpenAIServer:
    """Serves `model_dir` on loopback; `faults(request_number) -> one of FAULTS` (default: always "ok")."""

    def __init__(
        self,
        model_dir: str | Path,
        *,
        key: str | None = None,
        faults: Callable[[int], str] | None = None,
        slow_s: float = 2.0,
        threads: int = 1,
    ):
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
        import torch

        from pasodoble.sft.teacher import LocalTeacher

        torch.set_num_threads(threads)  # more threads than free cores slows a tiny model down 10-20x

        self.teacher = LocalTeacher.from_pretrained(str(model_dir))
        self.key, self.faults, self.slow_s = key, faults or (lambda i: "ok"), slow_s
        self.counts: Counter = Counter()
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> OpenAIServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _next_fault(self) -> str:
        with self.lock:
            number = self.counts["requests"]
            self.counts["requests"] += 1
            fault = self.faults(number)
            self.counts[fault] += 1
        return fault

    def _generate(self, body: dict) -> dict:
        seeds = [body["seed"]] if "seed" in body else None
        reply = self.teacher.complete(
            [body["messages"]],
            n=int(body.get("n", 1)),
            temperature=float(body.get("temperature", 1.0)),
            max_tokens=int(body.get("max_tokens", 256)),
            seeds=seeds,
        )[0]
        choices = [
            {"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}
            for i, t in enumerate(reply.texts)
        ]
        return {
            "id": "cmpl-test",
            "object": "chat.completion",
            "model": body.get("model"),
            "choices": choices,
        }

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (
                    BrokenPipeError,
                    ConnectionResetError,
                ):  # the client gave up (its timeout): it retries
                    self.close_connection = True

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                if self.path.rstrip("/") != "/v1/chat/completions":
                    return self._send(404, {"error": "not found"})
                if server.key is not None and self.headers.get("Authorization") != f"Bearer {server.key}":
                    return self._send(401, {"error": "bad key"})
                fault = server._next_fault()
                if fault == "429":
                    return self._send(429, {"error": "rate limited"})
                if fault == "500":
                    return self._send(500, {"error": "internal"})
                if fault == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return None
                if fault == "slow":
                    time.sleep(server.slow_s)
                return self._send(200, server._generate(body))

        return Handler


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--port-file", required=True, type=Path)
    parser.add_argument("--key-env", default=None, help="environment variable holding the expected key")
    args = parser.parse_args()
    key = os.environ[args.key_env] if args.key_env else None
    with OpenAIServer(args.model, key=key) as server:
        tmp = args.port_file.with_suffix(".tmp")
        tmp.write_text(server.base_url)
        os.replace(tmp, args.port_file)
        server.thread.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
