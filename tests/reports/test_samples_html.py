"""`pasodoble inspect`: one self-contained, escaped HTML page of a run's samples; rendered in headless Chromium."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import tempfile
from html.parser import HTMLParser

import pytest

from pasodoble.cli import main

EVIL = 'What is <script>alert("x")</script> 2 + 2 & "more"?'


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.attrs, self.text, self.title = [], [], [], ""
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += attrs
        self._in_title = tag == "title"

    def handle_endtag(self, tag):
        self._in_title = False

    def handle_data(self, data):
        self.text.append(data)
        if self._in_title:
            self.title += data


def _run_dir(tmp_path):
    run = tmp_path / "run-a"
    run.mkdir()
    rows = [
        {
            "step": 1,
            "passage": "Numbers: 2, 2.",
            "question": EVIL,
            "answer": "4",
            "invalid_reason": None,
            "proposer_completion": f"<problem>{EVIL}</problem><answer>\\boxed{{4}}</answer>",
            "pass_rate": 0.5,
            "diversity": 1.0,
            "proposer_reward": 0.8,
            "solver_answers": ["\\boxed{4}", "<b>5</b>"],
            "solver_correct": [True, False],
        },
        {"step": 2, "passage": "p", "question": "", "answer": "", "invalid_reason": "missing_problem"},
    ]
    (run / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_page_is_escaped_self_contained_and_complete(tmp_path, capsys):
    run = _run_dir(tmp_path)
    assert main(["inspect", str(run)]) == 0
    assert f"wrote {run / 'samples.html'}" in capsys.readouterr().out
    page = (run / "samples.html").read_text(encoding="utf-8")
    parsed = _Collect()
    parsed.feed(page)
    assert "script" not in parsed.tags and "b" not in parsed.tags  # model text never becomes markup
    assert not {"link", "img", "iframe", "object"} & set(parsed.tags)
    assert not [v for k, v in parsed.attrs if k in ("src", "href") and v and not v.startswith("#")]
    text = "".join(parsed.text)
    assert EVIL in text and "<b>5</b>" in text  # shown as text, exactly
    assert "Solver answers (1 of 2 correct)" in text and "invalid: missing_problem" in text
    assert parsed.title == "pasodoble samples: run-a"
    assert '<li class="ok">' in page and '<li class="wrong">' in page


def test_missing_samples_is_one_line(tmp_path, capsys):
    assert main(["inspect", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "samples.jsonl not found" in err[0]


def _png_size(path):
    with open(path, "rb") as fh:
        head = fh.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


@pytest.mark.skipif(
    shutil.which("chromium") is None, reason="chromium is not installed (apt-get install chromium)"
)
def test_page_renders_in_headless_chromium(tmp_path):
    run = _run_dir(tmp_path)
    assert main(["inspect", str(run)]) == 0
    page, shot = run / "samples.html", tmp_path / "shot.png"
    flags = [
        "chromium",
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tempfile.mkdtemp(dir=tmp_path)}",
    ]
    dom = subprocess.run(
        [*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    parsed = _Collect()
    parsed.feed(dom)
    assert parsed.title == "pasodoble samples: run-a" and "script" not in parsed.tags
    assert EVIL in "".join(parsed.text)
    subprocess.run(
        [*flags, f"--screenshot={shot}", "--window-size=1200,900", page.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert _png_size(shot) == (1200, 900)
