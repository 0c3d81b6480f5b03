"""The project's compiled CPU kernels against the paths they replace, on the project's GRPO step.

What: for each round, the project's GRPO step (`bench/vs_trl_sides.py`'s project side: `Role.generate`, reward,
`Role.update`; a warm-up step, then the measured one) runs on the work that `bench/vs_trl.py` writes for `--shape`
and `--seed` twice, each a fresh process pinned to one core with one thread and started on the allocator the
`pasodoble` command picks (`pasodoble.allocator`): once with the `--kernel` on (built on first use) and once with it
off, the first of a round taking turns. `--kernel decode` (default) is the shared-prompt decode attention
(`accel/decode_kernel.py`, off: `accel.decode_kernel=off`, the tensor path); `--kernel attention` is the
several-token attention of the update and of prefills (`accel/train_attention.py`, off:
`accel.train_attention=off`, SDPA); `--kernel layers` is the RMSNorm, the rotary embedding and the MLP's SiLU
gate, forward and backward (`accel/fused_layers.py`, off: `accel.fused_layers=off`, transformers' torch code);
`--kernel narrow` is the products of the narrow linear layers (`accel/narrow_matmul.py`, off:
`accel.narrow_matmul=off`, torch's BLAS).
It prints the medians over rounds of each arm's generation, update and step CPU-seconds, completion tokens and peak
resident memory, and the off arm's generation, update and step time over the kernel's, paired round by round. The
two arms draw the same samples when the kernel's rounding moves no draw; the table shows both token counts. Writes `results.json` and `report.md` under --out.

Why: the kernels are on by default where they apply; this says what each buys on each shape, from one command
(issue: performance; figures in docs/PERFORMANCE.md).

Run: `python bench/decode_kernel.py --kernel attention --shape tiny200 --rounds 3 --cpu 1 --out
bench-out/train_attention` (about 30 seconds a round for tiny, a minute for tiny200, 3 minutes for smollm2 on a
2-core Zen 4 host).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from vs_trl import (  # noqa: E402
    SHAPES,
    add_shape_run_args,
    entry,
    load_average,
    save_results,
    shape_run_header,
    shape_run_lines,
)

from pasodoble import allocator  # noqa: E402
from pasodoble.errors import UserError  # noqa: E402
from pasodoble.io import write_json_atomic  # noqa: E402

ARMS = ("kernel", "off")
# --kernel: (its config key, its key in the project side's settings, what the kernel arm runs, what the off arm runs)
KERNELS = {
    "decode": (
        "accel.decode_kernel",
        "decode_kernel",
        "accel/decode_kernel.py serves the shared-prompt decode steps",
        "update/prefix_attention.py's tensor operations",
    ),
    "attention": (
        "accel.train_attention",
        "train_attention",
        "accel/train_attention.py serves the update's attention and the prefills",
        "torch's SDPA",
    ),
    "narrow": (
        "accel.narrow_matmul",
        "narrow_matmul",
        "accel/narrow_matmul.py serves the products of the linear layers cpu_matmul turned onto it",
        "torch's BLAS (MKL)",
    ),
    "layers": (
        "accel.fused_layers",
        "fused_layers",
        "accel/fused_layers.py serves the RMSNorms, the rotary embeddings and the MLPs' SiLU gates",
        "transformers' own torch operators",
    ),
}
RATIOS = ("generate_cpu_s", "update_cpu_s", "step_cpu_s")
COLUMNS = (
    ("generate_cpu_s", "generation (CPU-s)", "{:.2f}"),
    ("update_cpu_s", "update (CPU-s)", "{:.2f}"),
    ("step_cpu_s", "step (CPU-s)", "{:.2f}"),
    ("completion_tokens", "completion tokens", "{:,.0f}"),
    ("peak_rss_mb", "peak RSS (MB)", "{:,.0f}"),
)


def child(spec: Path, result: Path, off: str | None) -> None:
    """One arm's step in this process (pinned by the parent); its record to `result`. `off`: the fast path this
    arm turns off (an `accel` key), None for the kernel arm."""
    from vs_trl_sides import run_project

    from pasodoble import accel

    accel.configure(accel.AccelConfig(**({off: "off"} if off else {})))
    write_json_atomic(result, run_project(json.loads(spec.read_text())))


def run_arm(arm: str, kernel: str, spec: Path, result: Path, cpu: int) -> dict:
    """`arm` of `kernel` in a fresh process pinned to core `cpu` with one thread; its record."""
    switch, key, _, _ = KERNELS[kernel]
    cmd = ["taskset", "-c", str(cpu), sys.executable, __file__, "--child", "--spec", str(spec)]
    cmd += ["--result", str(result)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    if arm == "off":
        cmd += ["--off", switch.removeprefix("accel.")]
    env = (
        allocator.launch_env(os.environ.get("PASODOBLE_ALLOCATOR", "auto"), env) or env
    )  # as the command starts
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise UserError(f"decode_kernel: the {arm} arm failed (exit {done.returncode}):\n{tail}")
    record = json.loads(result.read_text())
    status = record["settings"][key]
    if (status == "on") != (arm == "kernel"):
        raise UserError(
            f"decode_kernel: the {arm} arm ran with the {kernel} kernel {status!r}; is a C compiler installed?"
        )
    return record


def summarise(runs: list[dict]) -> dict:
    """Per arm: the median of each figure over rounds; for the off arm, its generation, update and step time over
    the kernel's in the same round (the median of the paired ratios)."""
    by_arm = {arm: [r for r in runs if r["arm"] == arm] for arm in ARMS}
    out = {
        arm: {key: statistics.median(r[key] for r in rows) for key, _, _ in COLUMNS}
        for arm, rows in by_arm.items()
    }
    pairs = [(t, k) for t in by_arm["off"] for k in by_arm["kernel"] if t["round"] == k["round"]]
    for key in RATIOS:
        out["off"][f"{key}_over_kernel"] = statistics.median(t[key] / k[key] for t, k in pairs)
    return out


def report(results: dict) -> str:
    kernel = results.get("kernel", "decode")
    switch, _, serves, instead = KERNELS[kernel]
    lines = [
        *shape_run_lines(results, f"The compiled {kernel} kernel on and off"),
        "| arm | "
        + " | ".join(title for _, title, _ in COLUMNS)
        + " | generation / kernel's | update / kernel's | step / kernel's |",
        "|---|" + "---|" * (len(COLUMNS) + 3),
    ]
    for arm, row in results["summary"].items():
        cells = [fmt.format(row[key]) for key, _, fmt in COLUMNS]
        ratios = [f"{row[k]:.3f}" if k in row else "-" for k in (f"{key}_over_kernel" for key in RATIOS)]
        lines.append(f"| {arm} | " + " | ".join(cells + ratios) + " |")
    lines += [
        "",
        f"kernel: as shipped ({serves}); off: {switch}=off ({instead}).",
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_shape_run_args(ap, "decode_kernel", "tiny200", 3, "rounds, each running both arms once")
    ap.add_argument(
        "--kernel", choices=sorted(KERNELS), default="decode", help="which kernel to switch (default: decode)"
    )
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument(
        "--off", default=None, help=argparse.SUPPRESS
    )  # the child's arm: the accel key it turns off
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.child:
        child(args.spec, args.result, args.off)
        return 0
    from vs_trl import write_spec

    args.out.mkdir(parents=True, exist_ok=True)
    work = argparse.Namespace(out=args.out, warmup_steps=1, project_set=[], device="cpu", dtype="float32")
    spec, _ = write_spec(args.shape, SHAPES[args.shape], work, args.seed)
    load_before = load_average()
    runs = []
    for r in range(args.rounds):
        for arm in ARMS if r % 2 == 0 else ARMS[::-1]:
            name = f"{args.kernel}-{args.shape}-seed{args.seed}-r{r}-{arm}.json"
            record = run_arm(arm, args.kernel, spec, args.out / "runs" / name, args.cpu)
            row = {key: record[key] for key, _, _ in COLUMNS}
            runs.append({**row, "arm": arm, "round": r, "versions": record["versions"]})
            print(
                f"round {r} {arm}: generation {row['generate_cpu_s']:.2f} / update {row['update_cpu_s']:.2f} / "
                f"step {row['step_cpu_s']:.2f} CPU-s, {row['completion_tokens']:,} tokens, peak "
                f"{row['peak_rss_mb']:,.0f} MB",
                flush=True,
            )
    results = {
        **shape_run_header("decode_kernel.py", argv, args, load_before, runs[0]["versions"]),
        "kernel": args.kernel,
        "runs": runs,
        "summary": summarise(runs),
    }
    save_results(args.out, results, report(results))
    return 0


if __name__ == "__main__":
    entry(main)
