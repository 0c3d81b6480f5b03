"""The `qa` domain: factual questions grounded in a passage, answered closed-book, checked as QA benchmarks check.

Pieces (all from `pasodoble/qa/`): passages from `core/knowledge.py`'s `PassageSampler` (any corpus of text
records); the Proposer writes `<question>`, `<answer>` and up to `max_aliases` `<alias>` tags; `parse` runs the
format checks (`parse_qa_format`) and the gate runs, cheapest first: span sizes, grounding in the passage it read
(the one stage that needs the passage), the leak test, self-containment. A valid proposal's `answer` is the gold
the checker receives: the answer and its aliases joined by newlines (`qa.check.join_golds`). The Solver sees the
question alone. The checker takes the best exact match over the golds after the `canonical` rule (NFKC, numbers,
SQuAD's steps), or token F1 >= `f1_threshold` when set; never substring credit. Its counters give
`solver/no_answer/fraction`, `solver/empty_answer/fraction`, `solver/answer_words/mean`,
`proposer/answer_words/mean` and `proposer/aliases/mean`; the loop counts the invalid reasons.

Prompts: the recipe's `prompts:` templates, except that templates left at the math defaults are replaced by the
QA ones (`qa/proposal.py`), so `domain: qa` alone asks QA questions. docs/QA.md has the whole story.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pasodoble.core import prompts
from pasodoble.core.knowledge import KnowledgeConfig, PassageSampler
from pasodoble.core.prompts import PromptConfig, Proposal
from pasodoble.domains.base import GateStage
from pasodoble.qa import proposal as qa
from pasodoble.qa.check import check, extract_answer, join_golds, split_golds
from pasodoble.qa.normalize import RULES, normalize

# The tiny QA world's held-out tiers (`pasodoble/qa/world.py`), evaluated by `pasodoble demo-qa`.
EVAL_SETS = ("qa-world/sft", "qa-world/corpus", "qa-world/multihop")


@dataclass(frozen=True)
class QAConfig:
    gates: qa.QAGates = field(
        default_factory=qa.QAGates
    )  # answer size, alias count, normalisation of the gates
    rule: str = "canonical"  # normalisation of the checker (normalize.RULES)
    f1_threshold: float | None = None  # correct when token F1 >= this (None: exact match)

    def validate(self) -> None:
        if self.rule not in RULES or self.gates.rule not in RULES:
            raise ValueError(f"qa: unknown normalisation rule; use one of {', '.join(RULES)}")
        if self.f1_threshold is not None and not 0 < self.f1_threshold <= 1:
            raise ValueError(f"qa: f1_threshold must be in (0, 1] or None, got {self.f1_threshold}")


@dataclass(frozen=True)
class QAVerdict:
    correct: bool  # exact match (or F1 >= threshold) with the answer or an alias
    extracted: str | None  # the short answer read from the response
    f1: float  # best token F1 over the golds


@dataclass
class QABatch:
    verdicts: list[QAVerdict]
    counters: dict[str, int]


class QAChecker:
    """Pure string checks: no workers or timeouts to own, so entering and leaving do nothing."""

    def __init__(self, config: QAConfig):
        self.config = config

    def __enter__(self) -> QAChecker:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def grade(self, golds: Sequence[str], responses: Sequence[str]) -> QABatch:
        rule, verdicts = self.config.rule, []
        counters = dict.fromkeys(("checks", "no_answer", "empty_answer", "answer_words", "gold_words"), 0)
        counters["aliases"] = 0
        for gold, response in zip(golds, responses, strict=True):
            answers, said = split_golds(gold), extract_answer(response)
            result = check(said, answers, rule=rule, f1_threshold=self.config.f1_threshold)
            verdicts.append(QAVerdict(result.correct, said, result.f1))
            words = len(normalize(said, rule).split()) if said is not None else 0
            counters["checks"] += 1
            counters["no_answer"] += said is None
            counters["empty_answer"] += words == 0
            counters["answer_words"] += words
            counters["gold_words"] += len(normalize(answers[0], rule).split())
            counters["aliases"] += len(answers) - 1
        return QABatch(verdicts, counters)


def _qa_proposal(p: Proposal) -> qa.QAProposal:
    golds = split_golds(p.answer)
    return qa.QAProposal(p.question, golds[0], tuple(golds[1:]), p.invalid_reason)


class QADomain:
    name = "qa"
    invalid_reasons = qa.INVALID_REASONS
    eval_sets = EVAL_SETS

    def __init__(self, config: QAConfig | None = None):
        self.config = config or QAConfig()
        self.config.validate()
        gates = self.config.gates
        self.gate = (
            GateStage("short spans", lambda ps: [qa.size_reason(_qa_proposal(p), gates) for p in ps]),
            GateStage("grounded in the passage", self._grounding, with_passages=True),
            GateStage(
                "answer not in the question", lambda ps: [qa.leak_reason(_qa_proposal(p), gates) for p in ps]
            ),
            GateStage("self-contained", lambda ps: [qa.self_reference_reason(_qa_proposal(p)) for p in ps]),
        )

    def _grounding(self, ps: Sequence[Proposal], passages: Sequence[str | None]) -> list[str | None]:
        # without a passage (the no-knowledge ablation) nothing can vouch for the answer: the stage passes it
        return [
            None if passage is None else qa.grounding_reason(_qa_proposal(p), passage, self.config.gates)
            for p, passage in zip(ps, passages, strict=True)
        ]

    def open_corpus(self, cfg: KnowledgeConfig, tokenizer=None) -> PassageSampler:
        return PassageSampler(cfg, tokenizer=tokenizer)

    def proposer_messages(self, passage: str | None, cfg: PromptConfig) -> list[dict[str, str]]:
        return prompts.proposer_messages(passage, self._prompts(cfg))

    def solver_messages(self, question: str, cfg: PromptConfig) -> list[dict[str, str]]:
        return prompts.solver_messages(question, self._prompts(cfg))

    def _prompts(self, cfg: PromptConfig) -> PromptConfig:
        """The recipe's templates, each left at its math default replaced by the QA one."""
        gates = self.config.gates

        def sized(template: str) -> str:
            return template.replace("{max_answer_tokens}", str(gates.max_answer_tokens)).replace(
                "{max_aliases}", str(gates.max_aliases)
            )

        defaults = {
            "proposer_template": (prompts.DEFAULT_PROPOSER_TEMPLATE, sized(qa.PROPOSER_TEMPLATE)),
            "proposer_template_no_passage": (
                prompts.DEFAULT_PROPOSER_TEMPLATE_NO_PASSAGE,
                sized(qa.PROPOSER_TEMPLATE_NO_PASSAGE),
            ),
            "solver_template": (prompts.DEFAULT_SOLVER_TEMPLATE, qa.SOLVER_TEMPLATE),
        }
        chosen = {
            name: qa_default if getattr(cfg, name) == math_default else getattr(cfg, name)
            for name, (math_default, qa_default) in defaults.items()
        }
        return PromptConfig(proposer_system=cfg.proposer_system, solver_system=cfg.solver_system, **chosen)

    def parse(self, text: str) -> Proposal:
        found = qa.parse_qa_format(text, self.config.gates)
        answer = join_golds(found.golds) if found.valid else found.answer
        return Proposal(found.question, answer, found.invalid_reason)

    def extract_answer(self, text: str) -> str | None:
        return extract_answer(text)

    def open_checker(self, cfg) -> QAChecker:
        """The QA checker; `cfg` (the recipe's math `grader:` section) has nothing it needs."""
        return QAChecker(self.config)

    def diversity_key(self, question: str, tokenizer) -> list[int]:
        """Token ids of the normalised question, so case and punctuation variants count as repeats."""
        return list(tokenizer(normalize(question, self.config.rule), add_special_tokens=False)["input_ids"])

    def metrics(self, counters: dict[str, int]) -> dict[str, float]:
        checks = counters.get("checks", 0)
        if not checks:
            return {}
        return {
            "solver/no_answer/fraction": counters["no_answer"] / checks,
            "solver/empty_answer/fraction": counters["empty_answer"] / checks,
            "solver/answer_words/mean": counters["answer_words"] / checks,
            "proposer/answer_words/mean": counters["gold_words"] / checks,
            "proposer/aliases/mean": counters["aliases"] / checks,
        }
