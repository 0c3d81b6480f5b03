"""`QAGrader`: the QA checker behind the grader's interface, so `pasodoble eval --grading qa` reuses the runner.

What: `grade(golds, responses)` reads each response's short answer (`check.extract_answer`) and returns the
grader's `GradeBatch` of `Verdict`s whose `correct` is exact match under the chosen rule and whose `f1` is token
F1; the evaluation runner takes the best over a problem's golds (the answer and its aliases), which gives the QA
harness's numbers: EM and F1 are means over questions of the max over golds (with k samples, the mean over them).

Why: EM and F1 are pure string functions, so no worker processes, timeouts or caches are needed; the class only
speaks the `Grader` protocol (`grade`, context manager, `close`) that `evaluate` uses.

How to run: `pasodoble eval --grading qa --dataset FILE ...` (docs/QA.md); tests in tests/qa/test_eval_qa.py.
"""

from __future__ import annotations

from collections.abc import Sequence

from pasodoble.grader.grader import GradeBatch, Verdict
from pasodoble.qa.check import exact_match, extract_answer, token_f1
from pasodoble.qa.normalize import RULES


class QAGrader:
    def __init__(self, rule: str = "squad"):
        if rule not in RULES:
            raise ValueError(f"unknown QA normalisation rule {rule!r}; use one of {', '.join(RULES)}")
        self.rule = rule

    def __enter__(self) -> QAGrader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to release (the math grader's workers have no counterpart here)."""

    def grade(self, golds: Sequence[str], responses: Sequence[str], *, extract: bool = True) -> GradeBatch:
        """One verdict per (gold, response) pair; `extract=False` compares the whole response."""
        if len(golds) != len(responses):
            raise ValueError(f"{len(golds)} golds for {len(responses)} responses")
        verdicts, no_answer = [], 0
        for gold, response in zip(golds, responses):
            answer = extract_answer(response) if extract else response
            if answer is None:
                no_answer += 1
                verdicts.append(Verdict(False, "no_answer", None, 0.0))
                continue
            correct = exact_match(answer, gold, self.rule)
            verdicts.append(Verdict(correct, "ok", answer, token_f1(answer, gold, self.rule)))
        return GradeBatch(verdicts, {"checks": len(golds), "no_answer": no_answer})
