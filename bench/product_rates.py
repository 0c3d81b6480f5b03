"""The matrix products of a call at the rate they run where they are, against the same products alone.

What: `product_calls(fn)` runs `fn()` once under a dispatch mode that times every `aten.mm` call (CPU-seconds of
the call alone, `time.process_time`) and groups the calls by their operands' shapes and layouts (an operand passed
transposed, as linear layers pass their weight forward and their output gradient for the weight's gradient, is
marked `T`). `alone_rate(m, k, n, ...)` times the same product by itself: with `cold_bytes=0` on the same operands
again and again (they stay in the core's caches), otherwise cycling through distinct operands of at least that many
bytes in all (they come from memory, as a backward's saved activations do). `product_rates(fn, top)` returns the
`top` costliest groups with the three rates, and `rates_table` / `rates_line` print them. `last_level_cache_bytes()`
reads the largest cache the core sees (the cold operands total four times it).

Why: the update's products ran at 0.78-0.81 of the matmul peak on the tiny anchor (`bench/op_profile.py`), where
one 1024 x 1024 product reaches the peak by definition; this splits the shortfall into what the shapes themselves
reach (alone, in cache) and what the call's order costs them (where the operands were when the product ran).
Only `aten.mm` is timed: oneDNN's linear layers (`accel.cpu_matmul`, SmolLM2's wide ones) and the project's narrow
kernel (`accel.narrow_matmul`, the tiny anchor's layers on a Zen 4 core) are not seen here; `bench/update_layout.py`
runs it with the narrow kernel off.

Run: `python bench/update_layout.py --model tiny --product-rates 12` prints the table for one update.
"""

from __future__ import annotations

import time
from pathlib import Path

from op_profile import product_flops

DEFAULT_CACHE_BYTES = 32 << 20  # where /sys does not say


def last_level_cache_bytes(cpu: int = 0) -> int:
    """The size of the largest cache `cpu` sees, from /sys (DEFAULT_CACHE_BYTES where it is not readable)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    best = 0
    for index in Path(f"/sys/devices/system/cpu/cpu{cpu}/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        scale = units.get(text[-1:].upper(), 1)
        digits = text[:-1] if text[-1:].upper() in units else text
        if digits.isdigit():
            best = max(best, int(digits) * scale)
    return best or DEFAULT_CACHE_BYTES


def _layout(t) -> str:
    """An operand's layout mark: "T" for a 2-D operand stored transposed (its rows strided), else ""."""
    return "T" if t.dim() == 2 and t.stride(0) == 1 and t.stride(1) != 1 else ""


def product_calls(fn) -> list[dict]:
    """One call of `fn()` with each `aten.mm` call timed: groups by (m, k, n, layout of a, layout of b) with their
    calls, CPU-seconds and FLOPs."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    groups: dict[tuple, dict] = {}

    class Timed(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is not torch.ops.aten.mm.default:
                return func(*args, **(kwargs or {}))
            a, b = args[0], args[1]
            start = time.process_time()
            out = func(*args, **(kwargs or {}))
            seconds = time.process_time() - start
            (m, k), n = a.shape, b.shape[1]
            key = (m, k, n, _layout(a), _layout(b))
            group = groups.get(key)
            if group is None:
                group = groups[key] = dict(
                    zip(("m", "k", "n", "a", "b"), key), calls=0, seconds=0.0, flops=0.0
                )
            group["calls"] += 1
            group["seconds"] += seconds
            group["flops"] += product_flops("aten::mm", [[m, k], [k, n]])
            return out

    with Timed():
        fn()
    return sorted(groups.values(), key=lambda g: -g["seconds"])


def _operand(rows: int, cols: int, transposed: bool):
    import torch

    return torch.randn(cols, rows).t() if transposed else torch.randn(rows, cols)


def alone_rate(
    m: int, k: int, n: int, a: str = "", b: str = "", cold_bytes: int = 0, seconds: float = 0.2
) -> float:
    """FLOPs per CPU-second of `m x k` times `k x n` (`a`, `b`: "T" for an operand stored transposed) by itself:
    on the same operands each time (`cold_bytes` 0), or cycling through distinct operand pairs of at least
    `cold_bytes` bytes in all, each pair used once a cycle."""
    import torch

    pair_bytes = 4 * (m * k + k * n)
    count = max(1, -(-cold_bytes // pair_bytes)) if cold_bytes else 1
    pairs = [(_operand(m, k, a == "T"), _operand(k, n, b == "T")) for _ in range(count)]
    for x, y in pairs[:3]:
        torch.mm(x, y)
    reps, start = 0, time.process_time()
    while reps < count or time.process_time() - start < seconds:
        x, y = pairs[reps % count]
        torch.mm(x, y)
        reps += 1
    return 2.0 * m * k * n * reps / (time.process_time() - start)


def product_rates(
    fn, top: int, cold_bytes: int | None = None, seconds: float = 0.2
) -> tuple[list[dict], dict]:
    """The `top` costliest product groups of one `fn()` (`product_calls`), each with its rate in the call and alone
    in cache and from memory (`alone_rate`; cold operands of 4x the last-level cache unless `cold_bytes`), and a
    summary: every group's CPU-seconds and FLOPs, and the listed groups' CPU-seconds in the call against what they
    would take at each alone rate."""
    groups = product_calls(fn)
    cold = 4 * last_level_cache_bytes() if cold_bytes is None else cold_bytes
    rows = []
    for g in groups[:top]:
        shape = (g["m"], g["k"], g["n"], g["a"], g["b"])
        rows.append(
            {
                **g,
                "in_call": g["flops"] / g["seconds"] if g["seconds"] > 0 else 0.0,
                "alone_cached": alone_rate(*shape, seconds=seconds),
                "alone_cold": alone_rate(*shape, cold_bytes=cold, seconds=seconds),
            }
        )
    summary = {
        "calls": sum(g["calls"] for g in groups),
        "seconds": sum(g["seconds"] for g in groups),
        "flops": sum(g["flops"] for g in groups),
        "listed_seconds": sum(r["seconds"] for r in rows),
        "listed_at_cached": sum(r["flops"] / r["alone_cached"] for r in rows),
        "listed_at_cold": sum(r["flops"] / r["alone_cold"] for r in rows),
        "cold_bytes": cold,
    }
    return rows, summary


def rates_table(rows: list[dict], peak: float | None = None) -> str:
    """Markdown: one row per product group, rates in GFLOP/s (and in the call against `peak` where given)."""
    lines = [
        "| product (m x k x n, T: stored transposed) | calls | CPU-s in the call | GFLOP/s in the call "
        "| alone, operands in cache | alone, operands from memory | in the call / alone in cache |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        shape = f"{r['m']}{' T' if r['a'] else ''} x {r['k']} x {r['n']}{' T' if r['b'] else ''}"
        against = f" ({r['in_call'] / peak:.2f} of peak)" if peak else ""
        lines.append(
            f"| {shape} | {r['calls']} | {r['seconds']:.4f} | {r['in_call'] / 1e9:.1f}{against} "
            f"| {r['alone_cached'] / 1e9:.1f} | {r['alone_cold'] / 1e9:.1f} "
            f"| {r['in_call'] / r['alone_cached']:.2f} |"
        )
    return "\n".join(lines)


def rates_line(summary: dict) -> str:
    """One sentence: where the products' time goes against their rates alone."""
    s = summary
    listed = s["listed_seconds"]
    return (
        f"aten.mm: {s['calls']} calls, {s['seconds']:.3f} CPU-s, {s['flops'] / 1e9:.1f} GFLOP at "
        f"{s['flops'] / s['seconds'] / 1e9 if s['seconds'] else 0.0:.1f} GFLOP/s; the listed shapes "
        f"({listed / s['seconds'] if s['seconds'] else 0.0:.0%} of that time) took {listed:.3f} CPU-s in the call, "
        f"would take {s['listed_at_cached']:.3f} at their rates alone with operands in cache and "
        f"{s['listed_at_cold']:.3f} with operands from memory ({s['cold_bytes'] >> 20} MiB of them)"
    )
