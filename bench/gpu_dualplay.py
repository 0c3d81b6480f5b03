"""Dual-play GPU run: rollout and training throughput, weight-sync time, peak memory and MFU of dual play at Qwen3-0.6B size.

What: builds two randomly initialised Qwen3-0.6B-architecture models from a config (no download; a synthetic
word-level tokenizer of the same vocabulary size), wraps them as the Proposer and Solver `Role`s with the vLLM
engine when vLLM is importable (the HF engine otherwise), and runs a few steps shaped like an online dual-play step:
the Proposer samples I completions per passage prompt, the Solver J completions for each of them, then both roles
take a GRPO update and sync their weights into their engines. A random model writes no valid question, so the
step's advantages are synthetic (completion length, group-normalised) instead of graded: the check measures the
machinery (generation, loss, backward, optimizer, weight sync), not learning.

Prints, per role and overall: rollout tokens/s, training tokens/s (prompt + completion tokens through forward and
backward), weight-sync seconds, peak GPU memory (this process, and the device as a whole including vLLM's), and MFU
against the GPU's dense bf16 peak (6 x parameters x training tokens / time).

With `--backend ddp|fsdp2` both roles train through the project's sharding backends (`pasodoble.scale.sharding.base`: DDP
through Accelerate, torch's FSDP2), one rank per GPU under torchrun (or one rank without it): every rank runs the
step on its own prompts, generation inside `Role.gathered()` as in the loop, and the report adds the backend, the
world size, every rank's peak memory and the tokens/s summed over ranks. FSDP2 rolls out with the HF engine (the
vLLM engines read the role's module, which holds only this rank's shards).

Needs: torch, transformers, accelerate, peft (vllm optional); no datasets, no math-verify, no network.

    python bench/gpu_dualplay.py --steps 1 --max-new-tokens 256   # GPU, Qwen3-0.6B size: 141 s on an H200 (HF engine)
    python bench/gpu_dualplay.py                      # the defaults: 3 steps of 512 new tokens (over 200 s there)
    python bench/gpu_dualplay.py --device cpu --tiny  # the same path on a CPU with a tiny model (seconds to minutes)
    python bench/gpu_dualplay.py --backend fsdp2 --engine hf --steps 2      # one GPU: FSDP2 on one rank (NCCL)
    torchrun --standalone --nproc_per_node 8 bench/gpu_dualplay.py --backend ddp   # 8 GPUs, one rank each
    torchrun --standalone --nproc_per_node 2 bench/gpu_dualplay.py --device cpu --tiny --backend fsdp2 --engine hf
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from gpu_check import BF16_PEAK_TFLOPS, QWEN3_0_6B, TINY, build_model_dir

from pasodoble.core.grpo import group_advantages
from pasodoble.roles.role import Role, RoleConfig, Sample
from pasodoble.rollout.settings import VLLMConfig


def engine_name(choice: str, device: str) -> str:
    if choice != "auto":
        return choice
    return "vllm" if importlib.util.find_spec("vllm") is not None else "hf"


def prompts(role: Role, n: int, words: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        text = " ".join(f"w{int(i)}" for i in torch.randint(0, 400, (words,), generator=g))
        out.append(role.prompt_ids([{"role": "user", "content": text}]))
    return out


def synthetic_advantages(groups) -> list[float]:
    adv = []
    for group in groups:
        lengths = torch.tensor([float(len(c.token_ids)) for c in group])
        adv += group_advantages(lengths).tolist()
    return adv


def step(proposer: Role, solver: Role, s: int, args, totals: dict) -> None:
    p_prompts = prompts(proposer, args.passages, args.prompt_words, s)
    t0 = time.perf_counter()
    with proposer.gathered():  # FSDP2: the full weights once for the phase (a no-op otherwise)
        p_groups = proposer.generate(p_prompts, seed=s)
    totals["proposer_gen_s"] += time.perf_counter() - t0
    totals["proposer_gen_tokens"] += sum(len(c.token_ids) for g in p_groups for c in g)
    questions = [c.token_ids[: args.question_tokens] or [0] for g in p_groups for c in g]
    s_prompts = [
        solver.prompt_ids([{"role": "user", "content": solver.tokenizer.decode(q)}]) for q in questions
    ]
    t0 = time.perf_counter()
    with solver.gathered():
        s_groups = solver.generate(s_prompts, seed=s + 1)
    totals["solver_gen_s"] += time.perf_counter() - t0
    totals["solver_gen_tokens"] += sum(len(c.token_ids) for g in s_groups for c in g)
    for role, ids, groups in (("proposer", p_prompts, p_groups), ("solver", s_prompts, s_groups)):
        samples = [Sample(ids[i], c) for i, g in enumerate(groups) for c in g]
        stats = (proposer if role == "proposer" else solver).update(samples, synthetic_advantages(groups))
        totals[f"{role}_train_s"] += stats["update_s"] - stats["weight_sync_s"]
        totals[f"{role}_train_tokens"] += sum(
            len(x.prompt_ids) + len(x.completion.token_ids) for x in samples
        )
        totals[f"{role}_sync_s"] += stats["weight_sync_s"]
        totals[f"{role}_logprob_diff_max"] = max(
            totals[f"{role}_logprob_diff_max"], stats["logprob_diff_max"]
        )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", help="cuda or cpu")
    ap.add_argument("--tiny", action="store_true", help="a tiny model instead of Qwen3-0.6B (CPU smoke test)")
    ap.add_argument(
        "--engine", default="auto", choices=["auto", "hf", "vllm"], help="auto: vllm if importable"
    )
    ap.add_argument("--steps", type=int, default=3, help="measured dual-play steps (after one warm-up step)")
    ap.add_argument("--passages", type=int, default=2, help="Proposer prompts per step")
    ap.add_argument("--generations", type=int, default=6, help="I = J, completions per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=512, help="completion budget of both roles")
    ap.add_argument("--prompt-words", type=int, default=200, help="length of the synthetic passage prompt")
    ap.add_argument("--question-tokens", type=int, default=64, help="Proposer tokens reused as the question")
    ap.add_argument(
        "--gpu-memory-utilization", type=float, default=0.25, help="per vLLM engine (two engines)"
    )
    ap.add_argument(
        "--peak-tflops", type=float, default=None, help="bf16 dense peak (default: from GPU name)"
    )
    ap.add_argument(
        "--backend",
        default="none",
        choices=["none", "ddp", "fsdp2"],
        help="train both roles through this sharding backend (none: plain PyTorch, one process)",
    )
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    on_gpu = args.device.startswith("cuda")
    if on_gpu and not torch.cuda.is_available():
        print(
            "gpu_check: --device cuda but no CUDA device is visible; use --device cpu --tiny", file=sys.stderr
        )
        return 2
    torch.set_num_threads(2) if not on_gpu else None
    collective, sharding = start_backend(args.backend, on_gpu)
    rank = getattr(collective, "rank", 0)
    if on_gpu and collective is not None:
        args.device = f"cuda:{torch.cuda.current_device()}"
    dtype = "bfloat16" if on_gpu else "float32"
    arch = TINY if args.tiny else QWEN3_0_6B
    engine = engine_name(args.engine, args.device)
    if args.backend == "fsdp2" and engine != "hf":
        print(
            "gpu_check: --backend fsdp2 rolls out with --engine hf (see the module docstring)",
            file=sys.stderr,
        )
        return 2
    max_new = min(args.max_new_tokens, 64) if args.tiny else args.max_new_tokens
    # One rank writes the models (transformers saves on the main process only), then every rank loads them.
    root = Path(tempfile.mkdtemp(prefix="gpu-check-")) if rank == 0 else None
    built = (
        [build_model_dir(root, arch, seed, getattr(torch, dtype)) for seed in range(2)] if rank == 0 else None
    )
    if collective is not None:
        built = collective.broadcast(built, "gpu check models")
    roles, n_params = {}, built[0][1]
    for (path, _), name in zip(built, ("proposer", "solver")):
        cfg = RoleConfig(
            model=str(path),
            num_generations=args.generations,
            temperature=1.0,
            max_prompt_length=1024,
            max_completion_length=max_new,
            lr=1e-6,
            micro_batch_size=4,
            dtype=dtype,
            device=args.device,
            gradient_checkpointing=on_gpu,
            engine=engine,
            vllm=VLLMConfig(gpu_memory_utilization=args.gpu_memory_utilization, enable_prefix_caching=True),
        )
        cfg.validate()
        roles[name] = Role.from_pretrained(name, cfg, path, total_updates=args.steps + 1, sharding=sharding)
    proposer, solver = roles["proposer"], roles["solver"]
    keys = ("gen_s", "gen_tokens", "train_s", "train_tokens", "sync_s", "logprob_diff_max")
    warm = {f"{r}_{k}": 0.0 for r in roles for k in keys}
    offset = 1000 * rank  # every rank samples its own prompts and completions
    step(proposer, solver, offset, args, warm)  # warm-up: compilation, CUDA graphs, caches
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
    totals = {f"{r}_{k}": 0.0 for r in roles for k in keys}
    start = time.perf_counter()
    for s in range(1, args.steps + 1):
        step(proposer, solver, offset + s, args, totals)
    wall = time.perf_counter() - start
    report = figures(totals, wall, n_params, engine, args, on_gpu)
    if collective is not None:
        report = combine_ranks(collective.all_gather(report, "gpu check figures"), args.backend)
    if rank == 0:
        for line in format_report(report):
            print(line)
        if args.json:
            args.json.write_text(json.dumps(report, indent=2))
    for role in roles.values():
        close = getattr(role.engine, "close", None)
        if callable(close):
            close()
    return 0


def start_backend(backend: str, on_gpu: bool):
    """(collective, sharding) for `backend`; (None, None) for plain PyTorch. Without torchrun: one rank."""
    if backend == "none":
        return None, None
    import os

    from pasodoble.rollout.server import free_port
    from pasodoble.scale.collectives import TorchDistributed
    from pasodoble.scale.sharding.ddp import Accelerated
    from pasodoble.scale.sharding.fsdp2 import FullyShard

    if "WORLD_SIZE" not in os.environ:  # `python bench/gpu_dualplay.py --backend ...`: a group of one
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1")
        os.environ["MASTER_PORT"] = str(free_port())
    collective = TorchDistributed(timeout_s=600)
    ws = collective.world_size
    return collective, (FullyShard(ws) if backend == "fsdp2" else Accelerated("ddp", ws))


def combine_ranks(per_rank: list[dict], backend: str) -> dict:
    """Rank 0's report plus the backend, the world size, every rank's peak memory and tokens/s summed."""
    out = {**per_rank[0], "backend": backend, "world_size": len(per_rank)}
    for key in [k for k in per_rank[0] if k.endswith("tokens_per_s")]:
        out[key] = sum(r[key] for r in per_rank)
    for key in ("peak_gpu_mem_trainer_gib", "gpu_mem_used_device_gib"):
        if key in per_rank[0]:
            out[key + "_per_rank"] = [round(r[key], 2) for r in per_rank]
    return out


def figures(t: dict, wall: float, n_params: int, engine: str, args, on_gpu: bool) -> dict:
    out = {"engine": engine, "params_per_model": n_params, "steps": args.steps, "wall_s": wall}
    train_tokens = t["proposer_train_tokens"] + t["solver_train_tokens"]
    train_s = t["proposer_train_s"] + t["solver_train_s"]
    for r in ("proposer", "solver"):
        out[f"{r}/rollout_tokens_per_s"] = t[f"{r}_gen_tokens"] / max(t[f"{r}_gen_s"], 1e-9)
        out[f"{r}/train_tokens_per_s"] = t[f"{r}_train_tokens"] / max(t[f"{r}_train_s"], 1e-9)
        out[f"{r}/weight_sync_s_per_update"] = t[f"{r}_sync_s"] / args.steps
        out[f"{r}/logprob_diff_max"] = t[f"{r}_logprob_diff_max"]
    gen_tokens = t["proposer_gen_tokens"] + t["solver_gen_tokens"]
    out["rollout_tokens_per_s"] = gen_tokens / max(t["proposer_gen_s"] + t["solver_gen_s"], 1e-9)
    out["train_tokens_per_s"] = train_tokens / max(train_s, 1e-9)
    out["weight_sync_s_per_step"] = (t["proposer_sync_s"] + t["solver_sync_s"]) / args.steps
    if on_gpu:
        free, total = torch.cuda.mem_get_info()
        out["gpu"] = torch.cuda.get_device_name()
        out["peak_gpu_mem_trainer_gib"] = torch.cuda.max_memory_allocated() / 2**30
        out["gpu_mem_used_device_gib"] = (total - free) / 2**30
        peak = args.peak_tflops or next((v for k, v in BF16_PEAK_TFLOPS.items() if k in out["gpu"]), None)
        # 6 N per token: forward + backward of the policy; gradient checkpointing's recompute is not counted.
        achieved = 6 * n_params * train_tokens / max(train_s, 1e-9)
        out["train_tflops"] = achieved / 1e12
        out["mfu"] = achieved / (peak * 1e12) if peak else None
    return out


def format_report(r: dict) -> list[str]:
    lines = [
        f"gpu_check: engine={r['engine']} params/model={r['params_per_model'] / 1e6:.1f}M steps={r['steps']}"
        + (f" backend={r['backend']} ranks={r['world_size']}" if "backend" in r else "")
    ]
    for key, value in r.items():
        if key in ("engine", "params_per_model", "steps", "backend", "world_size"):
            continue
        lines.append(f"  {key}: {value:.4g}" if isinstance(value, float) else f"  {key}: {value}")
    return lines


if __name__ == "__main__":
    code = main()
    collectives = sys.modules.get(
        "pasodoble.scale.collectives"
    )  # with --backend: end without torch's teardown
    sys.exit(collectives.end_process(code) if collectives is not None else code)
