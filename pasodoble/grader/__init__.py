"""Math answer grading: extraction, a fast path, and math-verify under hard time limits.

`Grader.grade(golds, responses)` returns one `Verdict` per pair (`correct`, `status`, `extracted`) and counters
(`counters_to_metrics` turns them into `grader/...` metrics). See `grader.py` for the flow, `fastpath.py` for when
math-verify is skipped, `pool.py` for the killable worker processes and `cli.py` for `pasodoble verify-answers`.
"""

from pasodoble.grader.extract import extract_answer, extract_boxed

# The grader proper needs math-verify; it is imported on first use, so modules that only extract answers (prompts,
# the loop) import without it (a GPU check machine may lack math-verify).
_LAZY = (
    "COUNTER_NAMES",
    "STATUSES",
    "GradeBatch",
    "Grader",
    "GraderConfig",
    "Verdict",
    "counters_to_metrics",
)


def __getattr__(name: str):
    if name == "GraderConfig":  # the config section reads without math-verify
        from pasodoble.grader.config import GraderConfig

        return GraderConfig
    if name in _LAZY:
        from pasodoble.grader import grader

        return getattr(grader, name)
    raise AttributeError(f"module 'pasodoble.grader' has no attribute {name!r}")


__all__ = [*_LAZY, "extract_answer", "extract_boxed"]
