"""The dual-play step's cost on the tiny world: its phases, its scaling in I x J and in completion length, a fitted
cost model.

What: runs `pasodoble train` on `recipes/tiny-online.yaml` (4 passages a step) for each point of a grid of I
(proposals per passage, `proposer.num_generations`) x J (answers per question, `solver.num_generations`) and of
Solver completion budgets, each a fresh process pinned to one core with one thread; drops the first step (warm-up)
and reads the wall-clock phases the loop logs: medians of `time/propose_s`, `solve_s`, `grade_s`, and of
`update_s`, `weight_sync_s` over the steps that updated (a step whose batch has nothing to learn skips them), and
the mean `time/step_s` (the expected cost of a step, skips included). Times a checkpoint of both roles
separately (the loop writes one every `checkpoint_every` steps, outside the step's clock). Fits
`step_s = a + b I + c I J` by least squares over the grid, and `solve_s = s0 + s1 x (Solver tokens)` over the
length runs; prints the tables and both models and writes `cost.json` and `cost.md` under --out.

Why: it says where a dual-play step's time goes and what a larger I or J will cost before a long run is launched
(issue: performance). The tiny world's models are SFT-warmed, so completions end on their own: the length runs
report the tokens actually generated beside the budget.

Run: `python bench/dualplay_cost.py --out bench-out/dualplay` (builds the tiny world first if it is not cached:
about 15 minutes; then about 5 minutes); `--quick` runs a 2 x 2 grid for a check.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from vs_trl import cpu_model  # noqa: E402

from pasodoble.errors import UserError  # noqa: E402
from pasodoble.io import write_json_atomic, write_text_atomic  # noqa: E402

PHASES = ("propose", "solve", "grade", "update", "weight_sync", "step")
GRID = [(i, j) for i in (2, 4, 6) for j in (2, 4, 8)]  # the recipe's point is I = 6, J = 8
QUICK_GRID = [(2, 2), (4, 4)]
LENGTHS = (32, 64, 128, 192)


def train_args(run_dir: Path, steps: int, i: int, j: int, length: int | None) -> list[str]:
    args = [
        "--config",
        str(ROOT / "recipes" / "tiny-online.yaml"),
        f"run_dir={run_dir}",
        f"schedule.steps={steps}",
        f"proposer.num_generations={i}",
        f"solver.num_generations={j}",
        "schedule.samples_every=null",
        "num_threads=1",
        "logging.quiet=true",
    ]
    return args + ([f"solver.max_completion_length={length}"] if length else [])


def run_point(out: Path, steps: int, cpu: int, i: int, j: int, length: int | None = None) -> dict:
    """One `pasodoble train` run; medians of its phases over the steps after the first."""
    run_dir = out / "runs" / (f"i{i}-j{j}" + (f"-len{length}" if length else ""))
    if run_dir.exists():  # an earlier bench's run: this one starts afresh
        shutil.rmtree(run_dir)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        "taskset",
        "-c",
        str(cpu),
        sys.executable,
        "-m",
        "pasodoble",
        "train",
        *train_args(run_dir, steps, i, j, length),
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise UserError(f"dualplay_cost: {' '.join(cmd[3:])} failed:\n{done.stderr[-2000:]}")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "time/step_s" in r][1:]  # the first step warms up
    if not rows:
        raise UserError(f"dualplay_cost: {run_dir} logged no step after the warm-up; raise --steps")
    point = {"I": i, "J": j, "max_completion_length": length, "steps": len(rows)}
    updated = [r for r in rows if "time/update_s" in r]
    for phase in PHASES:
        if phase == "step":  # the expected cost of a step, skipped updates included
            point["step_s"] = statistics.mean(r["time/step_s"] for r in rows)
        else:  # the phase's cost when it runs (a step whose batch has nothing to learn skips the update)
            ran = updated if phase in ("update", "weight_sync") else rows
            point[f"{phase}_s"] = (
                statistics.median(r.get(f"time/{phase}_s", 0.0) for r in ran) if ran else 0.0
            )
    tokens = [
        r["time/solver/tokens_per_s"] * r["time/solve_s"] for r in rows if "time/solver/tokens_per_s" in r
    ]
    point["solver_tokens"] = statistics.median(tokens) if tokens else 0.0
    point["updated_fraction"] = len(updated) / len(rows)
    return point


def checkpoint_seconds(cpu: int, repeats: int = 3) -> float:
    """Median wall seconds to write both tiny roles' checkpoint (weights, tokenizer, optimizer) to a new folder."""
    os.sched_setaffinity(0, {cpu})
    import torch

    from pasodoble.checkpoint import save_checkpoint
    from pasodoble.config import load_config
    from pasodoble.roles.role import Role, RoleConfig
    from pasodoble.runs.train import TrainConfig, _tiny_models

    torch.set_num_threads(1)
    cfg = load_config(TrainConfig, ROOT / "recipes" / "tiny-online.yaml", ["logging.quiet=true"])
    models = _tiny_models(cfg)
    roles = [
        Role.from_pretrained(name, RoleConfig(model=str(path), device="cpu"), path)
        for name, path in (("proposer", models.proposer_dir), ("solver", models.solver_dir))
    ]

    def write(folder: Path) -> None:
        for role in roles:
            role.save(folder / role.name)
        (folder / "state.json").write_text("{}", encoding="utf-8")

    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for step in range(repeats):
            start = time.perf_counter()
            save_checkpoint(Path(tmp), step, write, keep_last=1)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def least_squares(rows: list[list[float]], ys: list[float]) -> list[float]:
    """Coefficients minimising |rows @ x - ys|^2 (normal equations; a few unknowns)."""
    import torch

    a = torch.tensor(rows, dtype=torch.float64)
    y = torch.tensor(ys, dtype=torch.float64)[:, None]
    return torch.linalg.lstsq(a, y).solution[:, 0].tolist()


def fit(points: list[dict], lengths: list[dict]) -> dict:
    grid = [p for p in points if p["max_completion_length"] is None]
    a, b, c = least_squares([[1.0, p["I"], p["I"] * p["J"]] for p in grid], [p["step_s"] for p in grid])
    predicted = [a + b * p["I"] + c * p["I"] * p["J"] for p in grid]
    worst = max(abs(q - p["step_s"]) / p["step_s"] for q, p in zip(predicted, grid))
    model = {"a": a, "b": b, "c": c, "worst_relative_error": worst}
    if len(lengths) >= 2:
        s0, s1 = least_squares([[1.0, p["solver_tokens"]] for p in lengths], [p["solve_s"] for p in lengths])
        model["solve_s0"], model["solve_s_per_token"] = s0, s1
    return model


def report(points: list[dict], lengths: list[dict], model: dict, checkpoint_s: float, meta: dict) -> str:
    head = (
        "| I | J | budget | steps | "
        + " | ".join(f"{p} (s)" for p in PHASES)
        + " | Solver tokens | Solver updated |"
    )
    lines = [
        f"# Dual-play step cost, tiny world ({meta['date']}, {meta['machine']}, torch {meta['torch']}, one pinned thread)",
        "",
        "Wall seconds over the steps after the first: phase medians (update and weight sync: over the steps that "
        "updated), the step's mean. I: proposals per passage (4 passages a step); J: answers per question.",
        "",
        head,
        "|" + "---|" * (6 + len(PHASES)),
    ]
    for p in points + lengths:
        budget = p["max_completion_length"] or "recipe"
        cells = " | ".join(f"{p[f'{ph}_s']:.3f}" for ph in PHASES)
        lines.append(
            f"| {p['I']} | {p['J']} | {budget} | {p['steps']} | {cells} | {p['solver_tokens']:.0f} | "
            f"{p['updated_fraction']:.2f} |"
        )
    lines += [
        "",
        f"Cost model (least squares over the I x J grid): step_s = {model['a']:.3f} + {model['b']:.3f} I + "
        f"{model['c']:.4f} I J (worst relative error {model['worst_relative_error']:.0%}).",
    ]
    if "solve_s_per_token" in model:
        lines.append(
            f"Solver generation against its tokens (the length runs): solve_s = {model['solve_s0']:.3f} + "
            f"{model['solve_s_per_token'] * 1000:.3f} ms x tokens."
        )
    lines.append(f"Checkpoint of both roles (outside the step's clock): {checkpoint_s:.3f} s.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for cost.json, cost.md and the runs")
    ap.add_argument("--steps", type=int, default=6, help="steps a run, the first dropped (default 6)")
    ap.add_argument("--cpu", type=int, default=os.cpu_count() - 1, help="core to pin to (default: the last)")
    ap.add_argument(
        "--quick", action="store_true", help="a 2 x 2 grid and two budgets: a check, not a figure"
    )
    args = ap.parse_args(argv)
    if args.steps < 2:
        ap.error("--steps must be >= 2 (the first step is dropped)")
    grid, budgets = (QUICK_GRID, LENGTHS[:2]) if args.quick else (GRID, LENGTHS)
    points = []
    for i, j in grid:
        points.append(run_point(args.out, args.steps, args.cpu, i, j))
        print(f"I={i} J={j}: step {points[-1]['step_s']:.3f} s", flush=True)
    lengths = []
    for length in budgets:
        lengths.append(run_point(args.out, args.steps, args.cpu, 4, 4, length))
        print(
            f"budget {length}: solve {lengths[-1]['solve_s']:.3f} s, {lengths[-1]['solver_tokens']:.0f} tokens",
            flush=True,
        )
    ckpt = checkpoint_seconds(args.cpu)
    model = fit(points, lengths)
    import torch

    meta = {
        "date": datetime.date.today().isoformat(),
        "machine": cpu_model(),
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    text = report(points, lengths, model, ckpt, meta)
    print(text)
    write_json_atomic(
        args.out / "cost.json",
        {**meta, "points": points, "lengths": lengths, "model": model, "checkpoint_s": ckpt},
    )
    write_text_atomic(args.out / "cost.md", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
