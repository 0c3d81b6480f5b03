"""`pasodoble code-eval`: HumanEval or any code JSONL through the sandbox, pass@1 and pass@k.

    pasodoble code-eval --canonical --out runs/he-canonical        # every canonical solution must pass
    pasodoble code-eval --mutants --out runs/he-mutants            # every nudged solution must fail
    pasodoble code-eval --samples completions.jsonl --k 1,10 --out runs/he-model
    pasodoble code-eval --jsonl mine.jsonl --samples s.jsonl --out runs/mine
    pasodoble code-eval --model pkg:smollm2-135m-instruct --out runs/he-smollm2         # greedy pass@1
    pasodoble code-eval --model M --n 10 --temperature 0.8 --k 1,10 --engine vllm --out runs/he-m

`--samples` is a JSONL of {task_id, completion} rows (several per task for pass@k), as written by any generator;
a completion runs as the prompt continued, or as its fenced code block after the prompt. Writes DIR/checks.jsonl
(one verdict per sample) and DIR/results.json (pass@k, status counts, checks per second). `--model` generates the
completions itself (`model_eval.py`): DIR/samples.jsonl, results.json, results.md and run.json as `pasodoble eval`.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tqdm.auto import tqdm

from pasodoble.code.passk import mean_pass_at_k
from pasodoble.code.problems import (
    PROMPT_STYLES,
    CodeProblem,
    job_for,
    load_code_jsonl,
    load_humaneval,
    mutant,
    program_for,
)
from pasodoble.errors import UserError
from pasodoble.evals.engine import add_engine_arguments
from pasodoble.io import write_json_atomic
from pasodoble.jsonl import iter_jsonl, warn_skipped
from pasodoble.sandbox import SandboxConfig, check

SKIPPED_SHOWN = 20  # skip messages kept in results.json (all are counted)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "code-eval", help="run code problems (HumanEval, any JSONL) in the sandbox: pass@k"
    )
    src = p.add_argument_group("what to check (one of)")
    what = src.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--canonical", action="store_true", help="the set's canonical solutions (all must pass)"
    )
    what.add_argument(
        "--mutants", action="store_true", help="canonical solutions with nudged returns (must fail)"
    )
    what.add_argument("--samples", type=Path, help="JSONL of {task_id, completion} rows")
    what.add_argument(
        "--model", help="generate the completions with this model (folder, Hub id, tiny:/pkg: spec)"
    )
    p.add_argument("--benchmarks", default="humaneval", choices=["humaneval"], help="the built-in set")
    p.add_argument(
        "--jsonl", type=Path, help="a JSONL of {prompt, tests, entry_point} rows instead of --benchmarks"
    )
    p.add_argument("--limit", type=int, help="only the first N problems")
    p.add_argument("--k", default="1", help="comma-separated k values for pass@k")
    p.add_argument("--workers", type=int, default=2, help="checks run at once")
    p.add_argument("--timeout-s", type=float, default=10.0, help="wall clock of one check")
    p.add_argument("--out", type=Path, required=True, help="folder for checks.jsonl and results.json")
    g = p.add_argument_group("generation (--model; the run resumes when repeated with the same --out)")
    g.add_argument("--n", type=int, default=1, help="samples per problem (default: %(default)s)")
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default: %(default)s)")
    g.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (default: %(default)s)")
    g.add_argument("--max-new-tokens", type=int, default=512, help="completion budget (default: %(default)s)")
    g.add_argument("--seed", type=int, default=0, help="base sampling seed (default: %(default)s)")
    g.add_argument(
        "--prompt-style",
        choices=PROMPT_STYLES,
        default="raw",
        help="raw: the prompt continued, cut at a new top-level statement; chat: the chat template, the answer's "
        "fenced block; chat-prefix: the chat template, the answer begun with the prompt's code and continued "
        "(docs/SANDBOX.md) (default: %(default)s)",
    )
    g.add_argument(
        "--chunk-size", type=int, default=64, help="problems per engine call (default: %(default)s)"
    )
    g.add_argument("--label", help="row name in tables (default: from the model)")
    g.add_argument("--overwrite", action="store_true", help="discard an existing run in --out")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_engine_arguments(p.add_argument_group("engine (--model; the roles' engines)"))
    p.set_defaults(func=run_code_eval, distributed_timeout_s=3600.0)  # one process; the engine checks read it


def _ks(text: str) -> list[int]:
    try:
        ks = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        ks = []
    if not ks or ks[0] < 1:
        raise UserError(f"--k {text!r}: give positive integers separated by commas, e.g. 1,10")
    return ks


def _samples(path: Path, problems: dict[str, CodeProblem]) -> tuple[list[tuple[str, str]], list[str]]:
    """(task id, program) per good row, and one `path:N: why; line skipped` per bad one (split on "\n" only, so a
    raw U+2028 inside a completion stays in its row)."""
    if not path.is_file():
        raise UserError(f"--samples: {path} not found; give a JSONL of {{task_id, completion}} rows")
    rows, skipped = [], []
    for number, row, problem in iter_jsonl(path):
        if problem is None and not isinstance(row, dict):
            problem = "not a JSON object"
        elif problem is None and row.get("task_id") not in problems:
            problem = f"task_id {str(row.get('task_id'))[:80]!r} is not a problem of the set"
        elif problem is None and not isinstance(row.get("completion"), str):
            problem = "completion is not a string"
        if problem is None:
            rows.append((row["task_id"], program_for(problems[row["task_id"]], row["completion"])))
        else:
            skipped.append(f"{path}:{number}: {problem}; line skipped")
    return rows, skipped


def _programs(args, problems: list[CodeProblem]) -> tuple[list[tuple[str, str]], list[str]]:
    if args.samples is not None:
        return _samples(args.samples, {p.task_id: p for p in problems})
    with_solution = [p for p in problems if p.canonical_solution is not None]
    if not with_solution:
        raise UserError("--canonical/--mutants: the set has no canonical_solution fields")
    make = mutant if args.mutants else (lambda p: p.prompt + p.canonical_solution)
    without = [
        f"{p.task_id}: no canonical_solution; skipped" for p in problems if p.canonical_solution is None
    ]
    return [(p.task_id, make(p)) for p in with_solution], without


def run_code_eval(args) -> int:
    ks = _ks(args.k)
    if args.workers < 1 or args.timeout_s <= 0:
        raise UserError("--workers must be >= 1 and --timeout-s > 0")
    if args.model is not None:
        from pasodoble.code import model_eval  # without torch: it loads after these checks

        settings = model_eval.check_model_flags(args, ks)
    skipped_rows: list[str] = []
    if args.jsonl is not None:
        problems, skipped_rows = load_code_jsonl(args.jsonl)
    else:
        problems = load_humaneval()
    problems = problems[: args.limit] if args.limit else problems
    if args.model is not None:
        warn_skipped(skipped_rows)
        source = args.jsonl.stem if args.jsonl is not None else args.benchmarks
        return model_eval.run_model_eval(args, problems, source, ks, settings)
    by_id = {p.task_id: p for p in problems}
    programs, skipped = _programs(args, problems)
    skipped = skipped_rows + skipped
    warn_skipped(skipped)
    config = SandboxConfig(timeout_s=args.timeout_s)
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with (
        ThreadPoolExecutor(args.workers) as pool,
        open(args.out / "checks.jsonl", "w", encoding="utf-8") as out,
    ):
        verdicts = pool.map(lambda tp: check(job_for(by_id[tp[0]], tp[1]), config), programs)
        counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        statuses: Counter = Counter()
        for (task_id, _), v in tqdm(
            zip(programs, verdicts), total=len(programs), desc="checks", unit="check"
        ):
            counts[task_id][0] += 1
            counts[task_id][1] += v.passed
            statuses[v.status] += 1
            out.write(json.dumps({"task_id": task_id, "status": v.status, "detail": v.detail}) + "\n")
    seconds = time.monotonic() - start
    results = {
        "problems": len(counts),
        "checks": len(programs),
        "statuses": dict(statuses),
        "pass_at_k": {f"pass@{k}": mean_pass_at_k(counts.values(), k) for k in ks},
        "skipped_rows": len(skipped),  # beside pass@k: rows that were not checked, so not in it
        "skipped": skipped[:SKIPPED_SHOWN],
        "seconds": round(seconds, 2),
        "checks_per_s": round(len(programs) / seconds, 2) if seconds > 0 else None,
        "workers": args.workers,
    }
    write_json_atomic(args.out / "results.json", results)
    print(json.dumps(results, indent=2))
    return 0
