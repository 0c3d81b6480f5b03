"""Memory of the two ways to hold both roles: two full models vs two LoRA adapters on one shared base (CPU RSS).

Each mode runs in a fresh process: it builds the Proposer and Solver `Role`s (random Qwen3 weights of the chosen
size, HF engine), takes one GRPO update per role on a short synthetic batch (so gradients and AdamW states exist),
and reports the process's resident memory before and after. `full` is two full models, each with its own AdamW;
`shared` is one frozen base with a Proposer and a Solver adapter (`roles.shared_base: true`), each with its own AdamW.

    python bench/shared_base_memory.py                  # Qwen3-0.6B size in bf16 (needs ~10 GB free)
    python bench/shared_base_memory.py --size small     # a 30M-parameter model (quick)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

SIZES = {
    "0.6b": None,  # gpu_check.QWEN3_0_6B
    "small": dict(
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=64,
        vocab_size=32000,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
    ),
}


def rss_mib() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def measure(mode: str, size: str, dtype_name: str) -> dict:
    import torch
    from gpu_check import QWEN3_0_6B, build_model_dir

    from pasodoble.roles.adapters import LoraConfig
    from pasodoble.roles.role import Role, RoleConfig, Sample
    from pasodoble.roles.shared_base import build_shared_roles
    from pasodoble.rollout import Completion

    torch.set_num_threads(2)
    arch = SIZES[size] or QWEN3_0_6B
    root = Path(tempfile.mkdtemp(prefix="shared-mem-"))
    path, n_params = build_model_dir(root, arch, 0, getattr(torch, dtype_name))
    start = rss_mib()
    lora = LoraConfig(rank=16) if mode == "shared" else None
    cfg = RoleConfig(model=str(path), dtype=dtype_name, lr=1e-5, micro_batch_size=2, lora=lora)
    if mode == "shared":
        roles = build_shared_roles(cfg, cfg, str(path), updates=(1, 1))
    else:
        roles = tuple(Role.from_pretrained(n, cfg, path, total_updates=1) for n in ("proposer", "solver"))
    built = rss_mib()
    for role in roles:
        ids = list(range(10, 42))
        samples = [Sample(ids, Completion("", list(range(50, 66)), [-1.0] * 16, "length")) for _ in range(2)]
        role.update(samples, [1.0, -1.0])
    return {
        "mode": mode,
        "size": size,
        "dtype": dtype_name,
        "params_per_model_m": n_params / 1e6,
        "rss_before_mib": start,
        "rss_built_mib": built,
        "rss_after_update_mib": rss_mib(),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="0.6b", choices=sorted(SIZES))
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--mode", choices=["full", "shared"], help=argparse.SUPPRESS)  # one measurement (child)
    args = ap.parse_args(argv)
    if args.mode:
        print(json.dumps(measure(args.mode, args.size, args.dtype)))
        return 0
    results = {}
    for mode in ("full", "shared"):
        cmd = [sys.executable, __file__, "--mode", mode, "--size", args.size, "--dtype", args.dtype]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        results[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    for mode, r in results.items():
        grown = r["rss_after_update_mib"] - r["rss_before_mib"]
        print(
            f"{mode:6s} {r['size']} {r['dtype']} ({r['params_per_model_m']:.0f}M params/model): "
            f"RSS after one update per role {r['rss_after_update_mib']:.0f} MiB "
            f"(+{grown:.0f} MiB over the process with the model files written)"
        )
    full, shared = results["full"], results["shared"]
    ratio = (shared["rss_after_update_mib"] - shared["rss_before_mib"]) / max(
        full["rss_after_update_mib"] - full["rss_before_mib"], 1e-9
    )
    print(f"shared base / two full models (growth): {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
