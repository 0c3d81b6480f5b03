"""The math domain is the project's math code on the `Domain` interface, unchanged: on a fixed batch of Proposer
completions, Solver responses and grader counters it gives exactly what the functions the loop called before gave."""

from __future__ import annotations

import pytest

from pasodoble.config import load_config
from pasodoble.core.prompts import PromptConfig, parse_proposal, proposer_messages, solver_messages
from pasodoble.core.step_metrics import grader_metrics
from pasodoble.domains import Domain, domain_names, get_domain, read_proposals
from pasodoble.errors import ConfigError
from pasodoble.evals.benchmarks import BENCHMARKS, PAPER_BENCHMARKS
from pasodoble.grader import Grader, GraderConfig
from pasodoble.grader.extract import extract_answer
from pasodoble.runs.train import TrainConfig
from tests.loop_helpers import make_tokenizer

MATH = get_domain("math")

PROPOSALS = [
    "<problem>What is $3 \\cdot 21$?</problem><answer>3*21 = \\boxed{63}</answer>",
    "<think>hmm</think><problem>Find p.</problem><answer>\\boxed{\\frac{63}{400}}</answer>",
    "<think>never closed <problem>x</problem><answer>\\boxed{1}</answer>",
    "What is 2+2? \\boxed{4}",
    "<problem>  </problem><answer>\\boxed{1}</answer>",
    "<problem>What is 1+1?</problem>",
    "<problem>What is 1+1?</problem><answer>two</answer>",
    "<problem>What is 1+1?</problem><answer>\\boxed{ }</answer>",
    "<problem>Put \\boxed{2} here: 1+1?</problem><answer>\\boxed{2}</answer>",
    "<problem>What is 12 (answer: 12)?</problem><answer>\\boxed{12}</answer>",
    "<problem>What is 1/2 of 1?</problem><answer>\\boxed{\\frac{1}{2}}</answer>",
    "<problem>What is 12 + 3?</problem><answer>\\boxed{15}</answer>",
    "<problem>Nested?</problem><answer>\\boxed{\\boxed{7}}</answer>",
    "<problem>Bad</problem><answer>\\boxed{1}</answer>\x00",
    "<problem>Bad \ud800</problem><answer>\\boxed{1}</answer>",
    "<problem>" + "1" * 30_000 + "</problem><answer>\\boxed{1}</answer>",
    "",
]
RESPONSES = ["so \\boxed{63}", "<answer>4</answer>", "#### 12", "no answer here", "\\boxed{\\frac{1}{2}}", ""]
GOLDS = ["63", "4", "12", "3", "0.5", "1"]
PROMPT_CONFIGS = [
    PromptConfig(),
    PromptConfig(
        proposer_system="You propose.",
        proposer_template="Fact: {passage}\nAsk.",
        proposer_template_no_passage="Ask.",
        solver_system="You solve.",
        solver_template="{question}=",
    ),
]


def test_math_is_a_registered_domain():
    assert isinstance(MATH, Domain) and MATH.name == "math" and "math" in domain_names()


def test_parse_and_gate_equal_parse_proposal_on_a_fixed_batch():
    got = read_proposals(MATH, PROPOSALS)
    assert got == [parse_proposal(t) for t in PROPOSALS]
    reasons = {p.invalid_reason for p in got}
    # every reason of the parser and both gate stages are met by the batch
    assert reasons >= {"boxed_in_question", "answer_leaked", "no_problem_tag", "too_long", "not_text", None}


@pytest.mark.parametrize("cfg", PROMPT_CONFIGS)
def test_prompts_equal_the_prompt_functions(cfg):
    for passage in ("Primes have two divisors; \\{x\\}.", None):
        assert MATH.proposer_messages(passage, cfg) == proposer_messages(passage, cfg)
    assert MATH.solver_messages("What is {x} + 1?", cfg) == solver_messages("What is {x} + 1?", cfg)


def test_diversity_key_is_the_question_token_ids():
    tokenizer = make_tokenizer()
    for p in read_proposals(MATH, PROPOSALS):
        if p.question:
            ids = list(tokenizer(p.question, add_special_tokens=False)["input_ids"])
            assert MATH.diversity_key(p.question, tokenizer) == ids


def test_extraction_and_metrics_equal_the_grader_functions():
    assert [MATH.extract_answer(r) for r in RESPONSES] == [extract_answer(r)[0] for r in RESPONSES]
    counters = {"checks": 6, "cache_hits": 2, "no_answer": 1, "timeouts": 0, "fast_path": 3}
    assert MATH.metrics(counters) == grader_metrics(counters)


def test_checker_is_the_grader():
    cfg = GraderConfig(num_workers=1)
    with MATH.open_checker(cfg) as checker, Grader(cfg) as grader:
        assert isinstance(checker, Grader)
        mine, theirs = checker.grade(GOLDS, RESPONSES), grader.grade(GOLDS, RESPONSES)
    assert [(v.correct, v.extracted) for v in mine.verdicts] == [
        (v.correct, v.extracted) for v in theirs.verdicts
    ]
    assert [v.correct for v in mine.verdicts][:4] == [True, True, True, False]
    assert dict(mine.counters) == dict(theirs.counters)


def test_evaluation_sets_are_the_papers_benchmarks():
    assert MATH.eval_sets == PAPER_BENCHMARKS and set(MATH.eval_sets) <= set(BENCHMARKS)


def test_recipe_domain_defaults_to_math_and_an_unknown_name_is_one_line():
    assert load_config(TrainConfig).domain == "math"
    with pytest.raises(ConfigError) as err:
        load_config(TrainConfig, None, ["domain=chess"])
    assert err.value.where == "domain" and "registered domains: code, math, qa" in err.value.message
    assert "\n" not in str(err.value)
