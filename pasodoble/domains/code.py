"""The code domain: dual-play on Python tasks whose gold answers come from running them in the sandbox.

    domain: code                     # in a recipe; knowledge.path: stdlib (or a folder of .py files, or JSONL)

The Proposer reads a function of real code (`code_corpus.py`) and writes a task (`code_tasks.py`): predict what a
program prints, or write a function from a statement with a reference solution and tests. The gate runs cheapest
first: the tags, then `ast` (the code parses, the solution defines the function), the answer not in the question,
one sandbox run (within limits; it yields the gold: the printed text, or which tests the reference passes; the
others are dropped and counted), the printed text not in the program, and a second run under another hash seed that
must agree. The checker compares a predicted output with the gold as text, or runs the Solver's function on the
kept tests inside the jail, where the runner compares the values. Nothing model-written is executed in this
process: only `pasodoble.sandbox` launches it. Without the sandbox's essential layers every check is refused
(`sandbox_refused` in the gate, `code/refused` in the checker) and logged. docs/DOMAINS.md has the format.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from pasodoble.core import prompts
from pasodoble.core.knowledge import KnowledgeConfig, PassageSampler
from pasodoble.core.prompts import PromptConfig, Proposal
from pasodoble.domains import code_tasks as tasks
from pasodoble.domains.base import GateStage
from pasodoble.domains.code_checker import CodeChecker
from pasodoble.domains.code_corpus import FunctionPassages, is_code_source, source_root
from pasodoble.domains.code_prompts import code_prompts
from pasodoble.sandbox import Job, SandboxConfig, Verdict, check
from pasodoble.sandbox.values import encode

if TYPE_CHECKING:
    from pasodoble.grader.grader import GraderConfig

log = logging.getLogger("pasodoble.domains.code")
EVAL_SETS = ("humaneval",)  # `pasodoble code-eval` runs it through the same sandbox
GATE_REASONS = (
    "syntax_error",
    "no_function",
    "no_usable_tests",
    "answer_leaked",
    "timeout",
    "program_error",
    "no_passing_tests",
    "no_output",
    "long_output",
    "nondeterministic",
    "sandbox_refused",
    "sandbox_error",
)
_STATUS_REASON = {"timeout": "timeout", "refused": "sandbox_refused", "sandbox_error": "sandbox_error"}
MEMO_SIZE = 4096  # gold answers remembered by spec; a forgotten one is recomputed by one more run


def _spec(answer: str) -> dict:
    return json.loads(answer)


def _job(spec: dict) -> tuple[Job, list[tasks.Test]]:
    """The sandbox job that runs a spec's program (or reference on its tests), and the parsed tests."""
    if spec["kind"] == "output":
        return Job(program=spec["program"], stdin=spec["stdin"]), []
    usable, _ = tasks.parse_tests(spec["tests"], spec["entry_point"])
    return Job(
        program=spec["solution"], entry_point=spec["entry_point"], calls=tuple(t.args for t in usable)
    ), usable


def gold_from(spec: dict, verdict: Verdict, usable: list[tasks.Test]) -> tuple[dict | None, str | None, int]:
    """(gold, invalid reason, tests dropped) of a spec from its run: the printed text, or the tests passed."""
    if verdict.status in _STATUS_REASON:
        return None, _STATUS_REASON[verdict.status], 0
    if spec["kind"] == "output":
        if verdict.status != "passed":
            return None, "program_error", 0
        output = tasks.normalize_output(verdict.outputs[0] if verdict.outputs else "")
        reason = tasks.output_leak(output, spec["program"], spec["stdin"])
        return (None, reason, 0) if reason else ({"kind": "output", "stdout": output}, None, 0)
    if verdict.status not in ("passed", "error") or (verdict.status == "error" and not verdict.outputs):
        return None, "program_error", 0
    kept = [t for t, out in zip(usable, verdict.outputs) if out == tasks.expected_text(t.expected)]
    if not kept:
        return None, "no_passing_tests", len(usable)
    gold = {
        "kind": "function",
        "entry_point": spec["entry_point"],
        "calls": [encode(list(t.args)) for t in kept],
        "expected": [encode(t.expected) for t in kept],
    }
    return gold, None, len(usable) - len(kept)


class CodeDomain:
    name = "code"
    invalid_reasons = tasks.PARSE_REASONS + GATE_REASONS
    eval_sets = EVAL_SETS

    def __init__(self, sandbox: SandboxConfig | None = None, workers: int = 2):
        self.sandbox = sandbox or SandboxConfig(timeout_s=5.0, memory_mb=512)
        self.workers = workers
        self.stats: Counter[str] = Counter()  # sandbox launches and their wall time, drained by the checker
        self._lock = threading.Lock()
        # spec -> the first run's (status, outputs), which the second run must repeat
        self._first: OrderedDict[str, tuple[str, tuple[str, ...]]] = OrderedDict()
        self._gold: OrderedDict[str, dict] = OrderedDict()  # spec -> gold (confirmed by two hash seeds)
        self.gate = (
            GateStage("the code parses (ast)", self._syntax),
            GateStage("the answer is not in the question", self._static_leak),
            GateStage("runs within limits (sandbox, hash seed 0)", self._run_first),
            GateStage("deterministic (sandbox, hash seed 1)", self._run_second),
        )

    def run_jobs(self, jobs: Sequence[Job], seed: int = 0, timeout_s: float | None = None) -> list[Verdict]:
        """Run `jobs` in the sandbox, `workers` at a time, each under one hash seed; counted in `stats`."""
        if not jobs:
            return []
        config = dataclasses.replace(
            self.sandbox, hash_seeds=(seed,), timeout_s=timeout_s or self.sandbox.timeout_s
        )
        start = time.monotonic()
        with ThreadPoolExecutor(max_workers=max(1, self.workers)) as pool:
            verdicts = list(pool.map(lambda job: check(job, config), jobs))
        with self._lock:
            self.stats["sandbox/launches"] += len(jobs)
            self.stats["sandbox/wall_ms"] += int(1000 * (time.monotonic() - start))
            refused = sum(v.status == "refused" for v in verdicts)
            self.stats["refused"] += refused
        if refused:
            log.error("code checks refused: %s", verdicts[0].detail if verdicts else "")
        return verdicts

    def _remember(self, memo: OrderedDict, key: str, value) -> None:
        memo[key] = value
        memo.move_to_end(key)
        while len(memo) > MEMO_SIZE:
            memo.popitem(last=False)

    def _syntax(self, proposals: Sequence[Proposal]) -> list[str | None]:
        out = []
        for p in proposals:
            spec = _spec(p.answer)
            reason = tasks.syntax_reason(spec)
            if reason is None and spec["kind"] == "function":
                usable, dropped = tasks.parse_tests(spec["tests"], spec["entry_point"])
                self.stats["gate/tests_unusable"] += dropped
                reason = None if usable else "no_usable_tests"
            out.append(reason)
        return out

    def _static_leak(self, proposals: Sequence[Proposal]) -> list[str | None]:
        specs = [_spec(p.answer) for p in proposals]
        return [
            tasks.solution_leak(p.question, s["solution"]) if s["kind"] == "function" else None
            for p, s in zip(proposals, specs)
        ]

    def _run_first(self, proposals: Sequence[Proposal]) -> list[str | None]:
        specs = [_spec(p.answer) for p in proposals]
        jobs = [_job(s) for s in specs]
        verdicts = self.run_jobs([j for j, _ in jobs], seed=0)
        reasons = []
        for p, spec, (_, usable), v in zip(proposals, specs, jobs, verdicts):
            gold, reason, dropped = gold_from(spec, v, usable)
            self.stats["gate/tests_dropped"] += dropped
            if gold is not None:
                self._remember(self._first, p.answer, (v.status, v.outputs))
                self._remember(self._gold, p.answer, gold)
            reasons.append(reason)
        return reasons

    def _run_second(self, proposals: Sequence[Proposal]) -> list[str | None]:
        jobs = [_job(_spec(p.answer))[0] for p in proposals]
        verdicts = self.run_jobs(jobs, seed=1)
        reasons = []
        for p, v in zip(proposals, verdicts):
            if v.status in _STATUS_REASON:
                reasons.append(_STATUS_REASON[v.status])
            elif self._first.get(p.answer) != (v.status, v.outputs):
                self._gold.pop(p.answer, None)
                reasons.append("nondeterministic")
            else:
                reasons.append(None)
        return reasons

    def drain_stats(self) -> dict[str, int]:
        """The gate's and checker's sandbox counters since the last call (the checker reports them)."""
        with self._lock:
            out = dict(self.stats)
            self.stats.clear()
        return out

    def gold(self, answer: str) -> dict | None:
        """The gold of a spec: remembered from the gate, else recomputed by one run (a resumed buffer)."""
        if answer in self._gold:
            return self._gold[answer]
        spec = _spec(answer)
        job, usable = _job(spec)
        (verdict,) = self.run_jobs([job], seed=0)
        found, _, _ = gold_from(spec, verdict, usable)
        self.stats["gold_recomputed"] += 1
        if found is not None:
            self._remember(self._gold, answer, found)
        return found

    def open_corpus(self, cfg: KnowledgeConfig, tokenizer=None):
        if is_code_source(cfg.path):
            return FunctionPassages(source_root(cfg.path), cfg.seed, min_chars=cfg.min_chars)
        return PassageSampler(cfg, tokenizer=tokenizer)

    def proposer_messages(self, passage: str | None, cfg: PromptConfig) -> list[dict[str, str]]:
        return prompts.proposer_messages(passage, code_prompts(cfg))

    def solver_messages(self, question: str, cfg: PromptConfig) -> list[dict[str, str]]:
        return prompts.solver_messages(question, code_prompts(cfg))

    def parse(self, text: str) -> Proposal:
        return tasks.parse_task(text)

    def extract_answer(self, text: str) -> str | None:
        output = tasks.read_output(text)
        return output if output is not None else tasks.read_code(text)

    def open_checker(self, cfg: GraderConfig | None) -> CodeChecker:
        """The checker; the recipe's `grader.num_workers` sets the launches at a time (gate too) and
        `grader.timeout_s` the wall seconds of one Solver check."""
        if cfg is None:
            return CodeChecker(self)
        self.workers = cfg.num_workers
        return CodeChecker(self, timeout_s=cfg.timeout_s)

    def diversity_key(self, question: str, tokenizer) -> list[int]:
        return list(tokenizer(question, add_special_tokens=False)["input_ids"])

    def metrics(self, counters: dict[str, int]) -> dict[str, float]:
        return code_metrics(counters)


def code_metrics(counters: dict[str, int]) -> dict[str, float]:
    """Counters as `code/...`; pass rates per kind; sandbox timing (process-local) under `proc/code/`."""
    out = {}
    for name, value in sorted(counters.items()):
        prefix = "proc/code/" if name == "sandbox/wall_ms" else "code/"
        out[prefix + name] = float(value)
    for kind in tasks.KINDS:
        answers = counters.get(f"{kind}/answers", 0)
        if answers:
            out[f"code/{kind}/pass_rate"] = counters.get(f"{kind}/correct", 0) / answers
    if counters.get("sandbox/wall_ms"):
        out["proc/code/sandbox/checks_per_s"] = (
            1000 * counters["sandbox/launches"] / counters["sandbox/wall_ms"]
        )
    return out
