"""Evaluation problems and the generic loader that turns any JSONL / Parquet / Hugging Face set into them.

Why: every math test set has its own schema (README of the benchmarks folder), and peers hard-code one parser per
set. Here a set is described by a field mapping instead, so a new set needs flags, not code:

    pasodoble eval --dataset my.jsonl --question-field Body --answer-field Answer ...
    pasodoble eval --dataset my.jsonl --question-template "{Body} {Question}" --answer-field Answer ...

A field name may reach into nested objects with dots (`answers.text` of SQuAD, `answer.aliases` of TriviaQA);
`--alias-field` adds a second field's answers to the golds.

Gold answers may be a string, a number (27.0 -> "27"), a list of accepted answers, a worked solution ending in
`#### 18` (GSM8K style, commas removed), or a solution with a `\\boxed{}` (the last one is the gold); a plain
gold loses a leading `Answer:` / `The answer is` and math delimiters around it (`$...$`, `\\(...\\)`, `\\[...\\]`). The seven
shipped benchmarks (`benchmarks.py`) are just seven such mappings.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pasodoble.errors import ConfigError, UserError
from pasodoble.jsonl import LineError, decode_line, read_jsonl_skipping, warn_skipped

_TEMPLATE_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_\-\. ]*)\}")


@dataclass(frozen=True)
class Problem:
    """One test problem. `answers` holds every accepted gold answer (a prediction matching any one is correct)."""

    id: str
    question: str
    answers: tuple[str, ...]
    source: str  # benchmark name or file stem; (source, id) is unique within one evaluation


@dataclass(frozen=True)
class FieldMap:
    """How one row of a data file becomes a Problem."""

    question_field: str | None = "question"  # field holding the question text; ignored when a template is set
    question_template: str | None = (
        None  # e.g. "{context}\n{question}": fields in braces; empty/None fields drop
    )
    answer_field: str = (
        "answer"  # field holding the gold answer(s): string, number, list, `####` or `\boxed{}`
    )
    answer_format: str = "auto"  # "auto" (detect), "text" (verbatim), "boxed", "hashes" (after `####`)
    id_field: str | None = None  # field holding a unique id; None: the row number
    source_field: str | None = None  # field that splits the set into reported groups (e.g. "tier"); None: one
    alias_field: str | None = (
        None  # field with more accepted answers (QA aliases), added to the golds; None: none
    )

    def validate(self) -> None:
        if self.answer_format not in ANSWER_FORMATS:
            raise ConfigError(
                "answer_format", f"{self.answer_format!r} is not one of {', '.join(ANSWER_FORMATS)}"
            )
        if not self.question_template and not self.question_field:
            raise ConfigError("question_field", "give a question field or a question template")


ANSWER_FORMATS = ("auto", "text", "boxed", "hashes")


def format_number(value: float | int) -> str:
    """27.0 -> "27", 0.5 -> "0.5": JSON numbers as a person would write them."""
    if isinstance(value, bool):
        raise ValueError("a boolean is not an answer")
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _strip_math_delimiters(text: str) -> str:
    # OlympiadBench writes golds as "$\frac{1}{2}$", other sets as "\(...\)" or "Answer: 7": markup, not answer.
    # Units, thousands separators and currency are left to the grader, which counts what it removes.
    from pasodoble.grader.goldforms import strip_wrappers

    text = text.strip()
    if len(text) >= 2 and text.startswith("$") and text.endswith("$"):
        text = text.strip("$").strip()
    return strip_wrappers(text)


def _after_hashes(text: str) -> str | None:
    if "####" not in text:
        return None
    return text.rsplit("####", 1)[1].strip().replace(",", "")


def _boxed(text: str) -> str | None:
    # Several boxes that answer together (`\boxed{1} and \boxed{-2}`) are one gold, as math-verify reads them.
    from pasodoble.grader.extract import extract_box_group

    found = extract_box_group(text)
    return found.strip() if found is not None else None


def parse_answers(value: Any, answer_format: str = "auto") -> tuple[str, ...]:
    """Gold answer(s) of one row as non-empty strings; empty tuple when none can be read."""
    if value is None:
        return ()
    if isinstance(value, (list, tuple)):
        return tuple(a for item in value for a in parse_answers(item, answer_format))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return () if isinstance(value, float) and math.isnan(value) else (format_number(value),)
    text = str(value)
    if answer_format == "boxed":
        found = _boxed(text)
    elif answer_format == "auto" and ("\\boxed" in text or "\\fbox" in text):
        found = _boxed(text) or _strip_math_delimiters(text)  # a box never closed: the gold is read whole
    elif answer_format == "hashes" or (answer_format == "auto" and "####" in text):
        found = _after_hashes(text)
    else:
        found = _strip_math_delimiters(text)
    return (found,) if found else ()


def _template_fields(template: str) -> list[str]:
    return _TEMPLATE_FIELD.findall(template)


def render_question(row: Mapping[str, Any], fields: FieldMap) -> str:
    """The question text of one row: one field, or the template with missing / null fields rendered empty."""
    if not fields.question_template:
        value = field_value(row, fields.question_field)
        return "" if value is None else str(value).strip()

    def one(match: re.Match[str]) -> str:
        value = field_value(row, match.group(1))
        return "" if value is None else str(value)

    return _TEMPLATE_FIELD.sub(one, fields.question_template).strip()


_MISSING = object()


def field_value(row: Mapping[str, Any], name: str, default: Any = None) -> Any:
    """`row[name]`, or for a dotted name absent as such, the nested value (`answers.text`); else `default`."""
    if name in row:
        return row[name]
    value: Any = row
    for part in name.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return default
        value = value[part]
    return value


def rows_to_problems(rows: Iterable[Mapping[str, Any]], fields: FieldMap, source: str) -> list[Problem]:
    """Map rows to Problems; an unknown field name or an empty question / answer is a UserError naming the row."""
    fields.validate()
    problems: list[Problem] = []
    seen: set[str] = set()
    for index, row in enumerate(rows):
        if index == 0:
            _check_fields(row, fields, source)
        pid = str(field_value(row, fields.id_field, index)) if fields.id_field else str(index)
        if pid in seen:
            raise UserError(
                f"{source}: id {pid!r} appears twice in field {fields.id_field!r}; pick a unique id field"
            )
        seen.add(pid)
        question = render_question(row, fields)
        answers = parse_answers(field_value(row, fields.answer_field), fields.answer_format)
        if fields.alias_field:
            extra = parse_answers(field_value(row, fields.alias_field), fields.answer_format)
            answers += tuple(a for a in dict.fromkeys(extra) if a not in answers)
        if not question:
            raise UserError(f"{source}: row {index} (id {pid}) has an empty question; check --question-field")
        if not answers:
            raise UserError(
                f"{source}: row {index} (id {pid}) has no readable gold answer in {fields.answer_field!r}"
            )
        group = f"{source}/{field_value(row, fields.source_field)}" if fields.source_field else source
        problems.append(Problem(id=pid, question=question, answers=answers, source=group))
    return problems


def _check_fields(row: Mapping[str, Any], fields: FieldMap, source: str) -> None:
    wanted = [fields.answer_field]
    wanted += (
        _template_fields(fields.question_template) if fields.question_template else [fields.question_field]
    )
    wanted += [name for name in (fields.id_field, fields.source_field, fields.alias_field) if name]
    missing = [name for name in wanted if field_value(row, name, _MISSING) is _MISSING]
    if missing:
        raise UserError(
            f"{source}: field(s) {', '.join(map(repr, missing))} not in the data; "
            f"available: {', '.join(sorted(row))} "
            "(set --question-field / --answer-field / --id-field / --group-field / --alias-field)"
        )


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a .jsonl / .json / .parquet file; a bad JSONL line is reported on stderr and skipped (counted)."""
    if not path.is_file():
        raise UserError(f"{path}: no such file (check --dataset or --data-dir)")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if suffix == ".json":
        try:
            data = decode_line(path.read_bytes())
        except LineError as err:
            raise UserError(f"{path}: {err.problem}; fix the file or convert it to JSONL") from None
        if not isinstance(data, list) or not all(isinstance(row, dict) for row in data):
            raise UserError(
                f"{path}: a .json set must hold a list of objects; use JSONL for one object a line"
            )
        return data
    rows, skipped = read_jsonl_skipping(path, _not_an_object)
    warn_skipped(skipped)
    if skipped:
        print(f"{path}: {len(skipped)} bad line(s) skipped, {len(rows)} rows read", file=sys.stderr)
    return rows


def _not_an_object(row: Any) -> str | None:
    return None if isinstance(row, dict) else "expected a JSON object"


def load_problems_file(
    path: str | Path, fields: FieldMap | None = None, *, source: str | None = None, limit: int | None = None
) -> list[Problem]:
    """Problems from a local JSONL / JSON / Parquet file; source defaults to the file stem."""
    path = Path(path)
    rows = read_rows(path)
    if limit is not None:
        rows = rows[:limit]
    return rows_to_problems(rows, fields or FieldMap(), source or path.stem)


def load_hf_problems(
    dataset_id: str,
    fields: FieldMap,
    *,
    split: str = "test",
    config_name: str | None = None,
    source: str | None = None,
    limit: int | None = None,
) -> list[Problem]:
    """Problems from a Hugging Face dataset id (needs network or a warm HF cache)."""
    import datasets

    try:
        data = datasets.load_dataset(dataset_id, config_name, split=split)
    except Exception as err:  # the datasets library raises many types (network, missing config, auth)
        raise UserError(
            f"cannot load Hugging Face dataset {dataset_id!r} (split {split!r}): {type(err).__name__}: {err}. "
            "Without network, pass --data-dir pointing at local copies or set PASODOBLE_DATA_DIR"
        ) from err
    rows: Sequence[Mapping[str, Any]] = data.select(range(min(limit, len(data)))) if limit else data
    return rows_to_problems(rows, fields, source or dataset_id.rsplit("/", 1)[-1])
