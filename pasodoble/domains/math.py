"""The math domain: the paper's game, on the `Domain` interface, with the behaviour it had before the interface.

Every piece is the project's existing math code: passages from `core/knowledge.py`, prompts and the
`<problem>`/`<answer>`/`\\boxed{}` parser from `core/prompts.py` (the gate's stages are its `boxed_in_question`
and `answer_leaked` checks, in that order), answers read by `grader/extract.py`, the checker is the math-verify
`Grader` with its killable worker pool (`grader/pool.py`: each check bounded in CPU time, outside the trainer
process), diversity over the question's token ids, labels of integer arithmetic questions checked by
`domains/label_check.py` (`check_label`; the loop rejects a wrong one only with `labels.check` on), the grader's counters as `grader/...` metrics, and the paper's
six benchmarks as evaluation sets. tests/domains/test_math.py holds it equal to those functions.
"""

from __future__ import annotations

from pasodoble.core import prompts
from pasodoble.core.knowledge import KnowledgeConfig, PassageSampler
from pasodoble.core.prompts import Proposal
from pasodoble.core.step_metrics import grader_metrics
from pasodoble.domains.base import GateStage
from pasodoble.domains.label_check import label_verdict
from pasodoble.domains.labels import WRONG_LABEL
from pasodoble.grader.extract import extract_answer

# The paper's six test sets, its AVG columns (`pasodoble.evals.benchmarks` defines how each is read).
EVAL_SETS = ("aime24", "aime25", "amc23", "gsm8k", "math500", "olympiadbench")


def _stage(reason_of):
    return lambda proposals: [reason_of(p) for p in proposals]


class MathDomain:
    name = "math"
    invalid_reasons = (*prompts.INVALID_REASONS, WRONG_LABEL)  # wrong_label: only with labels.check on
    gate = (
        GateStage("no box in the question", _stage(prompts.box_in_question_reason)),
        GateStage("answer not in the question", _stage(prompts.leak_reason)),
    )
    eval_sets = EVAL_SETS

    def open_corpus(self, cfg: KnowledgeConfig, tokenizer=None) -> PassageSampler:
        return PassageSampler(cfg, tokenizer=tokenizer)

    def proposer_messages(self, passage: str | None, cfg: prompts.PromptConfig) -> list[dict[str, str]]:
        return prompts.proposer_messages(passage, cfg)

    def solver_messages(self, question: str, cfg: prompts.PromptConfig) -> list[dict[str, str]]:
        return prompts.solver_messages(question, cfg)

    def parse(self, text: str) -> Proposal:
        return prompts.parse_tags(text)

    def check_label(self, question: str, answer: str) -> bool | None:
        """Whether the label is the value of an integer arithmetic question (None: not such a question)."""
        return label_verdict(question, answer)

    def extract_answer(self, text: str) -> str | None:
        return extract_answer(text)[0]

    def open_checker(self, cfg):
        # The grader module loads math-verify, which only checking needs (the loop imports without it).
        from pasodoble.grader.grader import Grader

        return Grader(cfg)

    def diversity_key(self, question: str, tokenizer) -> list[int]:
        return list(tokenizer(question, add_special_tokens=False)["input_ids"])

    def metrics(self, counters: dict[str, int]) -> dict[str, float]:
        return grader_metrics(counters)
