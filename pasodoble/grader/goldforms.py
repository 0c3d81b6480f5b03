"""Answers as people write them: strip the markup around a gold or an extracted answer before it is compared.

Why: benchmark files in the wild write golds as `Answer: 7`, `\\(\\frac{1}{2}\\)`, `7.`, `45°`, `€5`, `3.50 dollars`
or `1,234`; math-verify reads `\\boxed{Answer: 7}` as a product of letters over 7 and `\\boxed{45°}` as nothing, so
a correct answer would be graded wrong without a word. How: `normalise_answer(text)` returns the answer with these
wrappers removed plus the kinds removed (each counted by the grader as `gold_normalised` / `answer_normalised` and
`normalised_<kind>`); it applies the same rules to golds and answers, so a pair that math-verify already reads
(`12 cm` against `12`) keeps its verdict. Kinds, in the order applied:

- `answer_prefix`: a leading `Answer:`, `Final answer:`, `The answer is` (any case; `=` or `:` after `answer`);
- `delimiters`: the whole text inside `$...$`, `$$...$$`, `\\(...\\)` or `\\[...\\]`, or `$...$` followed by
  words (`$12$ cm` -> `12 cm`);
- `punctuation`: a trailing full stop after a digit, a letter or `}`;
- `currency`: a leading `$`, `\\$`, `US$`, `€`, `£` or `¥` before a number;
- `units`: a plain number followed by one to three words of two letters or more (`12 cm`, `5 apples`,
  `3.50 dollars`, `45 degrees`), by such words in parentheses (ASDiv's `9 (apples)`, `0.46 (dollars)`) or by a
  degree sign (`45°`, `45 °C`); words math reads (`pi`, `sqrt`, `infty`, `mod`, ...) are kept, and single letters
  are kept (`3 x` is 3x, `3 (x)` is 3x);
- `thousands`: a number whose commas are all followed by exactly three digits (`1,234`, `12,345.5`) loses them;
  any other comma is left alone (`3,5` stays the set {3, 5} as math-verify reads it);
- `decimal_comma`: only when asked (`decimal_comma=True`): a number with one comma not followed by exactly three
  digits (`3,5`, `0,25`) is read as a decimal (`3.5`). `1,234` stays a thousands separator even then.

Extended forms (`extended=True`: the grader's `fallback="auto"`, where answers are read as math-verify reads them;
the rewards' default leaves them off, so training reads as before): `thousands` also for spaces, `\\,`, `~` or `{,}`
between groups (`1 000`, `1\\,000`); `decimal_comma` for a comma after a leading zero (`0,125`), for a comma in a
number read from prose, and (`read_decimal_comma`) for `1,22` against the decimal `1.22`, never for a comma before
exactly three digits; `units` also inside `\\text{}` / `\\mathrm{}` / `\\mbox{}` (`12\\,\\text{cm}`), with a power
(`3 cm^2`, `14 m²`) or a ratio (`60 km/h`); `relations`: `>=`, `\\ge`, `\\geqslant`, `≥` -> `\\geq` (and the same for
`\\leq`, `\\neq`), `\\gt` / `\\lt` -> `>` / `<`, so equal relations compare as equal strings on the fast path.
Rounded answers (`rounded_fractions`, the grader's `rounded_answers`): when the answer writes decimals of at least
that many places and the gold writes none, the gold's integer fractions (`\\frac{1}{3}`, `8/3`) are written as
decimals rounded half up to the answer's largest number of places, so `0.33` (or a vector or interval of such
decimals) matches `\\frac{1}{3}` as math-verify's own tests expect at 2 places; `0.34` and `0.3` stay wrong.
`set_size` counts a gold's top-level items, for reading several boxes as one answer.

Texts longer than `MAX_CHARS` are returned unchanged (answers that long are not numbers with units); every pattern
is anchored and has no nested repetition, so the cost is linear in the length. Nothing here raises.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

MAX_CHARS = 200
KINDS = (
    "answer_prefix",
    "delimiters",
    "punctuation",
    "currency",
    "units",
    "thousands",
    "decimal_comma",
    "relations",
)
SET_SIZE_MAX = 16  # golds with more items are not matched against several boxes

_PREFIX = re.compile(r"^\s*(?:the\s+)?(?:final\s+)?answer\s*(?:is\s*:?|:|=)\s*", re.IGNORECASE)
_WRAPPERS = (
    re.compile(r"^\$\$([^$]+)\$\$$"),
    re.compile(r"^\$([^$]+)\$$"),
    re.compile(r"^\\\((.+)\\\)$", re.DOTALL),
    re.compile(r"^\\\[(.+)\\\]$", re.DOTALL),
)
_DOLLARS_THEN_WORDS = re.compile(r"^\$([^$]+)\$(\s*[A-Za-z][A-Za-z ]*\.?)$")
_TRAILING_STOP = re.compile(r"(?<=[A-Za-z\d}])\s*\.$")
_NUM = r"-?(?:\d+(?:[.,]\d+)*|\.\d+)(?:\s*/\s*\d+)?|-?\\[dt]?frac\{\d+\}\{\d+\}"
_CURRENCY = re.compile(rf"^(-?)\s*(?:US\$|\\\$|\$|€|£|¥)\s*({_NUM})$")
_WORD_UNITS = re.compile(rf"^({_NUM})\s*([A-Za-z]{{2,}}(?:\s+[A-Za-z]{{2,}}){{0,2}})$")
_PAREN_UNITS = re.compile(rf"^({_NUM})\s*\(\s*([A-Za-z]{{2,}}(?:\s+[A-Za-z]{{2,}}){{0,2}})\s*\)$")
_DEGREES = re.compile(rf"^({_NUM})\s*[°º]\s*[CFK]?$")
MATH_WORDS = frozenset(
    {
        "pi",
        "sqrt",
        "infty",
        "inf",
        "infinity",
        "sin",
        "cos",
        "tan",
        "cot",
        "sec",
        "csc",
        "log",
        "ln",
        "exp",
        "mod",
        "frac",
        "cdot",
        "times",
        "dfrac",
        "tfrac",
    }
)  # words math-verify reads as math, never units
_THOUSANDS = re.compile(r"^(-?)(\d{1,3}(?:,\d{3})+)(\.\d+)?$")
_DECIMAL_COMMA = re.compile(r"^(-?\d+),(\d+)$")
# Extended forms (`extended=True`): math-verify's reading of numbers and relations written in other ways.
_SEPARATED = re.compile(r"^(-?)([1-9]\d{0,2}(?:(?:,|\s|\\[,;: ]|\{,\}|~)\d{3})+)(\.\d+)?$")
_SEPARATOR = re.compile(r"\D+")
_SPACES = re.compile(r"  +")
_PLAIN_DECIMAL = re.compile(r"^-?\d+\.\d+$")
_NESTING = re.compile(r"\\\\|\\[{}]|\\[A-Za-z]+|[()\[\]{},]")
_LEADING_ZERO_COMMA = re.compile(r"^(-?0),(\d+)$")
_UNIT_WORD = r"(?:[A-Za-z]{1,6}(?:/[A-Za-z]{1,3})?(?:\^\{?[23]\}?|[²³])?)"
_LATEX_UNITS = re.compile(
    rf"^({_NUM})\s*(?:\\[,;: !]|~)*\s*\\(?:text|mbox|mathrm)\s*\{{\s*({_UNIT_WORD}(?:\s+{_UNIT_WORD})?)\s*\}}"
    r"(?:\^\{?[23]\}?)?$"
)
_POWER_UNITS = re.compile(
    rf"^({_NUM})\s*([A-Za-z]{{1,6}}(?:/[A-Za-z]{{1,3}})?(?:\^\{{?[23]\}}?|[²³])|[A-Za-z]{{1,6}}/[A-Za-z]{{1,3}})$"
)
_RELATIONS = (
    (re.compile(r">=|\\geq?(?![A-Za-z])|\\geqslant|≥"), "\\geq "),
    (re.compile(r"<=|\\leq?(?![A-Za-z])|\\leqslant|≤"), "\\leq "),
    (re.compile(r"!=|\\neq?(?![A-Za-z])|≠"), "\\neq "),
    (re.compile(r"\\gt(?![A-Za-z])"), ">"),
    (re.compile(r"\\lt(?![A-Za-z])"), "<"),
)


def _strip_prefix_and_wrappers(text: str, kinds: list[str]) -> str:
    stripped = _PREFIX.sub("", text, count=1)
    if stripped != text and stripped.strip():
        kinds.append("answer_prefix")
        text = stripped.strip()
    for wrapper in _WRAPPERS:
        match = wrapper.match(text)
        if match and match.group(1).strip():
            kinds.append("delimiters")
            text = match.group(1).strip()
            break
    else:
        if match := _DOLLARS_THEN_WORDS.match(text):
            kinds.append("delimiters")
            text = match.group(1).strip() + match.group(2)
    return text


def strip_wrappers(text: str) -> str:
    """The answer without a leading `Answer:` phrase or math delimiters around it (the loader's gold reading)."""
    if not isinstance(text, str) or len(text) > MAX_CHARS:
        return text
    return _strip_prefix_and_wrappers(text.strip(), [])


def normalise_answer(
    text: str, *, decimal_comma: bool = False, extended: bool = False
) -> tuple[str, tuple[str, ...]]:
    """`(answer, kinds)`: the answer as math-verify should see it and the kinds of markup removed (see above).

    `extended` adds the forms math-verify's extraction reads in prose (see "Extended forms" above).
    """
    if not isinstance(text, str) or len(text) > MAX_CHARS:
        return text, ()
    kinds: list[str] = []
    text = _strip_prefix_and_wrappers(text.strip(), kinds)
    stopped = _TRAILING_STOP.sub("", text)
    if stopped != text and stopped:
        kinds.append("punctuation")
        text = stopped
    if match := _CURRENCY.match(text):
        kinds.append("currency")
        text = match.group(1) + match.group(2)
    words = _WORD_UNITS.match(text) or _PAREN_UNITS.match(text)
    if words and MATH_WORDS.intersection(words.group(2).lower().split()):
        words = None
    if extended and words is None and not _DEGREES.match(text):
        words = _units_written_otherwise(text)
    if match := _DEGREES.match(text) or words:
        kinds.append("units")
        text = match.group(1)
    if extended:
        return _extended_numbers(text, kinds, decimal_comma)
    if match := _THOUSANDS.match(text):
        kinds.append("thousands")
        text = match.group(1) + match.group(2).replace(",", "") + (match.group(3) or "")
    elif decimal_comma and (match := _DECIMAL_COMMA.match(text)):
        kinds.append("decimal_comma")
        text = f"{match.group(1)}.{match.group(2)}"
    return text, tuple(kinds)


def _units_written_otherwise(text: str) -> re.Match[str] | None:
    """A number with its unit in `\\text{}` (`12\\,\\text{cm}`), a power (`3 cm^2`, `12 m²`) or a ratio (`5 km/h`)."""
    match = _LATEX_UNITS.match(text) or _POWER_UNITS.match(text)
    if match and MATH_WORDS.intersection(re.findall(r"[a-z]+", match.group(2).lower())):
        return None
    return match


def _extended_numbers(text: str, kinds: list[str], decimal_comma: bool) -> tuple[str, tuple[str, ...]]:
    """Separators (`1 000`, `1\\,000`, `1,000`), decimal commas that cannot be separators, and relations."""
    if match := _SEPARATED.match(text):
        kinds.append("thousands")
        text = match.group(1) + _SEPARATOR.sub("", match.group(2)) + (match.group(3) or "")
    elif match := _LEADING_ZERO_COMMA.match(text) or (decimal_comma and _DECIMAL_COMMA.match(text)):
        kinds.append("decimal_comma")
        text = f"{match.group(1)}.{match.group(2)}"
    related = text
    for pattern, spelling in _RELATIONS:
        related = pattern.sub(lambda _, spelling=spelling: spelling, related)
    if related != text:
        kinds.append("relations")
        text = _SPACES.sub(" ", related).strip()
    return text, tuple(kinds)


def read_decimal_comma(text: str, other: str) -> str | None:
    """`text` with its comma read as a decimal point when `other` is that very decimal (`1,22` against `1.22`).

    The other answer is the context that tells a decimal comma from a list; a comma that separates thousands
    (`1,234`) was already removed, so `1,234` never equals `1.234` here.
    """
    if (
        "," in text
        and _DECIMAL_COMMA.match(text)
        and not _SEPARATED.match(text)
        and _PLAIN_DECIMAL.match(other)
    ):
        decimal = text.replace(",", ".")
        return decimal if decimal == other else None
    return None


def set_size(text: str) -> int:
    """How many items a gold lists at its top level (`(1, 2), (2, 1)`: 2; `\\{1, 2, 3\\}`: 3; `[0, 1)`: 1).

    One pass; counts past `SET_SIZE_MAX` give 1 (too many to be written as separate boxes).
    """
    text = text.strip()
    for opener, closer in (("\\{", "\\}"), ("{", "}")):
        if text.startswith(opener) and text.endswith(closer):
            text = text[len(opener) : len(text) - len(closer)]
            break
    depth, items = 0, 1
    for token in _NESTING.finditer(text):
        mark = token.group()
        if mark == ",":
            items += depth == 0
        elif mark in ("(", "[", "{", "\\{"):
            depth += 1
        elif mark in (")", "]", "}", "\\}"):
            depth = max(0, depth - 1)
    return items if items <= SET_SIZE_MAX else 1


_GOLD_FRACTION = re.compile(
    r"\\[dtc]?frac\{(\d+)\}\{(\d+)\}|\\[dtc]?frac(\d)(\d)|(?<![\d.])(\d+)\s*/\s*(\d+)(?![\d.])"
)
_DECIMAL_PLACES = re.compile(r"(?<![\d.])\d*\.(\d+)")


def rounded_fractions(gold: str, answer: str, min_places: int | None) -> str | None:
    """`gold` with its integer fractions as decimals rounded to the answer's places, or None where that does not
    apply (no such option, the gold writes decimals or no fraction, the answer no decimal of `min_places` or more)."""
    if min_places is None or len(gold) > MAX_CHARS or len(answer) > MAX_CHARS or "." in gold:
        return None
    places = max((len(m.group(1)) for m in _DECIMAL_PLACES.finditer(answer)), default=0)
    if places < min_places:
        return None
    step = Decimal(1).scaleb(-places)

    def decimal(match: re.Match[str]) -> str:
        numerator, denominator = (int(g) for g in match.groups() if g is not None)
        if denominator == 0:
            return match.group()
        value = Fraction(numerator, denominator)
        return str((Decimal(value.numerator) / Decimal(value.denominator)).quantize(step, ROUND_HALF_UP))

    rounded = _GOLD_FRACTION.sub(decimal, gold)
    return rounded if rounded != gold else None
