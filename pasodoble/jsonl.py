"""Reading JSON-lines files that may hold bad bytes, and writing strict JSON.

What: `iter_jsonl(path)` yields every non-blank line of a file as `(line number, value, problem)`: the decoded value
and `None`, or `None` and a one-line description of what is wrong with the line. `read_jsonl_skipping` collects the
good rows and one `path:N: problem; line skipped` message per bad line; `warn_skipped` prints a few of those
messages and the count. `dumps_strict` writes a value as standard JSON.

Why: answer files, corpora and run folders come from other people and other tools. One line of Latin-1, a lone
UTF-16 surrogate (`"\\ud800"`, legal in JSON text but not encodable as UTF-8), a number with 10^5 digits or a
10^4-deep nesting must cost that line, not the whole run, and must never surface later as a failure to write.

A line is bad when it is not UTF-8, is not JSON, holds an integer too long for Python to read (over 4,300 digits),
nests deeper than `MAX_DEPTH`, or holds a lone surrogate in a key or a string. Lines are split on `\\n` only (a
JSON string may hold U+2028, which `str.splitlines` would cut).

Non-finite numbers: `NaN` and `Infinity` are not JSON but Python's reader accepts them, and files written by
older versions of this project hold them; they are read as floats. `dumps_strict` never writes them: a
non-finite float (including one that overflowed, such as `1e400`) is written as `null`, the choice of JavaScript's
`JSON.stringify` and pandas, so every output line is valid standard JSON.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from pasodoble.errors import UserError

MAX_DEPTH = 64  # deeper nesting is refused: no record of this project comes close, and writers recurse


class LineError(ValueError):
    """A line that cannot be read; `problem` says why, without the file name or line number."""

    def __init__(self, problem: str):
        self.problem = problem
        super().__init__(problem)


class BadJsonlError(UserError, ValueError):
    """A bad line where the reader cannot skip it: `path:N: problem`, a one-line user error."""


def decode_line(raw: bytes | str) -> Any:
    """One JSONL line -> its value; `LineError` when the line is bad (see the module docstring)."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise LineError(f"not UTF-8 (byte 0x{raw[err.start]:02x} at byte {err.start + 1})") from None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as err:
        raise LineError(f"not valid JSON ({err.msg})") from None
    except RecursionError:
        raise LineError(f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as err:  # an integer literal past Python's digit limit
        raise LineError(f"not readable JSON ({str(err).split(';')[0]})") from None
    check_value(value)
    return value


def check_value(value: Any) -> None:
    """`LineError` if `value` nests deeper than MAX_DEPTH or holds a string that is not valid Unicode."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            _check_text(item)
        elif isinstance(item, (dict, list)):
            if depth > MAX_DEPTH:
                raise LineError(f"nested deeper than {MAX_DEPTH} levels")
            if isinstance(item, dict):
                for key in item:
                    _check_text(key)
                stack.extend((v, depth + 1) for v in item.values())
            else:
                stack.extend((v, depth + 1) for v in item)


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise LineError(
            f"holds a lone surrogate \\u{ord(text[err.start]):04x} (not valid Unicode; cannot be written as UTF-8)"
        ) from None


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, Any, str | None]]:
    """(line number, value, None) for each good non-blank line, (line number, None, problem) for each bad one."""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                yield number, decode_line(raw), None
            except LineError as err:
                yield number, None, err.problem


def read_jsonl_skipping(
    path: str | Path, check: Callable[[Any], str | None] | None = None
) -> tuple[list[Any], list[str]]:
    """Good rows, and one `path:N: problem; line skipped` message per bad line (`check(row)` may add problems)."""
    rows, skipped = [], []
    for number, value, problem in iter_jsonl(path):
        if problem is None and check is not None:
            problem = check(value)
        if problem is None:
            rows.append(value)
        else:
            skipped.append(f"{path}:{number}: {problem}; line skipped")
    return rows, skipped


def warn_skipped(skipped: list[str], stream: TextIO | None = None, limit: int = 5) -> None:
    """Print the first `limit` skip messages and, past them, how many more lines were skipped."""
    stream = stream or sys.stderr
    for message in skipped[:limit]:
        print(message, file=stream)
    if len(skipped) > limit:
        print(f"... and {len(skipped) - limit} more bad line(s) skipped", file=stream)


def finite_or_none(value: Any) -> Any:
    """A copy of a JSON-like value with every non-finite float replaced by None (other values are shared)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    return value


def dumps_strict(value: Any) -> str:
    """Standard JSON on one line (UTF-8 text, non-finite floats as null)."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except ValueError:  # a NaN or an infinity somewhere: rare, so the copy is paid only then
        return json.dumps(finite_or_none(value), ensure_ascii=False, allow_nan=False)
