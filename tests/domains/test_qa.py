"""The `qa` domain on the plug-in: staged parse and gate with the passage, the alias-aware checker with its counters,
prompts, and a real `DualPlay.online_step` on tiny models that plays QA with no math code called."""

from __future__ import annotations

import json

import pytest

from pasodoble.core import prompts, step_metrics
from pasodoble.core.knowledge import KnowledgeConfig
from pasodoble.core.prompts import PromptConfig
from pasodoble.core.rewards import RewardConfig
from pasodoble.domains import get_domain, read_proposals
from pasodoble.domains.qa import QAConfig, QADomain
from pasodoble.dualplay import DualPlay, ScheduleConfig
from pasodoble.qa.proposal import INVALID_REASONS, parse_qa_proposal
from pasodoble.roles.role import Role, RoleConfig
from tests.loop_helpers import ScriptedEngine, make_model, make_tokenizer

PASSAGE = (
    "Zemzem Brinalith was born in Fenmo. Zemzem Brinalith practised masonry, learned from Nalvel Sabrivel."
)


def tagged(question, answer, *aliases):
    return f"<question>{question}</question><answer>{answer}</answer>" + "".join(
        f"<alias>{a}</alias>" for a in aliases
    )


GOOD = tagged("From whom did Zemzem Brinalith learn a craft?", "Nalvel Sabrivel", "Sabrivel")
CASES = [
    (GOOD, None),
    ("no tags at all", "no_question_tag"),
    (
        tagged("Who taught Zemzem Brinalith?", "Nalvel Sabrivel and many more people than fit in a span"),
        "answer_too_long",
    ),
    (tagged("In which town was Zemzem Brinalith born?", "Paris"), "not_grounded"),
    (tagged("Was Zemzem Brinalith born in Fenmo?", "Fenmo"), "answer_leaked"),
    (tagged("According to the passage, where was Zemzem Brinalith born?", "Fenmo"), "not_self_contained"),
]


def test_registered_by_name_and_staged_like_the_whole_parser():
    domain = get_domain("qa")
    assert isinstance(domain, QADomain) and set(domain.invalid_reasons) == set(INVALID_REASONS)
    texts = [t for t, _ in CASES]
    got = read_proposals(domain, texts, [PASSAGE] * len(texts))
    assert [p.invalid_reason for p in got] == [r for _, r in CASES]
    # the stages give the one-call parser's reasons, and a valid answer carries its aliases to the checker
    assert [p.invalid_reason for p in got] == [parse_qa_proposal(t, PASSAGE).invalid_reason for t in texts]
    assert got[0].answer == "Nalvel Sabrivel\nSabrivel"


def test_grounding_sees_each_proposals_own_passage():
    domain = get_domain("qa")
    answer = tagged("In which town was Zemzem Brinalith born?", "Fenmo")
    got = read_proposals(domain, [answer, answer, answer], [PASSAGE, "Another passage about Osk.", None])
    assert [p.invalid_reason for p in got] == [None, "not_grounded", None]  # None: the no-knowledge ablation


def test_checker_takes_the_best_gold_and_gives_no_substring_credit():
    domain = get_domain("qa")
    gold = "Nalvel Sabrivel\nSabrivel"
    replies = [
        "Answer: sabrivel",
        "Answer: NALVEL  SABRIVEL.",
        "Answer: Nalvel Sabrivel, Fenmo, Osk",
        "Answer:",
        "x",
    ]
    with domain.open_checker(None) as checker:
        batch = checker.grade([gold] * len(replies), replies)
    assert [v.correct for v in batch.verdicts] == [True, True, False, False, False]
    assert batch.verdicts[3].extracted is None  # "Answer:" with nothing after it is no answer
    metrics = domain.metrics(batch.counters)
    assert metrics["solver/no_answer/fraction"] == 0.2 and metrics["solver/empty_answer/fraction"] == 0.2
    assert metrics["proposer/aliases/mean"] == 1.0 and metrics["proposer/answer_words/mean"] == 2.0
    assert metrics["solver/answer_words/mean"] == pytest.approx((1 + 2 + 4 + 0 + 1) / 5)
    f1 = QADomain(QAConfig(f1_threshold=0.5))
    with f1.open_checker(None) as checker:
        assert checker.grade([gold], ["Answer: Nalvel Sabrivel of Fenmo"]).verdicts[0].correct


def test_prompts_default_to_qa_and_keep_a_recipes_own():
    domain = get_domain("qa")
    asked = domain.proposer_messages(PASSAGE, PromptConfig())[-1]["content"]
    assert PASSAGE in asked and "<question>" in asked and "<problem>" not in asked
    assert "without explanation" in domain.solver_messages("Q?", PromptConfig())[-1]["content"]
    own = PromptConfig(proposer_template="{passage}\nAsk a question.", solver_template="{question}")
    assert domain.proposer_messages("P", own)[-1]["content"] == "P\nAsk a question."
    assert domain.solver_messages("Q?", own)[-1]["content"] == "Q?"
    assert "<question>" in domain.proposer_messages(None, PromptConfig())[-1]["content"]


def test_corpus_reader_reads_passages(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text(json.dumps({"text": PASSAGE}) + "\n")
    sampler = get_domain("qa").open_corpus(KnowledgeConfig(path=str(path)))
    assert sampler.sample(0, 2)[0].text == PASSAGE


class Corpus:
    def sample(self, step, k=1):
        return [type("Passage", (), {"text": PASSAGE})()] * k


def role(name, script, seed):
    tokenizer = make_tokenizer()
    model = make_model(tokenizer, seed=seed)
    cfg = RoleConfig(model="test", num_generations=4, max_completion_length=48, lr=1e-2, micro_batch_size=4)
    return Role(name, cfg, model, tokenizer, engine=ScriptedEngine(model, tokenizer, script))


def test_the_loop_plays_qa(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("math code was called")

    for name in ("parse_proposal", "parse_tags", "leak_reason"):
        monkeypatch.setattr(prompts, name, boom)
    monkeypatch.setattr(step_metrics, "grader_metrics", boom)
    proposals = [GOOD, CASES[3][0], CASES[4][0], "no tags at all"]
    # 2 of 4 answers right (one by the alias): a learnable question for both roles
    answers = ["Answer: Sabrivel", "Answer: Nalvel Sabrivel", "Answer: Fenmo", "I do not know"]
    proposer, solver = (
        role("proposer", lambda p, j: proposals[j], 1),
        role("solver", lambda p, j: answers[j], 2),
    )
    before = {
        n: [w.detach().clone() for w in r.model.parameters()] for n, r in (("p", proposer), ("s", solver))
    }
    domain = get_domain("qa")
    loop = DualPlay(
        proposer,
        solver,
        domain.open_checker(None),
        schedule=ScheduleConfig(samples_every=1),
        rewards=RewardConfig(),
        prompts=PromptConfig(),
        sampler=Corpus(),
        run_dir=tmp_path,
        verbose=False,
        domain=domain,
    )
    row = loop.online_step()
    assert row["proposer/valid/fraction"] == 0.25
    assert row["proposer/invalid/not_grounded"] == row["proposer/invalid/answer_leaked"] == 1.0
    assert row["proposer/invalid/no_question_tag"] == 1.0
    assert row["proposer/pass_rate/mean"] == 0.5 and row["solver/empty_answer/fraction"] == 0.0
    assert row["solver/no_answer/fraction"] == 0.0 and row["proposer/aliases/mean"] == 1.0
    assert row["solver/update/applied"] == 1.0 and row["proposer/update/applied"] == 1.0
    for name, r in (("p", proposer), ("s", solver)):
        assert any(not w.equal(b) for w, b in zip(r.model.parameters(), before[name])), name
    samples = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert samples[0]["passage"] == PASSAGE and samples[0]["solver_correct"] == [True, True, False, False]
