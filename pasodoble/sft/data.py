"""`pasodoble sft-data`: verified Proposer and Solver SFT sets from a teacher and a checker (docs/METHOD.md "Cold start").

What: for passages drawn from the knowledge corpus, the teacher writes `samples_per_passage` Proposer outputs with
the project's Proposer prompt; each is parsed with `parse_proposal` (the RL validity gate); the checker answers each
valid question with the Solver prompt; the grader compares the checker's answer with the teacher's. A candidate is
kept when they agree and its question is new. Every candidate ends with one fate: kept, checker_disagreed,
unparseable, leaked_answer, duplicate or error (a request that failed after its retries).

Files under `out_dir`:
    candidates.jsonl   one row per candidate fate, appended (and fsynced) wave by wave as results arrive
    proposer.jsonl     {"prompt", "completion"[, "system"]}: passage prompt -> the teacher's Proposer output
    solver.jsonl       {"prompt", "completion"[, "system"]}: question -> the teacher's solution (its answer part)
    report.json / .md  the counts of every fate, invalid reasons, request counters
    config.yaml        the resolved config (the key's variable NAME only, never its value)
    provenance.json    what writes the fates (teacher, checker, prompts, sampling, seed); a rerun must match it

Resume: candidates are keyed by (passage index, sample index), both pure functions of the config (the passage of
index i is `PassageSampler.sample(i)`), so a rerun with the same `out_dir` skips every key that already has a fate
and redoes only the wave that was in flight. Error rows are retried on a rerun (the newest row of a key wins); no
other key is ever written twice, so nothing is counted twice. The run stops when `target_kept` examples are kept
(candidates of the last wave past the target are not written) or after `max_passages` passages.

Departures from the reference code: the reference asks one hard-coded provider, keeps whatever the checker matched
and loses all progress when interrupted. Here the Proposer output must also pass the same validity gate as in RL
(tags, `\\boxed{}`, no leaked answer) and repeat no kept question, and the Solver set is made of the teacher's
solutions (`solver_completion: teacher`) or of the checker's agreeing solutions (`checker`).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm.auto import tqdm

from pasodoble.config import save_config
from pasodoble.core.knowledge import KnowledgeConfig, PassageSampler
from pasodoble.core.prompts import PromptConfig, parse_proposal, proposer_messages, solver_messages
from pasodoble.errors import ConfigError, UserError
from pasodoble.folders import claim_folder
from pasodoble.grader.config import GraderConfig
from pasodoble.io import append_jsonl, read_jsonl, write_json_atomic, write_text_atomic
from pasodoble.kb.dedup import normalise
from pasodoble.sft.teacher import Teacher, TeacherConfig

if TYPE_CHECKING:  # the grader loads math-verify (seconds); `sft-data` checks its recipe first
    from pasodoble.grader import Grader

FATES = ("kept", "checker_disagreed", "unparseable", "leaked_answer", "duplicate", "error")


@dataclass
class SFTDataConfig:
    out_dir: str | None = None  # output folder (required); rerun with the same folder to resume
    target_kept: int = 2800  # stop once this many examples are kept
    samples_per_passage: int = 6  # teacher samples per passage
    max_passages: int | None = None  # stop after this many passages (None: 4 x target_kept)
    wave_passages: int = 4  # passages per wave; a wave's requests run concurrently, its rows land together
    proposer_temperature: float = 0.8  # teacher sampling temperature
    proposer_max_tokens: int = 4096  # teacher completion budget
    checker_temperature: float = 0.0  # checker sampling temperature (0: greedy)
    checker_max_tokens: int = 4096  # checker completion budget
    keep_thinking: bool = False  # keep a <think>...</think> part in the Proposer SFT completions
    solver_completion: str = (
        "teacher"  # Solver SFT completion: the teacher's answer part, or "checker"'s solution
    )
    retry_errors: bool = True  # a rerun retries candidates whose requests failed
    seed: int = 0  # seeds the teacher's and checker's sampling
    num_threads: int | None = None  # torch CPU threads for local teachers (None: torch's default)
    teacher: TeacherConfig = field(default_factory=TeacherConfig)  # writes the Proposer outputs
    checker: TeacherConfig | None = None  # answers the questions (None: the teacher)
    knowledge: KnowledgeConfig = field(
        default_factory=KnowledgeConfig
    )  # passages (knowledge.seed picks them)
    prompts: PromptConfig = field(default_factory=PromptConfig)  # the roles' prompts (as in training)
    grader: GraderConfig = field(default_factory=lambda: GraderConfig(num_workers=1))  # checks agreement

    def validate(self) -> None:
        if not self.out_dir:
            raise ConfigError("out_dir", "is required: the folder for candidates.jsonl and the SFT sets")
        for name in (
            "target_kept",
            "samples_per_passage",
            "wave_passages",
            "proposer_max_tokens",
            "checker_max_tokens",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(name, "must be at least 1")
        if self.max_passages is not None and self.max_passages < 1:
            raise ConfigError("max_passages", "must be at least 1, or null for 4 x target_kept")
        if self.solver_completion not in ("teacher", "checker"):
            raise ConfigError(
                "solver_completion", f"must be 'teacher' or 'checker', got {self.solver_completion!r}"
            )
        for name in ("proposer_temperature", "checker_temperature"):
            if getattr(self, name) < 0:
                raise ConfigError(name, "must be >= 0")
        self.teacher.validate("teacher")
        if self.checker is not None:
            self.checker.validate("checker")

    def provenance(self) -> dict:
        """What decides the candidates' fates: the teacher and checker (not their address, key or pacing), the
        prompts, the sampling settings and the seed. A rerun must match it (`check_provenance`)."""
        roles = {"teacher": self.teacher, "checker": self.checker}
        identity = {
            name: None
            if cfg is None
            else {
                k: getattr(cfg, k) for k in ("kind", "model", "extra_body", "max_tokens_field", "omit_fields")
            }
            for name, cfg in roles.items()
        }
        sampling = (
            "samples_per_passage",
            "proposer_temperature",
            "proposer_max_tokens",
            "checker_temperature",
            "checker_max_tokens",
            "seed",
        )
        return {**identity, "prompts": asdict(self.prompts), **{k: getattr(self, k) for k in sampling}}

    @property
    def passage_limit(self) -> int:
        return self.max_passages if self.max_passages is not None else 4 * self.target_kept


def candidate_seed(seed: int, index: int, sample: int) -> int:
    """A 31-bit sampling seed for candidate (index, sample): the same on every rerun."""
    digest = hashlib.sha256(f"pasodoble.sft-data:{seed}:{index}:{sample}".encode()).digest()
    return int.from_bytes(digest[:4], "little") >> 1


def _after_thinking(text: str) -> str:
    close = text.rfind("</think>")
    return text[close + len("</think>") :].lstrip() if close >= 0 else text


def _answer_part(text: str) -> str:
    body = _after_thinking(text)
    start = body.find("<answer>", body.find("</problem>"))
    end = body.find("</answer>", start)
    return body[start + len("<answer>") : end].strip()


def _drop_torn_tail(path: Path) -> int:
    """Cut a last line left unfinished by a crash (so the next append starts a fresh line); returns bytes cut."""
    if not path.exists():
        return 0
    with path.open("rb+") as f:
        size = f.seek(0, 2)
        if size == 0:
            return 0
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return 0
        data = (f.seek(0), f.read())[1]
        keep = data.rfind(b"\n") + 1
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
        return size - keep


def _leaves(tree, prefix: str = "") -> dict:
    if not isinstance(tree, dict):
        return {prefix: tree}
    out = {}
    for key, value in tree.items():
        out.update(_leaves(value, f"{prefix}.{key}" if prefix else key))
    return out


def check_provenance(path: Path, provenance: dict) -> None:
    """Refuse a rerun whose teacher, checker, prompts or sampling differ from those that wrote the candidates.

    One line naming the changed fields (not their values: prompts are long and extra_body may hold anything).
    The file is written by the first run of a folder (a folder from before it existed adopts this run's)."""
    if not path.exists():
        write_json_atomic(path, provenance)
        return
    try:
        before = json.loads(path.read_text())
    except ValueError:
        raise UserError(f"{path}: damaged (not JSON); use a new out_dir") from None
    old, new = _leaves(before), _leaves(json.loads(json.dumps(provenance)))
    changed = sorted(k for k in old.keys() | new.keys() if old.get(k, "<absent>") != new.get(k, "<absent>"))
    if changed:
        raise ConfigError(
            ", ".join(changed[:6]) + (" ..." if len(changed) > 6 else ""),
            f"differs from the run that wrote {path.parent}/candidates.jsonl, whose rows would mix with "
            "this one's: restore it, or use a new out_dir",
        )


class Ledger:
    """The candidates file: the newest row per key, fate counts, kept questions (see module docstring)."""

    def __init__(self, path: Path, retry_errors: bool):
        self.path, self.retry_errors = path, retry_errors
        self.rows: dict[str, dict] = {}
        self.error_rows = 0
        self.torn_bytes = _drop_torn_tail(path)
        try:
            rows = read_jsonl(path, strict=True) if path.exists() else []
        except ValueError as err:
            raise UserError(f"{err}; the candidates file was edited or damaged: use a new out_dir") from None
        for row in rows:
            self.rows[row["key"]] = row
            self.error_rows += row["fate"] == "error"
        self.kept_questions = {normalise(r["question"]) for r in self.rows.values() if r["fate"] == "kept"}

    def done(self, key: str) -> bool:
        row = self.rows.get(key)
        return row is not None and not (self.retry_errors and row["fate"] == "error")

    @property
    def kept(self) -> int:
        return sum(r["fate"] == "kept" for r in self.rows.values())

    def counts(self) -> dict[str, int]:
        counts = Counter(r["fate"] for r in self.rows.values())
        return {fate: counts[fate] for fate in FATES}

    def add(self, rows: list[dict]) -> None:
        append_jsonl(self.path, rows)
        for row in rows:
            self.rows[row["key"]] = row
            self.error_rows += row["fate"] == "error"
            if row["fate"] == "kept":
                self.kept_questions.add(normalise(row["question"]))


class SFTDataRun:
    """One `sft-data` run over a teacher, a checker and a grader (all injected, so tests use any of them)."""

    def __init__(
        self, cfg: SFTDataConfig, teacher: Teacher, checker: Teacher, grader: Grader, *, progress=True
    ):
        cfg.validate()
        self.cfg, self.teacher, self.checker, self.grader = cfg, teacher, checker, grader
        self.out = Path(cfg.out_dir)
        self.sampler = PassageSampler(cfg.knowledge)
        self.ledger = Ledger(self.out / "candidates.jsonl", cfg.retry_errors)
        self.progress = progress

    def _candidates(self, start: int, stop: int) -> list[dict]:
        rows = []
        for index in range(start, stop):
            passage = self.sampler.sample(index)[0]
            for sample in range(self.cfg.samples_per_passage):
                key = f"{index}:{sample}"
                old = self.ledger.rows.get(key)
                if old is not None and old["passage_id"] != passage.id:
                    raise ConfigError(
                        "knowledge",
                        f"{self.ledger.path} was made from another corpus or knowledge.seed "
                        f"(candidate {key}: {old['passage_id']} != {passage.id}); use a new out_dir",
                    )
                if not self.ledger.done(key):
                    rows.append(
                        {
                            "key": key,
                            "index": index,
                            "sample": sample,
                            "passage_id": passage.id,
                            "passage": passage.text,
                        }
                    )
        return rows

    def _propose(self, rows: list[dict]) -> list[dict]:
        """Teacher outputs for `rows`; returns the rows that passed the gate and wait for the checker."""
        cfg = self.cfg
        replies = self.teacher.complete(
            [proposer_messages(r["passage"], cfg.prompts) for r in rows],
            n=1,
            temperature=cfg.proposer_temperature,
            max_tokens=cfg.proposer_max_tokens,
            seeds=[candidate_seed(cfg.seed, r["index"], r["sample"]) for r in rows],
        )
        pending = []
        for row, reply in zip(rows, replies):
            if reply.error is not None:
                row.update(fate="error", reason=f"teacher: {reply.error}")
                continue
            row["proposal"] = reply.texts[0]
            parsed = parse_proposal(reply.texts[0])
            row.update(question=parsed.question, answer=parsed.answer, reason=parsed.invalid_reason)
            if parsed.invalid_reason == "answer_leaked":
                row["fate"] = "leaked_answer"
            elif not parsed.valid:
                row["fate"] = "unparseable"
            elif normalise(parsed.question) in self.ledger.kept_questions:
                row["fate"] = "duplicate"
            else:
                pending.append(row)
        return pending

    def _check(self, rows: list[dict]) -> None:
        """Checker answers and grades for `rows`; sets each row's fate."""
        cfg = self.cfg
        replies = self.checker.complete(
            [solver_messages(r["question"], cfg.prompts) for r in rows],
            n=1,
            temperature=cfg.checker_temperature,
            max_tokens=cfg.checker_max_tokens,
            seeds=[candidate_seed(cfg.seed + 1, r["index"], r["sample"]) for r in rows],
        )
        answered = []
        for row, reply in zip(rows, replies):
            if reply.error is not None:
                row.update(fate="error", reason=f"checker: {reply.error}")
            else:
                row["checker"] = reply.texts[0]
                answered.append(row)
        if not answered:
            return
        batch = self.grader.grade([r["answer"] for r in answered], [r["checker"] for r in answered])
        wave_questions: set[str] = set()
        for row, verdict in zip(answered, batch.verdicts):
            row["checker_answer"] = verdict.extracted
            if verdict.status in ("timeout", "error"):
                row.update(fate="error", reason=f"grader: {verdict.status}")
            elif not verdict.correct:
                row.update(fate="checker_disagreed", reason=verdict.status)
            elif normalise(row["question"]) in wave_questions:
                row["fate"] = "duplicate"
            else:
                row["fate"] = "kept"
                wave_questions.add(normalise(row["question"]))

    def _wave(self, start: int, stop: int) -> int:
        """Process passages [start, stop); append the rows (up to the target); returns how many were kept."""
        rows = self._candidates(start, stop)
        if not rows:
            return 0
        self._check(self._propose(rows))
        room = self.cfg.target_kept - self.ledger.kept
        written = []
        for row in rows:  # key order: the first kept rows win the remaining room
            if row["fate"] == "kept":
                if room == 0:
                    break
                room -= 1
            written.append(row)
        self.ledger.add(written)
        return sum(r["fate"] == "kept" for r in written)

    def run(self) -> dict:
        """Draw passages wave by wave until the target or the passage limit; write the sets and the report."""
        cfg, start = self.cfg, time.perf_counter()
        claim_folder(self.out, "sft-data", "out_dir")
        check_provenance(self.out / "provenance.json", cfg.provenance())
        save_config(cfg, self.out / "config.yaml")
        bar = tqdm(total=cfg.target_kept, initial=self.ledger.kept, desc="kept", disable=not self.progress)
        index = 0
        try:
            while self.ledger.kept < cfg.target_kept and index < cfg.passage_limit:
                stop = min(cfg.passage_limit, index + cfg.wave_passages)
                bar.update(self._wave(index, stop))
                bar.set_postfix({k: v for k, v in self.ledger.counts().items() if v and k != "kept"})
                index = stop
        finally:
            bar.close()
        return self.finish(index, time.perf_counter() - start)

    def finish(self, passages: int, seconds: float) -> dict:
        """Write proposer.jsonl, solver.jsonl and the report from the candidates file; returns the report."""
        cfg = self.cfg
        kept = sorted(
            (r for r in self.ledger.rows.values() if r["fate"] == "kept"),
            key=lambda r: (r["index"], r["sample"]),
        )
        proposer, solver = [], []
        for row in kept:
            p_msgs = proposer_messages(row["passage"], cfg.prompts)
            s_msgs = solver_messages(row["question"], cfg.prompts)
            completion = row["proposal"] if cfg.keep_thinking else _after_thinking(row["proposal"])
            solution = _answer_part(row["proposal"]) if cfg.solver_completion == "teacher" else row["checker"]
            proposer.append(_example(p_msgs, completion))
            solver.append(_example(s_msgs, solution))
        write_text_atomic(self.out / "proposer.jsonl", _jsonl(proposer))
        write_text_atomic(self.out / "solver.jsonl", _jsonl(solver))
        counts = self.ledger.counts()
        reasons = Counter(r["reason"] for r in self.ledger.rows.values() if r["fate"] == "unparseable")
        report = {
            "kept": counts["kept"],
            "target_kept": cfg.target_kept,
            "candidates": sum(counts.values()),
            "fates": counts,
            "unparseable_reasons": dict(sorted(reasons.items())),
            "error_rows": self.ledger.error_rows,
            "torn_bytes_dropped": self.ledger.torn_bytes,
            "passages_drawn": passages,
            "seconds_this_run": round(seconds, 2),
            "requests_this_run": {
                "teacher": dict(getattr(self.teacher, "counters", {})),
                "checker": dict(getattr(self.checker, "counters", {}))
                if self.checker is not self.teacher
                else None,
            },
            "files": {
                "proposer": "proposer.jsonl",
                "solver": "solver.jsonl",
                "candidates": "candidates.jsonl",
            },
        }
        write_json_atomic(self.out / "report.json", report)
        write_text_atomic(self.out / "report.md", _report_md(report))
        return report


def _example(messages: list[dict], completion: str) -> dict:
    example = {"prompt": messages[-1]["content"], "completion": completion}
    if messages[0]["role"] == "system":
        example["system"] = messages[0]["content"]
    return example


def _jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def _report_md(report: dict) -> str:
    total = max(1, report["candidates"])
    lines = [
        "# Cold-start SFT data",
        "",
        f"Kept {report['kept']} of {report['candidates']} candidates (target {report['target_kept']}) "
        f"from {report['passages_drawn']} passages.",
        "",
        "| fate | candidates | share |",
        "|---|---:|---:|",
    ]
    lines += [f"| {fate} | {n} | {100 * n / total:.1f}% |" for fate, n in report["fates"].items()]
    if report["unparseable_reasons"]:
        lines += [
            "",
            "Unparseable: " + ", ".join(f"{k} {v}" for k, v in report["unparseable_reasons"].items()),
        ]
    lines += ["", f"Error rows written (retried on a rerun): {report['error_rows']}."]
    return "\n".join(lines) + "\n"
