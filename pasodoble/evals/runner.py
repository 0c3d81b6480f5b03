"""`evaluate`: generate k answers per problem with any rollout engine, grade them, score them, stream them to disk.

Why: the evaluation must be reproducible from what is recorded (template, sampling, seed) and must survive being
killed. The prompt is rendered from one template (`{question}` placeholder, substituted literally so LaTeX braces
in the template stay as written), optionally wrapped in the tokenizer's chat template, and tokenized once.

Problems are generated in fixed chunks of `chunk_size` (fixed by position in the problem list, not by what is
left to do), each with the seed `seed * 1_000_003 + index of its first problem`. On resume a chunk with any
unfinished problem is regenerated whole and only its unfinished problems are written: the batch, and so the
sampled text, is then the same as in an uninterrupted run (exactly so for the Hugging Face engine on one device).
Within a chunk, the engine reports each sequence as it finishes (`on_progress`: the progress bar counts samples,
0 to N) and each finished batch of sequences (`on_batch`): a problem is graded and saved as soon as its k samples
are in, so a run killed mid-chunk keeps every problem it finished.

Run: see `pasodoble.evals.cli` (`pasodoble eval ...`), or call `evaluate(engine, tokenizer, problems, settings,
grader, samples_path=...)` from Python (the dual-play loop does, via `pasodoble.evals.periodic`).
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pasodoble.errors import ConfigError
from pasodoble.evals.metrics import add_qa_scores, average_sources, score_source
from pasodoble.evals.problems import Problem
from pasodoble.evals.samples import Key, ResumeState, load_resume_state, row_key
from pasodoble.evals.settings import DEFAULT_TEMPLATE as DEFAULT_TEMPLATE  # re-exported: read without torch
from pasodoble.evals.settings import EvalSettings
from pasodoble.evals.settings import settings_dict as settings_dict
from pasodoble.io import append_jsonl
from pasodoble.progress import progress_bar
from pasodoble.scale.collectives import SingleProcess, share


@dataclass
class EvalReport:
    """Scores of one evaluation (see `metrics.py` for the definitions)."""

    per_source: dict[str, dict[str, float]]  # source -> {"avg@k", "pass@k", "maj@k", "ci95", "n", "k"}
    average: dict[str, float]  # unweighted mean over sources (the paper's AVG column)
    counters: dict[str, int] = field(default_factory=dict)  # grader counters + eval/* bookkeeping
    seconds: float = 0.0  # wall time of this call (generation + grading)
    samples_generated: int = 0  # samples produced by this call (not read back from a previous run)

    def to_metrics(self, prefix: str = "eval") -> dict[str, float]:
        """Flat `prefix/source/name` metrics for a tracker, plus `prefix/average/name` (no prefix when empty)."""
        head = f"{prefix}/" if prefix else ""
        out: dict[str, float] = {}
        for source, scores in {**self.per_source, "average": self.average}.items():
            for name in ("avg@k", "pass@k", "maj@k", "ci95", "em", "f1"):
                if name in scores:
                    out[f"{head}{source}/{name}"] = float(scores[name])
        return out


def render_prompt(question: str, settings: EvalSettings, tokenizer) -> tuple[str, list[int], bool]:
    """(prompt text, prompt ids, truncated?) for one question; the text is what the ids say."""
    user = settings.prompt_template.replace("{question}", question)
    if settings.use_chat_template:
        messages = [{"role": "system", "content": settings.system_prompt}] if settings.system_prompt else []
        messages.append({"role": "user", "content": user})
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    else:
        text = f"{settings.system_prompt}\n\n{user}" if settings.system_prompt else user
        ids = tokenizer(text)["input_ids"]
    limit = settings.max_prompt_length
    if limit is not None and len(ids) > limit:
        ids = ids[-limit:]  # the end holds the instruction and the assistant header
        return tokenizer.decode(ids), ids, True
    return text, ids, False


def context_length(model_config) -> int | None:
    """Longest sequence (prompt + completion) the model's positions allow, if its config says."""
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(model_config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def completion_budget(context: int, longest_prompt: int) -> int:
    """The default `max_new_tokens`: what the context leaves after the longest prompt."""
    if longest_prompt >= context:
        raise ConfigError(
            "max_new_tokens",
            f"the longest prompt takes {longest_prompt} tokens, the model's whole context ({context}); "
            "pass --max-prompt-length to cut prompts, or a model with a longer context",
        )
    return context - longest_prompt


def _grade(
    grader, problems: Sequence[Problem], texts: list[list[str]], counters: Counter
) -> list[list[dict]]:
    """Per problem, per sample: {"extracted", "correct", "status"}; correct if any accepted gold matches."""
    width = max(len(p.answers) for p in problems)
    flat_responses = [t for texts_i in texts for t in texts_i]
    verdicts_by_alt = []
    for alt in range(width):
        golds = [p.answers[min(alt, len(p.answers) - 1)] for p, ts in zip(problems, texts) for _ in ts]
        batch = grader.grade(golds, flat_responses, extract=True)
        counters.update({f"grader/{name}": count for name, count in batch.counters.items()})
        verdicts_by_alt.append(batch.verdicts)
    graded, flat = [], 0
    for texts_i in texts:
        rows = []
        for _ in texts_i:
            verdicts = [v[flat] for v in verdicts_by_alt]
            best = next((v for v in verdicts if v.correct), verdicts[0])
            row = {"extracted": best.extracted, "correct": bool(best.correct), "status": best.status}
            f1s = [v.f1 for v in verdicts if v.f1 is not None]  # QA grading: the best token F1 over golds
            rows.append(row | {"f1": max(f1s)} if f1s else row)
            flat += 1
        graded.append(rows)
    return graded


def _sample_rows(problem: Problem, index: int, prompt: str, completions, graded: list[dict]) -> list[dict]:
    return [
        {
            "source": problem.source,
            "id": problem.id,
            "index": index,
            "sample": j,
            "gold": list(problem.answers),
            "prompt": prompt,
            "response": c.text,
            "finish_reason": c.finish_reason,
            "num_tokens": len(c.token_ids),
            **g,
        }
        for j, (c, g) in enumerate(zip(completions, graded))
    ]


def score_rows(problems: Sequence[Problem], rows_by_key: dict[Key, list[dict]], k: int) -> EvalReport:
    """EvalReport of the given problems from their sample rows (rows of other problems are ignored)."""
    per_source: dict[str, list] = defaultdict(list)
    for p in problems:
        rows = rows_by_key[(p.source, p.id)]
        per_source[p.source].append(([bool(r["correct"]) for r in rows], [r["extracted"] for r in rows]))
    scores = {source: score_source(samples, k) for source, samples in per_source.items()}
    add_qa_scores(scores, problems, rows_by_key)
    return EvalReport(per_source=scores, average=average_sources(scores))


def _run_chunk(engine, tokenizer, chunk, start, todo, settings, grader, counters, emit) -> None:
    """Generate the whole chunk (same batch and seed as an uninterrupted run); `emit(rows, new_samples)` gets each
    `todo` problem's rows as soon as its k samples are ready (`new_samples` also counts those of unfinished ones)."""
    from pasodoble.rollout import SamplingParams

    rendered = [render_prompt(p.question, settings, tokenizer) for p in chunk]
    counters["eval/prompts_truncated"] += sum(r[2] for r in rendered)
    k = settings.num_samples
    sampling = SamplingParams(
        n=k,
        temperature=settings.temperature,
        top_p=settings.top_p,
        top_k=settings.top_k,
        min_p=settings.min_p,
        max_new_tokens=settings.max_new_tokens,
        seed=settings.seed * 1_000_003 + start,
    )
    pending: dict[int, list] = {i: [None] * k for i in todo}  # chunk position -> its completions so far
    shown = [0]  # samples the progress bar was told of by on_progress since the last batch

    def progress(count: int) -> None:  # sequences finished inside a batch: move the bar before it returns
        shown[0] += count
        emit([], count)

    def take(first: int, completions: list) -> None:
        new = 0
        for offset, completion in enumerate(completions):
            i, j = divmod(first + offset, k)
            if i in pending and pending[i][j] is None:
                pending[i][j] = completion
                new += 1
        new, shown[0] = max(0, new - shown[0]), 0  # what on_progress already counted is not counted twice
        ready = [i for i in pending if all(c is not None for c in pending[i])]
        if not ready:
            emit([], new)
            return
        graded = _grade(
            grader, [chunk[i] for i in ready], [[c.text for c in pending[i]] for i in ready], counters
        )
        rows = [
            _sample_rows(chunk[i], start + i, rendered[i][0], pending.pop(i), g)
            for i, g in zip(ready, graded)
        ]
        emit(rows, new)

    whole = len(todo) == len(chunk)  # a resumed chunk regenerates finished problems: count per batch only
    out = engine.generate(
        [r[1] for r in rendered], sampling, on_batch=take, on_progress=progress if whole else None
    )
    if pending:  # an engine that returned without reporting every batch
        for position, completions in enumerate(out):
            take(position * k, completions)


def evaluate(
    engine,
    tokenizer,
    problems: Sequence[Problem],
    settings: EvalSettings,
    grader,
    *,
    samples_path: Path | None = None,
    progress: bool = True,
    collective=None,
) -> EvalReport | None:
    """Generate, grade and score `settings.num_samples` answers per problem (see module docstring).

    With a `collective` of several ranks (`pasodoble.scale.collectives`), each rank generates its share of the chunks
    left to do; rank 0 alone reads and writes `samples_path` and returns the report (the other ranks: None)."""
    settings.validate()
    keys = [(p.source, p.id) for p in problems]
    if len(set(keys)) != len(keys):
        raise ConfigError(
            "problems", "two problems share the same (source, id); ids must be unique per source"
        )
    collective = collective or SingleProcess()
    lead = collective.rank == 0
    k, started = settings.num_samples, time.perf_counter()
    state = load_resume_state(Path(samples_path), k) if samples_path and lead else ResumeState()
    done: dict[Key, list[dict]] = dict(state.finished)
    finished = set(collective.broadcast(sorted(done), "finished problems"))
    resumed = sum(key in finished for key in keys)
    counters: Counter = Counter(
        {
            "eval/resumed_problems": resumed if lead else 0,  # summed over ranks at the end
            "eval/torn_lines": state.torn_lines,
            "eval/partial_rows_dropped": state.partial_rows,
            "eval/prompts_truncated": 0,
        }
    )
    bar = progress_bar(
        total=len(keys) * k, initial=resumed * k, unit="sample", disable=not (progress and lead), desc="eval"
    )
    size = settings.chunk_size
    starts = [
        s for s in range(0, len(problems), size) if any(key not in finished for key in keys[s : s + size])
    ]
    mine = [starts[i] for i in share(len(starts), collective.world_size, collective.rank)]
    generated, outbox = 0, []  # outbox: finished problems' rows waiting for the next gather (ranks > 0)

    def keep(rows: list[dict]) -> None:
        if samples_path:
            append_jsonl(samples_path, rows)  # one problem's k rows in one fsynced write
        done[row_key(rows[0])] = rows

    def emit(finished_rows: list[list[dict]], new_samples: int) -> None:
        nonlocal generated
        for rows in finished_rows:
            keep(rows) if lead else outbox.append(rows)
            generated += k
        bar.update(new_samples)

    for round_ in range(len(share(len(starts), collective.world_size, 0))):  # the largest share
        if round_ < len(mine):
            start = mine[round_]
            chunk = list(problems[start : start + size])
            todo = [i for i, p in enumerate(chunk) if (p.source, p.id) not in finished]
            _run_chunk(engine, tokenizer, chunk, start, todo, settings, grader, counters, emit)
        if collective.world_size > 1:  # rank 0 writes what the others finished in this round
            gathered = collective.all_gather(outbox, f"eval samples of round {round_ + 1}")
            outbox = []
            for rows in (r for rank_rows in gathered[1:] for r in rank_rows) if lead else ():
                keep(rows)
                bar.update(k)
    bar.close()
    totals = collective.all_gather((dict(counters), generated), "eval counters")
    if not lead:
        return None
    report = score_rows(problems, done, k)
    report.counters = dict(sum((Counter(c) for c, _ in totals), Counter()))
    report.seconds = time.perf_counter() - started
    report.samples_generated = sum(n for _, n in totals)
    return report
