"""The `grader:` config section (`GraderConfig`: time and memory limits, workers, cache, the fallback reading, how
partly read answers count), checked without math-verify or sympy; `grader.py` grades with it and re-exports it.
Apart so that a recipe is read and checked in well under a second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pasodoble.errors import ConfigError
from pasodoble.grader.extract import FALLBACKS

PARTIAL_PARSES = ("keep", "reject")  # what a verdict resting on a partly read gold or answer becomes


@dataclass
class GraderConfig:
    """Answer checking."""

    timeout_s: float = 5.0  # limit of one math-verify check, in its worker's CPU seconds (load-proof)
    wall_limit_factor: float = 10.0  # hang backstop: kill a worker with no CPU use in this many timeout_s
    num_workers: int = 1  # math-verify worker processes
    cache_size: int = 100_000  # (gold, answer) verdicts remembered; 0 turns the cache off
    # answer source when no box/tag/####: "none" | "last_number" | "auto" (math-verify's reading: prose, several
    # boxes for a set gold, the extended forms of goldforms.py); rewards keep "none", the strict boxed rule
    fallback: str = "none"
    decimal_comma: bool = False  # read `3,5` as 3.5 (a comma not followed by exactly 3 digits); else a set
    memory_limit_mb: int | None = 4096  # address-space cap of a worker; None means no cap
    # A pair whose gold or answer math-verify read only in part (counted as partial_parses): "keep" its verdict
    # (math-verify's), or "reject" it: graded wrong, since the verdict rests on a piece of the text (an answer
    # identical to the gold keeps its verdict).
    partial_parses: str = "keep"
    # A decimal answer of at least this many places also matches the gold's fractions rounded to its places (`0.33`
    # for 1/3, as math-verify's tests at 2 places expect; docs/GRADING.md); None compares exactly (6 places)
    rounded_answers: int | None = 2

    def validate(self) -> None:
        if not 0 < self.timeout_s < math.inf:
            raise ConfigError(
                "grader.timeout_s", f"must be a finite number > 0 of seconds, got {self.timeout_s}"
            )
        if not 1 <= self.wall_limit_factor < math.inf:
            raise ConfigError(
                "grader.wall_limit_factor",
                f"must be finite and >= 1 (times timeout_s), got {self.wall_limit_factor}",
            )
        if self.num_workers < 1:
            raise ConfigError("grader.num_workers", f"must be >= 1, got {self.num_workers}")
        if self.cache_size < 0:
            raise ConfigError("grader.cache_size", f"must be >= 0 (0 turns it off), got {self.cache_size}")
        if self.fallback not in FALLBACKS:
            raise ConfigError(
                "grader.fallback", f"must be one of {', '.join(FALLBACKS)}, got {self.fallback!r}"
            )
        if self.partial_parses not in PARTIAL_PARSES:
            raise ConfigError(
                "grader.partial_parses",
                f"must be one of {', '.join(PARTIAL_PARSES)}, got {self.partial_parses!r}",
            )
        if self.rounded_answers is not None and self.rounded_answers < 1:
            raise ConfigError(
                "grader.rounded_answers", f"must be >= 1 decimal places or null, got {self.rounded_answers}"
            )
        if self.memory_limit_mb is not None and self.memory_limit_mb < 256:
            raise ConfigError("grader.memory_limit_mb", f"must be >= 256 or null, got {self.memory_limit_mb}")
