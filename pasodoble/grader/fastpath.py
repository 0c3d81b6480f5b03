"""The fast path: decide a (gold, prediction) pair without math-verify when its verdict is certain.

Why: math-verify (LaTeX -> SymPy through an ANTLR parser, then SymPy comparisons) costs milliseconds per pair and
needs a killable worker process; most reward checks are plain numbers or an answer copied verbatim from the gold.
How: `fast_verdict(gold, pred)` returns True / False when math-verify's verdict on `\\boxed{gold}` against
`\\boxed{pred}` is known for sure, and None ("defer") otherwise. It answers only in three cases:

0. *Same text.* An answer identical to the gold (both stripped) is right whenever math-verify's normalised string of
   it is not empty: math-verify's string comparison says so, given the time to parse. Decided before any parse, so
   a 10^6-digit integer or a power tower against itself is right instead of timing out (the one place where the
   grader's verdict is not math-verify's under its limit). Texts longer than 300 characters are not normalised
   (`normalize_latex` is quadratic on some inputs, e.g. long runs of spaces); for them the test is conservative and
   linear: balanced braces, no trailing backslash, and an ASCII digit, which normalisation never removes. Answers
   that could change which math-verify pattern matches (`$`, `\\[`, `\\(`, `boxed`, `answer`) are deferred.
1. *Same normalised answer.* math-verify's `parse` returns the SymPy value *and* the normalised LaTeX string, and
   `verify` also compares string with string, so two answers whose normalised strings are equal and not empty are
   equal for math-verify (`\\dfrac` vs `\\frac`, `\\left(` vs `(`, `5 \\text{ cm}` vs `5`, and identical answers).
   We compute that string with math-verify's own `normalize_latex` and skip anything that could make parsing slow
   or change which pattern math-verify matches (power towers, huge exponents, factorials, sums, `$`, long strings):
   those go to a worker, under the hard time limit, exactly as math-verify would see them.
2. *Two plain numbers* (integers, decimals, `\\frac{a}{b}`, `a/b`). Exact rationals (Python `Fraction`) follow
   math-verify's rules: two non-decimal numbers are equal iff their values are; when a decimal is involved
   math-verify rounds both to 6 places, so we say True only for an exact match on the 6-decimal grid (no rounding
   tie possible) and False only when the values differ by clearly more than that rounding. Anything in between,
   percentages, units, thousands separators, scientific notation and leading zeros are deferred. A False also needs
   the two normalised strings to differ (else math-verify's string match would say True).

The test-suite checks these rules against math-verify itself on random numbers, and the benchmark shows identical
verdicts on the benchmark answer mix. Nothing here raises on any input.
"""

from __future__ import annotations

import re
from dataclasses import replace
from fractions import Fraction
from functools import lru_cache

from latex2sympy2_extended.latex2sympy2 import normalize_latex
from math_verify.parser import LatexExtractionConfig

_NORMALISED_MAX_CHARS = 300  # normalize_latex is quadratic on some inputs: longer texts are never normalised
# Inputs that change which math-verify pattern matches (so the string fallback may differ).
_OTHER_PATTERN = re.compile(r"\$|\\\[|\\\(|boxed|fbox|answer", re.IGNORECASE)
# Inputs that can make SymPy evaluate something huge while parsing or comparing.
_COSTLY = re.compile(r"!|\\sum|\\prod|\\int|\\lim|\\binom|\\choose|\d{30,}|\^\s*\{?\s*-?\d{4,}")
_ASCII_DIGIT = re.compile(r"[0-9]")
_BRACE = re.compile(r"[{}]")
_EXPONENT_GROUP = re.compile(r"\^\s*\{")
_NORMALISATION = replace(LatexExtractionConfig().normalization_config, boxed="last")

_INT = r"(?:0|[1-9]\d{0,29})"
_NUMBER = re.compile(
    rf"(-?)(?:({_INT})(?:\.(\d{{1,12}}))?|\\[dt]?frac\{{({_INT})\}}\{{({_INT})\}}|({_INT})/({_INT}))"
)
_DECIMAL_MAX_ABS = 10**9  # 9 integer digits + 6 decimals stay within a 53-bit float's 15 significant digits
_GRID = 10**6  # math-verify's default float_rounding is 6 decimal places


def _power_tower(answer: str) -> bool:
    """True if some exponent group `^{...}` itself holds a `^` (e.g. `9^{9^{9^{9}}}`)."""
    for match in _EXPONENT_GROUP.finditer(answer):
        depth = 0
        for index in range(match.end() - 1, len(answer)):
            char = answer[index]
            depth += (char == "{") - (char == "}")
            if depth == 0:
                break
            if char == "^":
                return True
    return False


def normalised(answer: str) -> str | None:
    """math-verify's normalised string for `\\boxed{answer}`, or None when empty or unsafe to rely on."""
    if len(answer) > _NORMALISED_MAX_CHARS or _COSTLY.search(answer) or _power_tower(answer):
        return None
    return _normalised_text(answer)


@lru_cache(maxsize=65_536)
def _normalised_text(answer: str) -> str | None:
    """`normalised` without the guards against slow parses (callers bound the length)."""
    if len(answer) > _NORMALISED_MAX_CHARS or _OTHER_PATTERN.search(answer):
        return None
    try:
        text = normalize_latex(f"\\boxed{{{answer}}}", config=_NORMALISATION).strip()
    except Exception:  # a normalisation failure means math-verify's parse returns nothing: let it decide
        return None
    return text or None


def parse_number(answer: str) -> tuple[Fraction, bool] | None:
    """Parse a plain number into (exact value, written as a decimal?), or None if it is not one."""
    match = _NUMBER.fullmatch(answer.strip())
    if match is None:
        return None
    sign, whole, decimals, frac_num, frac_den, slash_num, slash_den = match.groups()
    if whole is not None:
        value = Fraction(int(whole)) + (Fraction(int(decimals), 10 ** len(decimals)) if decimals else 0)
        is_decimal = decimals is not None
    else:
        numerator, denominator = (frac_num, frac_den) if frac_num is not None else (slash_num, slash_den)
        if int(denominator) == 0:
            return None
        value, is_decimal = Fraction(int(numerator), int(denominator)), False
    return (-value if sign else value), is_decimal


def _numeric_verdict(gold: tuple[Fraction, bool], pred: tuple[Fraction, bool]) -> bool | None:
    """math-verify's verdict on two plain numbers when it is certain, else None."""
    (g, g_decimal), (p, p_decimal) = gold, pred
    any_decimal = g_decimal or p_decimal
    difference = abs(g - p)
    scale = max(Fraction(1), abs(g), abs(p))
    if difference == 0:
        if not any_decimal:
            return True
        on_grid = (g * _GRID).denominator == 1
        return True if on_grid and abs(g) < _DECIMAL_MAX_ABS else None
    clearly_apart = difference > scale / 10**9
    if any_decimal:
        clearly_apart = clearly_apart and difference > Fraction(1, 10**5)
    return False if clearly_apart else None


def _balanced(text: str) -> bool:
    depth = 0
    for brace in _BRACE.finditer(text):
        depth += 1 if brace.group() == "{" else -1
        if depth < 0:
            return False
    return depth == 0


def same_text_verdict(answer: str) -> bool | None:
    """True when an answer compared with its own text is surely right (its normalised string is not empty), else
    None; linear in the length of the answer (see case 0 of the module docstring)."""
    if len(answer) <= _NORMALISED_MAX_CHARS:
        return True if _normalised_text(answer) else None
    if answer.endswith("\\") or _OTHER_PATTERN.search(answer) or not _ASCII_DIGIT.search(answer):
        return None
    return True if _balanced(answer) else None


def fast_verdict(gold: str, pred: str) -> bool | None:
    """Return math-verify's verdict for (gold answer, extracted prediction) when certain, else None."""
    gold, pred = gold.strip(), pred.strip()
    if gold == pred and same_text_verdict(gold):
        return True
    gold_text = normalised(gold)
    pred_text = normalised(pred) if gold_text is not None else None
    if gold_text is not None and gold_text == pred_text:
        return True
    if pred_text is None or len(gold) > 80 or len(pred) > 80:
        return None  # without both normalised strings we cannot rule out math-verify's string match
    gold_number = parse_number(gold)
    pred_number = parse_number(pred) if gold_number is not None else None
    if gold_number is None or pred_number is None:
        return None
    return _numeric_verdict(gold_number, pred_number)
