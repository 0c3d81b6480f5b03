"""Checking a Proposer's label where the question is plain integer arithmetic: parse with `ast`, never evaluate.

What: `arithmetic_value("What is 12 + 47 * 6?") -> 294`; `None` for anything that is not a bounded integer
expression of int literals, unary minus and `+ - * //` (names, calls, floats, `**`, `/`, division by zero,
too deep, too many nodes, a literal or an intermediate value past `MAX_ABS`). `label_verdict(question, answer)`
says whether the label equals that value (`None`: the question cannot be checked). The math domain's
`check_label` is this function.

Why: the paper verifies its cold start's labels with a second model; self-play peers verify during RL by execution
or majority vote. On arithmetic the truth is computable, so a wrong label can be rejected (`wrong_label`) and a
run that keeps the check off still measures its own label noise. Nothing here calls `eval`: the tree is walked
node by node, each product's size bounded before it is computed, so `9**9**9` or a product of huge literals is
refused, not run.
"""

from __future__ import annotations

import ast
import re

MAX_CHARS = 400  # longer text is not checked
MAX_NODES = 64  # AST nodes of the expression
MAX_DEPTH = 16  # nesting of the expression tree
MAX_ABS = 10**18  # every literal and intermediate value stays within this

# A question may wrap its expression in words: "What is 3 + 4?", "Compute 3 + 4.", "3 + 4 = ?".
_PREFIX = re.compile(r"^\s*(?:what\s+is|compute|calculate|evaluate|find)\s*:?\s*", re.IGNORECASE)
_SUFFIX = re.compile(r"\s*(?:=\s*\??|\?|\.)?\s*$")
_INT_LABEL = re.compile(r"^\s*[+-]?\d{1,19}\s*$")

_OPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
}


class _Refused(ValueError):
    """The expression is outside the checkable shapes."""


def _bounded(value: int) -> int:
    if abs(value) > MAX_ABS:
        raise _Refused("value out of range")
    return value


def _value(node: ast.AST, depth: int) -> int:
    if depth > MAX_DEPTH:
        raise _Refused("too deep")
    if isinstance(node, ast.Constant):
        # bool is an int subclass; True + 1 is not arithmetic a question states
        if type(node.value) is not int:
            raise _Refused("not an int literal")
        return _bounded(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = _value(node.operand, depth + 1)
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _value(node.left, depth + 1), _value(node.right, depth + 1)
        if isinstance(node.op, ast.FloorDiv) and right == 0:
            raise _Refused("division by zero")
        # Both operands are within MAX_ABS, so even a product is at most 10**36 before its bound is checked.
        return _bounded(_OPS[type(node.op)](left, right))
    raise _Refused(type(node).__name__)


def arithmetic_value(question: str) -> int | None:
    """The value of a bounded integer expression in `question`, or None when it is not one (never raises)."""
    if len(question) > MAX_CHARS:
        return None
    text = _SUFFIX.sub("", _PREFIX.sub("", question))
    if not text:
        return None
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        return None
    try:
        return _value(tree.body, 0)
    except (_Refused, RecursionError):
        return None


def label_verdict(question: str, answer: str) -> bool | None:
    """True/False: the label is/is not the question's value; None: the question is not checkable arithmetic."""
    value = arithmetic_value(question)
    if value is None:
        return None
    label = answer.strip().replace(",", "")
    return bool(_INT_LABEL.match(label)) and int(label) == value


def operand_count(question: str) -> int | None:
    """Int literals of a checkable question (the tiny world's tiers are operand counts), else None."""
    if arithmetic_value(question) is None:
        return None
    text = _SUFFIX.sub("", _PREFIX.sub("", question))
    return sum(isinstance(n, ast.Constant) for n in ast.walk(ast.parse(text, mode="eval")))
