"""Progress bars that suit where they are shown, and library noise kept out of a run's output.

Why: a bar redrawn with carriage returns is right on a terminal and wrong in a log file or CI output, where each
redraw stays as text (thousands of updates for one SFT run). `progress_bar` is tqdm's bar on a terminal; elsewhere
it prints one plain line every `LOG_PERCENT` percent of the work (every `LOG_INTERVAL_S` seconds when the total is
unknown). `quiet_libraries` turns off what libraries print for themselves: transformers' and huggingface_hub's
bars (`Loading weights`, `Writing model shards`) through the hub's `HF_HUB_DISABLE_PROGRESS_BARS` (read at their
import, so set before; a value the user set wins) and matplotlib's INFO notes (`generated new fontManager`).
"""

from __future__ import annotations

import logging
import math
import os
import sys
from typing import Any

LOG_PERCENT = 5  # a line every this many percent of the work, where the output is not a terminal
LOG_INTERVAL_S = 30.0  # a line every this many seconds when the total is unknown
DEEPSPEED_CPU_NOTE = "Setting accelerator to CPU."  # how DeepSpeed's CPU fallback warning begins


class _Lines:
    """A stream for tqdm that writes each redraw as one line (no carriage returns, no cleared bars)."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> None:
        line = text.replace("\r", "").rstrip()
        if line:
            self.stream.write(line + "\n")

    def flush(self) -> None:
        self.stream.flush()


def _is_terminal(stream) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def progress_bar(iterable: Any = None, **kwargs: Any):
    """tqdm's bar (same arguments) on a terminal; elsewhere one line every `LOG_PERCENT` % of the total."""
    from tqdm.auto import tqdm

    stream = kwargs.pop("file", None) or sys.stderr
    if kwargs.get("disable") or _is_terminal(stream):
        return tqdm(iterable, file=stream, **kwargs)
    total = kwargs.get("total")
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)
    if total:
        pacing = {"miniters": max(1, math.ceil(total * LOG_PERCENT / 100)), "mininterval": 0.0}
    else:
        pacing = {"mininterval": LOG_INTERVAL_S}
    return tqdm(iterable, file=_Lines(stream), ascii=True, **pacing, **kwargs)


def quiet_libraries() -> None:
    """No library progress bars, INFO notes or DeepSpeed's CPU fallback in a command's output (module docstring)."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    # DeepSpeed adds its own handler to this logger at its import and keeps the filters it finds
    logging.getLogger("DeepSpeed").addFilter(_drop_cpu_fallback)


def _drop_cpu_fallback(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(DEEPSPEED_CPU_NOTE)
