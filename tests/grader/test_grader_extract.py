"""Answer extraction on literal inputs, adversarial sizes, and random strings (hypothesis)."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pasodoble.grader.extract import extract_answer, extract_boxed, extract_last_number


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so \\boxed{\\frac{63}{400}}.", "\\frac{63}{400}"),
        ("\\boxed{1} then \\boxed{2}", "2"),
        ("\\fbox{7}", "7"),
        ("\\boxed {x = 3}", "x = 3"),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
        ("\\boxed{[2, 5)}", "[2, 5)"),
        ("\\boxed{\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}}", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"),
        ("\\boxed{10\\%}", "10\\%"),
        ("\\boxed{30^\\circ}", "30^\\circ"),
        ("\\boxed{5 \\text{ cm}}", "5 \\text{ cm}"),
        ("\\boxed{1,000}", "1,000"),
        ("\\boxed{\\text{(C)}}", "\\text{(C)}"),
        ("\\boxed{\\boxed{4}}", "4"),
        ("the last box is cut: \\boxed{3} and \\boxed{4", "3"),
        ("\\boxed{}", ""),
        ("no box here", None),
        ("\\boxed", None),
    ],
)
def test_extract_boxed_last(text, expected):
    assert extract_boxed(text) == expected


def test_extract_boxed_first():
    assert extract_boxed("\\boxed{1} and \\fbox{2}", which="first") == "1"
    with pytest.raises(ValueError, match="which"):
        extract_boxed("\\boxed{1}", which="middle")


@pytest.mark.parametrize(
    ("text", "fallback", "expected"),
    [
        ("steps \\boxed{42}", "none", ("42", "boxed")),
        ("<problem>Q</problem><answer>steps \\boxed{7}</answer>", "none", ("7", "boxed")),
        ("<answer> 12 </answer>", "none", ("12", "answer_tag")),
        ("Janet makes 9 * 2 = $18.\n#### 18", "none", ("18", "gsm8k")),
        ("#### 1,000.\n", "none", ("1,000", "gsm8k")),
        ("\\boxed{ } so #### 5", "none", ("5", "gsm8k")),
        ("the total is 1,234.5 dollars", "none", (None, None)),
        ("the total is 1,234.5 dollars", "last_number", ("1,234.5", "last_number")),
        ("it grew by 15% then 20 %", "last_number", ("20 %", "last_number")),
        ("slope 3/4.", "last_number", ("3/4", "last_number")),
        ("nothing numeric", "last_number", (None, None)),
    ],
)
def test_extract_answer_sources(text, fallback, expected):
    assert extract_answer(text, fallback=fallback) == expected


def test_extract_answer_rejects_unknown_fallback():
    with pytest.raises(ValueError, match="fallback"):
        extract_answer("1", fallback="first_number")


def test_extract_answer_non_string_is_no_answer():
    assert extract_answer(None) == (None, None)  # type: ignore[arg-type]


def test_last_number_handles_negative_and_decimal():
    assert extract_last_number("from -3 to -0.25") == "-0.25"


def test_100kb_of_nested_braces_is_linear():
    depth = 50_000
    text = "\\boxed{" + "{" * depth + "1" + "}" * depth + "}"
    start = time.perf_counter()
    content = extract_boxed(text)
    assert time.perf_counter() - start < 2.0
    assert content == "{" * depth + "1" + "}" * depth
    many_open_boxes = "\\boxed{" * 20_000
    start = time.perf_counter()
    assert extract_answer(many_open_boxes) == (None, None)
    assert time.perf_counter() - start < 2.0


_LATEXISH = st.text(alphabet=st.sampled_from(list("\\{}$#<>/answ:erboxfd0123456789.,%-^ \n")), max_size=300)


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(max_size=300), _LATEXISH))
def test_extraction_never_raises(text):
    for which in ("last", "first"):
        found = extract_boxed(text, which)
        assert found is None or found in text
    answer, source = extract_answer(text, fallback="last_number")
    assert (answer is None) == (source is None)
    assert answer is None or answer.strip() == answer


@settings(max_examples=200, deadline=None)
@given(
    prefix=st.text(max_size=50),
    content=st.text(alphabet=st.characters(blacklist_characters="{}\\"), max_size=50),
)
def test_boxed_content_round_trips(prefix, content):
    assert extract_boxed(f"{prefix.replace('box', '')} \\boxed{{{content}}}") == content
