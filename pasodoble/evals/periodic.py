"""In-training evaluation of the Solver on a held-out set, every N steps, with best-checkpoint tracking.

Why: choosing the best checkpoint on the test sets inflates the reported numbers; the paper's setting has no
labels during RL, but a small labelled held-out set (or a validation slice of a corpus) is fair for model
selection. This module turns an `EvalConfig` into the `evaluator(role) -> metrics` callable that the dual-play
loop calls every `schedule.eval_every` steps (it prefixes the names with `eval/` and logs them).

    evaluator = SolverEvaluator.from_config(EvalConfig(problems_file="heldout.jsonl", limit=64), grader)
    loop = DualPlay(..., evaluator=evaluator)          # logs eval/heldout/avg@k, eval/average/avg@k, ...
    evaluator.best                                       # (call number, score) of the best evaluation so far

Defaults are greedy and short (one sample, 512 new tokens) because this runs inside training; the final numbers
come from `pasodoble eval` with the paper's sampling.
"""

from __future__ import annotations

from pathlib import Path

from pasodoble.evals.benchmarks import load_benchmark
from pasodoble.evals.problems import FieldMap, Problem, load_problems_file
from pasodoble.evals.runner import EvalSettings, evaluate
from pasodoble.evals.settings import EvalConfig as EvalConfig  # re-exported: read without torch


def load_eval_problems(config: EvalConfig) -> list[Problem]:
    problems: list[Problem] = []
    if config.problems_file:
        fields = FieldMap(question_field=config.question_field, answer_field=config.answer_field)
        problems += load_problems_file(config.problems_file, fields, limit=config.limit)
    for name in config.benchmarks:
        problems += load_benchmark(name, config.data_dir, limit=config.limit)
    return problems


class SolverEvaluator:
    """`evaluator(role) -> {"<source>/<metric>": value}` for the dual-play loop; remembers the best call.

    The best call is decided on the held-out file alone when one is given (benchmarks are only watched), else on
    the average. `best` lives in memory; every call's scores are also in the run's metrics.jsonl (`eval/...`),
    which is where a resumed run or a later script picks the checkpoint from.
    """

    def __init__(
        self,
        problems: list[Problem],
        settings: EvalSettings,
        grader,
        *,
        metric: str = "avg@k",
        select_source: str | None = None,
        samples_dir: str | Path | None = None,
    ):
        self.problems, self.settings, self.grader, self.metric = problems, settings, grader, metric
        self.select_source = select_source  # the source that decides the best call; None: the average
        self.samples_dir = Path(samples_dir) if samples_dir else None
        self.calls = 0
        self.best: tuple[int, float] | None = None  # (call number, score)
        self.last_is_best = False

    @classmethod
    def from_config(cls, config: EvalConfig, grader) -> SolverEvaluator:
        config.validate()
        return cls(
            load_eval_problems(config),
            config.settings(),
            grader,
            metric=config.metric,
            select_source=Path(config.problems_file).stem if config.problems_file else None,
            samples_dir=config.samples_dir,
        )

    def __call__(self, role) -> dict[str, float]:
        self.calls += 1
        path = self.samples_dir / f"eval-{self.calls}.jsonl" if self.samples_dir else None
        if path is not None and path.exists():
            path.unlink()  # a re-run of the same call after a resume starts that evaluation over
        report = evaluate(
            role.engine,
            role.tokenizer,
            self.problems,
            self.settings,
            self.grader,
            samples_path=path,
            progress=False,
        )
        scores = report.per_source[self.select_source] if self.select_source else report.average
        score = scores[self.metric]
        self.last_is_best = self.best is None or score > self.best[1]
        if self.last_is_best:
            self.best = (self.calls, score)
        return {**report.to_metrics(prefix=""), "average/is_best": float(self.last_is_best)}
