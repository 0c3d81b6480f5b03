"""The generic loader: field mappings, templates, every answer shape, and one-line errors."""

import json

import pytest

from pasodoble.errors import UserError
from pasodoble.evals.problems import (
    FieldMap,
    format_number,
    load_problems_file,
    parse_answers,
    rows_to_problems,
)


def test_answer_shapes():
    assert parse_answers(27.0) == ("27",)
    assert parse_answers(0.5) == ("0.5",)
    assert parse_answers(12) == ("12",)
    assert parse_answers("$\\frac{1}{2}$") == ("\\frac{1}{2}",)
    assert parse_answers(["$3$", "4"]) == ("3", "4")
    assert parse_answers("She makes 9 * 2 = $18.\n#### 1,018") == ("1018",)
    # boxes that answer together are one gold, as math-verify reads them; a box in another paragraph is not
    assert parse_answers("so the answer is \\boxed{\\frac{a}{b}} and \\boxed{7}.") == ("\\frac{a}{b}, 7",)
    assert parse_answers("first \\boxed{3}.\n\nso the answer is \\boxed{7}.") == ("7",)
    assert parse_answers("x \\boxed{2^{\\{1\\}}}", "boxed") == ("2^{\\{1\\}}",)
    assert parse_answers("text #### 5", "text") == ("text #### 5",)
    assert parse_answers(None) == ()
    assert parse_answers("   ") == ()
    assert parse_answers("no box here", "boxed") == ()
    with pytest.raises(ValueError):
        format_number(True)


def test_template_joins_fields_and_drops_nulls():
    rows = [{"Body": "Ann has 3 apples.", "Question": "How many?", "Answer": 3, "ctx": None}]
    [p] = rows_to_problems(
        rows, FieldMap(question_template="{ctx}\n{Body} {Question}", answer_field="Answer"), "s"
    )
    assert p.question == "Ann has 3 apples. How many?"
    assert p.answers == ("3",) and p.id == "0" and p.source == "s"


def test_errors_name_the_field_and_row(tmp_path, capsys):
    rows = [{"q": "1+1?", "a": "2"}, {"q": "2+2?", "a": ""}]
    with pytest.raises(UserError, match="'question' not in the data; available: a, q"):
        rows_to_problems(rows, FieldMap(), "s")
    with pytest.raises(UserError, match="row 1 .* no readable gold answer in 'a'"):
        rows_to_problems(rows, FieldMap(question_field="q", answer_field="a"), "s")
    with pytest.raises(UserError, match="appears twice"):
        rows_to_problems([{"q": "x", "a": 1, "i": 1}] * 2, FieldMap("q", answer_field="a", id_field="i"), "s")
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"q": "x", "a": 1}\n{oops\n{"q": "caf\xe9", "a": 2}\n[3]\n')
    assert [p.question for p in load_problems_file(bad, FieldMap("q", answer_field="a"))] == ["x"]
    err = capsys.readouterr().err
    assert "bad.jsonl:2: not valid JSON" in err and "bad.jsonl:3: not UTF-8 (byte 0xe9" in err
    assert "bad.jsonl:4: expected a JSON object" in err and "3 bad line(s) skipped, 1 rows read" in err
    (tmp_path / "bad.json").write_bytes(b'[{"q": "x", "a": 1}, {"q": "\xff"}]')
    with pytest.raises(UserError, match="bad.json: not UTF-8"):
        load_problems_file(tmp_path / "bad.json", FieldMap("q", answer_field="a"))
    with pytest.raises(UserError, match="no such file"):
        load_problems_file(tmp_path / "missing.jsonl")


def test_jsonl_json_and_parquet_files_load_alike(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {"Problem": "1+1?", "Sol": "so \\boxed{2}", "key": "a"},
        {"Problem": "2+3?", "Sol": "\\boxed{5}", "key": "b"},
    ]
    fields = FieldMap("Problem", answer_field="Sol", id_field="key")
    (tmp_path / "s.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "s.json").write_text(json.dumps(rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "s.parquet")
    loaded = [load_problems_file(tmp_path / f"s.{ext}", fields) for ext in ("jsonl", "json", "parquet")]
    assert loaded[0] == loaded[1] == loaded[2]
    assert [(p.id, p.answers, p.source) for p in loaded[0]] == [("a", ("2",), "s"), ("b", ("5",), "s")]
    assert len(load_problems_file(tmp_path / "s.jsonl", fields, limit=1)) == 1


def test_group_field_splits_a_set_into_reported_sources():
    rows = [{"question": "1+1?", "answer": 2, "tier": "t1"}, {"question": "9*9?", "answer": 81, "tier": "t2"}]
    problems = rows_to_problems(rows, FieldMap(source_field="tier"), "tiers")
    assert [p.source for p in problems] == ["tiers/t1", "tiers/t2"]
    with pytest.raises(UserError, match="'level' not in the data"):
        rows_to_problems(rows, FieldMap(source_field="level"), "tiers")
