"""Files with bad bytes: every JSONL reader reports and skips the bad lines, and what is written is standard JSON.

Each case was a failure before: a non-UTF-8 line aborted `verify-answers` with a traceback and no output, a lone
surrogate was graded and then broke the write (leaving the temporary file), NaN and 1e400 golds were written as
the non-standard `NaN` / `Infinity`, and a bad byte in a copied run's metrics stopped `pasodoble plot`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pasodoble.core.knowledge import KnowledgeConfig, PassageSampler
from pasodoble.errors import UserError
from pasodoble.evals.samples import load_resume_state
from pasodoble.reports.series import load_series

REPO = Path(__file__).resolve().parents[2]


def _strict_loads(line: str):
    return json.loads(line, parse_constant=lambda name: pytest.fail(f"non-standard JSON constant {name}"))


def _answers_file(path: Path) -> Path:
    lines = [
        json.dumps(
            {"gold": "2", "pred": "so \\boxed{2}", "score": float("nan")}
        ).encode(),  # NaN in another field
        b'{"gold": "3", "pred": "caf\xe9 \\\\boxed{3}"}',  # Latin-1, not UTF-8
        b'{"gold": "4", "pred": "\\ud800 \\\\boxed{4}"}',  # a lone surrogate: valid JSON text, not Unicode
        b'{"gold": NaN, "pred": "\\\\boxed{1}"}',
        b'{"gold": 1e400, "pred": "\\\\boxed{1}"}',
        b'{"gold": 5, "pred": "\\\\boxed{5}"}',
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_verify_answers_cli_skips_bad_lines_and_writes_standard_json(tmp_path):
    source, out = _answers_file(tmp_path / "in.jsonl"), tmp_path / "out.jsonl"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "pasodoble", "verify-answers", str(source), "--out", str(out)]
    proc = subprocess.run(
        [*cmd, "--num-workers", "1", "--no-progress"], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    rows = [_strict_loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [(r["gold"], r["correct"]) for r in rows] == [("2", True), (5, True)]
    assert rows[0]["score"] is None  # NaN elsewhere in a row is written as null
    err = proc.stderr
    assert "in.jsonl:2: not UTF-8 (byte 0xe9" in err
    assert "in.jsonl:3: holds a lone surrogate \\ud800" in err
    assert "in.jsonl:4: 'gold' is NaN, an infinity or a number past 1.8e308" in err
    assert "in.jsonl:5: 'gold' is NaN" in err
    assert "2 graded, 2 correct" in err and "bad lines skipped 4" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "out.jsonl"]  # no temporary file left


def test_verify_answers_leaves_no_temporary_file_when_the_write_fails(tmp_path, monkeypatch):
    from pasodoble.grader import cli

    source, out = tmp_path / "in.jsonl", tmp_path / "out" / "graded.jsonl"
    source.write_text(json.dumps({"gold": "2", "pred": "2"}) + "\n")

    def no_space(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", no_space)
    parser = cli.argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["verify-answers", str(source), "--out", str(out), "--no-extract", "--no-progress"]
    )
    with pytest.raises(UserError, match="no space left on device writing .*graded.jsonl"):
        cli.run_verify_answers(args)
    assert list(out.parent.iterdir()) == []
    args.out = tmp_path
    with pytest.raises(UserError, match="is a folder"):
        cli.run_verify_answers(args)


def test_knowledge_corpus_with_bad_lines_samples_the_good_ones(tmp_path):
    corpus = tmp_path / "c.jsonl"
    good = [json.dumps({"text": f"passage number {i} about arithmetic"}).encode() for i in range(3)]
    corpus.write_bytes(
        b"\n".join([b"\xff\xfe garbage", good[0], b'{"text": "\\udc80 lone surrogate passage"}', good[1]])
        + b"\n"
        + b"[" * 10_000
        + b"\n"
        + good[2]
        + b"\n"
    )
    sampler = PassageSampler(KnowledgeConfig(path=str(corpus)))  # line 1 is unreadable: the check uses line 2
    texts = {p.text for step in range(60) for p in sampler.sample(step)}
    assert texts == {f"passage number {i} about arithmetic" for i in range(3)}
    assert sampler.bad_records > 0  # the broken lines were drawn, counted and redrawn


def test_plot_reads_metrics_with_a_damaged_line(tmp_path, capsys):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_bytes(b'{"step": 1, "loss": 1.0}\n{"step": 2, "loss": \xff}\n{"step": 3, "loss": NaN}\n')
    assert load_series(metrics) == {"loss": ([1], [1.0])}
    assert "metrics.jsonl:2: not UTF-8" in capsys.readouterr().err


def test_samples_resume_treats_an_undecodable_last_line_as_torn(tmp_path):
    path = tmp_path / "samples.jsonl"
    row = {"source": "s", "id": "a", "sample": 0, "correct": True}
    path.write_bytes(json.dumps(row).encode() + b"\n" + b'{"source": "s", "id": "b", "sam\xc3')
    state = load_resume_state(path, 1)
    assert state.torn_lines == 1 and list(state.finished) == [("s", "a")]
    assert path.read_text(encoding="utf-8") == json.dumps(row, ensure_ascii=False) + "\n"
    path.write_text(json.dumps(row) + "\n" + json.dumps({"id": "no source"}) + "\n")
    assert load_resume_state(path, 1).torn_lines == 1  # JSON, but not a samples row: dropped, not a KeyError


def test_chunking_text_with_a_lone_surrogate_does_not_reach_the_tokenizer():
    from pasodoble.core.knowledge import chunk_text
    from tests.conftest import build_char_tokenizer

    chunks = chunk_text("ab\ud800cd " * 10, 4, build_char_tokenizer())  # raised TypeError in the tokenizer
    assert chunks and all(c.encode("utf-8") for c in chunks) and "\ufffd" in "".join(chunks)
