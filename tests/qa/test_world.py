"""The tiny QA world: seeded, tiers kept apart, every fact in the corpus, teacher records that pass the gates; the
grounded teacher (`proposer_facts="all"`) asks about every fact of a passage and leaves the Solver's data alone."""

from collections import Counter
from dataclasses import replace

import pytest

from pasodoble.errors import ConfigError
from pasodoble.evals.problems import FieldMap, load_problems_file
from pasodoble.io import read_jsonl
from pasodoble.qa.check import check, extract_answer
from pasodoble.qa.normalize import canonical
from pasodoble.qa.proposal import parse_qa_proposal
from pasodoble.qa.world import TIERS, QAWorldConfig, make_world, proposer_record, write_world


@pytest.fixture(scope="module")
def world():
    return make_world(QAWorldConfig(seed=0))


def test_same_seed_same_world_other_seed_other_names(world):
    again = make_world(QAWorldConfig(seed=0))
    assert again.passages == world.passages and again.facts == world.facts
    assert make_world(QAWorldConfig(seed=1)).passages != world.passages


def test_tiers_and_their_separation(world):
    counts = Counter(f.tier for f in world.facts)
    assert set(counts) == set(TIERS) and min(counts.values()) >= 20
    taught = " ".join(r["prompt"] + " " + r["completion"] for r in world.sft_solver + world.sft_proposer)
    for fact in world.facts:
        if fact.tier != "sft":  # never asked in SFT data, in either role
            assert fact.question not in taught
    assert len(world.sft_solver) == len(world.sft_proposer) == counts["sft"]


def test_every_single_fact_is_stated_in_its_passage_and_multihop_composes_two(world):
    corpus = canonical(" ".join(world.passages))
    for fact in world.facts:
        if fact.passage is None:
            assert fact.tier == "multihop"
            assert f" {canonical(fact.answer)} " in f" {corpus} "
            continue
        passage = world.passages[fact.passage]
        assert parse_qa_proposal(proposer_record(passage, fact)["completion"], passage).valid
    person = next(f for f in world.facts if f.tier == "multihop").id.removeprefix("hop-")
    mentor = next(f.answer for f in world.facts if f.id == f"mentor-{person}")
    home = next(f.answer for f in world.facts if f.id == f"home-{mentor}")
    assert next(f.answer for f in world.facts if f.id == f"hop-{person}") == home


def test_teacher_records_are_in_the_roles_formats_and_pass_the_checker(world):
    for record in world.sft_proposer:
        passage = record["prompt"].rsplit("\n", 1)[0]
        assert parse_qa_proposal(record["completion"], passage).valid
    facts = {f.question: f for f in world.facts}
    for record in world.sft_solver:
        fact = facts[record["prompt"]]
        assert check(extract_answer(record["completion"]), [fact.answer, *fact.aliases]).correct
    mentor = next(f for f in world.facts if f.id.startswith("mentor-"))
    assert mentor.aliases == (mentor.answer.split()[1],)  # the surname alone is accepted too


def test_a_teacher_bug_cannot_ship(world):
    fact = next(f for f in world.facts if f.passage is not None)
    with pytest.raises(AssertionError, match="not_grounded"):
        proposer_record("A passage about something else.", fact)
    with pytest.raises(AssertionError, match="answer_leaked"):
        proposer_record(world.passages[fact.passage], replace(fact, question=f"Is it {fact.answer}?"))


def test_written_files_load_as_an_eval_set_grouped_by_tier(world, tmp_path):
    paths = write_world(world, tmp_path / "qa-world")
    fields = FieldMap(id_field="id", alias_field="aliases", source_field="tier")
    problems = load_problems_file(paths["heldout"], fields)
    assert Counter(p.source for p in problems) == Counter(f"heldout/{f.tier}" for f in world.facts)
    assert len(paths["corpus"].read_text().splitlines()) == len(world.passages)


def test_grounded_teacher_asks_about_every_fact_of_each_passage(world):
    grounded = make_world(QAWorldConfig(seed=0, proposer_facts="all"))
    assert grounded.passages == world.passages and grounded.facts == world.facts
    asked: dict[str, set[str]] = {}
    for record in grounded.sft_proposer:
        passage = record["prompt"].rsplit("\n", 1)[0]
        assert parse_qa_proposal(record["completion"], passage).valid
        question = record["completion"].split("<question>", 1)[1].split("</question>", 1)[0]
        asked.setdefault(passage, set()).add(question)
    for index, passage in enumerate(world.passages):
        stated = {f.question for f in world.facts if f.passage == index}
        assert asked[passage] == stated  # every tier's facts, so the non-sft ones too
    tiers = Counter(f.tier for f in world.facts if f.passage is not None)
    assert len(grounded.sft_proposer) == tiers["sft"] + tiers["corpus"] > len(world.sft_proposer)


def test_grounded_teacher_gives_the_solver_sft_facts_only(world):
    grounded = make_world(QAWorldConfig(seed=0, proposer_facts="all"))
    assert grounded.sft_solver == world.sft_solver
    unseen = {f.question for f in world.facts if f.tier != "sft"}
    assert not unseen & {r["prompt"] for r in grounded.sft_solver}


@pytest.mark.parametrize(
    ("field", "value"), [("sft_fraction", 1.0), ("multihop_fraction", -0.1), ("proposer_facts", "corpus")]
)
def test_bad_config_is_one_line_naming_the_field(field, value):
    with pytest.raises(ConfigError, match=f"^{field}: "):
        make_world(QAWorldConfig(**{field: value}))


def test_the_module_writes_the_world_files_for_a_recipe(tmp_path, capsys):
    from pasodoble.qa.world import main

    assert main(["--out", str(tmp_path / "w"), "--seed", "3"]) == 0
    corpus = read_jsonl(tmp_path / "w" / "corpus.jsonl")
    world = make_world(QAWorldConfig(seed=3))
    assert [row["text"] for row in corpus] == list(world.passages)
    assert "heldout: " in capsys.readouterr().out
