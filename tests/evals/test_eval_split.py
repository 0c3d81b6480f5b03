"""The evaluation split: fresh draws by seed, disjoint from the corpus, the SFT data and the dev split."""

from __future__ import annotations

import random
import re

import pytest

from pasodoble.errors import ConfigError
from pasodoble.evals.eval_split import evaluation_problems, evaluation_set, split_of
from pasodoble.world.build import WorldConfig, _math_rows

# A whole expression as the corpus and the SFT data write it ("38 + 47 * 6"), never a piece of a longer one.
EXPRESSION = re.compile(r"(?<![\d+*] )(?<!\d)\d+(?: [+*] \d+)+(?!\d)")
SIZES = {"t1": 200, "t2": None, "t3": 800, "t4": 300}


def test_test_and_dev_are_disjoint_and_held_out():
    test = evaluation_problems(SIZES, eval_seed=0, split="test")
    dev = evaluation_problems({"t1": 200, "t2": None, "t3": 200, "t4": 100}, eval_seed=0, split="dev")
    test_q, dev_q = {p.question for p in test}, {p.question for p in dev}
    assert not test_q & dev_q
    assert {split_of(q) for q in test_q} == {"test"} and {split_of(q) for q in dev_q} == {"dev"}
    counts = {t: sum(p.source == t for p in test) for t in SIZES}
    assert counts["t1"] == 200 and counts["t3"] == 800 and counts["t4"] == 300
    assert 100 < counts["t2"] < 173  # all of t2's test side (173 held out, a quarter of them dev)
    assert len(test_q) == len(test)  # distinct


@pytest.mark.parametrize("passages", ["worked", "numbers"])
def test_evaluation_sets_never_meet_the_corpus_or_the_sft_data(passages):
    config = WorldConfig(
        passages=passages, corpus_size=2000, sft_solver_examples=2000, sft_proposer_examples=500
    )
    corpus, solver, proposer = _math_rows(config, random.Random("world/0"))
    texts = [row["text"] for row in corpus] + [
        e["prompt"] + "\n" + e["completion"] for e in solver + proposer
    ]
    seen = {m for text in texts for m in EXPRESSION.findall(text)}
    assert len(seen) > 1000  # the pattern reads the data's expressions
    for split in ("test", "dev"):
        for p in evaluation_problems({"t1": 200, "t2": None, "t3": 300, "t4": 300}, 0, split):
            assert p.question[len("What is ") : -1] not in seen, (split, p.question)


def test_the_evaluation_seed_draws_other_problems():
    a = [q for q, _ in evaluation_set("t3", 200, eval_seed=0)]
    b = [q for q, _ in evaluation_set("t3", 200, eval_seed=1)]
    assert a == [q for q, _ in evaluation_set("t3", 200, eval_seed=0)]  # reproducible
    assert len(set(a) & set(b)) < 20  # fresh draws from a large tier barely overlap
    assert evaluation_set("t1", 10, 0) != evaluation_set("t1", 10, 1)


def test_bad_sizes_are_config_errors():
    with pytest.raises(ConfigError):
        evaluation_problems({"t9": 10}, 0)
    with pytest.raises(ConfigError):
        evaluation_set("t3", None, 0)
