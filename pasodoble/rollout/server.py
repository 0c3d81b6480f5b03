"""Server mode (`engine: vllm_server`, `pasodoble serve`): a vLLM OpenAI-compatible server and its client engine.

What:
- `VLLMServer.start(...)`: launches `python -m vllm.entrypoints.openai.api_server` on loopback at a free port (or
  `vllm.server_port`), with the project's worker extension (weight sync), processed log-probs, LoRA when the
  roles are adapters, and a random token every request must carry (`server_auth`); waits for `/health` with a
  proof that the answer comes from that process (a server that dies while starting raises with its last log
  lines); logs into the run folder; `stop()` ends its process group. A run stops the server it started.
- `VLLMServerEngine`: `RolloutEngine` over HTTP. `/v1/completions` with token-id prompts (one request per prompt,
  with that prompt's seed, sent concurrently), `logprobs=0` and `return_token_ids`; weight sync through the
  server's own endpoints, full models by `vllm.weight_sync` (`settings.engine_sync`): `nccl` (the default on a GPU)
  or `gloo` over vLLM's weight-transfer routes (`rollout.transfer`: tensors broadcast from this process, no file, so
  the server may run on another node; `start` passes `--weight-transfer-config`), or `shm` (the CPU default):
  `/collective_rpc` -> `pasodoble_reload(folder)` from safetensors under /dev/shm (so the server must run on this
  machine); adapters by `/v1/load_lora_adapter` under a new name per version + `/v1/unload_lora_adapter`; then
  `/reset_prefix_cache`.
- On several ranks `rollout.placement` decides who starts a server and who syncs it: with
  `distributed.rollout=dedicated` rank 0 starts one per role on GPUs of their own (`devices`) and every rank
  shares it, rank 0 pushing the weights and the others waiting (`owner`, `after_sync`).
- A server that stops answering (killed, crashed) raises `EngineUnavailable`, a one-line error: the run ends, and
  `pasodoble train --resume RUN_DIR` continues from its last checkpoint.

Run: `pasodoble serve --model out/sft` (`rollout/serve_cli.py`; prints the URL; Ctrl-C stops it), then
`pasodoble train ... solver.engine=vllm_server solver.vllm.server_url=http://127.0.0.1:PORT`. The server needs
`VLLM_SERVER_DEV_MODE=1` (for /collective_rpc) and `VLLM_ALLOW_RUNTIME_LORA_UPDATING=1`; `start` sets both, and puts
every route behind the token (`serve` writes it to OUT/token; the client of a `server_url` sends `VLLM_API_KEY`).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from pasodoble.errors import UserError
from pasodoble.rollout.base import Completion, SamplingParams
from pasodoble.rollout.hosts import advertised_host, bind_host, check_bind, device_list, free_port
from pasodoble.rollout.server_auth import (
    CHALLENGE_HEADER,
    MIDDLEWARE,
    TOKEN_ENV,
    auth_headers,
    client_token,
    new_token,
    proof_refusal,
)
from pasodoble.rollout.settings import TRANSFER_BACKENDS, VLLMConfig, engine_dtype, engine_sync
from pasodoble.rollout.shm import WEIGHTS_ROOT_ENV, make_shm_dir, shm_root
from pasodoble.rollout.vllm_common import WORKER_EXTENSION, ServesAdapters, make_completion, vllm_sampling
from pasodoble.rollout.weights import write_weights

SERVED_NAME = "base"
LAUNCHER_ENV = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
)


class EngineUnavailable(UserError):
    """The vLLM server stopped answering; the run cannot go on (resume it from its last checkpoint)."""

    exit_code = 3


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None  # a redirect would carry the token to another origin: it ends as an HTTPError


# No proxy (http_proxy would capture loopback requests and their token) and no redirects.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect)


class VLLMServer:
    """A vLLM server process this project started (see module docstring)."""

    def __init__(self, process: subprocess.Popen, url: str, log_path: Path, token: str):
        self.process, self.url, self.log_path, self.token = process, url, log_path, token

    @classmethod
    def start(
        cls,
        model_path: str | Path,
        cfg: VLLMConfig,
        *,
        max_model_len: int,
        log_dir: str | Path,
        dtype: str = "float32",
        adapters: Sequence[str] = (),
        host: str = "127.0.0.1",
        port: int | None = None,
        devices: Sequence[int] | None = None,
        wait: bool = True,
        token: str | None = None,
        weights_root: str | Path | None = None,
        allow_remote: bool | None = None,
    ) -> VLLMServer:
        """Start a server; `devices`: indices of this process's visible GPUs it may use (None: inherited).

        `token`: what every request must carry (None: a new random one, `server.token`); `weights_root`: the
        only folder its reload method loads from (None: the `pasodoble-vllm-*` folders of shared memory);
        `log_dir`: where its log goes (the run folder)."""
        warning = check_bind(host, cfg.allow_remote if allow_remote is None else allow_remote)
        if warning is not None:
            print(warning, file=sys.stderr, flush=True)
        token = token or new_token()
        port = port or cfg.server_port or free_port(bind_host(host))
        on_cpu = not _cuda()
        args = [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(model_path),
            "--served-model-name", SERVED_NAME,
            "--host", host,
            "--port", str(port),
            "--dtype", engine_dtype(cfg, dtype),
            "--max-model-len", str(cfg.max_model_len or max_model_len),
            "--gpu-memory-utilization", str(cfg.gpu_memory_utilization),
            "--tensor-parallel-size", str(cfg.tensor_parallel_size),
            "--logprobs-mode", "processed_logprobs",
            "--worker-extension-cls", WORKER_EXTENSION,
            "--middleware", MIDDLEWARE,
            "--seed", "0",
        ]  # fmt: skip
        if cfg.enforce_eager if cfg.enforce_eager is not None else on_cpu:
            args.append("--enforce-eager")
        args.append("--enable-prefix-caching" if cfg.enable_prefix_caching else "--no-enable-prefix-caching")
        sync = engine_sync(cfg, "vllm_server", cuda=not on_cpu)
        if sync in TRANSFER_BACKENDS:
            args += ["--weight-transfer-config", json.dumps({"backend": TRANSFER_BACKENDS[sync]})]
        if adapters:
            args += [
                "--enable-lora",
                "--max-loras",
                str(len(adapters)),
                "--max-lora-rank",
                str(cfg.max_lora_rank),
            ]
        env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1"}
        # In the environment, not on the command line (which every local user can read); vLLM's own /v1 key is
        # the same token, so an inherited VLLM_API_KEY cannot demand a second one.
        env[TOKEN_ENV] = env["VLLM_API_KEY"] = token
        env[WEIGHTS_ROOT_ENV] = str(weights_root or shm_root())
        if devices is not None and not on_cpu:
            env["CUDA_VISIBLE_DEVICES"] = device_list(devices)
        for key in [k for k in env if k in LAUNCHER_ENV or k.startswith("TORCHELASTIC_")]:
            del env[key]  # the server is not a rank of the training run (torch and vLLM read some of these)
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH")])
        )
        if on_cpu:
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(cfg.cpu_kvcache_space_gb))
            if cfg.cpu_threads_bind:
                env["VLLM_CPU_OMP_THREADS_BIND"] = cfg.cpu_threads_bind
        log_dir = Path(log_dir)
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"vllm-server-{port}.log"
        log = open(log_path, "ab")  # noqa: SIM115 - the child writes to it for its whole life
        process = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        server = cls(process, f"http://{advertised_host(host)}:{port}", log_path, token)
        if wait:
            server.wait_healthy(cfg.server_start_timeout_s)
        return server

    def wait_healthy(self, timeout_s: float) -> None:
        try:
            wait_until_healthy(self.url, timeout_s, process=self, token=self.token)
        except EngineUnavailable as e:
            self.stop()
            raise EngineUnavailable(f"{e}; log {self.log_path}") from None

    def tail(self, n: int = 5) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(lines[-n:])

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout_s: float = 30.0) -> None:
        """End the server's whole process group (the API server and its engine core); idempotent."""
        if self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout_s)
        except ProcessLookupError:
            pass


def die_with_parent() -> None:
    """In the server's process before it runs (Linux): SIGTERM when the process that started it ends, however it
    ends. A rank that exits at once on a collective failure (`TorchDistributed.fail`), is killed, or fails while
    building its second role would otherwise leave the server it started running in its own session."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def wait_until_healthy(
    url: str,
    timeout_s: float,
    *,
    process: VLLMServer | None = None,
    who: str = "",
    token: str | None = None,
) -> None:
    """Poll `url`/health until it answers 200; a `process` that exits while starting raises at once.

    With the server's `token`, the answer must also prove it holds the token (`server_auth`), and come from
    `process` when given: a process that took the port raises at once. The token itself is never sent."""
    who = who or f"the vLLM server at {url}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.process.poll() is not None:
            raise EngineUnavailable(
                f"the vLLM server exited with code {process.process.returncode} while starting; "
                f"last log lines: {process.tail()}"
            )
        challenge = secrets.token_hex(16)
        request = urllib.request.Request(url + "/health", headers={CHALLENGE_HEADER: challenge})
        try:
            with _OPENER.open(request, timeout=5) as r:
                status, headers = r.status, r.headers
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            status = None
        if status == 200:
            if token is None:
                return
            pid = process.process.pid if process is not None else None
            refusal = proof_refusal(headers, token, challenge, pid)
            if refusal is None:
                return
            raise EngineUnavailable(
                f"{who} is not the server this run started ({refusal}): another process holds its port"
            )
        time.sleep(1.0)
    raise EngineUnavailable(
        f"{who} was not healthy after {timeout_s:.0f}s (vllm.server_start_timeout_s); {url}"
    )


def _cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


class VLLMServerEngine(ServesAdapters):
    """`RolloutEngine` over a vLLM server's HTTP API (see module docstring)."""

    copies_weights = True  # its own copy, written by `update_weights`

    def __init__(
        self,
        url: str,
        tokenizer,
        cfg: VLLMConfig,
        *,
        server: VLLMServer | None = None,
        owner: bool = True,
        after_sync=None,
        token: str | None = None,
        shm: Path | None = None,
        dtype: str = "float32",
    ):
        """`token`: the server's (None: `VLLM_API_KEY` if set); `shm`: the folder weight copies go to (None: new);
        `dtype`: the role's (the engine's unless `vllm.dtype` names one)."""
        self.url, self.tokenizer, self.cfg, self.server = url.rstrip("/"), tokenizer, cfg, server
        # A server shared by several ranks (`rollout.placement`): the owner pushes weights, every rank then waits.
        self.owner, self.after_sync = owner, after_sync
        self._headers = {"Content-Type": "application/json", **auth_headers(token or client_token())}
        self._shm = shm or make_shm_dir("server")
        self._versions = itertools.count(1)
        self._lora: dict[str, str] = {}  # adapter -> served LoRA name of its current version
        self.sync = engine_sync(cfg, "vllm_server", cuda=_cuda())
        self.dtype = engine_dtype(cfg, dtype)
        self._transfer = None  # `rollout.transfer.Transfer`, opened by the first sync that uses it

    # ------------------------------------------------------------------ HTTP
    def _post(self, path: str, body: dict, timeout: float | None = None) -> dict:
        data = json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, headers=self._headers)
        try:
            with _OPENER.open(request, timeout=timeout or self.cfg.request_timeout_s) as r:
                raw, is_json = r.read(), "json" in r.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")[:300]
            if e.code == 401:
                raise EngineUnavailable(
                    f"the vLLM server at {self.url} refused the run's token (401 on {path}); for a server "
                    "given by vllm.server_url set VLLM_API_KEY to its token (`pasodoble serve` writes it)"
                ) from None
            raise RuntimeError(f"vLLM server {self.url}{path} answered {e.code}: {detail}") from None
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise EngineUnavailable(
                f"the vLLM server at {self.url} stopped answering ({path}: {reason}); the run stopped, "
                "resume it with `pasodoble train --resume RUN_DIR` once a server is up"
            ) from None
        return json.loads(raw) if raw and is_json else {}  # LoRA loads answer in plain text

    # ------------------------------------------------------------------ sampling
    def _generate(
        self, adapter: str | None, prompt_ids, sampling: SamplingParams, on_batch
    ) -> list[list[Completion]]:
        model = SERVED_NAME if adapter is None else self._lora.get(adapter)
        if model is None:
            raise RuntimeError(f"adapter {adapter!r} has not been synced to the vLLM server yet")

        def one(i: int) -> list[Completion]:
            body = {
                "model": model,
                "prompt": list(prompt_ids[i]),
                **vllm_sampling(sampling, i),
                "return_token_ids": True,
            }
            choices = sorted(self._post("/v1/completions", body)["choices"], key=lambda c: c["index"])
            return [self._completion(c) for c in choices]

        result: list[list[Completion]] = [[] for _ in prompt_ids]
        with ThreadPoolExecutor(max_workers=min(16, max(len(prompt_ids), 1))) as pool:
            futures = {pool.submit(one, i): i for i in range(len(prompt_ids))}
            for future in as_completed(futures):  # callbacks run here, on the caller's thread
                i = futures[future]
                result[i] = future.result()
                if on_batch is not None:
                    on_batch(i * sampling.n, result[i])
        return result

    def _completion(self, choice: dict) -> Completion:
        logprobs = (choice.get("logprobs") or {}).get("token_logprobs") or []
        return make_completion(choice["token_ids"], logprobs, choice.get("finish_reason"), self.tokenizer)

    # ------------------------------------------------------------------ weight sync
    def update_weights(self, model) -> None:
        """Full weights to the server: over vLLM's weight transfer (`nccl`, `gloo`) or through /dev/shm (`shm`)."""
        version = next(self._versions)  # every rank counts versions alike (`sync_adapter`)
        if self.owner:
            if self.sync in TRANSFER_BACKENDS:
                self._send(model)
            else:
                self._reload_through_shm(model, self._shm / f"weights-{version}")
            self._post("/reset_prefix_cache", {})
        if self.after_sync is not None:
            self.after_sync()

    def _send(self, model) -> None:
        if self._transfer is None:
            from pasodoble.rollout.transfer import Transfer
            from pasodoble.update.precision import DTYPES

            self._transfer = Transfer(
                TRANSFER_BACKENDS[self.sync],
                self.url,
                self._post,
                workers=self.cfg.tensor_parallel_size,
                dtype=DTYPES[self.dtype],
                timeout_s=self.cfg.sync_timeout_s,
            )
        self._transfer.send(model)

    def _reload_through_shm(self, model, folder: Path) -> None:
        write_weights(model, folder)
        try:
            body = {"method": "pasodoble_reload", "args": [str(folder)], "timeout": self.cfg.sync_timeout_s}
            self._post("/collective_rpc", body, timeout=self.cfg.sync_timeout_s + 30)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def sync_adapter(self, name: str, adapter_dir: str | Path) -> None:
        version = next(self._versions)  # every rank counts versions alike, so all know the served name
        served = f"{name}-v{version}"
        old, self._lora[name] = self._lora.get(name), served
        if self.owner:
            folder = self._shm / f"{name}-{version}"
            shutil.copytree(adapter_dir, folder)
            self._post("/v1/load_lora_adapter", {"lora_name": served, "lora_path": str(folder)})
            if old is not None:
                self._post("/v1/unload_lora_adapter", {"lora_name": old})
                shutil.rmtree(self._shm / old.replace("-v", "-"), ignore_errors=True)
            self._post("/reset_prefix_cache", {})
        if self.after_sync is not None:
            self.after_sync()

    def close(self) -> None:
        """Remove the weights folder, release the weight transfer and stop the server this rank started (idempotent).
        A server that is gone already has no transfer left to release."""
        shutil.rmtree(self._shm, ignore_errors=True)
        transfer, self._transfer = self._transfer, None
        if transfer is not None:
            with contextlib.suppress(EngineUnavailable):
                transfer.close()
        server, self.server = self.server, None
        if server is not None:
            server.stop()


# ---------------------------------------------------------------------- `pasodoble serve`
