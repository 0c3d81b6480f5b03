"""Teachers: models that write text for chat messages, behind one interface (an HTTP endpoint or a local model).

What: `Teacher.complete(conversations, n=, temperature=, max_tokens=, seed=)` returns one `Reply` per conversation
(`n` texts, or the error that ended its request). `OpenAITeacher` talks to any OpenAI-compatible
`/chat/completions` endpoint (vLLM, SGLang, TGI, hosted APIs); `LocalTeacher` runs a Hugging Face model through the
project's rollout engine (`HFEngine`). `build_teacher(cfg, where)` makes either from a `TeacherConfig`, so the
cold-start pipeline never asks which one it has.

Why: the paper's cold start asks a strong teacher (Qwen3-14B) for Proposer outputs and a second model (GPT-5-mini)
to check them. Any endpoint must do, and on a machine without one a local model must do.

How (HTTP): the standard library only (`urllib`), one request per conversation, `concurrency` threads, a shared
rate limit (`requests_per_s`, evenly spaced), a per-request timeout, and retries with exponential backoff and full
jitter on 429, 5xx, timeouts and dropped or refused connections (a `Retry-After` header is honoured as a floor).
Other 4xx answers are not retried. The API key is read from the environment variable *named* by `api_key_env` at
each request; it is never stored on the object, in the config, in a reply or in an error message.

Departures from the reference code: the reference hard-codes one provider, model and key; a failed request there
ends the run. Here a request that fails after its retries is one `Reply` with an error, counted by the caller.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.client import HTTPException
from typing import Protocol, runtime_checkable

from pasodoble.errors import ConfigError

Messages = list[dict[str, str]]
RETRY_STATUSES = (408, 409, 429, 500, 502, 503, 504)


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
    timeout_s: float = 300.0  # per-request timeout
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
            if not self.base_url or not self.base_url.startswith(("http://", "https://")):
                raise ConfigError(
                    f"{where}.base_url", "needs an http(s) URL such as http://127.0.0.1:8000/v1"
                )
            if self.api_key_env is not None and not os.environ.get(self.api_key_env):
                raise ConfigError(
                    f"{where}.api_key_env", f"the environment variable {self.api_key_env} is not set or empty"
                )
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


class _Fatal(Exception):
    """A request that retrying cannot fix (4xx other than 408/409/429)."""


class _Retryable(Exception):
    def __init__(self, reason: str, floor_s: float = 0.0):
        super().__init__(reason)
        self.reason, self.floor_s = reason, floor_s


class OpenAITeacher:
    """`Teacher` over an OpenAI-compatible `/chat/completions` endpoint (see module docstring)."""

    def __init__(self, cfg: TeacherConfig, where: str = "teacher", *, sleep=time.sleep):
        cfg.validate(where)
        self.cfg = cfg
        self.url = cfg.base_url.rstrip("/") + "/chat/completions"
        self.limiter = RateLimiter(cfg.requests_per_s)
        self.sleep = sleep
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
            headers["Authorization"] = "Bearer " + os.environ.get(self.cfg.api_key_env, "")
        return headers

    def _post(self, body: bytes) -> dict:
        request = urllib.request.Request(self.url, data=body, headers=self._headers(), method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.cfg.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as err:
            if err.code in RETRY_STATUSES:
                after = err.headers.get("Retry-After") if err.headers else None
                floor = float(after) if after and after.replace(".", "", 1).isdigit() else 0.0
                raise _Retryable(f"http_{err.code}", floor) from None
            raise _Fatal(f"http_{err.code} (not retried)") from None
        except TimeoutError:
            raise _Retryable("timeout") from None
        except urllib.error.URLError as err:
            if isinstance(err.reason, TimeoutError):
                raise _Retryable("timeout") from None
            raise _Retryable("connection") from None
        except (HTTPException, ConnectionError, OSError):
            raise _Retryable("connection") from None
        try:
            return json.loads(raw)
        except ValueError:
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
        for attempt in range(self.cfg.max_retries + 1):
            self.limiter.wait()
            self._count("requests")
            try:
                data = self._post(body)
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
        seeds = list(seeds) if seeds is not None else [None] * len(conversations)
        with ThreadPoolExecutor(max_workers=self.cfg.concurrency) as pool:
            return list(
                pool.map(
                    lambda a: self._one(a[0], n, temperature, max_tokens, a[1]), zip(conversations, seeds)
                )
            )


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
