"""The tiny world's knowledge corpus: short passages that name the numbers and operations a problem may use.

Why: dual-play grounds each proposal in a passage of a knowledge corpus. Here a passage is an arithmetic "fact
sheet" (`Numbers: 47, 6, 38, 3. Operations: + and *.`); the Proposer's questions use its numbers, so the passage
decides what can be asked and the no-passage ablation loses that knowledge. Every passage holds two two-digit and
two one-digit numbers, enough for questions from one tier up to four operands: the Proposer can climb in
difficulty within one passage.

Usage: `random_passage(rng)` for the corpus file; `passage_for(expr, rng)` for a teacher example that must contain
the numbers of a chosen expression.

Worked passages (`world.passages: worked`, an alternative corpus): each passage is one solved expression from the
training side of the held-out split, `Fact: 38 + 47 * 6 = 320.`, of any tier. The Proposer's examples ask about the
passage's expression, so a Proposer that copies faithfully has a correct label for a question harder than it can
solve; that is the knowledge advantage the paper's corpus passages give. The Solver never sees a passage.
Measured (README, worked-passage experiment): the SFT-warmed tiny Proposer works the answer out rather than copying
the passage's value, and 29% of its three-operand labels were right. With `world.proposer_answer: copied` its SFT
answers are the passage's value alone (`<answer>\\boxed{320}</answer>`), and in a 120-update online run 92% of
its three-operand labels (46% of four-operand ones) were right.
"""

from __future__ import annotations

import random

from pasodoble.world.problems import Expr

OPERATIONS = ("+", "*", "+ and *")


def passage_text(numbers: list[int], operations: str) -> str:
    """`Numbers: 47, 6, 38, 3. Operations: + and *.`"""
    return f"Numbers: {', '.join(map(str, numbers))}. Operations: {operations}."


def _fill(numbers: list[int], rng: random.Random) -> list[int]:
    """Pad to two two-digit and two one-digit numbers, then shuffle."""
    out = list(numbers)
    while sum(n >= 10 for n in out) < 2:
        out.append(rng.randint(10, 99))
    while sum(n < 10 for n in out) < 2:
        out.append(rng.randint(2, 9))
    rng.shuffle(out)
    return out


def random_passage(rng: random.Random) -> str:
    """One corpus passage: random numbers, one of the operation sets."""
    return passage_text(_fill([], rng), rng.choice(OPERATIONS))


def passage_for(expr: Expr, rng: random.Random) -> str:
    """A passage that holds the numbers and the operations of `expr`, plus filler numbers."""
    ops = set(expr.ops)
    operations = "+ and *" if len(ops) == 2 else rng.choice([ops.pop(), "+ and *"])
    return passage_text(_fill(list(expr.operands), rng), operations)


def worked_passage(expr: Expr) -> str:
    """`Fact: 38 + 47 * 6 = 320.`: one solved expression."""
    return f"Fact: {expr.question[len('What is ') : -1]} = {expr.answer}."
