"""The worker's shortcuts (numeric disproof before `simplify`, memoised `solve`) never change a verdict."""

from __future__ import annotations

import re

import math_verify.grader as math_verify_grader
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from math_verify import parse, verify
from sympy import (
    Abs,
    Float,
    Function,
    Rational,
    Symbol,
    cos,
    exp,
    expand,
    floor,
    log,
    pi,
    simplify,
    sin,
    sqrt,
    tan,
)

from pasodoble.grader import shortcuts

x, y, t = (Symbol(name, real=True) for name in "xyt")


@pytest.fixture
def installed():
    shortcuts.install()
    yield
    shortcuts.uninstall()


@pytest.mark.parametrize(
    "a, b",
    [
        (x + 1, x + 2),
        (sin(2 * t) / 15, sin(3 * t) / 15),
        (exp(-2 * t) + x, exp(-3 * t) + x),
        (sqrt(2) * cos(2 * t - pi / 4), sqrt(3) * cos(2 * t - pi / 4)),
        (floor((2 * x - 1) / 5), floor((3 * x - 1) / 5)),
        (Rational(1, 3), Rational(1, 2)),
    ],
)
def test_different_expressions_are_disproved(a, b):
    assert shortcuts.certainly_different(a, b)
    assert not simplify(a - b).is_zero  # and simplify agrees


@pytest.mark.parametrize(
    "a, b",
    [
        (sin(x) ** 2 + cos(x) ** 2, 1),  # identities only simplify proves
        ((x**2 - 1) / (x - 1), x + 1),
        (sqrt(x**2), Abs(x)),
        (exp(log(x)), x),  # equal at the (positive) point: never disproved
        (tan(x), sin(x) / cos(x)),
        (expand((x + y) ** 5), (x + y) ** 5),
        (x + Float("0.5"), x + 1),  # Floats: left to math-verify
        (Function("f")(x), x),  # undefined functions: cannot be evaluated
        (Symbol("z") + 1, 2 * Symbol("z")),  # a symbol without math-verify's real assumption
        (x + 10**-12, x),  # too close to call
    ],
)
def test_equal_or_unsure_pairs_are_not_disproved(a, b):
    assert not shortcuts.certainly_different(a, b)


_LEAVES = st.sampled_from([x, y, t, Rational(1, 2), Rational(3), pi, Rational(-2)])
_UNARY = st.sampled_from([sin, cos, exp, sqrt, Abs, floor, lambda e: log(1 + e**2)])


def _expressions(depth: int = 3):
    return st.recursive(
        _LEAVES,
        lambda inner: st.one_of(
            st.tuples(inner, inner).map(lambda pair: pair[0] + pair[1]),
            st.tuples(inner, inner).map(lambda pair: pair[0] * pair[1]),
            st.tuples(_UNARY, inner).map(lambda pair: pair[0](pair[1])),
        ),
        max_leaves=6,
    )


@settings(max_examples=60, deadline=None)
@given(_expressions(), st.sampled_from(["expand", "rewrite", "other"]), _expressions())
def test_disproof_never_contradicts_simplify(a, how, other):
    """Equal-by-construction pairs are never disproved; a disproved pair is never simplified to 0."""
    if how == "expand":
        b = expand(a)
    elif how == "rewrite":
        b = a.rewrite(exp)
    else:
        b = other
    if how != "other":
        assert not shortcuts.certainly_different(a, b)
    elif shortcuts.certainly_different(a, b):
        assert simplify(a - b).is_zero is not True


def test_solve_memo_returns_equal_independent_copies(installed):
    equation = parse("\\boxed{x^{\\prime}+\\frac{r}{V} x-r c=0}")[0]
    first = math_verify_grader.solve(equation, equation.free_symbols)
    hits = shortcuts.stats()[1]
    second = math_verify_grader.solve(equation, set(equation.free_symbols))
    assert shortcuts.stats()[1] == hits + 1
    assert second == first and second is not first
    second[0].clear()  # a caller changing its copy does not change the memo
    assert math_verify_grader.solve(equation, equation.free_symbols) == first


def test_solve_that_raises_is_not_memoised(installed, monkeypatch):
    calls = []

    def failing(*args, **kwargs):
        calls.append(args)
        raise NotImplementedError("no algorithms")

    monkeypatch.setattr(shortcuts, "_ORIGINAL_SOLVE", failing)
    for _ in range(2):
        with pytest.raises(NotImplementedError):
            math_verify_grader.solve(x + y, {x, y})
    assert len(calls) == 2


def test_uninstall_restores_math_verify(installed):
    shortcuts.uninstall()
    assert math_verify_grader.solve is shortcuts._ORIGINAL_SOLVE
    assert math_verify_grader.sympy_symbolic_eq is shortcuts._ORIGINAL_SYMBOLIC_EQ


def _symbolic(symbolic_golds: list[str], step: int) -> list[str]:
    """Golds with a letter in them, every `step`-th; not the one whose solve alone runs past 5 s."""
    return [g for g in symbolic_golds if re.search(r"[a-zA-Z]", g) and "\\ddot" not in g][::step]


def _near_misses(gold: str) -> list[str]:
    bumped = re.sub(r"\d", lambda d: str((int(d.group()) + 1) % 10), gold, count=1)
    return [bumped, f"2({gold})", f"{gold}+1", re.sub(r"\s*([=,])\s*", r" \1 ", gold)]


def _verdicts(golds: list[str], with_shortcuts: bool) -> list[bool]:
    if with_shortcuts:
        shortcuts.install()
    try:
        return [
            verify(parse(f"\\boxed{{{gold}}}"), parse(f"\\boxed{{{pred}}}"))
            for gold in golds
            for pred in _near_misses(gold)
        ]
    finally:
        shortcuts.uninstall()


def test_same_verdicts_on_sampled_benchmark_answers(symbolic_golds):
    golds = _symbolic(symbolic_golds, step=25)
    disproofs_before = shortcuts.stats()[0]
    with_shortcuts = _verdicts(golds, with_shortcuts=True)
    assert shortcuts.stats()[0] > disproofs_before  # the shortcut was taken, not only its fallback
    assert with_shortcuts == _verdicts(golds, with_shortcuts=False)


@pytest.mark.slow
def test_same_verdicts_on_all_symbolic_benchmark_answers(symbolic_golds):
    golds = _symbolic(symbolic_golds, step=1)
    assert _verdicts(golds, with_shortcuts=True) == _verdicts(golds, with_shortcuts=False)
