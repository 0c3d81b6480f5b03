"""The `pasodoble serve` command line: a vLLM server for a model, started by `rollout/server.py`.

Why apart from `server.py`: the flags (the bind address, the engine settings, the model folder, the output folder)
are checked before torch is imported, so a mistake answers in a second with one line and exit code 2; the server
module (and torch with it) is imported only to start the process.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from pasodoble.folders import claim_folder
from pasodoble.rollout.hosts import check_bind
from pasodoble.rollout.server_auth import client_token, new_token
from pasodoble.rollout.settings import VLLMConfig, validate_engine


def register(subparsers) -> None:
    p = subparsers.add_parser("serve", help="start a vLLM OpenAI-compatible server for a model (server mode)")
    p.add_argument("--model", required=True, help="Hugging Face model folder")
    p.add_argument("--out", default="out/serve", help="folder for the server's log and token file")
    p.add_argument("--host", default="127.0.0.1", help="interface to listen on (default: loopback only)")
    p.add_argument("--allow-remote", action="store_true", help="accept a --host other machines can reach")
    p.add_argument("--port", type=int, default=None, help="port (default: a free one)")
    p.add_argument("--max-model-len", type=int, default=8192, help="longest prompt + completion in tokens")
    p.add_argument("--dtype", default="bfloat16", help="engine dtype (float32 on a CPU)")
    p.add_argument("--adapters", type=int, default=0, help="LoRA adapters to serve at once (2: shared base)")
    p.add_argument("--max-lora-rank", type=int, default=16, help="largest LoRA rank accepted")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="share of GPU memory for vLLM")
    p.add_argument("--tensor-parallel-size", type=int, default=1, help="GPUs the engine spans")
    p.add_argument(
        "--weight-sync",
        choices=("auto", "nccl", "gloo", "shm"),
        default="auto",
        help="how trainers send weights (vllm.weight_sync; auto: nccl on a GPU, shm on a CPU)",
    )
    p.set_defaults(func=run_serve_cmd)


def write_secret(path: Path, text: str) -> None:
    """`text` into `path`, readable by this user only from its first byte on (atomic)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run_serve_cmd(args: argparse.Namespace) -> int:
    cfg = VLLMConfig(
        gpu_memory_utilization=args.gpu_memory_utilization,
        tensor_parallel_size=args.tensor_parallel_size,
        max_lora_rank=args.max_lora_rank,
        server_port=args.port,
        server_host=args.host,
        allow_remote=args.allow_remote,
        weight_sync=args.weight_sync,
    )
    check_bind(args.host, args.allow_remote, flag="--allow-remote")
    cfg.validate()
    # sleep_mode stays unset here, and torch is imported to find a GPU only for the one flag that needs one (nccl)
    on_cpu = not _cuda() if args.weight_sync == "nccl" else True
    validate_engine("vllm_server", cfg, model_dir=args.model, on_cpu=on_cpu)
    out = claim_folder(
        Path(args.out), "serve", "--out"
    )  # its token and log, never into another command's run
    token = client_token()
    if token is None:  # clients read it from the file (VLLM_API_KEY=$(cat ...)), never from the terminal
        token = new_token()
        write_secret(out / "token", token + "\n")
        where = f"clients need VLLM_API_KEY=$(cat {out / 'token'})"
    else:
        where = "clients need the same VLLM_API_KEY"
    names = [f"adapter{i}" for i in range(args.adapters)]
    from pasodoble.rollout.server import EngineUnavailable, VLLMServer  # torch loads here, after the checks

    server = VLLMServer.start(
        args.model,
        cfg,
        max_model_len=args.max_model_len,
        dtype=args.dtype,
        adapters=names,
        host=args.host,
        log_dir=out,
        token=token,
    )
    print(f"vLLM server for {args.model} at {server.url} (log {server.log_path}; {where}); Ctrl-C stops it")
    sys.stdout.flush()
    try:
        while server.alive():
            time.sleep(1.0)
    finally:
        server.stop()
    raise EngineUnavailable(
        f"the vLLM server exited with code {server.process.returncode}; log {server.log_path}"
    )


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()
