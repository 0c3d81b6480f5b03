"""JSON-lines reading with bad bytes, and strict JSON writing (`pasodoble.jsonl`, `pasodoble.io.read_jsonl`)."""

from __future__ import annotations

import json
import math

import pytest

from pasodoble.io import read_jsonl
from pasodoble.jsonl import (
    MAX_DEPTH,
    BadJsonlError,
    LineError,
    decode_line,
    dumps_strict,
    iter_jsonl,
    read_jsonl_skipping,
    warn_skipped,
)

BAD_LINES = [
    (b'{"a": "caf\xe9"}', "not UTF-8 (byte 0xe9 at byte 11)"),
    (b"\xff\xfe{}", "not UTF-8 (byte 0xff at byte 1)"),
    (b'{"a": 1', "not valid JSON"),
    (b'{"a": "\\ud800"}', "lone surrogate \\ud800"),
    (b'{"\\udfff": 1}', "lone surrogate \\udfff"),  # in a key
    (b"[" * 100_000 + b"]" * 100_000, f"nested deeper than {MAX_DEPTH} levels"),  # json's own recursion limit
    (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), f"nested deeper than {MAX_DEPTH} levels"),
    (b'{"n": ' + b"7" * 5000 + b"}", "Exceeds the limit (4300 digits)"),
]


@pytest.mark.parametrize(("raw", "words"), BAD_LINES)
def test_bad_lines_raise_line_error_saying_why(raw, words):
    with pytest.raises(LineError) as err:
        decode_line(raw)
    assert words in err.value.problem


def test_good_lines_decode_including_python_extensions():
    assert decode_line(b'{"a": "\\ud83d\\ude00"}') == {"a": "\U0001f600"}  # a surrogate *pair* is fine
    assert decode_line('"\u2028"') == "\u2028"
    assert math.isnan(decode_line(b"NaN")) and decode_line(b"[1e400]") == [math.inf]
    assert decode_line(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH) is not None


def test_iter_jsonl_numbers_lines_and_splits_on_newline_only(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"a": 1}\n\n  \n{"b": "x\xe2\x80\xa8y"}\n\xff\n{"c": 3}')
    got = list(iter_jsonl(path))
    assert got[0] == (1, {"a": 1}, None)
    assert got[1] == (4, {"b": "x\u2028y"}, None)  # U+2028 inside a string does not end the line
    assert got[2][0] == 5 and got[2][1] is None and got[2][2].startswith("not UTF-8")
    assert got[3] == (6, {"c": 3}, None)


def test_read_jsonl_skipping_reports_line_numbers(tmp_path, capsys):
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"a": 1}\n\xff\n[2]\n{"a": "\\ud800"}\n')
    rows, skipped = read_jsonl_skipping(path, lambda row: None if isinstance(row, dict) else "not an object")
    assert rows == [{"a": 1}]
    assert [m.split(":", 2)[1] for m in (s.replace(str(path), "P") for s in skipped)] == ["2", "3", "4"]
    assert skipped[1] == f"{path}:3: not an object; line skipped"
    warn_skipped(skipped, limit=2)
    err = capsys.readouterr().err.splitlines()
    assert err[:2] == skipped[:2] and err[2] == "... and 1 more bad line(s) skipped"


def test_read_jsonl_names_a_bad_line_or_skips_it(tmp_path, capsys):
    path = tmp_path / "m.jsonl"
    path.write_bytes(b'{"step": 1}\n{"step": "\xe9"}\n[3]\n{"step": 4}\n{"step": 5, "torn')
    with pytest.raises(BadJsonlError, match=r"m.jsonl:2: not UTF-8") as err:
        read_jsonl(path)
    assert isinstance(err.value, ValueError)  # callers that repair a file catch ValueError
    assert read_jsonl(path, skip_bad=True) == [{"step": 1}, {"step": 4}]  # the torn last line goes silently
    out = capsys.readouterr().err
    assert "m.jsonl:2: not UTF-8" in out and "m.jsonl:3: expected a JSON object; line skipped" in out
    assert "m.jsonl:5" not in out


def test_a_torn_last_line_is_dropped_unless_strict(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(b'{"step": 1}\n{"step": 5, "torn')
    assert read_jsonl(path) == [{"step": 1}]
    with pytest.raises(BadJsonlError, match="m.jsonl:2: not valid JSON"):
        read_jsonl(path, strict=True)


def test_dumps_strict_writes_standard_json():
    row = {"gold": "2", "score": math.nan, "big": 1e400, "neg": [-math.inf, 1.5], "text": "caf\u00e9"}
    text = dumps_strict(row)
    assert text == '{"gold": "2", "score": null, "big": null, "neg": [null, 1.5], "text": "café"}'
    json.loads(text, parse_constant=lambda name: pytest.fail(f"non-standard constant {name}"))
    assert dumps_strict({"a": 1.0}) == '{"a": 1.0}'
    assert row["score"] is not None  # the caller's object is not changed
