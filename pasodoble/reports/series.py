"""A run's metrics as series: `metrics.jsonl` -> {name: (steps, values)}, and the moving average the plots draw.

Shared by the per-group plots (`plotting.py`), the summary figure (`summary_plot.py`) and the demo's tables.
Damaged lines, non-numeric and non-finite values are skipped; a step logged twice keeps its last value.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from pasodoble.io import read_jsonl


def load_series(metrics_path: Path) -> dict[str, tuple[list[int], list[float]]]:
    """metric name -> (steps, values); later rows for the same step win (a resumed run re-logs nothing twice)."""
    by_key: dict[str, dict[int, float]] = defaultdict(dict)
    for row in read_jsonl(metrics_path, skip_bad=True):  # a copied run may hold a damaged line
        step = row.get("step")
        if not isinstance(step, int):
            continue
        for k, v in row.items():
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                by_key[k][step] = float(v)
    return {k: (sorted(d), [d[s] for s in sorted(d)]) for k, d in by_key.items()}


def moving_average(values: list[float], window: int) -> list[float]:
    """Trailing mean over `window` points (fewer at the start); window <= 1 returns the values unchanged."""
    if window <= 1:
        return values
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out
