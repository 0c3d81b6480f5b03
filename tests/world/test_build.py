"""build_world: files and formats, determinism, idempotence, the tokenizer and the base model."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from pasodoble.errors import ConfigError
from pasodoble.world import WorldConfig, arith, build_world, formats, problems
from pasodoble.world.model import count_parameters
from pasodoble.world.problems import is_held_out

PROPOSER = re.compile(r"<problem>(.+?)</problem><answer>(.+) \\boxed\{(-?\d+)\}</answer>")
SOLVER = re.compile(r"(.+) \\boxed\{(-?\d+)\}")


def rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return build_world(tmp_path_factory.mktemp("world"), WorldConfig.minimal())


def test_files_and_row_formats(world):
    corpus, tiers = rows(world.corpus), rows(world.tiers)
    assert len(corpus) == 20 and all(
        set(r) == {"id", "text"} and r["text"].startswith("Numbers: ") for r in corpus
    )
    assert len(tiers) == 16 and {r["tier"] for r in tiers} == {"t1", "t2", "t3", "t4"}
    for r in tiers:
        assert set(r) == {"id", "tier", "question", "answer"}
        assert str(arith.solve(r["question"])) == r["answer"]
    for r in rows(world.sft_solver):
        question, (steps, answer) = r["prompt"], SOLVER.fullmatch(r["completion"]).groups()
        assert r["prompt"] == formats.solver_prompt(question)
        assert str(arith.solve(question)) == answer and steps.endswith(f"so {answer}.")
    for r in rows(world.sft_proposer):
        assert r["prompt"].endswith("\nWrite a problem.")
        question, _, answer = PROPOSER.fullmatch(r["completion"]).groups()
        assert str(arith.solve(question)) == answer
        numbers = re.findall(r"\d+", r["prompt"])  # the question uses the passage's numbers
        assert all(n in numbers for n in re.findall(r"\d+", question))


def test_sft_data_never_holds_a_tier_problem(world):
    held = {r["question"] for r in rows(world.tiers)}
    questions = [r["prompt"] for r in rows(world.sft_solver)]
    questions += [PROPOSER.fullmatch(r["completion"]).group(1) for r in rows(world.sft_proposer)]
    assert not held & set(questions)
    assert not any(is_held_out(q) for q in questions)


def test_next_tier_share(tmp_path):
    config = replace(WorldConfig.minimal(), sft_solver_examples=2000, next_tier_share=0.05)
    paths = build_world(tmp_path, config)
    shares = [len(arith.tokenize(r["prompt"][len("What is ") : -1])) for r in rows(paths.sft_solver)]
    three = sum(n == 5 for n in shares) / len(shares)  # a + b * c: five tokens
    assert 0.03 < three < 0.07
    assert not any(n > 5 for n in shares)  # no four-operand tier in the SFT data


def test_top_tier_share_and_copied_proposer_answers(tmp_path):
    config = replace(
        WorldConfig.minimal(),
        sft_solver_examples=2000,
        top_tier_share=0.05,
        passages="worked",
        proposer_answer="copied",
    )
    paths = build_world(tmp_path, config)
    sizes = [len(arith.tokenize(r["prompt"][len("What is ") : -1])) for r in rows(paths.sft_solver)]
    assert 0.03 < sum(n == 7 for n in sizes) / len(sizes) < 0.07  # t4: four operands, seven tokens
    for row in rows(paths.sft_proposer):  # the label is the passage's value, with no worked steps
        value = row["prompt"].split(" = ")[1].split(".")[0]
        assert row["completion"].endswith(f"</problem><answer>\\boxed{{{value}}}</answer>")


def test_same_seed_same_files_and_idempotent(tmp_path, world):
    again = build_world(tmp_path / "again", WorldConfig.minimal())
    for name in [
        "corpus.jsonl",
        "sft_solver.jsonl",
        "sft_proposer.jsonl",
        "tiers.jsonl",
        "world.json",
        "tokenizer/tokenizer.json",
        "base_model/model.safetensors",
    ]:
        assert (again.root / name).read_bytes() == (world.root / name).read_bytes(), name
    stamp = (again.root / "corpus.jsonl").stat().st_mtime_ns
    build_world(again.root, WorldConfig.minimal())
    assert (again.root / "corpus.jsonl").stat().st_mtime_ns == stamp
    other = build_world(tmp_path / "other", WorldConfig.minimal(seed=1))
    assert other.corpus.read_bytes() != world.corpus.read_bytes()


def test_tokenizer_round_trip_and_chat_template(world):
    tok = AutoTokenizer.from_pretrained(world.tokenizer_dir)
    texts = [r["completion"] for r in rows(world.sft_proposer)] + [r["text"] for r in rows(world.corpus)]
    texts += ["<think>hm</think>Ünïcode ✓ \\boxed{\\frac{1}{2}}\n\n  x"]
    for text in texts:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids, skip_special_tokens=True) == text
    digits = tok("12345", add_special_tokens=False)["input_ids"]
    assert len(digits) == 5
    for marker in ["<problem>", "</problem>", "<answer>", "</answer>", "\\boxed{"]:
        assert len(tok(marker, add_special_tokens=False)["input_ids"]) == 1
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is 1 + 2?"}], tokenize=False, add_generation_prompt=True
    )
    assert prompt == "<|im_start|>user\nWhat is 1 + 2?<|im_end|>\n<|im_start|>assistant\n"
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"


def test_base_model_loads_through_from_pretrained(world):
    model = AutoModelForCausalLM.from_pretrained(world.base_model_dir)
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert model.config.tie_word_embeddings
    assert 10_000 < count_parameters(model) < 100_000  # the minimal size; defaults are ~0.4M


def test_default_model_size():
    from pasodoble.world.model import ModelConfig, build_model
    from pasodoble.world.tokenizer import build_tokenizer

    model = build_model(ModelConfig(), build_tokenizer(["What is 1 + 2?"], 320), seed=0)
    assert 300_000 < count_parameters(model) < 2_000_000


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"sft_tiers": ["t7"]}, "world.sft_tiers"),
        ({"next_tier_share": 1.5}, "world.next_tier_share"),
        ({"top_tier_share": 0.9}, "world.bridge_share"),
        ({"top_tier_share": 0.1, "next_tier": "t4"}, "world.top_tier_share"),
        ({"proposer_answer": "none"}, "world.proposer_answer"),
        ({"tier_size": 0}, "world.tier_size"),
        ({"vocab_size": 100}, "world.vocab_size"),
        ({"sft_tier_weights": [1.0]}, "world.sft_tier_weights"),
        ({"sft_tier_weights": [1.0, 0.0]}, "world.sft_tier_weights"),
    ],
)
def test_validate(change, field):
    with pytest.raises(ConfigError) as info:
        replace(WorldConfig(), **change).validate()
    assert info.value.where == field


def test_mix_weights_the_sft_tiers():
    even = replace(WorldConfig(), sft_tier_weights=None).mix(0.1, 0.2)
    assert even == pytest.approx({"t1": 0.35, "t2": 0.35, "t3": 0.1, "t1b": 0.2})
    skewed = replace(WorldConfig(), sft_tier_weights=[1.0, 3.0]).mix(0.1, 0.2)
    assert skewed == pytest.approx({"t1": 0.175, "t2": 0.525, "t3": 0.1, "t1b": 0.2})


def test_tier_problems_for_the_evaluation_harness(world):
    from pasodoble.evals.tiers import load_tier_problems

    problems = load_tier_problems(world.tiers)
    assert len(problems) == 16 and {p.source for p in problems} == {"t1", "t2", "t3", "t4"}
    assert all(p.answers == (str(arith.solve(p.question)),) for p in problems)
    assert [p.source for p in load_tier_problems(world.tiers, per_tier=1)] == ["t1", "t2", "t3", "t4"]


def test_held_out_problems_extend_the_worlds_tier_file(world):
    from pasodoble.evals.tiers import held_out_problems, load_tier_problems

    stored = load_tier_problems(world.tiers)  # the fixture's world: 4 problems per tier, seed 0
    more = held_out_problems(0, 250)
    by_tier = {tier: [p for p in more if p.source == tier] for tier in problems.TIERS}
    for tier in problems.TIERS:
        assert by_tier[tier][:4] == [p for p in stored if p.source == tier]  # the tier file is the start
        assert len({p.question for p in by_tier[tier]}) == len(by_tier[tier])
        assert all(problems.is_held_out(p.question) for p in by_tier[tier])
    assert 150 < len(by_tier["t2"]) < 250  # t2 (A * d) holds fewer: capped, not an error
    assert len(by_tier["t3"]) == len(by_tier["t4"]) == 250
    with pytest.raises(ConfigError, match="tier_size"):
        problems.held_out("t2", 250, 0)


def test_solver_sft_mix_holds_the_bridge(world):
    counts = {"bridge": 0, "all": 0}
    for r in rows(world.sft_solver):
        numbers = [int(n) for n in re.findall(r"\d+", r["prompt"])]
        counts["bridge"] += len(numbers) == 2 and max(numbers) >= 100
        counts["all"] += 1
    assert 0.03 < counts["bridge"] / counts["all"] < 0.25  # bridge_share = 0.12 of 200 examples


def test_worked_passages_are_solved_training_side_expressions(tmp_path):
    world = build_world(
        tmp_path, replace(WorldConfig.minimal(), passages="worked", sft_proposer_examples=200)
    )
    fact = re.compile(r"Fact: (.+) = (-?\d+)\.")
    tiers_seen = set()
    for r in rows(world.corpus):
        expression, value = fact.fullmatch(r["text"]).groups()
        question = f"What is {expression}?"
        assert str(arith.solve(question)) == value and not is_held_out(question)
        tiers_seen.add(len(re.findall(r"\d+", expression)))
    assert tiers_seen >= {2, 3}  # sums and products, and three-operand expressions
    for r in rows(world.sft_proposer):
        passage = r["prompt"].split("\n")[0]
        question, _, answer = PROPOSER.fullmatch(r["completion"]).groups()
        expression = question[len("What is ") : -1]
        assert passage == f"Fact: {expression} = {answer}."  # the question is the passage's
    with pytest.raises(ConfigError, match="passages"):
        replace(WorldConfig.minimal(), passages="facts").validate()
