"""Prompt templates and completion formats of the tiny world.

The formats are the ones real models use in this project (docs/METHOD.md): the Proposer writes
`<problem>QUESTION</problem><answer>STEPS \\boxed{N}</answer>` and the Solver writes `STEPS \\boxed{N}`. Templates are
rendered into a user message; the chat template is applied afterwards. They are kept very short because the tiny
models have a small context (prompt + completion stays under about 128 tokens).

Departure from the paper: the paper's prompts are long instructions for a 1.7B+ model; a tiny model learns the task
from SFT data, so the instruction is just a cue that tells the two roles apart.
"""

from __future__ import annotations

PROPOSER_TEMPLATE = "{passage}\nWrite a problem."  # `{passage}`: one corpus passage
PROPOSER_TEMPLATE_NO_PASSAGE = "Write a problem."  # the no-knowledge ablation
SOLVER_TEMPLATE = "{question}"  # `{question}`: the question text alone


def boxed(answer: int | str) -> str:
    """`\\boxed{N}`."""
    return f"\\boxed{{{answer}}}"


def solver_completion(steps: list[str], answer: int | str) -> str:
    """Solver text: the worked steps, then the boxed answer."""
    return " ".join([*steps, boxed(answer)])


def proposer_completion(question: str, steps: list[str], answer: int | str) -> str:
    """Proposer text: the question, then an answer part with worked steps ending in the boxed answer."""
    return f"<problem>{question}</problem><answer>{solver_completion(steps, answer)}</answer>"


def proposer_prompt(passage: str | None) -> str:
    """User message for the Proposer (`None`: no passage, the ablation)."""
    return PROPOSER_TEMPLATE_NO_PASSAGE if passage is None else PROPOSER_TEMPLATE.format(passage=passage)


def solver_prompt(question: str) -> str:
    """User message for the Solver."""
    return SOLVER_TEMPLATE.format(question=question)
