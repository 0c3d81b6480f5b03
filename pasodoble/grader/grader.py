"""The batch grader: extraction, cache, fast path, then math-verify in killable workers.

Used by the rewards and by the evaluation harness:

    with Grader(GraderConfig(timeout_s=5.0, num_workers=2)) as grader:
        batch = grader.grade(golds, responses)           # responses are whole model outputs
        rewards = [float(v.correct) for v in batch.verdicts]
        tracker.log(counters_to_metrics(batch.counters), step)

Per pair: extract the answer (last balanced `\\boxed{}`, then `<answer>`, `####`, optionally the last number; with
`fallback="auto"` the answer as math-verify reads it: prose, several boxes for a gold listing as many items, the
extended forms of `goldforms.py`, and a gold holding boxes read as its boxes), remove people's markup from gold and answer alike (`Answer:`, `$...$`, units,
thousands separators, currency; `goldforms.py`, counted as `gold_normalised` / `answer_normalised` and
`normalised_<kind>`), look up the (gold, answer) cache, try the fast path (`fastpath.py`), and only then send the pair to a worker process that
runs math-verify's `parse` + `verify` under a hard limit on its CPU time (`pool.py`; workers parse LaTeX with ANTLR's
faster SLL prediction first, with identical results, `sll.py`, and skip `simplify` where a numeric evaluation
already proves two expressions different and `solve` for an equation already solved, `shortcuts.py`). A verdict
never depends on the route taken: the fast path only answers where math-verify surely agrees (and an answer identical
to the gold is right without any parse, `fastpath.py`). Timeouts are cached like verdicts (the same pair would only
burn the limit again); errors (a worker that died) and wall-clock backstop timeouts are not, as they may be transient.

Semantics: `correct` is math-verify's `verify(parse("\\boxed{gold}"), parse("\\boxed{answer}"))` with its default
settings. One departure from plain math-verify: its own timeouts are wall clock, per parse and per comparison (and
need the main thread); ours is one limit on the worker's CPU time per check (both parses and the comparison), so a
busy machine makes a check slower but never changes its verdict, and a check past it is status "timeout",
correct=False (`timeouts`). The worker stops such a check itself and stays warm; one stuck inside C code, deaf to its
timer, is stopped by its CPU rlimit about `pool.KILL_GRACE_S` later and its worker replaced. A wall-clock backstop
catches checks that hang without using CPU: a worker whose CPU time stood still for `wall_limit_factor` times the
limit is killed (also status "timeout", counted as `wall_timeouts`); a merely starved one keeps its check.

math-verify sometimes reads only a piece of an answer (the whole box does not parse, so it takes a smaller match
inside it; see `worker.py`); such pairs are counted (`partial_parses`, `gold_partial_parses`) and, with
`partial_parses="reject"`, graded wrong instead of trusting the piece, unless the answer is the gold's own text.

Departures from the PasoDoble reference: a failing check costs one pair (status "error" or "timeout", counted) and
never zeroes the whole batch; the time limit works in any thread; every failure is counted, none swallowed.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from pasodoble.grader.config import PARTIAL_PARSES as PARTIAL_PARSES  # re-exported: read without sympy
from pasodoble.grader.config import GraderConfig
from pasodoble.grader.extract import extract_answer, extract_box_group
from pasodoble.grader.fastpath import fast_verdict
from pasodoble.grader.goldforms import (
    KINDS,
    normalise_answer,
    read_decimal_comma,
    rounded_fractions,
    set_size,
)
from pasodoble.grader.pool import WorkerPool

logger = logging.getLogger(__name__)
_FALLBACK_SOURCES = {  # answer source -> its own counter (all also count as `fallbacks`)
    "last_number": "last_numbers",
    "answer_phrase": "answer_phrases",
    "bare": "bare_answers",
    "latex_span": "latex_spans",
}

STATUSES = ("ok", "no_answer", "timeout", "error")
COUNTER_NAMES = (
    "checks",  # pairs graded
    "cache_hits",  # answered from the (gold, answer) cache
    "fast_path",  # answered by the fast path
    "math_verify",  # sent to a math-verify worker
    "no_answer",  # no answer found in the response
    "fallbacks",  # answer found only by the configured fallback (last number, answer phrase or bare answer)
    "answer_phrases",  # answers taken after an `answer is` / `Answer:` phrase (fallback "auto")
    "bare_answers",  # responses that were themselves a short math expression (fallback "auto")
    "latex_spans",  # answers read from the last LaTeX span of the prose (fallback "auto")
    "last_numbers",  # answers read as the prose's last number (fallback "auto")
    "box_groups",  # several boxes read as one answer for a gold that lists as many items (fallback "auto")
    "gold_normalised",  # gold answers whose markup was removed before comparison (`goldforms.py`)
    "answer_normalised",  # extracted answers whose markup was removed before comparison
    "rounded_golds",  # golds whose fractions were compared rounded to the answer's decimals (`rounded_answers`)
    *(f"normalised_{kind}" for kind in KINDS),  # golds and answers normalised, by kind of markup removed
    "timeouts",  # pairs whose check used up its CPU-time limit (now or, cached, earlier)
    "wall_timeouts",  # pairs abandoned at the wall-clock backstop: their worker used no CPU for the whole period
    "errors",  # pairs whose check raised or whose worker died
    "parse_failures",  # extracted answers math-verify could not turn into a value
    "gold_parse_failures",  # gold answers math-verify could not turn into a value
    "partial_parses",  # extracted answers math-verify read only in part (the whole box did not parse)
    "gold_partial_parses",  # gold answers math-verify read only in part; verdicts on them rest on a fragment
    "mv_exceptions",  # exceptions math-verify caught inside its comparisons (verdict unchanged)
    "simplify_skipped",  # simplify calls a worker skipped: a numeric evaluation proved the pair different
    "solve_reused",  # solve calls a worker answered from equations it had already solved
    "worker_restarts",  # worker processes this batch's checks had killed and replaced (each restart counted once)
)


@dataclass(frozen=True)
class Verdict:
    """The grade of one (gold, response) pair."""

    correct: bool
    status: str  # "ok" | "no_answer" | "timeout" | "error"
    extracted: str | None  # the prediction's extracted answer (None if none found)
    f1: float | None = None  # token F1 with the gold (QA grading, `pasodoble.qa.grading`); None for math


@dataclass
class GradeBatch:
    """Verdicts in input order plus what happened while grading them."""

    verdicts: list[Verdict]
    counters: dict[str, int] = field(default_factory=dict)


def counters_to_metrics(counters: dict[str, int]) -> dict[str, float]:
    """Grader counters as `grader/<name>` metrics, plus the timeout and error rates per check.

    `timeout_rate` counts every pair graded "timeout" (CPU limit and wall-clock backstop alike).
    """
    metrics = {f"grader/{name}": float(value) for name, value in counters.items()}
    checks = counters.get("checks", 0)
    if checks:
        metrics["grader/timeout_rate"] = (
            counters.get("timeouts", 0) + counters.get("wall_timeouts", 0)
        ) / checks
        metrics["grader/error_rate"] = counters.get("errors", 0) / checks
    return metrics


class _LRU:
    """A thread-safe least-recently-used map of (gold, answer) -> (correct, status)."""

    def __init__(self, size: int):
        self._size = size
        self._items: OrderedDict[tuple[str, str], tuple[bool, str]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> tuple[bool, str] | None:
        with self._lock:
            if key not in self._items:
                return None
            self._items.move_to_end(key)
            return self._items[key]

    def put(self, key: tuple[str, str], value: tuple[bool, str]) -> None:
        if self._size == 0:
            return
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)


class Grader:
    """Grades (gold, response) pairs; safe to call from several threads; owns the worker processes."""

    def __init__(self, config: GraderConfig | None = None):
        self.config = config or GraderConfig()
        self.config.validate()
        self._extended = self.config.fallback == "auto"  # math-verify's reading of prose, boxes and numbers
        self._cache = _LRU(self.config.cache_size)
        self._pool: WorkerPool | None = None
        self._finalizer: weakref.finalize | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> Grader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _workers(self) -> WorkerPool:
        with self._lock:
            if self._pool is None:
                self._pool = WorkerPool(
                    self.config.num_workers,
                    memory_limit_mb=self.config.memory_limit_mb,
                    wall_limit_factor=self.config.wall_limit_factor,
                )
                self._finalizer = weakref.finalize(self, self._pool.close)
            return self._pool

    def start(self) -> Grader:
        """Start the worker processes now (about a second of CPU each) rather than at the first deferred check."""
        self._workers().start()
        return self

    def clear_cache(self) -> None:
        """Forget every cached verdict (benchmarks use it to time a cold cache)."""
        self._cache = _LRU(self.config.cache_size)

    def close(self) -> None:
        """Stop the worker processes (also done at interpreter exit); the grader can be used again after."""
        with self._lock:
            if self._finalizer is not None:
                self._finalizer()
            self._pool, self._finalizer = None, None

    def grade(self, golds: Sequence[str], responses: Sequence[str], *, extract: bool = True) -> GradeBatch:
        """Grade each response against its gold answer.

        extract=True: responses are whole model outputs (the answer is the last balanced `\\boxed{}`, then the
        fallbacks); extract=False: responses are already-extracted answers. Golds are answer strings.
        """
        if len(golds) != len(responses):
            raise ValueError(f"got {len(golds)} golds but {len(responses)} responses")
        counters: Counter[str] = Counter({name: 0 for name in COUNTER_NAMES})
        counters["checks"] = len(golds)
        verdicts: list[Verdict | None] = [None] * len(golds)
        waiting: dict[tuple[str, str], list[int]] = {}
        extracted: list[str | None] = [None] * len(
            golds
        )  # each response's answer as found, before normalising
        for index, (gold, response) in enumerate(zip(golds, responses, strict=True)):
            gold_kinds, gold_text = self._normalised(self._gold(str(gold)))
            size = set_size(gold_text) if self._extended else 1
            answer, source = self._answer(response, extract, size, counters)
            if answer is None:
                verdicts[index] = Verdict(False, "no_answer", None)
                continue
            extracted[index] = answer
            answer_kinds, answer_text = self._normalised(answer, prose_number=source == "last_number")
            if self._extended:
                gold_text, answer_text = self._paired(gold_text, answer_text, gold_kinds, answer_kinds)
            if (
                rounded := rounded_fractions(gold_text, answer_text, self.config.rounded_answers)
            ) is not None:
                counters["rounded_golds"] += 1
                gold_text = rounded
            self._count(gold_kinds, "gold", counters)
            self._count(answer_kinds, "answer", counters)
            key = (gold_text, answer_text)
            known = self._known(key, counters)
            if known is not None:
                verdicts[index] = Verdict(*known, answer)
                counters["timeouts"] += known[1] == "timeout"
            elif key in waiting:
                counters["cache_hits"] += 1
                waiting[key].append(index)
            else:
                waiting[key] = [index]
        if waiting:
            self._check(waiting, verdicts, counters, extracted)
        return GradeBatch([verdict for verdict in verdicts if verdict is not None], dict(counters))

    def _answer(
        self, response: str, extract: bool, set_size: int, counters: Counter[str]
    ) -> tuple[str | None, str | None]:
        if not extract:
            answer = response.strip() if isinstance(response, str) else None
            source = "given" if answer else None
        else:
            answer, source = extract_answer(response, self.config.fallback, set_size)
        if not answer:
            counters["no_answer"] += 1
            return None, None
        if source in _FALLBACK_SOURCES:
            counters["fallbacks"] += 1
            counters[_FALLBACK_SOURCES[source]] += 1
        counters["box_groups"] += source == "boxes"
        return answer, source

    def _gold(self, gold: str) -> str:
        """A gold written as a solution with its answer boxed is read as its box(es), as math-verify reads it."""
        return (extract_box_group(gold) or gold) if self._extended else gold

    def _normalised(self, text: str, prose_number: bool = False) -> tuple[list[str], str]:
        """(kinds removed, the text with people's markup removed: `goldforms.py`)."""
        decimal_comma = self.config.decimal_comma or (self._extended and prose_number)
        result, kinds = normalise_answer(text.strip(), decimal_comma=decimal_comma, extended=self._extended)
        return list(kinds), result

    @staticmethod
    def _paired(gold: str, answer: str, gold_kinds: list[str], answer_kinds: list[str]) -> tuple[str, str]:
        """A decimal comma read in the context of the other side's decimal (`1,22` against `1.22`)."""
        if (decimal := read_decimal_comma(answer, gold)) is not None:
            answer_kinds.append("decimal_comma")
            return gold, decimal
        if (decimal := read_decimal_comma(gold, answer)) is not None:
            gold_kinds.append("decimal_comma")
            return decimal, answer
        return gold, answer

    @staticmethod
    def _count(kinds: list[str], role: str, counters: Counter[str]) -> None:
        if kinds:
            counters[f"{role}_normalised"] += 1
            counters.update(f"normalised_{kind}" for kind in kinds)

    def _known(self, key: tuple[str, str], counters: Counter[str]) -> tuple[bool, str] | None:
        """(correct, status) from the cache or the fast path, or None when a worker must decide."""
        cached = self._cache.get(key)
        if cached is not None:
            counters["cache_hits"] += 1
            return cached
        decided = fast_verdict(*key)
        if decided is None:
            return None
        counters["fast_path"] += 1
        self._cache.put(key, (decided, "ok"))
        return decided, "ok"

    def _check(
        self,
        waiting: dict[tuple[str, str], list[int]],
        verdicts: list[Verdict | None],
        counters: Counter[str],
        extracted: list[str | None],
    ) -> None:
        keys = list(waiting)
        results = self._workers().run(keys, self.config.timeout_s)
        counters["math_verify"] += len(keys)
        reject_partial = self.config.partial_parses == "reject"
        for key, result in zip(keys, results, strict=True):
            counters.update(result.counters)
            counters["worker_restarts"] += result.restarts
            status = "timeout" if result.status == "wall_timeout" else result.status
            partial = result.counters.get("partial_parses", 0) + result.counters.get("gold_partial_parses", 0)
            rejected = (
                reject_partial and partial > 0 and key[0] != key[1]
            )  # the gold's own text is never rejected
            correct = result.correct and status == "ok" and not rejected
            if result.status in ("ok", "timeout"):  # a verdict or a spent CPU budget would only repeat
                self._cache.put(key, (correct, status))
            if result.status != "ok":
                counted = {"timeout": "timeouts", "wall_timeout": "wall_timeouts"}.get(
                    result.status, "errors"
                )
                counters[counted] += len(waiting[key])
                logger.warning(
                    "grader %s (gold %.80r, answer %.80r): %s", result.status, *key, result.message
                )
            for index in waiting[key]:
                verdicts[index] = Verdict(correct, status, extracted[index])
