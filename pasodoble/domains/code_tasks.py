"""Code tasks as plain data: the Proposer's tagged format, the task spec, the Solver's question, answer reading.

What: `parse_task(text)` reads a Proposer completion into a `Proposal` whose question is what the Solver sees and
whose answer is the task's spec (canonical JSON: the program and its input, or the reference solution and its
tests); the gold answer is not in the spec, it comes from running the spec in the sandbox (`domains/code.py`).
`parse_tests` reads `assert f(ARGS) == VALUE` lines into argument tuples and expected values with `ast` and
`ast.literal_eval` (literals only: nothing is executed). `output_leak` / `solution_leak` say when the answer is in
the question; `read_output` / `read_code` read a Solver's answer.

Two kinds of task (docs/DOMAINS.md shows the format):
- output: a program and its standard input; the Solver predicts what it prints, compared as text;
- function: a statement, a reference solution and tests; the Solver writes the function, run on the tests that
  the reference passes.
Pure functions on strings; model text is parsed, never run here.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass

from pasodoble.core.prompts import Proposal
from pasodoble.sandbox.values import canonical, encode

KINDS = ("output", "function")
MAX_TASK_CHARS = 6000  # a longer proposal is refused before any parsing (keeps ast and the jail bounded)
MAX_OUTPUT_CHARS = 1000  # a program printing more is no question a Solver can answer
MIN_LEAK_LINE_CHARS = 16  # solution lines shorter than this may appear in a statement without leaking it
PARSE_REASONS = ("too_long", "no_task", "no_program", "no_problem", "no_solution", "no_tests")

_TAG = {
    name: re.compile(rf"<{name}>(.*?)</{name}>", re.DOTALL)
    for name in ("task", "program", "input", "problem", "solution", "tests")
}
_OUTPUT = re.compile(r"<output>(.*?)</output>", re.DOTALL)
_FENCE = re.compile(r"```[ \t]*(?:python|py|Python)?[ \t]*\n(.*?)```", re.DOTALL)
_CALLED = re.compile(r"assert\s+([A-Za-z_]\w*)\s*\(")
OUTPUT_HEAD = "What does this Python program print?"


@dataclass(frozen=True)
class Test:
    args: tuple  # plain values, the entry point's positional arguments
    expected: object  # the plain value the assert compares with


def _tag(name: str, text: str) -> str | None:
    found = _TAG[name].findall(text)
    return found[-1] if found else None


def _unfence(code: str) -> str:
    """Code inside a tag, without a surrounding ``` fence and blank edge lines."""
    fenced = _FENCE.search(code)
    body = fenced.group(1) if fenced else code
    return body.strip("\n").rstrip()


def spec_json(spec: dict) -> str:
    """A task spec as one canonical string (sorted keys): the Proposal's answer and the gold memo's key."""
    return json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def output_question(program: str, stdin: str) -> str:
    question = f"{OUTPUT_HEAD}\n\n```python\n{program}\n```"
    return question + (f"\n\nIts standard input:\n```\n{stdin}\n```" if stdin else "")


def parse_task(text: str) -> Proposal:
    """A Proposer completion -> Proposal(question, spec JSON) or a reason from PARSE_REASONS; never raises."""
    if len(text) > MAX_TASK_CHARS:
        return Proposal(None, None, "too_long")
    kind = (_tag("task", text) or "").strip().lower()
    if kind not in KINDS:
        return Proposal(None, None, "no_task")
    if kind == "output":
        program = _unfence(_tag("program", text) or "")
        if not program.strip():
            return Proposal(None, None, "no_program")
        stdin = (_tag("input", text) or "").strip("\n")
        spec = {"kind": "output", "program": program, "stdin": stdin}
        return Proposal(output_question(program, stdin), spec_json(spec), None)
    problem = (_tag("problem", text) or "").strip()
    if not problem:
        return Proposal(None, None, "no_problem")
    solution = _unfence(_tag("solution", text) or "")
    if not solution.strip():
        return Proposal(None, None, "no_solution")
    tests = _unfence(_tag("tests", text) or "")
    called = _CALLED.search(tests)
    if called is None:
        return Proposal(None, None, "no_tests")
    entry = called.group(1)
    spec = {"kind": "function", "entry_point": entry, "solution": solution, "tests": tests}
    return Proposal(f"{problem}\n\nWrite the Python function `{entry}`.", spec_json(spec), None)


def syntax_reason(spec: dict) -> str | None:
    """`syntax_error` when the program or solution does not parse; `no_function` when the solution does not
    define the entry point at top level."""
    source = spec["program"] if spec["kind"] == "output" else spec["solution"]
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "syntax_error"
    if spec["kind"] == "function":
        defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        if spec["entry_point"] not in defined:
            return "no_function"
    return None


def _literal(node: ast.AST):
    value = ast.literal_eval(node)
    encode(value)  # ValueError for what cannot cross into the jail (a huge int, a too-deep nesting)
    return value


def parse_tests(tests: str, entry: str) -> tuple[list[Test], int]:
    """(usable tests, dropped statements) of `assert ENTRY(LITERALS) == LITERAL` lines; others are dropped."""
    try:
        body = ast.parse(tests).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return [], 1
    usable, dropped = [], 0
    for stmt in body:
        test = stmt.test if isinstance(stmt, ast.Assert) else None
        call = test.left if isinstance(test, ast.Compare) else None
        if (
            not isinstance(call, ast.Call)
            or not isinstance(call.func, ast.Name)
            or call.func.id != entry
            or call.keywords
            or len(test.ops) != 1
            or not isinstance(test.ops[0], ast.Eq)
        ):
            dropped += 1
            continue
        try:
            usable.append(Test(tuple(_literal(a) for a in call.args), _literal(test.comparators[0])))
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            dropped += 1
    return usable, dropped


def expected_text(value) -> str:
    """What the runner reports for a call that returned `value` (canonical JSON), to compare with outputs."""
    return canonical(encode(value))


def normalize_output(text: str) -> str:
    """Printed text as compared: line ends unified, trailing spaces and leading/trailing blank lines dropped."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    return "\n".join(lines).strip("\n")


def _constants(program: str) -> tuple[set[str], list[str]]:
    try:
        tree = ast.parse(program)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set(), []
    values = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)]
    return {str(v) for v in values}, [v for v in values if isinstance(v, str)]


def output_leak(output: str, program: str, stdin: str) -> str | None:
    """`no_output` / `long_output` / `answer_leaked` (the printed text is a constant of the program, inside one
    of its strings, or in its input), else None. `output` is normalized."""
    if not output.strip():
        return "no_output"
    if len(output) > MAX_OUTPUT_CHARS:
        return "long_output"
    as_str, strings = _constants(program)
    if output in as_str or output.strip() == stdin.strip():
        return "answer_leaked"
    if len(output) >= 3 and (output in stdin or any(output in s for s in strings)):
        return "answer_leaked"
    return None


def solution_leak(question: str, solution: str) -> str | None:
    """`answer_leaked` when a substantial line of the reference solution's body appears in the statement."""
    for line in solution.splitlines():
        line = line.strip()
        if len(line) >= MIN_LEAK_LINE_CHARS and not line.startswith("def ") and line in question:
            return "answer_leaked"
    return None


def read_output(text: str) -> str | None:
    """The last `<output>...</output>` of a response, normalized; None when there is none."""
    found = _OUTPUT.findall(text)
    return normalize_output(found[-1]) if found else None


def read_code(text: str) -> str | None:
    """The last fenced code block of a response; None when there is none."""
    found = _FENCE.findall(text)
    return found[-1].strip("\n") if found and found[-1].strip() else None
