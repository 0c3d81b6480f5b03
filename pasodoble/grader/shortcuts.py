"""Two cheaper ways to reach the same math-verify verdict inside a grader worker: a numeric disproof in front of
`simplify`, and a memo for `solve`.

Why: after parsing, almost all of a worker's time on a wrong symbolic answer goes to two SymPy calls deep inside
math-verify's `verify`: `simplify(a - b)` (its last test of whether two expressions are equal, also reached for the
two sides of equations and for set elements) and `solve` (equations are compared by their solutions, and the gold's
equation is solved again for every prediction). Neither can be skipped in general, but both can be skipped where
the answer is known.

1. *Numeric disproof.* math-verify asks `simplify(a - b).is_zero`. When `a - b` is a plain expression (an allowed
   set of functions, rational constants only, every symbol plain real as math-verify's parser makes them) and its
   value at one fixed real point is clearly not 0 (30-digit evaluation that SymPy certifies, `strict=True`;
   |value| > 1e-8), then `a - b` is not the zero function on the reals, so no correct simplification can return 0:
   the answer is False without calling `simplify`. Anything else (a value near 0, an evaluation error, a Float, a
   derivative, an undefined function, a symbol with other assumptions) calls the original, unchanged. The cheap tests
   math-verify runs before `simplify` (string form, numeric rounding) are left as they are.
2. *Solve memo.* `solve` is a pure function of its arguments; a worker keeps the last `SOLVE_CACHE_SIZE` results
   keyed by (expression, symbols) and hands out copies. A call that raises is not stored, so it raises again.

Both only make a check faster. Near the grader's time limit a faster check can finish where a slower one would
have timed out, as on a faster machine; no verdict reached within the limit changes. Each worker counts both
(`simplify_skipped`, `solve_reused` in the grader's counters).

`install()` is called once by each worker process (never in the caller's process); `uninstall()` restores
math-verify. The test-suite compares math-verify's verdicts with and without these shortcuts on every symbolic gold
answer of three benchmarks against four near misses each, checks identities that only `simplify` proves are never
disproved, and runs math-verify's own test cases through the workers; `bench/grader.py` checks the benchmark answer
mix and `bench/grader.py --shortcuts` times them.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from fractions import Fraction
from typing import Any

import math_verify.grader as math_verify_grader
from sympy import (
    Abs,
    Add,
    Expr,
    Integer,
    Mul,
    NumberSymbol,
    Pow,
    Rational,
    Symbol,
    ceiling,
    exp,
    floor,
    log,
    preorder_traversal,
)
from sympy.core.numbers import ImaginaryUnit
from sympy.functions.elementary.hyperbolic import HyperbolicFunction
from sympy.functions.elementary.miscellaneous import Max, Min
from sympy.functions.elementary.trigonometric import InverseTrigonometricFunction, TrigonometricFunction

SOLVE_CACHE_SIZE = 512
_NONZERO = 1e-8  # |a - b| above this at the point, with 30 certified digits, is not 0
_REAL_SYMBOL = Symbol("x", real=True).assumptions0  # the assumptions math-verify's parser gives its symbols
_ALLOWED = (
    Add,
    Mul,
    Pow,
    Symbol,
    Integer,
    Rational,
    NumberSymbol,  # pi, E, ...
    ImaginaryUnit,
    exp,
    log,
    Abs,
    floor,
    ceiling,
    Max,
    Min,
    TrigonometricFunction,
    InverseTrigonometricFunction,
    HyperbolicFunction,
)

_ORIGINAL_SYMBOLIC_EQ = math_verify_grader.sympy_symbolic_eq
_ORIGINAL_SOLVE = math_verify_grader.solve


_STATS = {"disproofs": 0, "solve_hits": 0}  # how often each shortcut answered in this process (see `stats`)


def _point(symbol: Symbol) -> Rational:
    """A fixed rational between 1 and 3 for a symbol, different for different names (coincidences are unlikely)."""
    digest = int.from_bytes(hashlib.blake2b(symbol.name.encode(), digest_size=8).digest(), "big")
    fraction = Fraction(digest % 999_983, 999_983)
    return 1 + 2 * Rational(fraction.numerator, fraction.denominator) + Rational(1, 7919)


def _plain(expr: Expr) -> bool:
    """Only allowed node types, and every symbol plain real."""
    for node in preorder_traversal(expr):
        if not isinstance(node, _ALLOWED):
            return False
        if isinstance(node, Symbol) and node.assumptions0 != _REAL_SYMBOL:
            return False
    return True


def certainly_different(a: Any, b: Any) -> bool:
    """True only when `a - b` is surely not the zero function (so `simplify(a - b)` cannot be 0)."""
    if not isinstance(a, Expr) or not isinstance(b, Expr):
        return False
    difference = a - b
    if not isinstance(difference, Expr) or not _plain(difference):
        return False
    point = {symbol: _point(symbol) for symbol in difference.free_symbols}
    try:
        value = difference.evalf(30, subs=point, strict=True)
        if value.free_symbols or not value.is_number:
            return False
        magnitude = abs(complex(value))
    except Exception:  # an evaluation that fails (or cannot certify its digits) proves nothing
        return False
    return magnitude == magnitude and magnitude != float("inf") and magnitude > _NONZERO


def _symbolic_eq(a: Any, b: Any) -> bool:
    try:
        different = certainly_different(a, b)
    except Exception:  # e.g. `a - b` undefined for these types: math-verify's own function decides
        different = False
    if different:
        _STATS["disproofs"] += 1
        return False
    return _ORIGINAL_SYMBOLIC_EQ(a, b)


_SOLVED: OrderedDict[tuple, list] = OrderedDict()


def _copy(solutions: Any) -> Any:
    if isinstance(solutions, list):
        return [dict(item) if isinstance(item, dict) else item for item in solutions]
    return solutions


def _solve(f: Any, *symbols: Any, **flags: Any) -> Any:
    try:
        key = (
            f,
            tuple(frozenset(s) if isinstance(s, (set, frozenset)) else s for s in symbols),
            tuple(sorted(flags.items())),
        )
        hash(key)
    except TypeError:
        return _ORIGINAL_SOLVE(f, *symbols, **flags)
    if key in _SOLVED:
        _SOLVED.move_to_end(key)
        _STATS["solve_hits"] += 1
        return _copy(_SOLVED[key])
    solutions = _ORIGINAL_SOLVE(f, *symbols, **flags)
    _SOLVED[key] = _copy(solutions)
    if len(_SOLVED) > SOLVE_CACHE_SIZE:
        _SOLVED.popitem(last=False)
    return solutions


def stats() -> tuple[int, int]:
    """(simplify calls skipped by a disproof, solve calls answered from the memo) so far in this process."""
    return _STATS["disproofs"], _STATS["solve_hits"]


def install() -> None:
    """Put both shortcuts in front of math-verify's `simplify` test and `solve` (idempotent)."""
    math_verify_grader.sympy_symbolic_eq = _symbolic_eq
    math_verify_grader.solve = _solve


def uninstall() -> None:
    """Restore math-verify's own functions and forget solved equations."""
    math_verify_grader.sympy_symbolic_eq = _ORIGINAL_SYMBOLIC_EQ
    math_verify_grader.solve = _ORIGINAL_SOLVE
    _SOLVED.clear()
