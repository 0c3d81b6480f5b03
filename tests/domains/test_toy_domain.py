"""A toy second domain, registered here, drives parse, the staged gate, the checker and the loop without any math
code: the math prompts, parser, gate, grader and grader metrics are made to fail if anything calls them."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from pasodoble.core import prompts, step_metrics
from pasodoble.core.prompts import PromptConfig, Proposal
from pasodoble.core.rewards import RewardConfig
from pasodoble.domains import GateStage, get_domain, read_proposals, register_domain, unregister_domain
from pasodoble.dualplay import DualPlay, ScheduleConfig
from pasodoble.roles.role import Role, RoleConfig
from tests.loop_helpers import ScriptedEngine, make_model, make_tokenizer


@dataclass
class Text:
    text: str


class Corpus:
    def sample(self, step: int, k: int = 1) -> list[Text]:
        return [Text(f"word{step}")] * k


@dataclass
class ToyBatch:
    verdicts: list
    counters: dict


@dataclass
class ToyVerdict:
    correct: bool
    extracted: str | None


class ToyChecker:
    """Reversal puzzles: the answer is the word reversed; a response is right when it equals the gold."""

    def grade(self, golds, responses):
        verdicts = [ToyVerdict(r.strip() == g, r.strip() or None) for g, r in zip(golds, responses)]
        return ToyBatch(verdicts, {"checks": len(golds), "empty": sum(v.extracted is None for v in verdicts)})

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


class Reverse:
    """Proposals are `reverse WORD => ANSWER`; the gate refuses short words, then wrong answers (counted)."""

    name = "reverse"
    invalid_reasons = ("no_arrow", "too_short", "wrong_answer")
    eval_sets = ()

    def __init__(self):
        self.gate_calls: list[int] = []
        self.gate = (
            GateStage("long enough", self._too_short),
            GateStage("answer is right", self._wrong),
        )

    def _too_short(self, ps):
        self.gate_calls.append(len(ps))
        return ["too_short" if len(p.question.split()[-1]) < 3 else None for p in ps]

    def _wrong(self, ps):
        self.gate_calls.append(len(ps))
        return [None if p.question.split()[-1][::-1] == p.answer else "wrong_answer" for p in ps]

    def open_corpus(self, cfg, tokenizer=None):
        return Corpus()

    def proposer_messages(self, passage, cfg):
        return [{"role": "user", "content": f"reverse something like {passage}"}]

    def solver_messages(self, question, cfg):
        return [{"role": "user", "content": question}]

    def parse(self, text):
        question, arrow, answer = text.partition(" => ")
        if not arrow:
            return Proposal(None, None, "no_arrow")
        return Proposal(question.strip(), answer.strip(), None)

    def extract_answer(self, text):
        return text.strip() or None

    def open_checker(self, cfg):
        return ToyChecker()

    def diversity_key(self, question, tokenizer):
        return [ord(c) for c in question]

    def metrics(self, counters):
        return {f"reverse/{k}": float(v) for k, v in sorted(counters.items())}


PROPOSALS = ["reverse abcd => dcba", "reverse ab => ba", "no arrow", "reverse abcd => abcd"]


def solver_script(prompt: str, j: int) -> str:
    word = prompt.split("reverse ")[-1].split("<")[0].strip()
    return word[::-1] if j < 2 else word  # 2 of 4 right: a learnable question


@pytest.fixture
def toy(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("math code was called")

    for name in ("parse_proposal", "parse_tags", "proposer_messages", "solver_messages", "leak_reason"):
        monkeypatch.setattr(prompts, name, boom)
    monkeypatch.setattr(step_metrics, "grader_metrics", boom)
    register_domain("reverse", Reverse)
    yield get_domain("reverse")
    unregister_domain("reverse")


def test_parse_gate_and_check_run_in_stages(toy):
    got = read_proposals(toy, PROPOSALS)
    assert [p.invalid_reason for p in got] == [None, "too_short", "no_arrow", "wrong_answer"]
    assert toy.gate_calls == [3, 2]  # each stage sees only the proposals still valid, cheapest first
    with toy.open_checker(None) as checker:
        batch = checker.grade(["dcba", "dcba"], ["dcba", " "])
    assert [v.correct for v in batch.verdicts] == [True, False]
    assert toy.metrics(batch.counters) == {"reverse/checks": 2.0, "reverse/empty": 1.0}


def test_an_undeclared_reason_is_refused(toy):
    toy.invalid_reasons = ("no_arrow",)
    with pytest.raises(ValueError, match="undeclared invalid reasons"):
        read_proposals(toy, PROPOSALS)


def test_a_name_is_registered_once(toy):
    with pytest.raises(ValueError, match="already registered"):
        register_domain("reverse", Reverse)


def role(name, script, seed):
    tokenizer = make_tokenizer()
    model = make_model(tokenizer, seed=seed)
    cfg = RoleConfig(model="test", num_generations=4, max_completion_length=64, lr=1e-2, micro_batch_size=4)
    return Role(name, cfg, model, tokenizer, engine=ScriptedEngine(model, tokenizer, script))


def test_the_loop_plays_the_toy_domain(toy, tmp_path):
    loop = DualPlay(
        role("proposer", lambda p, j: PROPOSALS[j], 1),
        role("solver", solver_script, 2),
        toy.open_checker(None),
        schedule=ScheduleConfig(samples_every=1),
        rewards=RewardConfig(),
        prompts=PromptConfig(),
        sampler=toy.open_corpus(None),
        run_dir=tmp_path,
        verbose=False,
        domain=toy,
    )
    row = loop.online_step()
    assert row["proposer/valid/fraction"] == 0.25
    assert row["proposer/invalid/too_short"] == row["proposer/invalid/wrong_answer"] == 1.0
    assert row["proposer/pass_rate/mean"] == 0.5 and row["proposer/learnable/count"] == 1.0
    assert row["reverse/checks"] == 4.0 and not any(k.startswith("grader/") for k in row)
    assert row["solver/update/applied"] == 1.0 and row["proposer/update/applied"] == 1.0
    samples = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert samples[0]["passage"] == "word0" and samples[0]["solver_correct"] == [True, True, False, False]
