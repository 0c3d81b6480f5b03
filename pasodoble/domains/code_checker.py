"""The code domain's checker: a Solver's answer against a task's gold, with a verdict for every pair.

    with domain.open_checker(cfg.grader) as checker:     # grader.timeout_s: wall seconds of one Solver check
        batch = checker.grade(specs, responses)          # grader.num_workers: sandbox launches at a time

An output prediction is right when the text between `<output>` tags equals the gold printed text (both normalized):
a string comparison, nothing parsed or run. A function is run inside the jail on the tests the reference passed;
the runner compares its return values with the expected ones and the verdict is `passed` or not. Identical
(task, code) pairs of a batch share one launch. `grade` never raises (a failure is counted as `checker_errors`,
every verdict wrong) and is bounded in time (each launch by the sandbox's limits).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from pasodoble.domains import code_tasks as tasks
from pasodoble.sandbox import Job, Verdict
from pasodoble.sandbox.values import decode

log = logging.getLogger("pasodoble.domains.code")


@dataclass(frozen=True)
class CodeVerdict:
    correct: bool
    extracted: str | None


@dataclass(frozen=True)
class CodeBatch:
    verdicts: list[CodeVerdict]
    counters: dict[str, int]


class Runs(Protocol):
    """What the checker needs of the domain (`CodeDomain`): golds by spec, and sandbox launches."""

    def gold(self, answer: str) -> dict | None: ...

    def run_jobs(
        self, jobs: Sequence[Job], seed: int = 0, timeout_s: float | None = None
    ) -> list[Verdict]: ...

    def drain_stats(self) -> dict[str, int]: ...


def function_job(gold: dict, code: str) -> Job:
    """The Solver's `code` on the gold's kept tests; the jail's runner compares the values."""
    return Job(
        program=code,
        entry_point=gold["entry_point"],
        calls=tuple(tuple(decode(args)) for args in gold["calls"]),
        expected=tuple(decode(value) for value in gold["expected"]),
    )


class CodeChecker:
    def __init__(self, domain: Runs, timeout_s: float | None = None):
        self.domain, self.timeout_s = domain, timeout_s

    def __enter__(self) -> CodeChecker:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def grade(self, golds: Sequence[str], responses: Sequence[str]) -> CodeBatch:
        counters: Counter[str] = Counter()
        try:
            verdicts = self._grade(golds, responses, counters)
        except Exception as e:  # the contract: a verdict for every pair, whatever broke
            log.error("code checker failed on a batch of %d: %s: %s", len(golds), type(e).__name__, e)
            counters["checker_errors"] += 1
            verdicts = [CodeVerdict(False, None) for _ in golds]
        counters.update(self.domain.drain_stats())
        return CodeBatch(verdicts, dict(counters))

    def _grade(self, golds, responses, counters: Counter) -> list[CodeVerdict]:
        known = {spec: self.domain.gold(spec) for spec in dict.fromkeys(golds)}
        verdicts: list[CodeVerdict | None] = [None] * len(golds)
        pending: dict[tuple[str, str], list[int]] = {}
        for i, (spec, response) in enumerate(zip(golds, responses, strict=True)):
            gold = known[spec]
            if gold is None:
                counters["gold_unavailable"] += 1
                verdicts[i] = CodeVerdict(False, None)
                continue
            kind = gold["kind"]
            counters[f"{kind}/answers"] += 1
            answer = tasks.read_output(response) if kind == "output" else tasks.read_code(response)
            if answer is None:
                counters["no_answer"] += 1
                verdicts[i] = CodeVerdict(False, None)
            elif kind == "output":
                verdicts[i] = CodeVerdict(answer == gold["stdout"], answer)
            else:
                pending.setdefault((spec, answer), []).append(i)
        keys = list(pending)
        results = self.domain.run_jobs(
            [function_job(known[spec], code) for spec, code in keys], seed=0, timeout_s=self.timeout_s
        )
        for (_, code), result in zip(keys, results):
            counters[f"status/{result.status}"] += len(pending[(_, code)])
            for i in pending[(_, code)]:
                verdicts[i] = CodeVerdict(result.passed, code)
        for v, spec in zip(verdicts, golds):
            if v.correct:
                counters[f"{known[spec]['kind']}/correct"] += 1
        return verdicts
