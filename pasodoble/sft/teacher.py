"""Teachers: models that write text for chat messages, behind one interface (an HTTP endpoint or a local model).

What: `Teacher.complete(conversations, n=, temperature=, max_tokens=, seed=)` returns one `Reply` per conversation
(`n` texts, or the error that ended its request). `OpenAITeacher` talks to any OpenAI-compatible
`/chat/completions` endpoint (vLLM, SGLang, TGI, hosted APIs); `LocalTeacher` runs a Hugging Face model through the
project's rollout engine (`HFEngine`). `build_teacher(cfg, where)` makes either from a `TeacherConfig`, so the
cold-start pipeline never asks which one it has.

Why: the paper's cold start asks a strong teacher (Qwen3-14B) for Proposer outputs and a second model (GPT-5-mini)
to check them. Any endpoint must do, and on a machine without one a local model must do.

How (HTTP): the standard library only (`http_post.py`: no redirects, a total deadline and a byte cap per request,
no proxy for loopback), one request per conversation, `concurrency` threads, a shared rate limit (`requests_per_s`),
and retries with exponential backoff and full jitter on 429, 5xx, timeouts and dropped or refused connections (a
`Retry-After` is a floor, capped at `max_backoff_s`). Other 4xx are not retried; 401, 403 and redirects stop the
run (`TeacherStopped`), as does Ctrl-C, which ends the requests in flight. The key is read (stripped) from the
variable *named* by `api_key_env` at each request; it is never stored, in the config, a reply or an error.

Departures from the reference code: the reference hard-codes one provider, model and key; a failed request there
ends the run. Here a request that fails after its retries is one `Reply` with an error, counted by the caller.
"""

from __future__ import annotations

import json
import os
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable
from urllib.parse import urlsplit

from pasodoble.errors import ConfigError, UserError
from pasodoble.sft.http_post import BoundedPoster, PostError

Messages = list[dict[str, str]]
RETRY_STATUSES = (408, 409, 429, 500, 502, 503, 504)
ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")
REPLY_BASE_BYTES = (
    1 << 20
)  # the default byte cap of a reply: this much, plus REPLY_BYTES_PER_TOKEN per token asked
REPLY_BYTES_PER_TOKEN = 64  # a token is a few characters, each up to 6 bytes as a JSON \\u escape


@dataclass
class TeacherConfig:
    kind: str = "openai"  # "openai" (an OpenAI-compatible HTTP endpoint) or "local" (a model on this machine)
    model: str | None = (
        None  # model name at the endpoint, or a local model folder / Hugging Face id / tiny: spec
    )
    base_url: str | None = None  # endpoint root, e.g. http://127.0.0.1:8000/v1 (kind openai)
    api_key_env: str | None = None  # NAME of the environment variable holding the API key (None: no key)
    concurrency: int = 8  # requests in flight at once (kind openai)
    requests_per_s: float | None = None  # rate limit over all threads (None: none)
    timeout_s: float = 300.0  # total deadline of one request (connect, send, wait, read); a breach is retried
    max_reply_bytes: int | None = None  # byte cap of one reply (None: 1 MiB + 64 bytes per token asked for)
    max_retries: int = 6  # retries of one request after the first try
    backoff_s: float = 1.0  # base delay of the first retry; doubles each retry, with full jitter
    max_backoff_s: float = 60.0  # ceiling of one retry's delay
    extra_body: dict = field(default_factory=dict)  # extra request fields, e.g. {chat_template_kwargs: {...}}
    max_tokens_field: str = "max_tokens"  # "max_completion_tokens" for OpenAI's reasoning models
    omit_fields: list[str] = field(
        default_factory=list
    )  # request fields not to send, e.g. [temperature, seed]
    batch_size: int = 64  # sequences per generate call (kind local)
    max_prompt_length: int | None = None  # prompt tokens kept from the right (kind local; None: all)

    def validate(self, where: str = "teacher") -> None:
        if self.kind not in ("openai", "local"):
            raise ConfigError(f"{where}.kind", f"must be 'openai' or 'local', got {self.kind!r}")
        if not self.model:
            raise ConfigError(
                f"{where}.model", "is required: the endpoint's model name or a local model folder"
            )
        if self.kind == "openai":
            check_base_url(self.base_url, where)
            if self.api_key_env is not None:
                if not isinstance(self.api_key_env, str) or not ENV_NAME.fullmatch(self.api_key_env):
                    raise ConfigError(
                        f"{where}.api_key_env",
                        "must be the NAME of an environment variable (capitals, digits and _), not the key "
                        "itself (the value given is not shown)",
                    )
                read_key(self.api_key_env, where)
        for name in ("concurrency", "batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{where}.{name}", "must be at least 1")
        if self.max_tokens_field not in ("max_tokens", "max_completion_tokens"):
            raise ConfigError(f"{where}.max_tokens_field", "must be 'max_tokens' or 'max_completion_tokens'")
        unknown = set(self.omit_fields) - {"temperature", "seed", "n", "max_tokens"}
        if unknown:
            raise ConfigError(
                f"{where}.omit_fields", f"can omit temperature, seed, n, max_tokens; not {sorted(unknown)}"
            )
        if self.max_retries < 0:
            raise ConfigError(f"{where}.max_retries", "must be >= 0")
        for name in ("timeout_s", "backoff_s", "max_backoff_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{where}.{name}", "must be positive")
        if self.requests_per_s is not None and self.requests_per_s <= 0:
            raise ConfigError(f"{where}.requests_per_s", "must be positive, or null for no limit")
        if self.max_reply_bytes is not None and self.max_reply_bytes < 1:
            raise ConfigError(f"{where}.max_reply_bytes", "must be at least 1, or null for the default")


def check_base_url(url, where: str) -> None:
    """One line naming `{where}.base_url` unless it is an http(s) URL with a host and no credentials or query."""
    field_name = f"{where}.base_url"
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ConfigError(field_name, "needs an http(s) URL such as http://127.0.0.1:8000/v1")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError on a bad port)
    except ValueError:
        raise ConfigError(field_name, "is not a valid URL (host and port)") from None
    if parts.username is not None or parts.password is not None:
        raise ConfigError(
            field_name,
            "holds credentials (user:password@), which would be saved with the config: remove them and put "
            "the key in the variable named by api_key_env",
        )
    if parts.query or parts.fragment:
        raise ConfigError(
            field_name, "must have no ?query or #fragment (the client appends /chat/completions)"
        )
    if not parts.hostname:
        raise ConfigError(field_name, "needs a host, e.g. http://127.0.0.1:8000/v1")


def read_key(env: str, where: str) -> str:
    """The key in variable `env`, stripped of surrounding whitespace (a CRLF key file); never part of an error."""
    key = os.environ.get(env, "").strip()
    if not key:
        raise ConfigError(f"{where}.api_key_env", f"the environment variable {env} is not set or empty")
    if not all(33 <= ord(c) < 127 for c in key):
        raise ConfigError(
            f"{where}.api_key_env",
            f"the key in {env} holds spaces, control or non-ASCII characters (not shown): set it to the key alone",
        )
    return key


def retry_after_s(headers, cap_s: float) -> float:
    """A numeric `Retry-After` in seconds, capped at `cap_s`; 0 when absent or not a number (an HTTP date)."""
    value = (headers.get("Retry-After") or "").strip() if headers is not None else ""
    if not re.fullmatch(r"[0-9]+(\.[0-9]*)?", value):
        return 0.0
    return min(cap_s, float(value))  # float() of a huge number is inf, never an error


@dataclass
class Reply:
    texts: list[str]  # n completions (empty when the request failed)
    error: str | None = None  # why the request failed after its retries (None: it succeeded)


@runtime_checkable
class Teacher(Protocol):
    def complete(
        self,
        conversations: Sequence[Messages],
        *,
        n: int = 1,
        temperature: float = 1.0,
        max_tokens: int = 1024,
        seeds: Sequence[int] | None = None,
    ) -> list[Reply]:
        """One Reply per conversation, each with `n` texts or an error; `seeds`: one sampling seed each."""
        ...


class RateLimiter:
    """Spaces calls `1 / rate` seconds apart across threads."""

    def __init__(self, rate: float | None):
        self.interval = 0.0 if rate is None else 1.0 / rate
        self.next = 0.0
        self.lock = threading.Lock()

    def wait(self) -> None:
        if not self.interval:
            return
        with self.lock:
            now = time.monotonic()
            slot = max(now, self.next)
            self.next = slot + self.interval
        time.sleep(max(0.0, slot - now))


class TeacherStopped(UserError):
    """An answer that every request would get (401, 403, a redirect): the run stops with this one line."""


class _Fatal(Exception):
    """A request that retrying cannot fix (4xx other than 408/409/429, a reply over the byte cap)."""


class _Aborted(Exception):
    """The run is ending (Ctrl-C or a stop): no more tries."""


class _Retryable(Exception):
    def __init__(self, reason: str, floor_s: float = 0.0):
        super().__init__(reason)
        self.reason, self.floor_s = reason, floor_s


class OpenAITeacher:
    """`Teacher` over an OpenAI-compatible `/chat/completions` endpoint (see module docstring)."""

    def __init__(self, cfg: TeacherConfig, where: str = "teacher", *, sleep=None):
        cfg.validate(where)
        self.cfg, self.where = cfg, where
        self.url = cfg.base_url.rstrip("/") + "/chat/completions"
        self.limiter = RateLimiter(cfg.requests_per_s)
        self.poster = BoundedPoster()
        self.sleep = sleep or self.poster.aborted.wait  # a retry's wait ends at once on abort
        self.counters: Counter = Counter()  # requests, retries, failures, and retries by reason
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OpenAITeacher(url={self.url!r}, model={self.cfg.model!r})"

    def _count(self, name: str) -> None:
        with self._lock:
            self.counters[name] += 1

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.cfg.api_key_env is not None:
            headers["Authorization"] = "Bearer " + read_key(self.cfg.api_key_env, self.where)
        return headers

    def _post(self, body: bytes, max_bytes: int) -> dict:
        try:
            status, headers, raw = self.poster.post(
                self.url, body, self._headers(), deadline_s=self.cfg.timeout_s, max_bytes=max_bytes
            )
        except PostError as err:
            if err.kind == "aborted":
                raise _Aborted from None
            if err.kind == "too_large":
                raise _Fatal(f"reply over {max_bytes} bytes (not retried)") from None
            raise _Retryable("timeout" if err.kind == "deadline" else err.kind) from None
        if status in (401, 403):
            raise TeacherStopped(
                f"{self.where}: the endpoint at {self.cfg.base_url} answered {status} "
                f"({'unauthorized' if status == 401 else 'forbidden'}): check the key in the variable named by "
                f"{self.where}.api_key_env ({self.cfg.api_key_env}) and {self.where}.base_url"
            )
        if 300 <= status < 400:
            raise TeacherStopped(
                f"{self.where}: the endpoint at {self.cfg.base_url} answered {status} (a redirect, not followed): "
                f"set {self.where}.base_url to the address that serves /chat/completions"
            )
        if status in RETRY_STATUSES:
            raise _Retryable(f"http_{status}", retry_after_s(headers, self.cfg.max_backoff_s))
        if not 200 <= status < 300:
            raise _Fatal(f"http_{status} (not retried)")
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser's stack
            raise _Retryable("bad_json") from None

    def _one(
        self, messages: Messages, n: int, temperature: float, max_tokens: int, seed: int | None
    ) -> Reply:
        fields = {"n": n, "temperature": temperature, "max_tokens": max_tokens, "seed": seed}
        payload = {**self.cfg.extra_body, "model": self.cfg.model, "messages": messages}
        for name, value in fields.items():
            if value is not None and name not in self.cfg.omit_fields:
                payload[self.cfg.max_tokens_field if name == "max_tokens" else name] = value
        body = json.dumps(payload).encode()
        max_bytes = self.cfg.max_reply_bytes or REPLY_BASE_BYTES + REPLY_BYTES_PER_TOKEN * n * max_tokens
        for attempt in range(self.cfg.max_retries + 1):
            self.limiter.wait()
            if self.poster.aborted.is_set():
                raise _Aborted
            self._count("requests")
            try:
                data = self._post(body, max_bytes)
                texts = [choice["message"]["content"] or "" for choice in data["choices"]]
            except _Retryable as err:
                self._count(f"retry/{err.reason}")
                if attempt == self.cfg.max_retries:
                    self._count("failures")
                    return Reply([], f"{err.reason} after {attempt + 1} tries")
                delay = min(self.cfg.max_backoff_s, self.cfg.backoff_s * 2**attempt)
                self.sleep(max(err.floor_s, random.uniform(0.0, delay)))
                continue
            except _Fatal as err:
                self._count("failures")
                return Reply([], str(err))
            except (KeyError, TypeError, IndexError):
                self._count("failures")
                return Reply([], "bad response shape (no choices[].message.content)")
            if len(texts) != n:
                self._count("failures")
                return Reply([], f"asked for {n} choices, got {len(texts)}")
            return Reply(texts)
        raise AssertionError("unreachable")

    def complete(self, conversations, *, n=1, temperature=1.0, max_tokens=1024, seeds=None) -> list[Reply]:
        """Replies in order. A stop (`TeacherStopped`) or Ctrl-C ends every request in flight and is raised."""
        seeds = list(seeds) if seeds is not None else [None] * len(conversations)
        pool = ThreadPoolExecutor(max_workers=self.cfg.concurrency)
        try:
            futures = [
                pool.submit(self._one, m, n, temperature, max_tokens, s) for m, s in zip(conversations, seeds)
            ]
            done = _wait_waking(futures)
            failed = next((f for f in done if f.exception() is not None), None)
            if failed is not None:  # a stop ends the wave now, not after slower requests submitted before it
                raise failed.exception()
            return [f.result() for f in futures]
        except BaseException:
            self.poster.abort_all()  # the teacher ends with the run: no request outlives it
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def _wait_waking(futures, every_s: float = 0.2) -> set:
    """`wait(FIRST_EXCEPTION)` that wakes every `every_s`: a Ctrl-C that the kernel hands to a worker thread (any
    thread may take a process's signal) only flags the main thread, whose untimed lock wait would sleep on until a
    request ended (a trickling reply: minutes); waking lets the main thread run the handler and raise at once."""
    while True:
        done, pending = wait(futures, timeout=every_s, return_when=FIRST_EXCEPTION)
        if not pending or any(f.exception() is not None for f in done):
            return done


class LocalTeacher:
    """`Teacher` over a local Hugging Face model and the rollout engine; prompts are chat-templated here."""

    def __init__(self, model, tokenizer, *, batch_size: int = 64, max_prompt_length: int | None = None):
        from pasodoble.rollout import HFEngine

        self.tokenizer = tokenizer
        self.engine = HFEngine(model, tokenizer, batch_size=batch_size)
        self.max_prompt_length = max_prompt_length
        self.lock = threading.Lock()  # one generate at a time: the model is shared

    @classmethod
    def from_pretrained(cls, path: str, cfg: TeacherConfig | None = None) -> LocalTeacher:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        cfg = cfg or TeacherConfig(kind="local", model=path)
        model = AutoModelForCausalLM.from_pretrained(path)
        return cls(
            model,
            AutoTokenizer.from_pretrained(path),
            batch_size=cfg.batch_size,
            max_prompt_length=cfg.max_prompt_length,
        )

    def complete(self, conversations, *, n=1, temperature=1.0, max_tokens=1024, seeds=None) -> list[Reply]:
        """Generates the batch in one engine call, seeded by the first seed (the engine takes one per call)."""
        from pasodoble.rollout import SamplingParams

        if not conversations:
            return []
        ids = [
            self.tokenizer.apply_chat_template(
                m, add_generation_prompt=True, tokenize=True, return_dict=True
            )["input_ids"]
            for m in conversations
        ]
        if self.max_prompt_length is not None:
            ids = [p[-self.max_prompt_length :] for p in ids]
        seed = seeds[0] if seeds else None
        sampling = SamplingParams(n=n, temperature=temperature, max_new_tokens=max_tokens, seed=seed)
        with self.lock:
            outputs = self.engine.generate(ids, sampling)
        return [Reply([c.text for c in completions]) for completions in outputs]


def build_teacher(cfg: TeacherConfig, where: str = "teacher", *, model_path: str | None = None) -> Teacher:
    """An `OpenAITeacher` or a `LocalTeacher` per `cfg.kind`; `model_path` is the resolved local folder."""
    cfg.validate(where)
    if cfg.kind == "openai":
        return OpenAITeacher(cfg, where)
    return LocalTeacher.from_pretrained(model_path or cfg.model, cfg)
