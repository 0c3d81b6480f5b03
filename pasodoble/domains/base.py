"""The `Domain` interface: what a dual-play game is about, as the one object the loop asks.

What: a domain supplies the corpus reader (its passages carry `.text`), both roles' prompts, the proposal parser and
a staged validity gate (each rejection a reason from `invalid_reasons`, counted in `proposer/invalid/<reason>`),
answer extraction, a checker (`grade(golds, responses)` -> verdicts + counters; it never raises, is bounded in
time, and runs anything it executes outside the trainer process), a diversity key, its metrics and the names of
its evaluation sets. A domain may also define `check_label(question, answer) -> bool | None` (the label is
right / wrong / cannot be checked); `domains/labels.py` uses it where present (math: integer arithmetic).
`read_proposals` runs parse then gate, stage by stage, on a step's completions.

Why: the loop (`pasodoble.dualplay`) holds the method; what a question, an answer and a correct answer are belongs to
the domain, so a new domain is a new module here, never an `if domain ==` in the loop. docs/DOMAINS.md says how.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pasodoble.core.prompts import Proposal

if TYPE_CHECKING:
    from pasodoble.core.knowledge import KnowledgeConfig
    from pasodoble.core.prompts import PromptConfig


@dataclass(frozen=True)
class GateStage:
    """One stage of the validity gate: `check` gets the proposals still valid and returns a reason or None each;
    with `with_passages` it also gets each proposal's passage (None in the no-knowledge ablation)."""

    name: str  # what the stage tests, for docs and error messages
    check: Callable[..., list[str | None]]  # batch, so a costly stage can run once per step
    with_passages: bool = (
        False  # call `check(proposals, passages)` (a grounding test) instead of `check(proposals)`
    )


class Verdict(Protocol):
    correct: bool  # the response answers the gold
    extracted: str | None  # the answer read from the response (None: none found)


class CheckBatch(Protocol):
    verdicts: Sequence[Verdict]  # one per (gold, response) pair, in order
    counters: dict[
        str, int
    ]  # counted outcomes (timeouts, missing answers, ...); the domain's metrics read them


class Checker(Protocol):
    """Grades responses against golds; a context manager so it may own worker processes."""

    def grade(self, golds: Sequence[str], responses: Sequence[str]) -> CheckBatch: ...

    def __enter__(self) -> Checker: ...

    def __exit__(self, *exc: object) -> Any: ...


@runtime_checkable
class Domain(Protocol):
    name: str  # the recipe's `domain:` value
    invalid_reasons: tuple[str, ...]  # every reason `parse` and the gate may give
    gate: tuple[GateStage, ...]  # content checks after `parse`, cheapest first
    eval_sets: tuple[str, ...]  # names of the built-in evaluation sets of this domain

    def open_corpus(self, cfg: KnowledgeConfig, tokenizer=None) -> Any:
        """A sampler with `sample(step, k)` -> passages (each with `.text`), `state_dict`, `load_state_dict`."""

    def proposer_messages(self, passage: str | None, prompts: PromptConfig) -> list[dict[str, str]]: ...

    def solver_messages(self, question: str, prompts: PromptConfig) -> list[dict[str, str]]: ...

    def parse(self, text: str) -> Proposal:
        """A Proposer completion -> (question, answer) or an invalid reason; never raises on model output."""

    def extract_answer(self, text: str) -> str | None: ...

    def open_checker(self, cfg: Any) -> Checker:
        """The checker for `cfg` (the recipe's `grader:` section), to be used in a `with` block."""

    def diversity_key(self, question: str, tokenizer) -> list[int]:
        """The ids the diversity history compares (Jaccard over their set)."""

    def metrics(self, counters: dict[str, int]) -> dict[str, float]:
        """The checker's counters of a step as metric names and values."""


def read_proposals(
    domain: Domain, texts: Sequence[str], passages: Sequence[str | None] | None = None
) -> list[Proposal]:
    """Parse every completion, then run the gate's stages in order on the proposals still valid; `passages`
    (one per completion: the passage its Proposer read) go to the stages that ask for them."""
    proposals = [domain.parse(t) for t in texts]
    if passages is not None and len(passages) != len(texts):
        raise ValueError(f"{len(passages)} passages for {len(texts)} completions")
    for stage in domain.gate:
        alive = [i for i, p in enumerate(proposals) if p.invalid_reason is None]
        if not alive:
            break
        batch = [proposals[i] for i in alive]
        if stage.with_passages:
            reasons = stage.check(batch, [passages[i] if passages is not None else None for i in alive])
        else:
            reasons = stage.check(batch)
        for i, reason in zip(alive, reasons, strict=True):
            if reason is not None:
                proposals[i] = dataclasses.replace(proposals[i], invalid_reason=reason)
    unknown = {p.invalid_reason for p in proposals} - {None, *domain.invalid_reasons}
    if unknown:
        raise ValueError(f"domain {domain.name!r} gave undeclared invalid reasons {sorted(unknown)}")
    return proposals
