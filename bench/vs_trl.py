"""The project's single-policy GRPO step against TRL's GRPOTrainer on the same weights and the same work.

What: for each shape, the same model folder and the same chat prompts go to three sides, each a fresh process
pinned to one core (`taskset -c`, OMP_NUM_THREADS=1): the project (`Role.generate`, reward, `Role.update`), TRL
with the project's settings (gradient checkpointing off) and TRL's defaults (checkpointing on). The project's token
budgets are `auto` (`micro_batch_tokens`, `logprob_chunk_tokens`: from the model's shape, update/token_budget.py)
unless `--project-set` names them. A round runs the
sides one after another (A B C A B C ...); each process takes a warm-up step, dropped, then the measured step.
Reported per side: medians over rounds of CPU-seconds (step, generation with rewards, update), completion tokens
per CPU-second, peak RSS and MFU (`bench/vs_trl_stats.py`: 2N and 6N FLOPs a token, and again with attention's own
FLOPs counted), against a float32 matmul peak of the same core
measured in the same run (the higher of a measurement before and one after the timed work); then the paired
ratios TRL / project, and what twice each TRL side's tokens per CPU-second would ask of the project's step (its
CPU-seconds and step MFU at the same work). With `--seeds 0,1,2` every shape runs its rounds on each seed's
questions (the tiny anchor's tokenizer is learnt from them, so each seed has its own anchor folder) and the report
ends with each shape's figures over the seeds and their range. Writes `results.json` and `report.md` under --out.

Shapes: `tiny`, the anchor (a random tiny Qwen3 from the tiny world's config, byte-level BPE of 320 tokens, 32
prompts x 8 samples, 48 new tokens), `tiny200` (the same at 200 new tokens) and `smollm2`
(`pkg:smollm2-135m-instruct`, 16 prompts x 4, 128 new tokens). The project generates a step's samples in one
generate() call, as TRL does.
TRL runs in its own venv (`make bench-env`, same torch and transformers); without it use --project-only.

On a GPU (`--device cuda`, shapes `qwen3-0.6b` by default): a randomly initialised Qwen3-0.6B-architecture model built
from a config (no download; `bench/gpu_check.py`'s config and synthetic tokenizer, weights saved in float32), 16
prompts x 8 samples, 256 new tokens, micro-batches of 16; both sides train in bfloat16 autocast over float32 master
weights; processes are not pinned; times are wall-clock seconds after a CUDA synchronise, peak memory is what torch
allocated on the GPU, and the MFU is against a bfloat16 matmul peak measured in the same run. `qwen3-tiny` is the
same path with a tiny config (a CPU smoke test of it). `--trl-python` may name the python that runs the project too
(one environment holding both, with the same torch and transformers). `--dtype bfloat16` on a CPU runs both sides
in bfloat16 autocast there too, against a bfloat16 matmul peak of the core: worth it on cores with native bfloat16
products (AVX512_BF16, AMX), where they run several times the float32 rate.

    make bench                 # seeds 0-2: the tiny shapes 3 rounds a seed, SmolLM2 one
    python bench/vs_trl.py --quick --trl-python PY --out bench-out      # the anchor, 2 rounds: minutes
    python bench/vs_trl.py --shapes tiny,tiny200 --seeds 0,1,2 --trl-python PY --out bench-out  # spread over seeds
    nice -n 19 python bench/vs_trl.py --shapes smollm2 --rounds 2 --cpu 1 --trl-python PY --out bench-out
    python bench/vs_trl.py --quick --project-only --out bench-out       # no TRL: the project's figures alone
    python bench/vs_trl.py --device cuda --rounds 2 --trl-python python3 --out bench-gpu  # one GPU, Qwen3-0.6B size
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import subprocess
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))

import vs_trl_stats as stats  # noqa: E402

from pasodoble import allocator  # noqa: E402
from pasodoble.errors import UserError  # noqa: E402
from pasodoble.io import default_cache_dir, write_json_atomic, write_text_atomic  # noqa: E402

TRL_VERSION = "1.16.0"
SIDE_SCRIPT = BENCH / "vs_trl_sides.py"


@dataclass(frozen=True)
class Shape:
    prompts: int  # prompts per step
    num_generations: int  # samples per prompt
    max_new_tokens: int  # new tokens per sample, at most
    micro_batch: int = 8  # sequences per forward/backward (both sides)
    lr: float = 1e-6  # AdamW learning rate (constant)


SHAPES = {
    "tiny": Shape(32, 8, 48),
    "tiny200": Shape(32, 8, 200),
    "smollm2": Shape(16, 4, 128),
    "qwen3-0.6b": Shape(16, 8, 256, micro_batch=16),  # --device cuda
    "qwen3-tiny": Shape(4, 4, 16, micro_batch=8),  # the GPU shapes' path with a tiny config
}
CPU_SHAPES = "tiny,tiny200,smollm2"
GPU_SHAPES = "qwen3-0.6b"
DTYPE_SHORT = {"float32": "fp32", "bfloat16": "bf16"}


def default_trl_python() -> Path:
    return default_cache_dir() / f"venv-trl-{TRL_VERSION}" / "bin" / "python"


def questions(count: int, seed: int) -> list[str]:
    """`count` short arithmetic questions, the same for every side and every run with this seed."""
    rng = random.Random(seed)
    ops = ("+", "-", "*")
    return [
        f"What is {rng.randint(10, 999)} {rng.choice(ops)} {rng.randint(10, 999)}? Show your steps."
        for _ in range(count)
    ]


def build_tiny_anchor(folder: Path, texts: list[str], seed: int = 0) -> Path:
    """The anchor model: the tiny world's Qwen3 config, random weights (seeded), a 320-token BPE on `texts`."""
    from pasodoble.world.model import ModelConfig, build_model
    from pasodoble.world.tokenizer import build_tokenizer

    if (folder / "config.json").is_file():
        return folder
    tokenizer = build_tokenizer(texts, vocab_size=320)
    model = build_model(ModelConfig(max_position_embeddings=1024), tokenizer, seed)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def build_from_config(folder: Path, arch: str) -> Path:
    """A randomly initialised Qwen3 of `bench/gpu_check.py`'s `arch` config ("QWEN3_0_6B" or "TINY") with its
    synthetic tokenizer, weights in float32 (both sides keep float32 master weights), seed 0."""
    import gpu_check
    import torch

    if not (folder / "model-0" / "config.json").is_file():
        gpu_check.build_model_dir(folder, getattr(gpu_check, arch), seed=0, dtype=torch.float32)
    return folder / "model-0"


def model_dir(shape: str, out: Path, texts: list[str], seed: int = 0) -> Path:
    """The shape's model folder; the tiny anchor's tokenizer is learnt from `texts` (the questions of `seed`), so
    each seed has its own folder."""
    if shape.startswith("tiny"):
        return build_tiny_anchor(out / "models" / f"tiny-anchor-seed{seed}", texts)
    if shape.startswith("qwen3-"):
        arch = "TINY" if shape == "qwen3-tiny" else "QWEN3_0_6B"
        return build_from_config(out / "models" / shape, arch)
    from pasodoble.realmodels import resolve_pkg

    return Path(resolve_pkg("pkg:smollm2-135m-instruct", progress=False))


def run_child(
    python: str,
    side: str,
    spec: Path | None,
    out: Path,
    cpu: int,
    device: str = "cpu",
    dtype: str | None = None,
    malloc: str = "system",
) -> dict:
    """One side in a fresh process, on a CPU pinned to core `cpu` with one thread; its JSON record. `dtype`: the
    matmul peak's dtype (`--side peak` only); `malloc`: a `PASODOBLE_ALLOCATOR` setting to start it on, as the
    `pasodoble` command starts (`pasodoble.allocator`), or `system`."""
    cmd = [python, str(SIDE_SCRIPT), "--side", side, "--out", str(out), "--device", device]
    if dtype is not None:
        cmd += ["--dtype", dtype]
    if spec is not None:
        cmd += ["--spec", str(spec)]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    env = allocator.launch_env(malloc, env) or env
    if device == "cpu":
        cmd = ["taskset", "-c", str(cpu), *cmd]
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise UserError(f"vs_trl: the {side} side failed (exit {done.returncode}):\n{tail}")
    return json.loads(out.read_text())


def pinned_bench(ap, argv: list[str] | None, script: str, measure, report, prepare=None) -> int:
    """A paired bench's main: adds --cpu and the hidden --child to `ap`, reruns `script` pinned to that core with one
    thread, and there runs `measure(args)`, writes `args.out`/result.json and prints `report(record)`."""
    ap.add_argument(
        "--cpu", type=int, default=(os.cpu_count() or 1) - 1, help="core to pin to (default: last)"
    )
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    argv = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(argv)
    if prepare is not None:
        prepare(args)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if not args.child:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        cmd = ["taskset", "-c", str(args.cpu), sys.executable, script, "--child", *argv]
        return subprocess.run(cmd, env=env, check=False).returncode
    record = measure(args)
    (Path(args.out) / "result.json").write_text(json.dumps(record, indent=1))
    print(report(record))
    return 0


def load_average() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def write_spec(name: str, shape: Shape, args, seed: int) -> tuple[Path, Path]:
    """The work of shape `name` on the questions of `seed`, as every side reads it, written to
    `args.out`/spec-NAME-seedS.json (`args`: out, warmup_steps, project_set, device, dtype); the spec's path and the
    model folder."""
    texts = questions(shape.prompts * (args.warmup_steps + 1), seed=seed)
    folder = model_dir(name, args.out, texts, seed)
    spec = {
        **asdict(shape),
        "shape": name,
        "model_dir": str(folder),
        "chats": [[{"role": "user", "content": t}] for t in texts],
        "warmup_steps": args.warmup_steps,
        "seed": seed,
        "project_overrides": args.project_set,
        "device": args.device,
        "dtype": args.dtype,
    }
    spec_path = args.out / f"spec-{name}-seed{seed}.json"
    write_json_atomic(spec_path, spec)
    return spec_path, folder


def run_shape(name: str, shape: Shape, args, sides: list[str], peak: float, seed: int) -> dict:
    """Every round of one shape on the questions of `seed`; its runs (with derived figures) and summary."""
    spec_path, folder = write_spec(name, shape, args, seed)
    pythons = {"project": sys.executable, "trl": str(args.trl_python), "trl_defaults": str(args.trl_python)}
    runs = []
    for r in range(args.rounds):
        for side in sides:
            out = args.out / "runs" / f"{name}-seed{seed}-r{r}-{side}.json"
            malloc = args.malloc if side == "project" or args.trl_malloc == "same" else "system"
            record = run_child(pythons[side], side, spec_path, out, args.cpu, args.device, malloc=malloc)
            run = stats.derived({**record, "round": r}, peak)
            gpu = f", peak GPU {run['peak_gpu_mb']:,.0f} MB" if "peak_gpu_mb" in run else ""
            print(
                f"{name} seed {seed} round {r} {side}: step {run['step_cpu_s']:.2f} {stats.unit([run])} (generation "
                f"{run['generate_cpu_s']:.2f}, update {run['update_cpu_s']:.2f}), {run['completion_tokens']} "
                f"tokens, peak RSS {run['peak_rss_mb']:,.0f} MB{gpu}",
                flush=True,
            )
            runs.append(run)
    check_same_work(runs)
    summary = stats.summarise(runs)
    return {
        "name": name,
        "seed": seed,
        "shape": asdict(shape),
        "model_dir": str(folder),
        "runs": runs,
        "summary": summary,
    }


def check_same_work(runs: list[dict]) -> None:
    """Every side must have read the same prompts into the same model: equal prompt tokens and parameters."""
    seen = {(r["prompt_tokens"], r["params"]) for r in runs}
    if len(seen) > 1:
        raise UserError(
            f"vs_trl: the sides did not do the same work (prompt tokens, parameters): {sorted(seen)}"
        )


def peak_note(results: dict) -> str:
    """' (the higher of A before and B after the timed work)' when the run measured both."""
    both = results.get("peak_flops_per_s_before_after")
    if not both:
        return ""
    kernels = results.get("peak_flops_per_s_by_kernel_before_after") or [{}, {}]
    each = "; ".join(
        f"{when}: " + ", ".join(f"{k} {v / 1e9:.1f}" for k, v in rates.items())
        for when, rates in zip(("before", "after"), kernels, strict=True)
        if rates
    )
    kernel_note = f"; per kernel, {each}" if each else ""
    return f" (the higher of {both[0] / 1e9:.1f} before and {both[1] / 1e9:.1f} after the timed work{kernel_note})"


def report(results: dict) -> str:
    """The Markdown report: conditions, then per shape its table and the project's speed-up line."""
    m = results["machine"]
    dtype = results.get("dtype", "bfloat16" if m.get("gpu") else "float32")
    short = DTYPE_SHORT[dtype]
    if m.get("gpu"):
        where = f"{m['gpu']} (host {m['cpu']}), wall-clock seconds, {dtype} autocast"
        peak = f"{short} matmul peak {results['peak_flops_per_s'] / 1e12:.0f} TFLOP/s"
    else:
        precision = ", bfloat16 autocast" if dtype == "bfloat16" else ""
        where = f"{m['cpu']}, core {m['core']}, 1 thread{precision}"
        peak = f"{short} matmul peak {results['peak_flops_per_s'] / 1e9:.1f} GFLOP/s{peak_note(results)}"
    lines = [
        "# GRPO step: project vs TRL GRPOTrainer",
        "",
        f"{results['date']}; {where}; load average {m['load_before']} before, "
        f"{m['load_after']} after; versions {json.dumps(results['versions'])}; {peak}. "
        f"Command: `{results['command']}`.",
        "Figures: medians over rounds (± half the range, % of the median); ratios: median of the paired ratios.",
    ]
    for key, shape in results["shapes"].items():
        s = shape["shape"]
        project = next((r.get("settings", {}) for r in shape.get("runs", []) if r["side"] == "project"), {})
        budgets = (
            f"; the project's micro_batch_tokens {project['micro_batch_tokens']}, logprob_chunk_tokens "
            f"{project['logprob_chunk_tokens']}"
            if "micro_batch_tokens" in project
            else ""
        )
        lines += [
            "",
            f"## {key}: {s['prompts']} prompts x {s['num_generations']} samples, up to {s['max_new_tokens']} new "
            f"tokens, rounds: {shape['summary']['sides']['project']['rounds']}{budgets}",
            "",
            stats.render_table(shape["summary"]),
            "",
            stats.speedup_line(shape["summary"]),
            "",
            stats.target_line(shape["summary"]),
        ]
    by_name: dict[str, list[tuple[int, dict]]] = {}
    for shape in results["shapes"].values():
        if "name" in shape and shape["summary"]["ratios"]:
            by_name.setdefault(shape["name"], []).append((shape["seed"], shape["summary"]))
    spread = {name: per_seed for name, per_seed in by_name.items() if len(per_seed) > 1}
    if spread:
        lines += ["", "## Over seeds", ""]
        lines += ["\n\n".join(stats.render_seed_table(name, per_seed) for name, per_seed in spread.items())]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for results.json, report.md and the runs")
    ap.add_argument(
        "--shapes",
        help=f"comma-separated: {', '.join(SHAPES)} (default: {CPU_SHAPES}; with --device cuda: {GPU_SHAPES})",
    )
    ap.add_argument(
        "--device",
        default="cpu",
        choices=["cpu", "cuda"],
        help="cpu: one pinned core, float32, CPU-seconds; cuda: one GPU, bfloat16 autocast, wall-clock seconds",
    )
    ap.add_argument(
        "--dtype",
        choices=["float32", "bfloat16"],
        help="compute dtype of both sides (default: float32 on a CPU, bfloat16 on a GPU); bfloat16 is autocast over "
        "float32 master weights on both (the project's `dtype: bfloat16`, TRL's `bf16=True`), and the MFU divides "
        "by a matmul peak of the same dtype",
    )
    ap.add_argument("--rounds", type=int, help="paired rounds per shape (default 3; --quick: 2)")
    ap.add_argument(
        "--quick", action="store_true", help="the anchor only, 2 rounds unless --rounds (minutes)"
    )
    ap.add_argument("--project-only", action="store_true", help="no TRL sides (no TRL venv needed)")
    ap.add_argument("--no-trl-defaults", action="store_true", help="skip the TRL-defaults side")
    ap.add_argument("--trl-python", type=Path, default=default_trl_python(), help="python of the TRL venv")
    ap.add_argument(
        "--cpu",
        type=int,
        default=max(os.sched_getaffinity(0)),
        help="the core every process is pinned to (default: the last)",
    )
    ap.add_argument(
        "--warmup-steps", type=int, default=1, help="steps each process takes before the measured one"
    )
    ap.add_argument(
        "--malloc",
        default=os.environ.get("PASODOBLE_ALLOCATOR", "auto"),
        choices=allocator.SETTINGS,
        help="the project side's allocator, as the pasodoble command picks it (default: $PASODOBLE_ALLOCATOR, else "
        "auto: TCMalloc when installed)",
    )
    ap.add_argument(
        "--trl-malloc",
        choices=("system", "same"),
        default="system",
        help="the TRL sides' allocator: glibc's malloc, as TRL runs (default), or the project side's",
    )
    ap.add_argument("--seed", type=int, help="the questions' seed (default 0)")
    ap.add_argument(
        "--seeds",
        help="comma-separated seeds, e.g. 0,1,2: every shape's rounds on each seed's questions, then the spread "
        "over seeds (default: --seed alone)",
    )
    ap.add_argument("--prompts", type=int, help="override the prompts per step of every shape")
    ap.add_argument("--max-new-tokens", type=int, help="override the new tokens of every shape")
    ap.add_argument(
        "--micro-batch",
        type=int,
        help="override the sequences per forward/backward of both sides (TRL's per_device_train_batch_size; "
        "default 8); it must divide prompts x samples",
    )
    ap.add_argument(
        "--project-set", action="append", default=[], help="RoleConfig override, e.g. micro_batch_size=16"
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.shapes = "tiny"
    if args.shapes is None:
        args.shapes = GPU_SHAPES if args.device == "cuda" else CPU_SHAPES
    if args.rounds is None:
        args.rounds = 2 if args.quick else 3
    if args.dtype is None:
        args.dtype = "bfloat16" if args.device == "cuda" else "float32"
    args.shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    if args.seed is not None and args.seeds is not None:
        ap.error("--seed and --seeds: give one of them (--seeds 3 is the same as --seed 3)")
    try:
        args.seeds = (
            [args.seed or 0] if args.seeds is None else [int(s) for s in args.seeds.split(",") if s.strip()]
        )
    except ValueError:
        ap.error(f"--seeds {args.seeds!r}: use comma-separated integers, e.g. 0,1,2")
    if not args.seeds or len(set(args.seeds)) != len(args.seeds):
        ap.error(f"--seeds {args.seeds}: give at least one seed, each once")
    unknown = [s for s in args.shapes if s not in SHAPES]
    if unknown or not args.shapes:
        ap.error(f"--shapes: unknown {unknown}; use a comma-separated list of {', '.join(SHAPES)}")
    for name in args.shapes if args.micro_batch is not None else ():
        sequences = (args.prompts or SHAPES[name].prompts) * SHAPES[name].num_generations
        if args.micro_batch < 1 or sequences % args.micro_batch:
            ap.error(
                f"--micro-batch {args.micro_batch} must divide the {sequences} sequences of a {name} step "
                "(TRL accumulates whole micro-batches)"
            )
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            ap.error(
                "--device cuda: no CUDA device is visible here; run it on a GPU machine, or use --device cpu"
            )
    try:
        allocator.choose(args.malloc)
    except ValueError as err:
        ap.error(f"--malloc: {err}")
    if args.rounds < 1 or args.warmup_steps < 0:
        ap.error("--rounds must be >= 1 and --warmup-steps >= 0")
    if not args.project_only and not args.trl_python.is_file():
        ap.error(
            f"--trl-python: no TRL venv at {args.trl_python}; run `make bench-env`, or pass --project-only"
        )
    return args


def measure_peak(args, name: str) -> tuple[float, str | None, dict]:
    """The matmul peak (FLOPs per second) of the pinned core, or of the GPU with --device cuda, the GPU's name and
    the rate of each kernel measured ({"blas": ..., "onednn": ..., "narrow": ...} on a CPU)."""
    record = run_child(
        sys.executable, "peak", None, args.out / "runs" / name, args.cpu, args.device, dtype=args.dtype
    )
    gpu = record.get("device") if args.device == "cuda" else None
    return record["peak_flops_per_s"], gpu, record.get("peak_flops_per_s_by_kernel", {})


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "runs").mkdir(exist_ok=True)
    sides = (
        ["project"]
        if args.project_only
        else ["project", "trl"] + ([] if args.no_trl_defaults else ["trl_defaults"])
    )
    load_before = load_average()
    peak_before, gpu, kernels_before = measure_peak(args, "peak.json")
    if gpu:
        print(f"bf16 matmul peak of the {gpu}: {peak_before / 1e12:.0f} TFLOP/s", flush=True)
    else:
        each = ", ".join(f"{k} {v / 1e9:.1f}" for k, v in kernels_before.items())
        print(
            f"{DTYPE_SHORT[args.dtype]} matmul peak of core {args.cpu}: {peak_before / 1e9:.1f} GFLOP/s ({each})",
            flush=True,
        )
    shapes = {}
    for seed in args.seeds:
        for name in args.shapes:
            shape = SHAPES[name]
            shape = replace(
                shape,
                prompts=args.prompts or shape.prompts,
                max_new_tokens=args.max_new_tokens or shape.max_new_tokens,
                micro_batch=args.micro_batch or shape.micro_batch,
            )
            key = name if len(args.seeds) == 1 else f"{name}, seed {seed}"
            shapes[key] = run_shape(name, shape, args, sides, peak_before, seed)
    # The core's rate drifts over a long run (it moved by 30% within 40 minutes on one machine): measure it again
    # and divide every MFU by the higher of the two, so that no MFU rests on a slow moment of the core.
    peak_after, _, kernels_after = measure_peak(args, "peak-after.json")
    peak = max(peak_before, peak_after)
    for shape in shapes.values():
        shape["runs"] = [stats.derived(run, peak) for run in shape["runs"]]
        shape["summary"] = stats.summarise(shape["runs"])
    versions = {run["side"]: run["versions"] for shape in shapes.values() for run in shape["runs"]}
    results = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(["python", "bench/vs_trl.py", *(argv if argv is not None else sys.argv[1:])]),
        "machine": {
            "cpu": cpu_model(),
            "core": args.cpu,
            "gpu": gpu,
            "load_before": load_before,
            "load_after": load_average(),
        },
        "versions": versions,
        "dtype": args.dtype,
        "seeds": args.seeds,
        "peak_flops_per_s": peak,
        "peak_flops_per_s_before_after": [peak_before, peak_after],
        "peak_flops_per_s_by_kernel_before_after": [kernels_before, kernels_after],
        "shapes": shapes,
    }
    save_results(args.out, results, report(results))
    return 0


def add_shape_run_args(ap, name: str, shape: str, rounds: int, rounds_help: str) -> None:
    """The options of a bench of arms on one shape's work (`bench/host_memory.py`, `bench/decode_kernel.py`):
    --out, --shape, --seed, --rounds, --cpu, and the hidden --spec and --result of its child processes."""
    ap.add_argument("--out", type=Path, default=Path(f"bench-out/{name}"), help=f"default: bench-out/{name}")
    ap.add_argument(
        "--shape", choices=CPU_SHAPES.split(","), default=shape, help=f"the work (default: {shape})"
    )
    ap.add_argument("--seed", type=int, default=0, help="the questions' seed (default: 0)")
    ap.add_argument("--rounds", type=int, default=rounds, help=f"{rounds_help} (default: {rounds})")
    ap.add_argument(
        "--cpu", type=int, default=max(os.sched_getaffinity(0)), help="the core to pin to (default: the last)"
    )
    ap.add_argument("--spec", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--result", type=Path, help=argparse.SUPPRESS)


def shape_run_header(script: str, argv: list[str], args, load_before, versions: dict) -> dict:
    """The fields that open the results of a bench of arms on one shape's work (`bench/host_memory.py`,
    `bench/decode_kernel.py`; `args`: shape, seed, rounds, cpu): when, where, which versions, the command, the work
    and its rounds."""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu_model(),
        "core": args.cpu,
        "load_before": load_before,
        "load_after": load_average(),
        "versions": versions,
        "command": f"python bench/{script} " + " ".join(argv),
        "shape_name": args.shape,
        "shape": asdict(SHAPES[args.shape]),
        "seed": args.seed,
        "rounds": args.rounds,
    }


def shape_run_lines(results: dict, title: str) -> list[str]:
    """A report's title and the lines that say `shape_run_header`'s fields."""
    shape = results["shape"]
    return [
        f"# {title}",
        "",
        f"{results['date']}; {results['cpu']}, core {results['core']}, one thread; load average "
        f"{results['load_before']} before, {results['load_after']} after; versions {json.dumps(results['versions'])}. "
        f"Command: `{results['command']}`.",
        "",
        f"{results['shape_name']}, seed {results['seed']}: {shape['prompts']} prompts x {shape['num_generations']}, up "
        f"to {shape['max_new_tokens']} new tokens; a warm-up step, then the measured step, whose figures these are; "
        f"rounds: {results['rounds']}; medians over rounds.",
        "",
    ]


def save_results(out: Path, results: dict, text: str) -> None:
    """`results.json` and `report.md` under `out`, each written atomically, and the report printed."""
    write_json_atomic(out / "results.json", results)
    write_text_atomic(out / "report.md", text if text.endswith("\n") else text + "\n")
    print(text)


def entry(main) -> None:
    """A bench's `__main__`: exits with `main()`'s status, or 2 with the message of a UserError."""
    try:
        raise SystemExit(main())
    except UserError as err:
        print(err, file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    entry(main)
