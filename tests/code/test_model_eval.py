"""`pasodoble code-eval --model`: stop-string cuts, chat answers, sandbox verdicts, and a resumable run of a real
(random, from `from_pretrained`) model through the HF engine."""

import json

import pytest

from pasodoble.cli import main
from pasodoble.code.model_eval import (
    RAW_STOPS,
    CodeGrader,
    completion_program,
    cut_at_stops,
    pass_at_ks,
    style_question,
)
from pasodoble.code.problems import CodeProblem
from pasodoble.sandbox import STATUSES, SandboxConfig
from tests.code.test_code_eval_cli import ROWS

ADD = CodeProblem(ROWS[0]["task_id"], ROWS[0]["prompt"], ROWS[0]["tests"], ROWS[0]["entry_point"])


@pytest.fixture
def problems(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path


def test_raw_completions_are_cut_at_the_first_new_top_level_statement():
    body = "    return a + b\n"
    assert cut_at_stops(body + "\ndef test():\n    pass\n", RAW_STOPS) == body
    assert cut_at_stops(body + "\nif __name__ == '__main__':\n", RAW_STOPS) == body
    assert cut_at_stops(body + "print(add(1, 2))", RAW_STOPS) == body[:-1]
    assert cut_at_stops(body + "    def inner():\n", RAW_STOPS) == body + "    def inner():\n"  # nested: kept
    assert cut_at_stops(body + "\n```\nExplanation", RAW_STOPS) == body
    head = ADD.prompt.rstrip()  # the model writes the body's line break itself
    assert completion_program(ADD, "\n" + body + "print(add(1, 2))\n", "raw") == head + "\n" + body[:-1]
    assert completion_program(ADD, "\n```\nThis function adds.", "raw") == head  # a closed block: no body


def test_chat_answers_run_their_fenced_block_after_the_prompt():
    answer = "Sure!\n```python\ndef add(a, b):\n    return a + b\n```\nThis adds. \ndef other(): pass"
    program = completion_program(ADD, answer, "chat")
    assert program.startswith(ADD.prompt) and program.endswith("def add(a, b):\n    return a + b\n")
    assert completion_program(ADD, "    return a + b", "chat") == ADD.prompt + "    return a + b"


def test_chat_prefix_begins_the_assistants_answer_with_the_prompts_code(tiny_lm):
    tokenizer = tiny_lm[1]
    question = style_question("chat-prefix", ADD.prompt, tokenizer)
    turn = "<|im_start|>user\nComplete the following Python function.\n\n```python\n" + ADD.prompt + "```"
    head = ADD.prompt.rstrip()
    assert question.startswith(turn) and question.endswith("<|im_start|>assistant\n```python\n" + head)
    assert style_question("raw", ADD.prompt, tokenizer) == head
    body = "\n    return a + b\n```\nThis adds."
    assert completion_program(ADD, body, "chat-prefix") == head + "\n    return a + b"


def test_pass_at_k_over_sample_rows():
    rows = [[{"correct": True}, {"correct": False}], [{"correct": False}, {"correct": False}]]
    assert pass_at_ks(rows, [1, 2]) == {"pass@1": 0.25, "pass@2": 0.5}
    assert pass_at_ks(rows, [3]) == {"pass@3": None}


@pytest.mark.sandbox
def test_code_grader_gives_the_sandboxs_verdicts():
    grader = CodeGrader([ADD], "raw", SandboxConfig(), workers=2)
    responses = ["\n    return a + b\ndef junk(:\n", "\n    return a - b\n", "\n    return (\n"]
    batch = grader.grade([ADD.task_id] * 3, responses)
    assert [(v.correct, v.status) for v in batch.verdicts] == [
        (True, "passed"),
        (False, "failed"),
        (False, "error"),
    ]
    assert batch.verdicts[0].extracted == "\n    return a + b"  # what ran after the prompt
    assert batch.counters["checks"] == 3 and batch.counters["status/passed"] == 1


@pytest.mark.sandbox
def test_model_run_writes_samples_and_resumes_without_regenerating(problems, tiny_lm, tmp_path, capsys):
    _, _, path = tiny_lm
    out = tmp_path / "run"
    args = ["code-eval", "--jsonl", str(problems), "--model", str(path), "--out", str(out), "--no-progress"]
    args += ["--n", "2", "--temperature", "1.0", "--k", "1,2", "--max-new-tokens", "12", "--device", "cpu"]
    assert main(args) == 0
    results = json.loads((out / "results.json").read_text())
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and {r["id"] for r in rows} == {"mine/add", "mine/evens"}
    assert all(r["status"] in STATUSES and r["num_tokens"] <= 12 for r in rows)
    assert set(results["pass_at_k"]) == {"pass@1", "pass@2"} and results["engine"] == "hf"
    assert results["samples_generated"] == 4 and sum(results["statuses"].values()) == 4
    assert results["stop"] == list(RAW_STOPS) and (out / "results.md").is_file()
    assert main(args) == 0  # the same command again: every problem is finished, nothing is generated
    again = json.loads((out / "results.json").read_text())
    assert again["samples_generated"] == 0 and again["pass_at_k"] == results["pass_at_k"]
    assert len((out / "samples.jsonl").read_text().splitlines()) == 4
    capsys.readouterr()
    assert main([*args, "--prompt-style", "chat"]) == 2  # another run in the same --out
    assert "differs in" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["--k", "1,10"], "--k"),
        (["--n", "2"], "--n 2 at --temperature 0"),
        (["--n", "0"], "--n"),
        (["--max-new-tokens", "0"], "--max-new-tokens"),
    ],
)
def test_bad_generation_flags_are_one_line_naming_the_flag(problems, tmp_path, capsys, extra, flag):
    args = ["code-eval", "--jsonl", str(problems), "--model", "tiny:solver", "--out", str(tmp_path / "o")]
    assert main([*args, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert flag in err and "\n" not in err
