import gzip
import json

import pytest

from pasodoble.code.problems import CodeProblem, job_for, load_code_jsonl, mutant, parse_rows, program_for
from pasodoble.errors import UserError

PROBLEM = CodeProblem(
    "t/0",
    'def add(a, b):\n    """Sum."""\n',
    "def check(candidate):\n    assert candidate(1, 2) == 3\n",
    "add",
    "    return a + b\n",
)


def test_rows_with_a_missing_field_are_counted_not_fatal():
    lines = [
        json.dumps({"prompt": "def f():\n", "tests": "assert candidate() == 1", "entry_point": "f"}),
        json.dumps(
            {"prompt": "def g():\n", "test": "def check(c): pass", "entry_point": "g", "task_id": "x/1"}
        ),
        json.dumps({"prompt": "def h():\n", "entry_point": "h"}),
        json.dumps({"prompt": "p", "tests": "t", "entry_point": "not an identifier"}),
        "not json",
        "",
    ]
    problems, skipped = parse_rows(lines, "mine")
    assert [p.task_id for p in problems] == ["mine/1", "x/1"]
    assert [m.split(":")[:2] for m in skipped] == [["mine", "3"], ["mine", "4"], ["mine", "5"]]
    assert "not valid JSON" in skipped[2]


def test_a_file_without_usable_rows_is_one_clear_error(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": 1}\n')
    with pytest.raises(UserError, match="no usable rows"):
        load_code_jsonl(path)
    with pytest.raises(UserError, match="--jsonl"):
        load_code_jsonl(tmp_path / "missing.jsonl")


def test_completion_continues_the_prompt_or_its_fenced_block_replaces_the_stub():
    assert program_for(PROBLEM, "    return a + b\n") == PROBLEM.prompt + "    return a + b\n"
    chat = "Here you go:\n```python\ndef add(a, b):\n    return a + b\n```\nDone."
    program = program_for(PROBLEM, chat)
    assert program.startswith(PROBLEM.prompt) and program.endswith("def add(a, b):\n    return a + b\n")
    compile(program, "<p>", "exec")  # parsed only, never run here


def test_the_job_keeps_tests_and_prompt_out_of_the_program():
    job = job_for(PROBLEM, PROBLEM.prompt + PROBLEM.canonical_solution)
    assert job.tests == PROBLEM.tests and job.context == PROBLEM.prompt and job.entry_point == "add"
    assert "check" not in job.program
    compile(mutant(PROBLEM), "<m>", "exec")


def test_humaneval_wheel_data_is_read_as_gzip_jsonl(tmp_path):
    path = tmp_path / "h.jsonl.gz"
    row = {
        "task_id": "HumanEval/0",
        "prompt": "def f():\n",
        "test": "def check(c):\n    pass\n",
        "entry_point": "f",
    }
    with gzip.open(path, "wt") as f:
        f.write(json.dumps(row) + "\n")
    with gzip.open(path, "rb") as f:
        problems, skipped = parse_rows(f, "humaneval")
    assert problems[0].task_id == "HumanEval/0" and skipped == []


def test_a_bad_byte_and_a_raw_line_separator_cost_one_row_by_line_number(tmp_path):
    """Split on "\\n" only: U+2028 inside a JSON string stays in its row; a byte that is not UTF-8 skips its row."""
    good = {
        "prompt": "def f():\n    '''a\u2028b'''\n",
        "tests": "assert candidate() == 1",
        "entry_point": "f",
    }
    path = tmp_path / "mine.jsonl"
    path.write_bytes(
        json.dumps(good, ensure_ascii=False).encode()
        + b"\n"
        + b'{"prompt": "\xff"}\n'
        + json.dumps(good).encode()
    )
    problems, skipped = load_code_jsonl(path)
    assert [p.prompt for p in problems] == [good["prompt"]] * 2
    assert skipped == [f"{path}:2: not UTF-8 (byte 0xff at byte 13); line skipped"]
