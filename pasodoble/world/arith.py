"""The tiny world's own arithmetic: a tokenizer and precedence parser for its question grammar, and worked steps.

Why: the world needs true answers for held-out problems, a way to check the Proposer's labels, and a teacher that
writes worked steps, all without running Python `eval` on any text (model output included). Everything here is
pure and works on plain strings and ints.

Grammar (whitespace anywhere between tokens):

    question := ["What is"] expr ["?"]
    expr     := term (("+" | "-") term)*
    term     := factor ("*" factor)*
    factor   := INT | "-" factor | "(" expr ")"

Usage: `solve("What is 12 + 47 * 6?") -> 294`; `solve("hello") -> None`.

Worked steps are the column method the tiny models learn, one fact per step: `47+38: 7+8=15, 4+3=7, 7+1=8, so 85.`
for a sum and `47*6: 7*6=42, 4*6=24, 24+4=28, so 282.` for a product by a one-digit number. `steps()` writes them
for sums and products of non-negative numbers (multi-digit factors fall back to a one-line step); the world's tiers
stay inside that. An expression with products and sums gets a substitution line between them (`12+47*6 = 12+282.`).

Why these scratchpads (measured, 100 held-out problems per tier, same SFT budget): a column written as one fused
step `4*6+4=28` left the tiny Solver at 64% greedy on `A * d`; one fact per step (`4*6=24, 24+4=28`) lifted it to
90-93%. Without the substitution line, three-operand problems failed mostly by copying the wrong addend from the
question into the final sum (products right, 8% greedy); with it they reached 49-74%: every copy is a local one.
Sums with a carry are written one fact per step too (`4+3=7, 7+1=8`): the fused `4+3+1=8` was where the remaining
two-digit-sum errors were (91-93% greedy), and splitting it gave 100%. Table in `build.py`.
"""

from __future__ import annotations

import re

MAX_CHARS = 200  # longer text is not a tiny-world question
MAX_DIGITS = 12  # bigger literals are not either; keeps every computation small
MAX_DEPTH = 20  # parenthesis nesting limit, so the recursive parser cannot overflow

_TOKEN = re.compile(r"\s*(?:([0-9]+)|(.))", re.DOTALL)


class _Malformed(ValueError):
    """Raised inside the parser; `solve` turns it into None."""


def tokenize(expr: str) -> list[str]:
    """Split an expression into integer literals and one-character operators; raise on anything else."""
    tokens: list[str] = []
    pos = 0
    expr = expr.rstrip()
    while pos < len(expr):
        match = _TOKEN.match(expr, pos)
        if match is None:
            raise _Malformed(expr[pos:])
        number, op = match.groups()
        if number is not None:
            if len(number) > MAX_DIGITS:
                raise _Malformed(number)
            tokens.append(number)
        elif op in "+-*()":
            tokens.append(op)
        else:
            raise _Malformed(op)
        pos = match.end()
    return tokens


class _Parser:
    """Recursive-descent parser that evaluates as it parses (the grammar in the module docstring)."""

    def __init__(self, tokens: list[str]):
        self.tokens = tokens
        self.pos = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise _Malformed("unexpected end")
        self.pos += 1
        return token

    def expr(self, depth: int) -> int:
        value = self.term(depth)
        while self.peek() in ("+", "-"):
            op = self.take()
            right = self.term(depth)
            value = value + right if op == "+" else value - right
        return value

    def term(self, depth: int) -> int:
        value = self.factor(depth)
        while self.peek() == "*":
            self.take()
            value *= self.factor(depth)
        return value

    def factor(self, depth: int) -> int:
        if depth > MAX_DEPTH:
            raise _Malformed("nesting too deep")
        token = self.take()
        if token[0] in "0123456789":
            return int(token)
        if token == "-":
            return -self.factor(depth + 1)
        if token == "(":
            value = self.expr(depth + 1)
            if self.take() != ")":
                raise _Malformed("missing )")
            return value
        raise _Malformed(token)


def evaluate(expr: str) -> int | None:
    """Value of an expression in the world's grammar, or None if it is not well formed."""
    try:
        tokens = tokenize(expr)
        if not tokens:
            return None
        parser = _Parser(tokens)
        value = parser.expr(0)
    except _Malformed:
        return None
    return value if parser.peek() is None else None


def solve(question: str) -> int | None:
    """True answer of a tiny-world question (`What is 12 + 47 * 6?`), or None when it is not well formed."""
    if not isinstance(question, str) or len(question) > MAX_CHARS:
        return None
    text = question.strip()
    if text.startswith("What is"):
        text = text[len("What is") :]
    text = text.strip()
    if text.endswith("?"):
        text = text[:-1]
    return evaluate(text)


def add_steps(a: int, b: int) -> str:
    """Column addition of two non-negative ints, units first: `47+38: 7+8=15, 4+3=7, 7+1=8, so 85.`"""
    da, db = str(a)[::-1], str(b)[::-1]
    columns, carry = [], 0
    for i in range(max(len(da), len(db))):
        x = int(da[i]) if i < len(da) else 0
        y = int(db[i]) if i < len(db) else 0
        total = x + y + carry
        columns.append(f"{x}+{y}={x + y}, {x + y}+{carry}={total}" if carry else f"{x}+{y}={total}")
        carry = total // 10
    return f"{a}+{b}: {', '.join(columns)}, so {a + b}."


def mul_steps(a: int, b: int) -> str:
    """Column product of a non-negative int by a one-digit int: `47*6: 7*6=42, 4*6=24, 24+4=28, so 282.`"""
    if not 0 <= b <= 9:
        return f"{a}*{b}: so {a * b}."
    columns, carry = [], 0
    for digit in str(a)[::-1]:
        x = int(digit)
        product = x * b
        total = product + carry
        columns.append(f"{x}*{b}={product}, {product}+{carry}={total}" if carry else f"{x}*{b}={total}")
        carry = total // 10
    return f"{a}*{b}: {', '.join(columns)}, so {a * b}."


def substitution(operands: list[int], ops: list[str], summands: list[int]) -> str:
    """The expression with its products replaced by their values: `52+49*7 = 52+343.`"""
    expr = "".join(str(operands[0]) + "".join(op + str(v) for op, v in zip(ops, operands[1:])))
    return f"{expr} = {'+'.join(map(str, summands))}."


def steps(operands: list[int], ops: list[str]) -> list[str]:
    """Worked steps for `operands[0] ops[0] operands[1] ...` with `+` and `*`: products first, then sums left to right.

    A product with a one-digit left factor is written with the digit second (`6*47` is worked as `47*6`), which is
    what the column method needs; the value is the same.
    """
    if len(ops) != len(operands) - 1 or any(op not in ("+", "*") for op in ops):
        raise ValueError(f"steps() handles + and * only, got {ops}")
    lines: list[str] = []
    summands: list[int] = [operands[0]]
    for op, value in zip(ops, operands[1:]):
        if op == "*":
            left = summands.pop()
            big, small = (value, left) if left < 10 <= value else (left, value)
            lines.append(mul_steps(big, small))
            summands.append(left * value)
        else:
            summands.append(value)
    if lines and len(summands) > 1:
        lines.append(substitution(operands, ops, summands))
    total = summands[0]
    for value in summands[1:]:
        lines.append(add_steps(total, value))
        total += value
    return lines
