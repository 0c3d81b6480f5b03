"""`pasodoble eval` / `eval-table` in-process, and once as a subprocess that is killed and resumed."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pasodoble.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def own_set(tmp_path):
    """A set with its own field names, as a new user would bring it."""
    rows = [
        {
            "Body": f"Tom has {i} pens.",
            "Ask": "How many pens?",
            "Sol": f"He has \\boxed{{{i}}}",
            "uid": f"p{i}",
        }
        for i in range(4)
    ]
    path = tmp_path / "pens.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _eval_args(model_path, data, out, *extra):
    return [
        "eval",
        "--model",
        str(model_path),
        "--dataset",
        str(data),
        "--question-template",
        "{Body} {Ask}",
        "--answer-field",
        "Sol",
        "--id-field",
        "uid",
        "--max-new-tokens",
        "4",
        "--out",
        str(out),
        "--no-progress",
        *extra,
    ]


def test_eval_with_flags_alone_writes_samples_results_and_table(tiny_lm, own_set, tmp_path, capsys):
    out = tmp_path / "run"
    sampled = ("--num-samples", "2", "--temperature", "0.7", "--label", "tiny")
    assert main(_eval_args(tiny_lm[2], own_set, out, *sampled)) == 0
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and {r["id"] for r in rows} == {"p0", "p1", "p2", "p3"}
    assert rows[0]["gold"] == ["0"] and "Tom has 0 pens. How many pens?" in rows[0]["prompt"]
    result = json.loads((out / "results.json").read_text())
    assert result["settings"]["temperature"] == 0.7 and result["per_source"]["pens"]["n"] == 4
    assert "| Model | pens | AVG |" in capsys.readouterr().out
    assert "| tiny |" in (out / "results.md").read_text()
    # the same command again resumes (nothing to do); a different one on the same directory is refused
    assert main(_eval_args(tiny_lm[2], own_set, out, *sampled)) == 0
    assert len((out / "samples.jsonl").read_text().splitlines()) == 8
    assert main(_eval_args(tiny_lm[2], own_set, out, "--num-samples", "3")) == 2
    assert "holds a different run (differs in: settings)" in capsys.readouterr().err
    other = tmp_path / "run2"
    assert main(_eval_args(tiny_lm[2], own_set, other, "--label", "greedy")) == 0
    capsys.readouterr()
    assert main(["eval-table", str(out), str(other), "--out", str(tmp_path / "t.md")]) == 0
    table = (tmp_path / "t.md").read_text()
    assert "| tiny |" in table and "| greedy |" in table and "Settings differ between runs" in table
    own_set.write_text(own_set.read_text().replace("Tom has 3 pens.", "Tom has 30 pens."))  # edited data
    assert main(_eval_args(tiny_lm[2], own_set, out, *sampled)) == 2
    assert "differs in: problems_sha256" in capsys.readouterr().err


def test_user_mistakes_are_one_line_errors(tiny_lm, own_set, tmp_path, capsys):
    assert main(_eval_args(tiny_lm[2], own_set, tmp_path / "x", "--answer-field", "Answer")) == 2
    assert "field(s) 'Answer' not in the data; available: Ask, Body, Sol, uid" in capsys.readouterr().err
    assert (
        main(["eval", "--model", str(tiny_lm[2]), "--benchmarks", "aime2099", "--out", str(tmp_path / "y")])
        == 2
    )
    assert "--benchmarks: unknown aime2099" in capsys.readouterr().err
    assert (
        main(
            [
                "eval",
                "--model",
                str(tmp_path / "nomodel"),
                "--dataset",
                str(own_set),
                "--out",
                str(tmp_path / "z"),
                "--question-template",
                "{Body}",
                "--answer-field",
                "Sol",
            ]
        )
        == 2
    )
    assert "--model: " in (err := capsys.readouterr().err) and "nomodel does not exist" in err


def test_subprocess_reports_a_user_error_in_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "pasodoble", "eval-table", str(tmp_path / "missing")],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,  # a hang guard: importing torch took 58 s on a loaded 2-core machine
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"pasodoble eval-table: error: {tmp_path / 'missing' / 'results.json'}: not found; "
        "pass directories written by 'pasodoble eval --out DIR'"
    ]


@pytest.mark.slow  # two interpreter starts with torch + transformers: ~30 s on 2 busy cores
def test_killed_subprocess_resumes_without_duplicates_or_losses(tiny_lm, tmp_path):
    data = tmp_path / "many.jsonl"
    data.write_text("".join(json.dumps({"q": f"{i}+1?", "a": i + 1}) + "\n" for i in range(12)))
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "pasodoble",
        "eval",
        "--model",
        str(tiny_lm[2]),
        "--dataset",
        str(data),
        "--question-field",
        "q",
        "--answer-field",
        "a",
        "--num-samples",
        "2",
        "--temperature",
        "1.0",
        "--max-new-tokens",
        "24",
        "--chunk-size",
        "2",
        "--out",
        str(out),
        "--no-progress",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    samples, deadline = out / "samples.jsonl", time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if samples.exists() and len(samples.read_text().splitlines()) >= 4:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.05)
    proc.wait()
    killed_at = len(samples.read_text().splitlines())
    assert killed_at < 24, "the run finished before it could be killed; make it longer"
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    keys = [(r["id"], r["sample"]) for r in rows]
    assert len(keys) == len(set(keys)) == 24
    assert json.loads((out / "results.json").read_text())["per_source"]["many"]["n"] == 12


def test_top_k_and_min_p_flags_are_off_by_default_and_recorded(tiny_lm, own_set, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--top-k TOP_K" in help_text and "0 = off (default: 0)" in help_text
    assert "--min-p MIN_P" in help_text and "0 = off (default: 0.0)" in help_text
    out = tmp_path / "run"
    flags = ("--num-samples", "2", "--temperature", "0.7", "--top-k", "3", "--min-p", "0.1")
    assert main(_eval_args(tiny_lm[2], own_set, out, *flags)) == 0
    settings = json.loads((out / "results.json").read_text())["settings"]
    assert (settings["top_k"], settings["min_p"]) == (3, 0.1)
    assert "top_k=3, min_p=0.1" in (out / "results.md").read_text()
    assert main(_eval_args(tiny_lm[2], own_set, tmp_path / "bad", "--min-p", "1.5")) == 2
    assert "min_p" in capsys.readouterr().err


@pytest.fixture()
def short_context_model(tiny_lm, tmp_path):
    """The tiny model with an 80-token context, so the default completion budget is small and checkable."""
    import shutil

    path = tmp_path / "short"
    shutil.copytree(tiny_lm[2], path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 80}))
    return path


def test_max_new_tokens_defaults_to_the_context_left_after_the_longest_prompt(
    short_context_model, own_set, tmp_path, capsys
):
    from transformers import AutoTokenizer

    from pasodoble.evals.runner import EvalSettings, render_prompt

    out = tmp_path / "run"
    args = _eval_args(short_context_model, own_set, out, "--prompt-template", "{question}")
    args.remove("--max-new-tokens"), args.remove("4")
    assert main(args) == 0
    tok = AutoTokenizer.from_pretrained(short_context_model)
    questions = [f"Tom has {i} pens. How many pens?" for i in range(4)]
    longest = max(
        len(render_prompt(q, EvalSettings(prompt_template="{question}"), tok)[1]) for q in questions
    )
    result = json.loads((out / "results.json").read_text())
    assert result["settings"]["max_new_tokens"] == 80 - longest
    printed = capsys.readouterr().out
    assert (
        f"max_new_tokens: {80 - longest} (the model's context of 80 tokens minus the longest prompt"
        in printed
    )
    assert f"evaluating {short_context_model} -> {out}" in printed and f"eval-table {out}" in printed
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert all(r["num_tokens"] <= 80 - longest for r in rows)
    assert main(args) == 0  # the same command resumes: the budget chosen again is part of the same run


def test_a_run_json_left_by_a_run_that_saved_nothing_does_not_block_the_retry(tiny_lm, own_set, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"model": "wrong/model", "settings": {"max_new_tokens": 2048}}))
    assert main(_eval_args(tiny_lm[2], own_set, out)) == 0
    assert json.loads((out / "run.json").read_text())["model"] == str(tiny_lm[2])


def test_tiny_model_specs_resolve_through_the_cache_and_label_rows(tiny_lm, own_set, tmp_path, monkeypatch):
    import pasodoble.sft.tiny as cache

    asked = []
    monkeypatch.setattr(cache, "resolve_model", lambda spec: asked.append(spec) or str(tiny_lm[2]))
    out = tmp_path / "run"
    args = _eval_args(tiny_lm[2], own_set, out)
    args[args.index("--model") + 1] = "tiny:solver"
    assert main(args) == 0
    result = json.loads((out / "results.json").read_text())
    assert asked == ["tiny:solver"] and result["model"] == "tiny:solver" and result["label"] == "tiny:solver"


def test_eval_table_never_prints_two_rows_with_one_label(tiny_lm, own_set, tmp_path, capsys):
    for name in ("a", "b"):
        assert main(_eval_args(tiny_lm[2], own_set, tmp_path / name, "--label", "same")) == 0
    capsys.readouterr()
    assert main(["eval-table", str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "a")]) == 0
    scores, changes = capsys.readouterr().out.split("\n\n", 1)
    rows = [line.split("|")[1].strip() for line in scores.splitlines() if line.startswith("| ")]
    assert rows[1:] == ["same (a) #1", "same (b)", "same (a) #2"]
    # the same model and settings twice: every problem's score is unchanged, so the paired change is exactly 0
    change = [line for line in changes.splitlines() if line.startswith("| same (b)")]
    assert change and "+0.0 [+0.0, +0.0] within noise" in change[0]


def test_default_labels_tell_checkpoints_apart():
    from pasodoble.evals.cli import default_label

    assert default_label("runs/tour/checkpoints/step-40/solver/model") == "tour/step-40/solver"
    assert default_label("runs/other/checkpoints/step-40/solver/model/") == "other/step-40/solver"
    assert default_label("Qwen/Qwen3-1.7B-Base") == "Qwen3-1.7B-Base"
    assert default_label("tiny:solver") == "tiny:solver"


def test_help_shows_every_default():
    import argparse

    from pasodoble.cli import build_parser

    def parsers(parser):
        yield parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    yield from parsers(sub)

    for parser in parsers(build_parser()):
        text = " ".join(parser.format_help().split())
        for action in parser._actions:
            if not action.option_strings or isinstance(
                action, (argparse._HelpAction, argparse._VersionAction)
            ):
                continue
            assert action.help, f"{parser.prog} {action.option_strings[0]}: no help text"
            if action.default is not None and action.default is not False:
                shown = " ".join(str(action.default).split())
                assert "default" in action.help or f"(default: {shown})" in text, (parser.prog, action.dest)


def test_ctrl_c_keeps_finished_samples_and_says_how_to_resume(
    tiny_lm, own_set, tmp_path, monkeypatch, capsys
):
    import pasodoble.evals.runner as runner  # `pasodoble eval` imports `evaluate` from it once the flags are checked

    def interrupted(*args, samples_path, **kwargs):
        samples_path.write_text('{"source": "pens", "id": "p0", "sample": 0}\n')
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "evaluate", interrupted)
    out = tmp_path / "run"
    assert main(_eval_args(tiny_lm[2], own_set, out)) == 130
    assert (
        f"stopped: 1 samples kept in {out / 'samples.jsonl'}; the same command resumes"
        in capsys.readouterr().out
    )
