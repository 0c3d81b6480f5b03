"""Two-stage ANTLR parsing for math-verify's LaTeX parser: SLL prediction first, full LL only where SLL fails.

Why: most of a math-verify check on a symbolic answer is spent in latex2sympy's ANTLR parser, and most of that in
full-context (LL) prediction. ANTLR documents the standard remedy: parse with the faster `PredictionMode.SLL`,
which "either returns the same parse tree that the LL prediction mode would, or reports a syntax error", and parse
again in LL mode only after an error. On the benchmark answer mix this cuts a worker's parse time by about a third.

How: `install()` (called once by each worker process, never in the caller's process) wraps the `latex2sympy` that
math-verify's parser calls. Each call first runs with its outermost ANTLR parser in SLL mode; on any exception the
call is redone from scratch, unchanged, in ANTLR's default LL mode, so it returns or raises exactly what plain
math-verify would. Verdict safety rests on three points:
- latex2sympy turns every syntax error into an exception (its error listener raises), so a spurious SLL error can
  only lead to the LL redo, never to a different tree;
- a parse tree SLL does return is the one LL would build (ANTLR's guarantee), and conversion is the same code;
- latex2sympy re-parses sub-texts while converting (derivatives, function arguments), some inside its own `try`
  blocks; those nested parsers always run in LL mode, so no SLL error can be caught and handled differently.
The test-suite compares SLL and LL parse results on every benchmark gold answer and the worker-check verdicts on
math-verify's own test cases. Departure: none in results; only this wrapper's `fallbacks` count differs.
"""

from __future__ import annotations

from typing import Any

import math_verify.parser as math_verify_parser
from antlr4.atn.PredictionMode import PredictionMode
from latex2sympy2_extended.latex2sympy2 import _Latex2Sympy

_ORIGINAL_LATEX2SYMPY = math_verify_parser.latex2sympy
_ORIGINAL_CREATE_PARSER = _Latex2Sympy.create_parser


class _State:
    """Whether the next ANTLR parser created is the outermost one of an SLL attempt; SLL attempts that failed."""

    sll_next = False
    fallbacks = 0


def _create_parser(self: _Latex2Sympy, latex_str: str) -> Any:
    parser = _ORIGINAL_CREATE_PARSER(self, latex_str)
    if _State.sll_next:
        parser._interp.predictionMode = PredictionMode.SLL
        _State.sll_next = False  # nested parsers made while converting this tree keep ANTLR's default LL mode
    return parser


def two_stage_latex2sympy(*args: Any, **kwargs: Any) -> Any:
    """`latex2sympy(*args, **kwargs)` parsed in SLL mode first, then as is (LL) if that raised anything."""
    _State.sll_next = True
    try:
        return _ORIGINAL_LATEX2SYMPY(*args, **kwargs)
    except (
        Exception
    ):  # a syntax error SLL may report falsely, or a real error: LL redoes the call and decides
        _State.fallbacks += 1
    finally:
        _State.sll_next = False
    return _ORIGINAL_LATEX2SYMPY(*args, **kwargs)


def install() -> None:
    """Make math-verify's `parse` use two-stage parsing in this process (idempotent)."""
    _Latex2Sympy.create_parser = _create_parser
    math_verify_parser.latex2sympy = two_stage_latex2sympy


def uninstall() -> None:
    """Restore plain LL parsing (tests compare both)."""
    _Latex2Sympy.create_parser = _ORIGINAL_CREATE_PARSER
    math_verify_parser.latex2sympy = _ORIGINAL_LATEX2SYMPY


def fallbacks() -> int:
    """How many calls in this process fell back to LL parsing."""
    return _State.fallbacks
