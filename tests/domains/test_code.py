"""The code domain: its parser and gate on hand-written proposals (each reason), golds computed by running the
task in the sandbox, the checker's verdicts, refusal without a sandbox, the stdlib corpus, and the real loop.

Tests that launch the sandbox are marked `sandbox` and skip, saying why, where bubblewrap cannot run."""

from __future__ import annotations

import dataclasses
import json

import pytest

from pasodoble.core.knowledge import KnowledgeConfig
from pasodoble.core.prompts import PromptConfig
from pasodoble.core.rewards import RewardConfig
from pasodoble.domains import code_tasks as tasks
from pasodoble.domains import get_domain, read_proposals
from pasodoble.domains.code import CodeDomain
from pasodoble.domains.code_corpus import FunctionPassages, python_files, source_root
from pasodoble.domains.code_prompts import SOLVER_TEMPLATE, code_prompts
from pasodoble.dualplay import DualPlay, ScheduleConfig
from pasodoble.roles.role import Role, RoleConfig
from pasodoble.sandbox import SandboxConfig, probe
from pasodoble.scale.collectives import SingleProcess
from tests.loop_helpers import ScriptedEngine, make_model, make_tokenizer

needs_sandbox = pytest.mark.skipif(
    not probe()["essential_ok"], reason=f"no sandbox on this machine: {probe()['why']} (make sandbox-env)"
)


def output_task(program: str, stdin: str = "") -> str:
    return f"<task>output</task>\n<program>\n{program}\n</program>\n<input>{stdin}</input>"


def function_task(problem: str, solution: str, tests: str) -> str:
    return f"<task>function</task>\n<problem>{problem}</problem>\n<solution>\n{solution}\n</solution>\n<tests>\n{tests}\n</tests>"


DOUBLE = "def f(x):\n    return 2 * x + 1"
VALID_OUTPUT = output_task("x = 3\nprint(x * 2 + 1)")
VALID_FUNCTION = function_task(
    "Return twice x plus one.", DOUBLE, "assert f(1) == 3\nassert f(2) == 6\nassert f(0) == 1"
)


def test_parse_reasons_on_literal_proposals():
    cases = {
        "x" * 7000: "too_long",
        "no tags at all": "no_task",
        "<task>poem</task>": "no_task",
        "<task>output</task><program>  </program>": "no_program",
        "<task>function</task><solution>def f(): pass</solution>": "no_problem",
        "<task>function</task><problem>p</problem><tests>assert f(1) == 1</tests>": "no_solution",
        "<task>function</task><problem>p</problem><solution>def f(): pass</solution><tests>f(1)</tests>": "no_tests",
    }
    for text, reason in cases.items():
        assert tasks.parse_task(text).invalid_reason == reason, text[:40]
    p = tasks.parse_task(output_task("```python\nprint(6 * 7)\n```", "5"))
    assert p.valid and json.loads(p.answer) == {"kind": "output", "program": "print(6 * 7)", "stdin": "5"}
    assert p.question.startswith(tasks.OUTPUT_HEAD) and "print(6 * 7)" in p.question and "5" in p.question
    f = tasks.parse_task(VALID_FUNCTION)
    assert f.question == "Return twice x plus one.\n\nWrite the Python function `f`."
    assert json.loads(f.answer)["entry_point"] == "f" and DOUBLE not in f.question


def test_the_cheap_stages_refuse_without_launching_anything():
    domain = CodeDomain(SandboxConfig(bwrap="/nonexistent/bwrap"))  # any launch would be `sandbox_refused`
    texts = [
        output_task("print(1 +"),
        function_task("p", "def g(x):\n    return x", "assert f(1) == 1"),
        function_task("p", DOUBLE, "assert f(x=1) == 3\nprint(f(2))"),
        function_task("Here is how: return 2 * x + 1 of course", DOUBLE, "assert f(1) == 3"),
    ]
    got = [p.invalid_reason for p in read_proposals(domain, texts)]
    assert got == ["syntax_error", "no_function", "no_usable_tests", "answer_leaked"]
    assert domain.drain_stats() == {"gate/tests_unusable": 2}


def test_tests_are_read_as_literals_and_the_rest_dropped():
    usable, dropped = tasks.parse_tests(
        "assert f(1, 'a') == [1, 'a']\nassert f((1, 2)) == {1: {2}}\nassert f(1) != 2\nassert f(g(1)) == 1\n"
        "assert f(*x) == 1\nassert h(1) == 1\nx = 1\nassert f(1 << 2**30) == 1",
        "f",
    )
    assert [(t.args, t.expected) for t in usable] == [((1, "a"), [1, "a"]), (((1, 2),), {1: {2}})]
    assert dropped == 6
    assert tasks.parse_tests("assert f(", "f") == ([], 1)


def test_leaks_outputs_and_answers_are_read_literally():
    assert tasks.output_leak("7", "x = 3\nprint(x * 2 + 1)", "") is None
    assert tasks.output_leak("hello world", "print('hello world')", "") == "answer_leaked"
    assert tasks.output_leak("1", "print(1)", "") == "answer_leaked"
    assert tasks.output_leak("abc", "print(input())", "abc") == "answer_leaked"
    assert tasks.output_leak("", "pass", "") == "no_output"
    assert tasks.output_leak("x" * 1001, "print('x' * 1001)", "") == "long_output"
    assert tasks.normalize_output("\n 1  \r\n2\n\n") == " 1\n2"
    assert tasks.read_output("so <output>1</output> no, <output>\n2 \n</output>") == "2"
    assert tasks.read_output("2") is None
    assert tasks.read_code("```python\ndef f():\n    return 1\n```") == "def f():\n    return 1"
    assert tasks.read_code("def f(): return 1") is None


def test_code_prompts_replace_only_math_defaults():
    cfg = code_prompts(PromptConfig())
    assert cfg.solver_template == SOLVER_TEMPLATE and "<task>output</task>" in cfg.proposer_template
    assert "<task>function</task>" in cfg.proposer_template_no_passage
    mine = PromptConfig(solver_template="Q: {question}")
    assert code_prompts(mine).solver_template == "Q: {question}"
    messages = get_domain("code").proposer_messages("def g(): pass", PromptConfig())
    assert "def g(): pass" in messages[-1]["content"] and "mathematical" not in messages[-1]["content"]


def test_the_corpus_reads_functions_and_counts_skips(tmp_path):
    (tmp_path / "a.py").write_text(
        "def alpha(x):\n    return x + 1000000\n\nclass C:\n    def beta(self):\n        return 'a long enough body'\n"
    )
    (tmp_path / "b.py").write_text("X = 1\n")
    (tmp_path / "c.py").write_text("def broken(:\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.py").write_text("def test_x():\n    assert True is True and 1 == 1\n")
    sampler = FunctionPassages(tmp_path, seed=3)
    assert [p.name for p in sampler.files] == ["a.py", "b.py", "c.py"]
    drawn = sampler.sample(0, 6)
    assert {p.id for p in drawn} <= {"a.py:alpha", "a.py:beta"}
    assert drawn[0].text.startswith(("def alpha", "def beta"))
    assert sampler.skips["no_function"] > 0
    assert [p.id for p in FunctionPassages(tmp_path, seed=3).sample(0, 6)] == [p.id for p in drawn]
    state = sampler.state_dict()
    again = FunctionPassages(tmp_path)
    again.load_state_dict(state)
    assert again.seed == 3 and again.skips == sampler.skips
    stdlib = python_files(source_root("stdlib"))
    assert len(stdlib) > 300 and not any("site-packages" in p.parts for p in stdlib)


def test_metrics_name_kinds_and_process_local_timing():
    counters = {"output/answers": 4, "output/correct": 1, "sandbox/launches": 10, "sandbox/wall_ms": 2000}
    assert get_domain("code").metrics(counters) == {
        "code/output/answers": 4.0,
        "code/output/correct": 1.0,
        "code/output/pass_rate": 0.25,
        "code/sandbox/launches": 10.0,
        "proc/code/sandbox/wall_ms": 2000.0,
        "proc/code/sandbox/checks_per_s": 5.0,
    }


def test_without_a_sandbox_code_is_refused_and_counted():
    domain = CodeDomain(SandboxConfig(bwrap="/nonexistent/bwrap"))
    (p,) = read_proposals(domain, [VALID_OUTPUT])
    assert p.invalid_reason == "sandbox_refused"
    spec = tasks.parse_task(VALID_FUNCTION).answer
    with domain.open_checker(None) as checker:
        batch = checker.grade([spec], ["```python\n" + DOUBLE + "\n```"])
    assert [v.correct for v in batch.verdicts] == [False]
    assert batch.counters["gold_unavailable"] == 1 and batch.counters["refused"] == 2


@pytest.mark.sandbox
@needs_sandbox
def test_the_gate_computes_golds_by_execution_and_refuses_bad_programs():
    domain = CodeDomain(SandboxConfig(timeout_s=3.0, memory_mb=512))
    texts = [
        VALID_OUTPUT,
        VALID_FUNCTION,
        output_task("print({'alpha', 'beta', 'gamma', 'delta', 'epsilon'})"),
        output_task("print('hello world')"),
        output_task("print(1 / 0)"),
        output_task("while True:\n    pass"),
        function_task("Return x.", "def f(x):\n    return x", "assert f(1) == 2\nassert f(2) == 3"),
    ]
    got = [p.invalid_reason for p in read_proposals(domain, texts)]
    assert got == [
        None,
        None,
        "nondeterministic",
        "answer_leaked",
        "program_error",
        "timeout",
        "no_passing_tests",
    ]
    proposals = read_proposals(domain, texts[:2])
    assert domain.gold(proposals[0].answer) == {"kind": "output", "stdout": "7"}
    assert domain.gold(
        proposals[1].answer
    ) == {  # f(2) == 6 is wrong: the reference returns 5, so it is dropped
        "kind": "function",
        "entry_point": "f",
        "calls": [[1], [0]],
        "expected": [3, 1],
    }
    stats = domain.drain_stats()
    assert stats["gate/tests_dropped"] == 1 + 2 + 1 and stats["sandbox/launches"] == 7 + 3 + 2 + 2


@pytest.mark.sandbox
@needs_sandbox
def test_the_checker_compares_outputs_and_runs_functions_in_the_jail():
    output_spec, function_spec = (tasks.parse_task(t).answer for t in (VALID_OUTPUT, VALID_FUNCTION))
    domain = CodeDomain(SandboxConfig(timeout_s=3.0, memory_mb=512))  # a fresh domain: golds are recomputed
    responses = [
        "x is 3, so <output>7</output>",
        "<output>6</output>",
        "I think 7",
        "```python\ndef f(x):\n    return x + x + 1\n```",
        "```python\ndef f(x):\n    return x + x + 1\n```",
        "```python\ndef f(x):\n    return 2 * x\n```",
        "```python\ndef f(x):\n    while True:\n        pass\n```",
        "```python\nclass Liar(int):\n    def __eq__(self, o):\n        return True\ndef f(x):\n    return Liar(0)\n```",
    ]
    with domain.open_checker(None) as checker:
        batch = checker.grade([output_spec] * 3 + [function_spec] * 5, responses)
    assert [v.correct for v in batch.verdicts] == [True, False, False, True, True, False, False, False]
    assert batch.verdicts[0].extracted == "7" and batch.verdicts[2].extracted is None
    c = batch.counters
    assert c["gold_recomputed"] == 2 and c["no_answer"] == 1
    assert (c["output/answers"], c["output/correct"], c["function/answers"], c["function/correct"]) == (
        3,
        1,
        5,
        2,
    )
    assert (c["status/passed"], c["status/failed"], c["status/timeout"], c["status/error"]) == (2, 1, 1, 1)
    assert c["sandbox/launches"] == 2 + 4  # two golds, four distinct functions


def scripted_role(name, script, seed):
    tokenizer = make_tokenizer()
    model = make_model(tokenizer, seed=seed)
    cfg = RoleConfig(model="test", num_generations=4, max_completion_length=64, lr=1e-2, micro_batch_size=4)
    return Role(name, cfg, model, tokenizer, engine=ScriptedEngine(model, tokenizer, script))


def one_step(proposals, script, domain, run_dir, *, sampler=None, samples_every=10, collective=None) -> dict:
    """One online step of scripted roles on `domain`: the Proposer's j-th completion is `proposals[j]`."""
    loop = DualPlay(
        scripted_role("proposer", lambda p, j: proposals[j], 1),
        scripted_role("solver", script, 2),
        domain.open_checker(None),
        schedule=ScheduleConfig(samples_every=samples_every),
        rewards=RewardConfig(),
        prompts=PromptConfig(),
        sampler=sampler,
        run_dir=run_dir,
        verbose=False,
        domain=domain,
        collective=collective,
    )
    return loop.online_step()


def solver_script(prompt: str, j: int) -> str:
    if tasks.OUTPUT_HEAD in prompt:
        return "<output>7</output>" if j < 2 else "<output>8</output>"
    return "```python\n" + (DOUBLE if j < 2 else "def f(x):\n    return x") + "\n```"


@pytest.mark.sandbox
@needs_sandbox
def test_the_loop_plays_code_with_golds_from_the_sandbox(tmp_path):
    proposals = [
        VALID_OUTPUT,
        VALID_FUNCTION,
        output_task("print({'a', 'b', 'c', 'd', 'e', 'f'})"),
        "nothing",
    ]
    domain = CodeDomain(SandboxConfig(timeout_s=5.0, memory_mb=512))
    sampler = FunctionPassages(source_root("stdlib"))
    row = one_step(proposals, solver_script, domain, tmp_path, sampler=sampler, samples_every=1)
    assert row["proposer/valid/fraction"] == 0.5
    assert row["proposer/invalid/nondeterministic"] == row["proposer/invalid/no_task"] == 1.0
    assert row["code/output/pass_rate"] == row["code/function/pass_rate"] == 0.5
    assert row["proposer/pass_rate/mean"] == 0.5 and row["proposer/learnable/count"] == 2.0
    assert row["solver/update/applied"] == 1.0 and row["proposer/update/applied"] == 1.0
    assert row["code/sandbox/launches"] == 3 + 3 + 2 and row["proc/code/sandbox/checks_per_s"] > 0
    sample = json.loads((tmp_path / "samples.jsonl").read_text().splitlines()[0])
    assert sample["passage"].startswith(("def ", "@", "async def "))


def test_the_loop_survives_a_real_tiny_model_proposing_garbage(tmp_path):
    def real_role(name, seed):
        tokenizer = make_tokenizer()
        cfg = RoleConfig(model="test", num_generations=4, max_prompt_length=400, max_completion_length=24)
        return Role(name, cfg, make_model(tokenizer, seed=seed), tokenizer)

    domain = get_domain("code")
    with domain.open_checker(None) as checker:
        loop = DualPlay(
            real_role("proposer", 1),
            real_role("solver", 2),
            checker,
            schedule=ScheduleConfig(),
            rewards=RewardConfig(),
            prompts=PromptConfig(),
            sampler=domain.open_corpus(KnowledgeConfig(path="stdlib")),
            run_dir=tmp_path,
            verbose=False,
            domain=domain,
        )
        row = loop.online_step()
    assert row["proposer/valid/fraction"] == 0.0 and row["proposer/invalid/no_task"] == 4.0
    assert row["proposer/update/applied"] == 0.0 and row["solver/update/applied"] == 0.0


class FollowerRank(SingleProcess):
    """A rank whose gate judged otherwise than rank 0's: the broadcast hands it rank 0's proposals."""

    def __init__(self, rank0_reasons):
        self.rank0_reasons = rank0_reasons

    def broadcast(self, obj, what=""):
        if what == "proposals after the gate":
            return [dataclasses.replace(p, invalid_reason=r) for p, r in zip(obj, self.rank0_reasons)]
        return obj


def test_rank_zeros_gate_decides_for_every_rank(tmp_path):
    proposals = [VALID_OUTPUT, VALID_OUTPUT, "nothing", "nothing"]
    domain = CodeDomain(SandboxConfig(bwrap="/nonexistent/bwrap"))  # this rank's gate refuses everything
    follower = FollowerRank(["timeout", "timeout", "no_task", "no_task"])
    row = one_step(proposals, solver_script, domain, tmp_path, collective=follower)
    assert row["proposer/invalid/timeout"] == 2.0 and "proposer/invalid/sandbox_refused" not in row
