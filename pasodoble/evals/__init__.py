"""Evaluation harness: benchmark loaders, the k-sample runner, metrics and reports.

Public API (each name imported on first use, `pasodoble.lazy`, so that `settings.py` reads without torch):
- `Problem`, `FieldMap`, `load_problems_file`, `load_hf_problems`: any JSONL / Parquet / Hub set by field mapping.
- `load_benchmark(name, data_dir)`, `BENCHMARKS`: the seven math sets (aime24, aime25, amc23, gsm8k, math500,
  minerva_math, olympiadbench) read from a data directory or their Hugging Face ids.
- `EvalSettings`, `evaluate`, `EvalReport`: generate k samples per problem with any rollout engine, grade, score
  (avg@k, pass@k, maj@k, 95% interval), streamed and resumable.
- `pasodoble eval` / `pasodoble eval-table` (see `cli.py`); in-training evaluation in `periodic.py`.
"""

from typing import TYPE_CHECKING

from pasodoble.lazy import lazy_exports

if TYPE_CHECKING:
    from pasodoble.evals.benchmarks import BENCHMARKS, PAPER_BENCHMARKS, load_benchmark, resolve_data_dir
    from pasodoble.evals.problems import FieldMap, Problem, load_hf_problems, load_problems_file
    from pasodoble.evals.runner import EvalReport, evaluate
    from pasodoble.evals.settings import DEFAULT_TEMPLATE, EvalSettings

__all__ = [
    "BENCHMARKS",
    "DEFAULT_TEMPLATE",
    "PAPER_BENCHMARKS",
    "EvalReport",
    "EvalSettings",
    "FieldMap",
    "Problem",
    "evaluate",
    "load_benchmark",
    "load_hf_problems",
    "load_problems_file",
    "resolve_data_dir",
]
__getattr__ = lazy_exports(
    __name__,
    {
        "BENCHMARKS": "pasodoble.evals.benchmarks",
        "PAPER_BENCHMARKS": "pasodoble.evals.benchmarks",
        "load_benchmark": "pasodoble.evals.benchmarks",
        "resolve_data_dir": "pasodoble.evals.benchmarks",
        "FieldMap": "pasodoble.evals.problems",
        "Problem": "pasodoble.evals.problems",
        "load_hf_problems": "pasodoble.evals.problems",
        "load_problems_file": "pasodoble.evals.problems",
        "EvalReport": "pasodoble.evals.runner",
        "evaluate": "pasodoble.evals.runner",
        "DEFAULT_TEMPLATE": "pasodoble.evals.settings",
        "EvalSettings": "pasodoble.evals.settings",
    },
)
