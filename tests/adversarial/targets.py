"""What the fuzz suite and `bench/fuzz.py` push hostile input through: every text parser and every JSONL reader.

`PARSERS` maps a name to a call on one string (model text, a gold answer, a passage, a recipe or an override);
`READERS` maps a name to a call on a file path. Each comes with the exceptions it documents (`UserError` and its
`ConfigError` for a reader, a config parser's `ConfigError`); any other exception escaping is a defect.
`fuzz_text(rng)` and `fuzz_jsonl(rng)` draw the hostile inputs for the benchmark (the tests use hypothesis).
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pasodoble.config import apply_override
from pasodoble.core.knowledge import KnowledgeConfig, PassageSampler, chunk_text
from pasodoble.core.prompts import answer_leaked, normalized_tokens, parse_proposal
from pasodoble.errors import ConfigError, UserError
from pasodoble.evals.problems import parse_answers, read_rows
from pasodoble.evals.samples import load_resume_state
from pasodoble.grader import extract, fastpath, goldforms, prose
from pasodoble.grader.cli import _read_rows as verify_answers_rows
from pasodoble.io import read_jsonl
from pasodoble.jsonl import LineError, decode_line, read_jsonl_skipping
from pasodoble.reports.series import load_series
from pasodoble.sft import load_examples
from pasodoble.strict_yaml import load_yaml
from pasodoble.world import arith

Target = tuple[Callable[[Any], Any], tuple[type[BaseException], ...]]


@functools.cache
def _tokenizer():
    from tests.conftest import build_char_tokenizer

    return build_char_tokenizer()  # a fast tokenizer: chunk_text cuts at its offsets


def _half(text: str) -> tuple[str, str]:
    return text[: len(text) // 2], text[len(text) // 2 :]


PARSERS: dict[str, Target] = {
    "extract.extract_boxed": (extract.extract_boxed, ()),
    "extract.extract_boxed(first)": (lambda t: extract.extract_boxed(t, "first"), ()),
    "extract.extract_answer_tag": (extract.extract_answer_tag, ()),
    "extract.extract_gsm8k": (extract.extract_gsm8k, ()),
    "extract.extract_last_number": (extract.extract_last_number, ()),
    "extract.extract_answer": (extract.extract_answer, ()),
    "extract.extract_answer(last_number)": (lambda t: extract.extract_answer(t, "last_number"), ()),
    "extract.extract_answer(auto)": (lambda t: extract.extract_answer(t, "auto"), ()),
    "extract.extract_answer(auto, set)": (lambda t: extract.extract_answer(t, "auto", set_size=3), ()),
    "extract.extract_box_group": (extract.extract_box_group, ()),
    "prose.read_prose": (prose.read_prose, ()),
    "goldforms.normalise_answer(extended)": (lambda t: goldforms.normalise_answer(t, extended=True), ()),
    "goldforms.set_size": (goldforms.set_size, ()),
    "goldforms.read_decimal_comma": (lambda t: goldforms.read_decimal_comma(*_half(t)), ()),
    "goldforms.normalise_answer": (goldforms.normalise_answer, ()),
    "goldforms.normalise_answer(decimal_comma)": (
        lambda t: goldforms.normalise_answer(t, decimal_comma=True),
        (),
    ),
    "fastpath.normalised": (fastpath.normalised, ()),
    "fastpath.parse_number": (fastpath.parse_number, ()),
    "fastpath.fast_verdict": (lambda t: fastpath.fast_verdict(*_half(t)), ()),
    "fastpath.fast_verdict(same)": (lambda t: fastpath.fast_verdict(t, t), ()),
    "prompts.parse_proposal": (parse_proposal, ()),
    "prompts.normalized_tokens": (normalized_tokens, ()),
    "prompts.answer_leaked": (lambda t: answer_leaked(*_half(t)), ()),
    "problems.parse_answers(auto)": (parse_answers, ()),
    "problems.parse_answers(plain)": (lambda t: parse_answers(t, "plain"), ()),
    "arith.solve": (arith.solve, ()),
    "knowledge.chunk_text": (lambda t: chunk_text(t, 4), ()),
    "knowledge.chunk_text(tokenizer)": (lambda t: chunk_text(t, 4, _tokenizer()), ()),
    "config.apply_override": (lambda t: apply_override({}, t), (ConfigError,)),
    "config.apply_override(value)": (lambda t: apply_override({}, "solver.lr=" + t), (ConfigError,)),
    "strict_yaml.load_yaml": (lambda t: load_yaml(t, "recipe.yaml"), (ConfigError,)),
    "jsonl.decode_line": (lambda t: decode_line(t.encode("utf-8", "surrogatepass")), (LineError,)),
}


def _sampler(path: Path) -> None:
    PassageSampler(KnowledgeConfig(path=str(path), min_chars=1)).sample(0, k=4)


def _copy_to(suffix: str, reader: Callable[[Path], Any]) -> Callable[[Path], Any]:
    """Readers that pick their format by file name get a copy of the bytes under a name they read."""

    def read(path: Path) -> Any:
        target = path.with_name(path.stem + suffix)
        target.write_bytes(path.read_bytes())
        return reader(target)

    return read


READERS: dict[str, Target] = {
    "io.read_jsonl": (read_jsonl, (UserError,)),
    "io.read_jsonl(skip_bad)": (lambda p: read_jsonl(p, skip_bad=True), ()),
    "jsonl.read_jsonl_skipping": (read_jsonl_skipping, ()),
    "verify-answers rows": (verify_answers_rows, ()),
    "problems.read_rows(.jsonl)": (read_rows, ()),
    "problems.read_rows(.json)": (_copy_to(".json", read_rows), (UserError,)),
    "sft.load_examples": (load_examples, (UserError,)),
    "samples.load_resume_state": (lambda p: load_resume_state(p, 2), (UserError,)),
    "knowledge.PassageSampler": (_sampler, (UserError,)),
    "series.load_series": (load_series, ()),
}

# Pieces that steer random text into the parsers' structure: tags, boxes, braces, numbers, YAML and JSON syntax.
PIECES = [
    "\\boxed{", "\\fbox{", "}", "{", "\\{", "\\}", "\\", "<answer>", "</answer>", "<problem>", "</problem>",
    "<think>", "</think>", "####", "\\frac{", "\\dfrac", "^{", "^", "9", "0", "1,000", ".5", "-", "/", "%", "$",
    "\\(", "\\)", "\\[", "\\]", "\\text{", "x", " ", "\n", "\t", ":", "=", ".", "+=", "[", "]", "&a ", "*a", "!!",
    "yes", "NaN", "1e400", '"', ",", "\x00", "\u2028", "\ud800", "é", "\U0001f600", "9" * 40, "solver.lr",
    "final answer is ", "answer", " I hope", "$$", " and ", "1 000", "2,74", "\\,", ">=", "\\le ", "\\neq",
    "\\text{ cm}", "m²", "km/h", "€",
]  # fmt: skip


def fuzz_text(rng: random.Random, max_pieces: int = 60) -> str:
    """A hostile string: structural pieces and random characters (any code point, lone surrogates included)."""
    out = []
    for _ in range(rng.randrange(max_pieces + 1)):
        roll = rng.random()
        if roll < 0.6:
            out.append(rng.choice(PIECES))
        elif roll < 0.8:
            out.append(chr(rng.randrange(32, 127)))
        elif roll < 0.95:
            out.append(chr(rng.randrange(0x110000)))
        else:
            out.append(rng.choice(PIECES) * rng.randrange(1, 200))
    return "".join(out)


def _json_line(rng: random.Random) -> bytes:
    row = {
        "gold": rng.choice(["2", 3, 1.5, None, True, [1], "\\frac{1}{2}"]),
        "pred": rng.choice(["\\boxed{2}", "x", 7, None]),
        "prompt": "p",
        "completion": rng.choice(["c", 1]),
        "text": rng.choice(["a passage of text", "", 5]),
        "source": "s",
        "id": str(rng.randrange(3)),
        "sample": rng.choice([0, 1, 2, -1, "0", True]),
        "step": rng.choice([1, 2, "3", None]),
        "loss": rng.choice([0.5, 1e300, -0.0]),
    }
    return json.dumps({k: v for k, v in row.items() if rng.random() < 0.8}).encode()


def fuzz_line(rng: random.Random) -> bytes:
    """One hostile JSONL line: a row, truncated, with random bytes, huge numbers, deep nesting or bad escapes."""
    kind = rng.randrange(9)
    if kind == 0:
        return _json_line(rng)
    if kind == 1:
        line = _json_line(rng)
        return line[: rng.randrange(len(line) + 1)]
    if kind == 2:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(40)))
    if kind == 3:
        return b'{"gold": ' + b"9" * rng.randrange(1, 20_000) + b', "pred": "1"}'
    if kind == 4:
        depth = rng.randrange(1, 5_000)
        return b"[" * depth + b"]" * depth
    if kind == 5:
        return rng.choice([b'{"gold": NaN, "pred": "1"}', b'{"x": Infinity}', b'{"loss": 1e400, "step": 1}'])
    if kind == 6:
        return b'{"text": "\\ud800 half", "pred": "\\udfff", "gold": "\\ud83d"}'
    if kind == 7:
        line = bytearray(_json_line(rng))
        line[rng.randrange(len(line))] = rng.randrange(128, 256)
        return bytes(line)
    return fuzz_text(rng, 20).encode("utf-8", "surrogatepass")


def fuzz_jsonl(rng: random.Random, max_lines: int = 12) -> bytes:
    """A hostile JSONL file, maybe without its final newline (a torn last line)."""
    lines = [fuzz_line(rng).replace(b"\n", b" ") for _ in range(rng.randrange(max_lines + 1))]
    data = b"\n".join(lines)
    return data if rng.random() < 0.3 else data + b"\n"
