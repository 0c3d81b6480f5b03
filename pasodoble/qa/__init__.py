"""Factual question answering: answer normalisation, the checker, the Proposer parser with its gates, QA grading.

Pure pieces a `qa` domain calls (the Domain plug-in itself is not here yet):
- `normalize.py`: the SQuAD v1.1, TriviaQA and canonical (NFKC + numbers) rules;
- `check.py`: exact match, token F1, `check` (best over the answer and its aliases), `extract_answer`;
- `proposal.py`: QA prompts for both roles, `parse_qa_proposal` with counted reasons, `qa_metrics`;
- `grading.py`: `QAGrader`, the checker behind the grader interface for `pasodoble eval --grading qa`;
- `world.py`: the tiny QA world (invented facts in held-out tiers) and its cold-start teacher.
See docs/QA.md.
"""

from pasodoble.qa.check import Check, check, exact_match, extract_answer, token_f1
from pasodoble.qa.normalize import RULES, normalize
from pasodoble.qa.proposal import INVALID_REASONS, QAGates, QAProposal, parse_qa_proposal

__all__ = [
    "INVALID_REASONS",
    "RULES",
    "Check",
    "QAGates",
    "QAProposal",
    "check",
    "exact_match",
    "extract_answer",
    "normalize",
    "parse_qa_proposal",
    "token_f1",
]
