"""The code domain's prompt templates, and the rule that picks them over the recipe's `prompts:` section.

The `prompts:` section's defaults are the math game's; a code run that leaves a template at its math default gets
the code template below instead, and one that sets a template in its recipe gets that (it must keep `{passage}` /
`{question}`). System messages come from the recipe unchanged.
"""

from __future__ import annotations

import dataclasses

from pasodoble.core import prompts
from pasodoble.core.prompts import PromptConfig

_FORMAT = (
    "Write the task in one of two forms, using exactly these tags.\n\n"
    "Output prediction: a short program that prints its result, and the text it reads from standard input "
    "(leave <input></input> empty when it reads none):\n"
    "<task>output</task>\n<program>\nPYTHON PROGRAM\n</program>\n<input>\nSTANDARD INPUT\n</input>\n\n"
    "Function writing: a statement, a reference solution defining the function, and tests, one assert per line, "
    "each calling the function with literal arguments and comparing with a literal value:\n"
    "<task>function</task>\n<problem>\nSTATEMENT\n</problem>\n<solution>\nPYTHON FUNCTION\n</solution>\n"
    "<tests>\nassert NAME(ARGUMENTS) == EXPECTED\n</tests>\n\n"
    "Use only the standard library. No files, network, clocks or randomness: the task must give the same result "
    "every time it runs. Do not put the answer in the task."
)
PROPOSER_TEMPLATE = (
    "You are the proposer in a proposer-solver game. Write one challenging, self-contained, unambiguous Python task "
    "inspired by the code below.\n\nCode:\n{passage}\n\n" + _FORMAT
)
PROPOSER_TEMPLATE_NO_PASSAGE = (
    "You are the proposer in a proposer-solver game. Write one challenging, self-contained, unambiguous Python "
    "task.\n\n" + _FORMAT
)
SOLVER_TEMPLATE = (
    "{question}\n\nIf the task asks what a program prints, reason step by step, then give exactly the printed text "
    "between <output> and </output>. If it asks for a function, give the whole function in one ```python code block."
)


def code_prompts(cfg: PromptConfig) -> PromptConfig:
    """`cfg` with each template still at its math default replaced by the code one."""
    swaps = {
        "proposer_template": (prompts.DEFAULT_PROPOSER_TEMPLATE, PROPOSER_TEMPLATE),
        "proposer_template_no_passage": (
            prompts.DEFAULT_PROPOSER_TEMPLATE_NO_PASSAGE,
            PROPOSER_TEMPLATE_NO_PASSAGE,
        ),
        "solver_template": (prompts.DEFAULT_SOLVER_TEMPLATE, SOLVER_TEMPLATE),
    }
    changes = {name: code for name, (math, code) in swaps.items() if getattr(cfg, name) == math}
    return dataclasses.replace(cfg, **changes) if changes else cfg
