"""Every parser on model text is linear: 1 MB adversarial inputs of each shape cost about 16x their 64 KB versions.

The shapes and parsers are those of `bench/parsers.py` (which prints the full table). Times are CPU seconds, the
fastest of a few calls; a quadratic parser grows 256x. A ratio over the bound is taken again against a reference
linear scan of the same texts (`relative_growth`), and a deliberately quadratic parser is shown to fail both. The
linear rewrites are also checked against the plain definitions they replace on random strings.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pasodoble.core.prompts import _contains
from pasodoble.grader.extract import extract_answer_tag

_SPEC = importlib.util.spec_from_file_location(
    "bench_parsers", Path(__file__).resolve().parents[2] / "bench" / "parsers.py"
)
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)

REPEATS = 2
ATTEMPTS = 3  # measurements of a ratio over the bound before it fails (see the test)


@pytest.mark.parametrize("shape", sorted(bench.SHAPES))
@pytest.mark.parametrize("parser", sorted(bench.PARSERS))
def test_growth_from_64_kb_to_1_mb_is_linear(parser, shape):
    # What makes every byte of a 1 MB text dearer than one of a 64 KB text (a busy neighbour, a cache) inflates the
    # ratio: measured 41x for a parser that gives 16-23x alone, three times in a row on one machine. So a ratio
    # over the bound is measured again against a reference linear scan of the same texts, interleaved, which such
    # an effect should reach as well (that 41x could not be reproduced to check it); a superlinear parser stays
    # over both bounds every time (quadratic: 256x and 16x).
    ratios, relative = [], []
    for _ in range(ATTEMPTS):
        ratios.append(bench.growth(bench.PARSERS[parser], bench.SHAPES[shape], REPEATS))
        if ratios[-1] < bench.MAX_GROWTH:
            return
        relative.append(bench.relative_growth(bench.PARSERS[parser], bench.SHAPES[shape], REPEATS))
        if relative[-1] < bench.MAX_RELATIVE_GROWTH:
            return
    pytest.fail(
        f"{parser} on {shape}: {ratios} x for 16x the input, {relative} x the growth of a linear scan"
    )


def _quadratic(text: str) -> object:
    # one search to the end of the text from every 64th character: n / 64 scans of up to n characters
    return [text.find("\x00", start) for start in range(0, len(text), 64)]


def test_a_quadratic_parser_is_over_both_bounds():
    shape = bench.SHAPES["many_dollars"]
    assert bench.growth(_quadratic, shape, REPEATS) >= bench.MAX_GROWTH
    assert bench.relative_growth(_quadratic, shape, REPEATS) >= bench.MAX_RELATIVE_GROWTH


def test_every_shape_has_about_the_size_asked_for():
    for name, shape in bench.SHAPES.items():
        assert 0.9 * 65536 <= len(shape(65536)) <= 1.1 * 65536, name


_LAZY_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_TAG_PARTS = st.sampled_from(
    ["<answer>", "</answer>", "<ANSWER>", "</Answer>", "x", " ", "\n", "<", "/", "answer"]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_TAG_PARTS, max_size=14).map("".join))
def test_answer_tag_pairs_up_tags_as_the_lazy_regex_did(text):
    matches = _LAZY_TAG.findall(text)
    assert extract_answer_tag(text) == (matches[-1].strip() if matches else None)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from("ab"), max_size=12), st.lists(st.sampled_from("ab"), max_size=5))
def test_token_run_search_agrees_with_slice_comparison(haystack, needle):
    expected = any(haystack[i : i + len(needle)] == needle for i in range(len(haystack) - len(needle) + 1))
    assert _contains(haystack, needle) == expected
