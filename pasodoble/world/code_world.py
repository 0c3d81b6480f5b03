"""The tiny code world: short Python programs over small integers whose printed output a tiny model can learn.

What: three tiers of programs, generated from numbers (never from text that is then run):
- c1: `a = 3`, `b = 4`, `print(a * b)`;
- c2: `x = 7`, `y = x - 2`, `print(y * 3)`;
- c3: `s = 4`, `for i in range(3):`, `    s = s + 5`, `print(s)`.
The teacher writes the cold-start data in the code domain's formats (`domains/code_tasks.py`): a Solver example is
the output question and a trace of the values (`x = 7, y = 5, y * 3 = 15 <output>15</output>`); a Proposer example
is a program passage and a fresh program of the same tier in the `<task>output</task>` format. Every program passes
the code domain's leak test (its output is not one of its constants), so each teacher proposal is valid; the value
a program prints is computed here with `operator` on the numbers, and the sandbox recomputes it as the gold.

Why: `world.game: code` builds this world instead of arithmetic, with the same tokenizer, tiny models, SFT warm-up
and cache (`world/build.py`, `sft/tiny.py`); `recipes/tiny-code.yaml` plays dual-play on it (docs/DOMAINS.md).
"""

from __future__ import annotations

import operator
import random
from dataclasses import dataclass

from pasodoble.domains.code_tasks import output_leak, output_question, spec_json

TIERS = ("c1", "c2", "c3")
SFT_MIX = {"c1": 0.4, "c2": 0.45, "c3": 0.15}  # c3 small, so RL starts above a pass rate of 0 there
PROPOSER_TEMPLATE = "{passage}\nWrite a task."
SOLVER_TEMPLATE = "{question}"
_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


@dataclass(frozen=True)
class Program:
    tier: str
    lines: tuple[str, ...]
    trace: tuple[str, ...]  # the values the Solver's worked answer states, in order
    output: int

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def _op(rng: random.Random) -> str:
    return rng.choice(tuple(_OPS))


def _draw(tier: str, rng: random.Random) -> Program:
    if tier == "c1":
        a, b, op = rng.randint(1, 9), rng.randint(1, 9), _op(rng)
        out = _OPS[op](a, b)
        return Program(tier, (f"a = {a}", f"b = {b}", f"print(a {op} b)"), (f"a {op} b = {out}",), out)
    if tier == "c2":
        x, b, c, op1, op2 = rng.randint(1, 9), rng.randint(1, 9), rng.randint(1, 9), _op(rng), _op(rng)
        y = _OPS[op1](x, b)
        out = _OPS[op2](y, c)
        lines = (f"x = {x}", f"y = x {op1} {b}", f"print(y {op2} {c})")
        return Program(tier, lines, (f"y = {y}", f"y {op2} {c} = {out}"), out)
    s, n, k = rng.randint(0, 9), rng.randint(2, 4), rng.randint(1, 9)
    lines = (f"s = {s}", f"for i in range({n}):", f"    s = s + {k}", "print(s)")
    trace = tuple(f"s = {s + k * (i + 1)}" for i in range(n))
    return Program(tier, lines, trace, s + k * n)


def sample_program(tier: str, rng: random.Random) -> Program:
    """A program of `tier` whose output passes the code domain's leak test."""
    if tier not in TIERS:
        raise ValueError(f"unknown code tier {tier!r}; use {', '.join(TIERS)}")
    while True:
        program = _draw(tier, rng)
        if output_leak(str(program.output), program.text, "") is None:
            return program


def question(program: Program) -> str:
    return output_question(program.text, "")


def solver_completion(program: Program) -> str:
    return f"{', '.join(program.trace)} <output>{program.output}</output>"


def proposer_completion(program: Program) -> str:
    return f"<task>output</task><program>\n{program.text}\n</program><input></input>"


def _tier(rng: random.Random) -> str:
    return rng.choices(list(SFT_MIX), weights=list(SFT_MIX.values()))[0]


def world_rows(config, rng: random.Random) -> tuple[list[dict], list[dict], list[dict], list[dict]]:
    """(corpus, Solver SFT, Proposer SFT, held-out tier rows) for a `WorldConfig` with `game: code`.

    Held-out rows carry the task spec as `answer`, so the code domain's checker grades them by running it."""
    corpus = [
        {"id": f"c{i:05d}", "text": sample_program(rng.choice(TIERS), rng).text}
        for i in range(config.corpus_size)
    ]
    solver = []
    for _ in range(config.sft_solver_examples):
        program = sample_program(_tier(rng), rng)
        solver.append(
            {
                "prompt": SOLVER_TEMPLATE.format(question=question(program)),
                "completion": solver_completion(program),
            }
        )
    proposer = []
    for _ in range(config.sft_proposer_examples):
        tier = _tier(rng)
        passage, task = sample_program(tier, rng), sample_program(tier, rng)
        proposer.append(
            {
                "prompt": PROPOSER_TEMPLATE.format(passage=passage.text),
                "completion": proposer_completion(task),
            }
        )
    held_out = random.Random(f"code-world/held-out/{config.seed}")
    tiers = []
    for tier in TIERS:
        for i in range(config.tier_size):
            program = sample_program(tier, held_out)
            spec = spec_json({"kind": "output", "program": program.text, "stdin": ""})
            tiers.append(
                {"id": f"{tier}-{i:04d}", "tier": tier, "question": question(program), "answer": spec}
            )
    return corpus, solver, proposer, tiers
