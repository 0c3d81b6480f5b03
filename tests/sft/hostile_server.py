"""A loopback teacher endpoint that answers like a broken or malicious server, for the teacher client's tests.

`HostileServer(mode)` binds 127.0.0.1 on a free port in a thread; `mode(request_number, path) -> str` picks the
answer of each request:
    ok                 a valid completion (a sum question for proposer prompts, its boxed answer for solver ones)
    redirect:CODE:URL  a 301/302/303/307/308 to URL
    trickle_head       the whole reply one byte a second, from the status line on
    trickle_body       headers at once, then the body one byte a second
    endless            200 with no length, bytes until the client hangs up
    huge_length        200 declaring a 1 GiB Content-Length, then bytes until the client hangs up
    big_valid          a valid completion of 5 MB
    nested             200 with '[' x 200,000
    status:CODE[:RETRY_AFTER]  that status with an error body (and a Retry-After header)
`sft_data_recipe` writes an `sft-data` recipe whose prompts this server understands. It records each request's path and Authorization header and the bytes it sent; it stops itself when the block ends
(every trickle and stream checks that) and after `max_life_s` in any case.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

PROPOSER_MARK, SOLVER_MARK = "PASSAGE:", "QUESTION:"
PROMPTS = {
    "proposer_template": PROPOSER_MARK + " {passage}",
    "proposer_template_no_passage": "Write a problem.",
    "solver_template": SOLVER_MARK + " {question}",
}


def completion_for(body: dict) -> str:
    """A proposal `What is S + 1?` (S from the seed) for a proposer prompt; `\\boxed{S+1}` for a solver prompt."""
    text = body["messages"][-1]["content"]
    if text.startswith(SOLVER_MARK):
        number = int(re.search(r"What is (\d+) \+ 1", text).group(1))
        return f"The sum is \\boxed{{{number + 1}}}."
    seed = int(body.get("seed", 7))
    return f"<problem>What is {seed} + 1?</problem><answer>\\boxed{{{seed + 1}}}</answer>"


def completion_json(body: dict, content: str | None = None) -> bytes:
    content = completion_for(body) if content is None else content
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()


BIG_VALID = completion_json({}, "x" * 5_000_000)  # built once, so a test's memory peak is the client's


class HostileServer:
    def __init__(self, mode=lambda number, path: "ok", *, max_life_s: float = 300.0):
        self.mode, self.max_life_s = mode, max_life_s
        self.requests: list[dict] = []  # {"path", "auth"} of each request
        self.sent_bytes = 0
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.timer = threading.Timer(max_life_s, self.close)
        self.timer.daemon = True

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> HostileServer:
        self.thread.start()
        self.timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if not self.stop.is_set():
            self.stop.set()
            self.timer.cancel()
            self.httpd.shutdown()
            self.httpd.server_close()

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _raw(self, data: bytes) -> None:
                self.wfile.write(data)
                self.wfile.flush()
                with server.lock:
                    server.sent_bytes += len(data)

            def _reply(self, status: int, data: bytes, headers: dict | None = None) -> None:
                head = f"HTTP/1.1 {status} X\r\nContent-Length: {len(data)}\r\nConnection: close\r\n"
                head += "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
                self._raw(head.encode() + b"\r\n")
                self._raw(data)

            def _trickle(self, data: bytes) -> None:
                for i in range(len(data)):
                    if server.stop.wait(1.0):
                        return
                    self._raw(data[i : i + 1])

            def _stream(self, head: bytes) -> None:
                self._raw(head)
                chunk = b"a" * 65536
                while not server.stop.is_set():
                    self._raw(chunk)

            def do_POST(self) -> None:
                self.close_connection = True
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body = json.loads(raw) if raw else {}
                with server.lock:
                    number = len(server.requests)
                    server.requests.append(
                        {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
                    )
                mode = server.mode(number, self.path)
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # a bounded client hung up
                    self._answer(mode, body)

            def _answer(self, mode: str, body: dict) -> None:
                kind, _, rest = mode.partition(":")
                if kind == "ok":
                    return self._reply(200, completion_json(body))
                if kind == "redirect":
                    code, _, url = rest.partition(":")
                    return self._reply(int(code), b"", {"Location": url})
                if kind == "trickle_head":
                    data = completion_json(body)
                    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(data)}\r\n\r\n".encode()
                    return self._trickle(head + data + b" " * 100_000)
                if kind == "trickle_body":
                    data = completion_json(body) + b" " * 100_000
                    self._raw(f"HTTP/1.1 200 OK\r\nContent-Length: {len(data)}\r\n\r\n".encode())
                    return self._trickle(data)
                if kind == "endless":
                    return self._stream(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
                if kind == "huge_length":
                    return self._stream(b"HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n")
                if kind == "big_valid":
                    return self._reply(200, BIG_VALID)
                if kind == "nested":
                    return self._reply(200, b"[" * 200_000)
                if kind == "status":
                    code, _, after = rest.partition(":")
                    return self._reply(
                        int(code), b'{"error": "no"}', {"Retry-After": after} if after else None
                    )
                raise AssertionError(f"unknown mode {mode}")

        return Handler


def sft_data_recipe(tmp_path: Path, teacher: dict, **kw) -> Path:
    """A recipe for `pasodoble sft-data` over 8 short passages, one sample a wave, against `teacher`."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "".join(json.dumps({"text": f"Passage {i} about sums of numbers."}) + "\n" for i in range(8))
    )
    cfg = {
        "out_dir": str(tmp_path / "out"),
        "target_kept": 4,
        "samples_per_passage": 1,
        "wave_passages": 1,
        "max_passages": 4,
        "proposer_max_tokens": 64,
        "checker_max_tokens": 64,
        "teacher": {"model": "m", "concurrency": 2, **teacher},
        "knowledge": {"path": str(corpus), "min_chars": 5},
        "prompts": PROMPTS,
        **kw,
    }
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def wait_for(predicate, guard_s: float = 300.0, what: str = "condition") -> None:
    """Poll `predicate` until true; the guard only catches a hang."""
    deadline = time.monotonic() + guard_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"hang guard: {what} not reached in {guard_s} s")
        time.sleep(0.05)
