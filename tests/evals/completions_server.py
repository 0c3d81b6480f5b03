"""A small vLLM-style `/v1/completions` server for tests: token-id prompts answered by a real model via `HFEngine`.

It speaks the part of vLLM's OpenAI-compatible API that `VLLMServerEngine.generate` uses (token-id prompt, n,
temperature, max_tokens, seed, `return_token_ids`, `logprobs=0`) and `/health`; requests are served one at a time.
In a test: `with CompletionsServer(model_dir) as server: server.url`.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class CompletionsServer:
    def __init__(self, model_dir: str | Path):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from pasodoble.rollout import HFEngine

        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.engine = HFEngine(AutoModelForCausalLM.from_pretrained(model_dir).eval(), tokenizer)
        self.lock = threading.Lock()
        self.requests = 0
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> CompletionsServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def complete(self, body: dict) -> dict:
        from pasodoble.rollout import SamplingParams

        sampling = SamplingParams(
            n=body["n"],
            temperature=body["temperature"],
            max_new_tokens=body["max_tokens"],
            seed=body.get("seed"),
        )
        with self.lock:
            self.requests += 1
            (completions,) = self.engine.generate([body["prompt"]], sampling)
        return {
            "choices": [
                {
                    "index": i,
                    "token_ids": c.token_ids,
                    "logprobs": {"token_logprobs": c.logprobs},
                    "finish_reason": c.finish_reason,
                }
                for i, c in enumerate(completions)
            ]
        }

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, code: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._send(200 if self.path == "/health" else 404, {})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path != "/v1/completions":
                    return self._send(404, {"error": self.path})
                self._send(200, server.complete(body))

            def log_message(self, *args):
                pass

        return Handler
