"""Where a call's CPU time goes: its costliest operators, and the rate its matrix products ran at against the peak.

What: `op_profile(fn, top)` runs `fn()` under torch.profiler (CPU) and returns the `top` operators by self CPU
time, each with its calls, self CPU-seconds, share of all operator time and, for the matrix products
(`MATMUL_OPS`: torch's BLAS `aten::mm` / `addmm` / `bmm`, oneDNN's `mkldnn::_linear_pointwise`, which
`accel.cpu_matmul` runs, and the project's narrow kernel, `accel.narrow_matmul`, whose calls name their sizes), the FLOP
rate they ran at, counted from their operand shapes (`product_flops`) in a second call that records them; with it, `product_summary` of the call: the products' FLOPs, CPU-seconds and share of the
operator time. `profile_table(rows)` and `summary_line(summary, peak)` print them; `matmul_peak()` measures the
peak they are read against, from `kernel_rates` (each kernel's rate; `bench/vs_trl_sides.py --side peak` records
them).

Why: the MFU of a phase divides the model's FLOPs by the whole phase's time; this view splits that time into the
products (and the rate they reach against the core's peak) and everything else (attention, normalisations,
element-wise work, the optimizer), which is what bounds the MFU a phase can reach. torch.profiler's own FLOP count
knows `aten::mm` and its kin but not oneDNN's operator, the one float32 linear layers run on AMD AVX-512 cores.
The profiler adds a few microseconds to every operator, so small models' shares of element-wise work read high.

Run: `python bench/update_layout.py --model smollm2 --profile 15` (the update) or `python bench/sampling.py
--profile 15` (a generate call) print these tables.
"""

from __future__ import annotations

import math
import time

NARROW = "pasodoble::narrow_mm"  # accel.narrow_matmul's events, "NARROW(m,k,n)" a call
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "mkldnn::_linear_pointwise", NARROW)


def _op_and_sizes(key: str) -> tuple[str, float]:
    """An event's operator, and for the narrow kernel's events (named with their sizes) the FLOPs of one call."""
    if not key.startswith(NARROW + "("):
        return key, 0.0
    try:
        m, k, n = (int(x) for x in key[len(NARROW) + 1 : -1].split(","))
    except ValueError:
        return key, 0.0
    return NARROW, 2.0 * m * k * n


def product_flops(op: str, shapes: list[list[int]]) -> float:
    """FLOPs of one call of the matrix product `op` with input shapes `shapes` (as the profiler records them); 0
    for other operators or shapes it cannot read."""
    try:
        if op == "aten::mm":
            (m, k), (_, n) = shapes[0], shapes[1]
            return 2.0 * m * k * n
        if op == "aten::addmm":  # (bias, a, b)
            (m, k), (_, n) = shapes[1], shapes[2]
            return 2.0 * m * k * n
        if op == "aten::bmm":
            (b, m, k), (_, _, n) = shapes[0], shapes[1]
            return 2.0 * b * m * k * n
        if op == "mkldnn::_linear_pointwise":  # (input (..., K), weight (N, K), bias)
            x, w = shapes[0], shapes[1]
            return 2.0 * math.prod(x[:-1]) * x[-1] * w[0]
    except (IndexError, TypeError, ValueError):
        return 0.0
    return 0.0


def _events(fn, shapes: bool):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=shapes) as prof:
        fn()
    return list(prof.key_averages(group_by_input_shape=shapes))


def _per_op(timed, shaped) -> dict[str, dict]:
    ops: dict[str, dict] = {}
    for e in timed:
        op, flops = _op_and_sizes(e.key)
        row = ops.setdefault(op, {"op": op, "calls": 0, "self_cpu_s": 0.0, "flops": 0.0})
        row["calls"] += e.count
        row["self_cpu_s"] += e.self_cpu_time_total / 1e6
        row["flops"] += e.count * flops  # the narrow kernel's: from the timed events' names
    for e in shaped:
        if e.key in ops:
            ops[e.key]["flops"] += e.count * product_flops(e.key, e.input_shapes or [])
    return ops


def op_profile(fn, top: int) -> tuple[list[dict], dict]:
    """Two calls of `fn` under torch.profiler, one timed and one that records the operands' shapes (recording them
    slowed oneDNN's products by a third: a SmolLM2-135M update took 57 CPU-s against 38.5): the `top` operators of
    the first by self CPU time, with the FLOPs of the second (see module), and `product_summary` of them all."""
    timed = _events(fn, shapes=False)
    ops = _per_op(timed, _events(fn, shapes=True))
    total = sum(r["self_cpu_s"] for r in ops.values()) or 1e-12
    rows = sorted(ops.values(), key=lambda r: -r["self_cpu_s"])[:top]
    for r in rows:
        r["share"] = r["self_cpu_s"] / total
        timed_product = r["op"] in MATMUL_OPS and r["flops"] and r["self_cpu_s"]
        r["gflop_per_s"] = r["flops"] / r["self_cpu_s"] / 1e9 if timed_product else None
    return rows, product_summary(ops.values(), total)


def product_summary(rows, total_s: float) -> dict:
    """The matrix products among `rows` (per-operator totals): FLOPs, CPU-seconds, share of `total_s`."""
    products = [r for r in rows if r["op"] in MATMUL_OPS]
    seconds = sum(r["self_cpu_s"] for r in products)
    return {
        "product_flops": sum(r["flops"] for r in products),
        "product_s": seconds,
        "operator_s": total_s,
        "product_share": seconds / total_s if total_s else 0.0,
    }


def profile_table(rows: list[dict]) -> str:
    lines = [
        "| operator | calls | self CPU-s | share of operator time | GFLOP/s |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        rate = f"{r['gflop_per_s']:.1f}" if r["gflop_per_s"] else ""
        lines.append(f"| `{r['op']}` | {r['calls']:,} | {r['self_cpu_s']:.2f} | {r['share']:.1%} | {rate} |")
    return "\n".join(lines)


def summary_line(summary: dict, peak: float | None = None) -> str:
    """One sentence: the products' share of the operator time and their rate (against `peak`, FLOPs per second)."""
    rate = summary["product_flops"] / summary["product_s"] if summary["product_s"] else 0.0
    against = f", {rate / peak:.2f} of the matmul peak ({peak / 1e9:.1f} GFLOP/s)" if peak else ""
    return (
        f"matrix products: {summary['product_s']:.2f} of {summary['operator_s']:.2f} operator CPU-s "
        f"({summary['product_share']:.1%}), {summary['product_flops'] / 1e9:,.1f} GFLOP at "
        f"{rate / 1e9:.1f} GFLOP/s{against}"
    )


def kernel_rates(dtype: str = "float32", seconds: float = 1.0, size: int = 1024, trials: int = 3) -> dict:
    """Best of `trials` rates (FLOPs per CPU-second) of a `size` x `size` product in `dtype`, per kernel: torch's
    BLAS (`torch.mm`) and, in float32, oneDNN (`accel.cpu_matmul.mm`) where this build has it and the project's narrow
    kernel (`accel.narrow_matmul.nn`) on one thread where it builds. The caller sets the thread count."""
    import torch

    from pasodoble.accel import cpu_matmul, narrow_matmul

    a = torch.randn(size, size, dtype=getattr(torch, dtype))
    b = torch.randn(size, size, dtype=getattr(torch, dtype))
    kernels = {"blas": torch.mm}
    if dtype == "float32" and cpu_matmul.available():
        kernels["onednn"] = cpu_matmul.mm
    if dtype == "float32" and torch.get_num_threads() == 1 and narrow_matmul.status() == "on":
        kernels["narrow"] = narrow_matmul.nn  # the narrow layers' kernel, whatever its rate at this size
    rates = {}
    for name, product in kernels.items():
        for _ in range(3):
            product(a, b)
        best = 0.0
        for _ in range(trials):
            reps, start = 0, time.process_time()
            while time.process_time() - start < seconds:
                product(a, b)
                reps += 1
            best = max(best, 2.0 * size**3 * reps / (time.process_time() - start))
        rates[name] = best
    return rates


def matmul_peak(seconds: float = 1.0, size: int = 1024) -> float:
    """The float32 matmul peak of one thread, FLOPs per CPU-second: the faster kernel's rate (`kernel_rates`)."""
    import torch

    torch.set_num_threads(1)
    return max(kernel_rates("float32", seconds, size).values())
