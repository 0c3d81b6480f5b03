"""Sampling throughput of the rollout engines on SmolLM2-135M-Instruct: tokens per second and MFU at a batch size.

What: each engine samples `--prompts` chat prompts x `--samples` completions of up to `--new-tokens` tokens at
temperature 1 (rows end at EOS; throughput counts the tokens made), in a fresh
process pinned to one core with one thread, after a warm-up call; the engine's whole process tree is timed (vLLM
runs its engine core in a child process): wall seconds and CPU-seconds (psutil, the process and its children), and
the peak resident memory of the process tree (the sum of each process's peak, taken before any profiling call).
MFU: 2N FLOPs per token (the prompt tokens each engine prefills, plus the sampled tokens) over the tree's
CPU-seconds over the float32 matmul peak of the same core measured in the same run (the higher of a measurement
before and one after the timed calls: the rate drifts). Engines: `hf` (the project's
Hugging Face engine, one prefill per distinct prompt) and `vllm` (the in-process vLLM engine, its prefix cache on)
when `--vllm-python` names a venv with vLLM (`make vllm-env`).

Why: the issue asks how close sampling gets to the matmul limit at batch 64 or more, and whether the vLLM CPU build
is worth its install for a real model; the answer is measured here, not assumed.

`--profile N` adds two more HF calls under torch.profiler (`bench/op_profile.py`: one timed, one that records the
operand shapes) and the N costliest operators (share of the time, FLOP rate of the matrix products), with the
products' share of the time and rate against the peak: where a decode step's time goes.

Run: `python bench/sampling.py --out bench-out/sampling [--vllm-python ~/.cache/pasodoble/venv-vllm/bin/python]`;
one side by hand: `python bench/sampling.py --side hf --spec SPEC --result OUT.json`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))

from op_profile import matmul_peak, op_profile, profile_table, summary_line  # noqa: E402


def tree_cpu_s() -> float:
    """CPU-seconds of this process and every live child (user + system)."""
    import psutil

    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):  # a child that ended between the listing and the read
            total += sum(child.cpu_times()[:2])
    return total


def tree_peak_rss_mb() -> float:
    """Peak resident memory (MB) of this process plus that of every live child (`VmHWM` of each: an upper bound of
    the tree's peak, and its exact peak when there are no children)."""
    import psutil

    def hwm(pid: int) -> float:
        with open(f"/proc/{pid}/status") as status:
            kb = next((line.split()[1] for line in status if line.startswith("VmHWM:")), "0")
        return int(kb) / 1024

    me = psutil.Process()
    total = hwm(me.pid)
    for child in me.children(recursive=True):
        # a child that ended between the listing and the read counts nothing
        with contextlib.suppress(OSError, psutil.Error):
            total += hwm(child.pid)
    return total


def run_side(side: str, spec: dict) -> dict:
    import torch
    from transformers import AutoTokenizer

    from pasodoble.rollout import SamplingParams

    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(spec["model_dir"])
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    prompts = [
        list(
            tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=True)[
                "input_ids"
            ]
        )
        for chat in spec["chats"]
    ]
    batch = len(prompts) * spec["samples"]
    if side == "hf":
        from transformers import AutoModelForCausalLM

        from pasodoble.accel.cpu_matmul import use_cpu_matmul
        from pasodoble.accel.fused_layers import use_fused_layers
        from pasodoble.accel.grouped_attention import use_grouped_attention
        from pasodoble.rollout import HFEngine

        model = AutoModelForCausalLM.from_pretrained(spec["model_dir"], dtype=torch.float32)
        # as a Role loads it: grouped-query attention, and so the decode that reads each prompt's columns once;
        # linear layers on the kernel `cpu_matmul: auto` picks; norms, rotary embeddings and SiLU gates fused
        use_grouped_attention(model)
        use_cpu_matmul(model, "auto")
        use_fused_layers(model)
        engine = HFEngine(model, tokenizer, batch_size=batch)
        params = sum(p.numel() for p in model.parameters())
        prefill = sum(len(p) for p in prompts)  # one prefill per distinct prompt
    else:
        from pasodoble.rollout.settings import VLLMConfig
        from pasodoble.rollout.vllm import VLLMEngine

        engine = VLLMEngine(
            VLLMConfig(cpu_threads_bind=str(spec["cpu"])),
            spec["model_dir"],
            tokenizer,
            max_model_len=max(map(len, prompts)) + spec["new_tokens"] + 8,
        )
        params = spec["params"]
        prefill = sum(len(p) for p in prompts)  # prefix caching: one prefill per distinct prompt
    sampling = SamplingParams(n=spec["samples"], temperature=1.0, max_new_tokens=spec["new_tokens"], seed=0)
    engine.generate(prompts[:2], sampling)  # warm-up
    times = []
    for _ in range(spec["repeats"]):
        cpu0, wall0 = tree_cpu_s(), time.perf_counter()
        groups = engine.generate(prompts, sampling)
        times.append((tree_cpu_s() - cpu0, time.perf_counter() - wall0))
    tokens = sum(len(c.token_ids) for g in groups for c in g)
    peak_rss_mb = tree_peak_rss_mb()  # before the profiler, which holds every operator event
    profile = products = None
    if spec.get("profile"):
        profile, products = op_profile(lambda: engine.generate(prompts, sampling), spec["profile"])
    engine.close()
    cpu_s = statistics.median(t[0] for t in times)
    wall_s = statistics.median(t[1] for t in times)
    return {
        "side": side,
        "batch": batch,
        "tokens": tokens,
        "prefill_tokens": prefill,
        "params": params,
        "cpu_s": cpu_s,
        "wall_s": wall_s,
        "runs": times,
        "peak_rss_mb": peak_rss_mb,
        "profile": profile,
        "profile_products": products,
    }


def table(results: list[dict], peak: float) -> str:
    lines = [
        "| engine | batch | tokens made | CPU-s | wall s | tokens per CPU-s | MFU (2N per token) | peak RSS (MB) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        flops = 2.0 * r["params"] * (r["prefill_tokens"] + r["tokens"])
        rss = f"{r['peak_rss_mb']:,.0f}" if "peak_rss_mb" in r else "-"
        lines.append(
            f"| {r['side']} | {r['batch']} | {r['tokens']:,} | {r['cpu_s']:.2f} | {r['wall_s']:.2f} | "
            f"{r['tokens'] / r['cpu_s']:.1f} | {flops / r['cpu_s'] / peak:.3f} | {rss} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="folder for sampling.json and sampling.md")
    ap.add_argument("--prompts", type=int, default=16, help="distinct chat prompts (default 16)")
    ap.add_argument("--samples", type=int, default=4, help="completions per prompt (default 4: batch 64)")
    ap.add_argument(
        "--new-tokens", type=int, default=128, help="new tokens per completion, at most (default 128)"
    )
    ap.add_argument("--repeats", type=int, default=3, help="timed calls per engine, median (default 3)")
    ap.add_argument("--cpu", type=int, default=os.cpu_count() - 1, help="core to pin to (default: the last)")
    ap.add_argument("--vllm-python", type=Path, help="python of a venv with vLLM: adds the vllm engine")
    ap.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="after the timed calls, two more hf calls under torch.profiler: the N costliest operators (default 0: "
        "off; the profiler holds every operator event: 8.5 GB at batch 64 x 128 new tokens)",
    )
    ap.add_argument("--side", choices=("hf", "vllm"), help=argparse.SUPPRESS)
    ap.add_argument("--spec", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.side:
        record = run_side(args.side, json.loads(args.spec.read_text()))
        args.result.write_text(json.dumps(record))
        return 0
    if args.out is None:
        ap.error("--out is required")
    from vs_trl import cpu_model, questions

    from pasodoble.io import write_json_atomic, write_text_atomic
    from pasodoble.realmodels import resolve_pkg

    args.out.mkdir(parents=True, exist_ok=True)
    model_dir = str(resolve_pkg("pkg:smollm2-135m-instruct", progress=False))
    spec = {
        "model_dir": model_dir,
        "chats": [[{"role": "user", "content": t}] for t in questions(args.prompts, seed=0)],
        "samples": args.samples,
        "new_tokens": args.new_tokens,
        "repeats": args.repeats,
        "cpu": args.cpu,
        "profile": args.profile,
        "params": 134_515_008,  # SmolLM2-135M, tied embeddings once (the hf side counts its own)
    }
    spec_path = args.out / "spec.json"
    write_json_atomic(spec_path, spec)
    os.sched_setaffinity(0, {args.cpu})
    peak_before = matmul_peak()
    sides = [("hf", sys.executable)] + ([("vllm", str(args.vllm_python))] if args.vllm_python else [])
    results = []
    for side, python in sides:
        result = args.out / f"{side}.json"
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        cmd = [
            "taskset",
            "-c",
            str(args.cpu),
            python,
            __file__,
            "--side",
            side,
            "--spec",
            str(spec_path),
            "--result",
            str(result),
        ]
        subprocess.run(cmd, env=env, check=True)
        results.append(json.loads(result.read_text()))
        print(f"{side}: {results[-1]['tokens']} tokens in {results[-1]['cpu_s']:.2f} CPU-s", flush=True)
    # The core's rate drifts over a long run: every MFU divides by the higher of the rates before and after.
    peak_after = matmul_peak()
    peak = max(peak_before, peak_after)
    text = (
        f"Sampling on SmolLM2-135M-Instruct, {args.prompts} prompts x {args.samples} samples, up to {args.new_tokens} "
        f"new tokens, one thread on core {args.cpu} ({cpu_model()}), fp32 matmul peak {peak / 1e9:.1f} GFLOP/s "
        f"(the higher of {peak_before / 1e9:.1f} before and {peak_after / 1e9:.1f} after the timed calls), "
        f"medians of {args.repeats} calls\n\n" + table(results, peak)
    )
    for r in results:
        if r.get("profile"):
            text += (
                f"\n\nOperators of one more {r['side']} call under torch.profiler (a second recorded the shapes):\n\n"
                + profile_table(r["profile"])
            )
            text += "\n\n" + summary_line(r["profile_products"], peak)
    print(text)
    write_json_atomic(
        args.out / "sampling.json",
        {
            "peak_flops_per_s": peak,
            "peak_flops_per_s_before_after": [peak_before, peak_after],
            "results": results,
        },
    )
    write_text_atomic(args.out / "sampling.md", text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
