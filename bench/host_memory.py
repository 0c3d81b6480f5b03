"""Resident memory between a role's phases: the Role's heap trim against none, and glibc's mmap threshold fixed.

What: for each round, the project's GRPO step (`bench/vs_trl_sides.py`'s project side: `Role.generate`, reward,
`Role.update`; a warm-up step, then the measured one) runs on the work that `bench/vs_trl.py` writes for `--shape`
and `--seed`, once in each arm, each arm a fresh process pinned to one core with one thread, the first arm of a
round taking turns:

- `trim`: as shipped: the Role calls `accel.host_memory.release_freed` at the end of each phase;
- `keep`: the same with `release_freed` replaced by a no-op (the Role before the trim);
- `mmap256k`: as shipped, with `MALLOC_MMAP_THRESHOLD_=262144` in the environment (glibc then maps every block of
  256 KB or more on its own, and gives it back when it is freed);
- `tcmalloc`, `tcmalloc-keep`, `jemalloc` (the last only when named): as shipped, and with no release, with that
  allocator preloaded (`LD_PRELOAD`, as the `pasodoble` command preloads TCMalloc when installed:
  `pasodoble.allocator`; Debian's `libtcmalloc-minimal4`, `libjemalloc2`); an arm whose library is not installed is
  skipped and the report says so.

It prints, per arm, medians over the rounds of the process's peak resident memory (VmHWM), of its resident memory
(VmRSS) and freed heap after the measured step's generation and update, and of their CPU-seconds; then the ratios
of each arm's peak and update time to `trim`'s, paired round by round. Writes `results.json` and `report.md`
under --out.

Why: the trim is meant to hand what a phase freed back to the kernel (for a vLLM server or another process on the
node) without costing the next phase time, the threshold to lower the step's own peak at a price in update time, and
another allocator to lower it without that price
(issue: performance; figures in docs/PERFORMANCE.md). This measures both from one command.

Run: `python bench/host_memory.py --shape smollm2 --seed 0 --rounds 1 --cpu 1 --out bench-out/host_memory` (about
5 minutes an arm on a 2-core Zen 4 host, 25 for the five default arms); `--shape tiny` in about a minute.
"""

from __future__ import annotations

import argparse
import ctypes.util
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

from pasodoble.errors import UserError  # noqa: E402
from pasodoble.io import write_json_atomic  # noqa: E402

ARMS = ("trim", "keep", "mmap256k", "tcmalloc", "tcmalloc-keep", "jemalloc")
DEFAULT_ARMS = ("trim", "keep", "mmap256k", "tcmalloc", "tcmalloc-keep")
KEEP_ARMS = ("keep", "tcmalloc-keep")  # release_freed replaced by a no-op
ARM_ENV = {"mmap256k": {"MALLOC_MMAP_THRESHOLD_": "262144"}}
PRELOADS = {  # arm: (library name for ctypes.util.find_library, the Debian package that ships it)
    "jemalloc": ("jemalloc", "libjemalloc2"),
    "tcmalloc": ("tcmalloc_minimal", "libtcmalloc-minimal4"),
    "tcmalloc-keep": ("tcmalloc_minimal", "libtcmalloc-minimal4"),
}


def arm_env(arm: str) -> dict[str, str] | None:
    """What `arm` adds to the child's environment; None when its allocator is not installed."""
    if arm not in PRELOADS:
        return ARM_ENV.get(arm, {})
    found = ctypes.util.find_library(PRELOADS[arm][0])
    return {"LD_PRELOAD": found} if found else None


def child(arm: str, spec: Path, result: Path) -> None:
    """One arm's step in this process (pinned by the parent); its record to `result`."""
    from vs_trl_sides import run_project

    from pasodoble.accel import host_memory

    shipped, calls = host_memory.release_freed, []

    def counted(min_bytes: int = host_memory.MIN_FREE_BYTES) -> int:
        freed = 0 if arm in KEEP_ARMS else shipped(min_bytes)
        calls.append(freed)
        return freed

    host_memory.release_freed = counted  # the Role calls it through the module, so this reaches its calls
    record = run_project(json.loads(spec.read_text()))
    record.update(
        arm=arm, release_calls=len(calls), trims=sum(f > 0 for f in calls), trimmed_mb=sum(calls) / 2**20
    )
    write_json_atomic(result, record)


def run_arm(arm: str, spec: Path, result: Path, cpu: int) -> dict:
    """`arm` in a fresh process pinned to core `cpu` with one thread; its record."""
    cmd = ["taskset", "-c", str(cpu), sys.executable, __file__, "--child", arm, "--spec", str(spec)]
    cmd += ["--result", str(result)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.update(arm_env(arm) or {})
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise UserError(f"host_memory: the {arm} arm failed (exit {done.returncode}):\n{tail}")
    return json.loads(result.read_text())


def figures(record: dict) -> dict:
    """The measured (last) step's figures of one run."""
    last = record["phases"][-1]["step"]
    after = {p["after"]: p for p in record["phases"] if p["step"] == last}
    return {
        "peak_mb": record["peak_rss_mb"],
        "rss_after_generation_mb": after["generation"]["rss_mb"],
        "rss_after_update_mb": after["update"]["rss_mb"],
        "heap_free_after_update_mb": after["update"]["heap_free_mb"],
        "generate_cpu_s": record["generate_cpu_s"],
        "update_cpu_s": record["update_cpu_s"],
        "trimmed_mb": record["trimmed_mb"],
    }


COLUMNS = (
    ("peak_mb", "peak RSS (MB)", "{:,.0f}"),
    ("rss_after_generation_mb", "resident after generation (MB)", "{:,.0f}"),
    ("rss_after_update_mb", "resident after update (MB)", "{:,.0f}"),
    ("heap_free_after_update_mb", "freed heap kept after update (MB)", "{:,.0f}"),
    ("trimmed_mb", "handed back by the trims, both steps (MB)", "{:,.0f}"),
    ("generate_cpu_s", "generation (CPU-s)", "{:.2f}"),
    ("update_cpu_s", "update (CPU-s)", "{:.2f}"),
)


def summarise(runs: list[dict], arms: list[str]) -> dict:
    """Per arm: the median of each figure over rounds, and its peak and update time over `trim`'s in the same
    round (the median of the paired ratios; absent when `trim` did not run)."""
    by_arm = {arm: [r for r in runs if r["arm"] == arm] for arm in arms}
    out = {}
    for arm, rows in by_arm.items():
        out[arm] = {key: statistics.median(figures(r)[key] for r in rows) for key, _, _ in COLUMNS}
        if "trim" in by_arm and arm != "trim":
            pairs = [
                (figures(r), figures(t)) for r in rows for t in by_arm["trim"] if t["round"] == r["round"]
            ]
            for key in ("peak_mb", "update_cpu_s"):
                out[arm][f"{key}_over_trim"] = statistics.median(a[key] / b[key] for a, b in pairs)
    return out


def report(results: dict) -> str:
    lines = [
        *shape_run_lines(results, "Resident memory between a role's phases"),
        "| arm | " + " | ".join(title for _, title, _ in COLUMNS) + " | peak / trim's | update / trim's |",
        "|---|" + "---|" * (len(COLUMNS) + 2),
    ]
    for arm, row in results["summary"].items():
        cells = [fmt.format(row[key]) for key, _, fmt in COLUMNS]
        ratios = [
            f"{row[k]:.3f}" if k in row else "-" for k in ("peak_mb_over_trim", "update_cpu_s_over_trim")
        ]
        lines.append(f"| {arm} | " + " | ".join(cells + ratios) + " |")
    lines += [
        "",
        "trim: the Role as shipped (the freed heap handed back after each phase past "
        f"{results['min_free_mb']:.0f} MB); keep: no trim; mmap256k: as shipped under MALLOC_MMAP_THRESHOLD_=262144; "
        "tcmalloc (the pasodoble command's default where installed), jemalloc: as shipped with that allocator preloaded "
        "(LD_PRELOAD; under TCMalloc the release is MallocExtension_ReleaseFreeMemory, under jemalloc none); "
        "tcmalloc-keep: TCMalloc with no release.",
    ]
    for arm, package in results.get("skipped_arms", {}).items():
        lines.append(
            f"The {arm} arm did not run: its library is not installed (Debian: apt-get install {package})."
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_shape_run_args(ap, "host_memory", "smollm2", 1, "rounds, each running every arm once")
    ap.add_argument(
        "--arms",
        default=",".join(DEFAULT_ARMS),
        help=f"comma-separated, of {', '.join(ARMS)} (default: {','.join(DEFAULT_ARMS)}; an arm whose allocator is "
        "not installed is skipped, and the report says so)",
    )
    ap.add_argument("--child", choices=ARMS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in args.arms if a not in ARMS]
    if unknown or not args.arms or len(set(args.arms)) != len(args.arms):
        ap.error(f"--arms {','.join(args.arms)}: name each of {', '.join(ARMS)} at most once")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.child:
        child(args.child, args.spec, args.result)
        return 0
    from vs_trl import write_spec

    from pasodoble.accel.host_memory import MIN_FREE_BYTES

    args.out.mkdir(parents=True, exist_ok=True)
    work = argparse.Namespace(out=args.out, warmup_steps=1, project_set=[], device="cpu", dtype="float32")
    spec, _ = write_spec(args.shape, SHAPES[args.shape], work, args.seed)
    skipped = {arm: PRELOADS[arm][1] for arm in args.arms if arm_env(arm) is None}
    for arm, package in skipped.items():
        print(
            f"host_memory: the {arm} arm is skipped: its library is not installed (Debian: apt-get install {package})"
        )
    args.arms = [arm for arm in args.arms if arm not in skipped]
    if not args.arms:
        raise UserError(
            "host_memory: no arm left to run; install an allocator or name another arm with --arms"
        )
    load_before = load_average()
    runs = []
    for r in range(args.rounds):
        for arm in args.arms[r % len(args.arms) :] + args.arms[: r % len(args.arms)]:
            record = run_arm(
                arm, spec, args.out / "runs" / f"{args.shape}-seed{args.seed}-r{r}-{arm}.json", args.cpu
            )
            runs.append({**record, "round": r})
            f = figures(record)
            print(
                f"round {r} {arm}: peak {f['peak_mb']:,.0f} MB, resident after generation "
                f"{f['rss_after_generation_mb']:,.0f} / update {f['rss_after_update_mb']:,.0f} MB, generation "
                f"{f['generate_cpu_s']:.2f} / update {f['update_cpu_s']:.2f} CPU-s",
                flush=True,
            )
    results = {
        **shape_run_header("host_memory.py", argv, args, load_before, runs[0]["versions"]),
        "min_free_mb": MIN_FREE_BYTES / 2**20,
        "skipped_arms": skipped,
        "runs": runs,
        "summary": summarise(runs, args.arms),
    }
    save_results(args.out, results, report(results))
    return 0


if __name__ == "__main__":
    entry(main)
