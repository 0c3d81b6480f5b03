"""Answers written in prose: read a response without `\\boxed{}` the way math-verify's extraction reads it.

Why: users compare our scores with math-verify-based evaluations, which find an answer in `Answer $ 9 $`,
`Therefore $x \\geq 5$ is the solution.`, `Final Answer: The largest $n$ is 34.` or `... which is 1,000.99€`. How:
`read_prose(text)` tries, in math-verify's order of priority (first found wins):

1. `final answer ... is X` (within 100 characters): the item right after `is`;
2. an `answer` word: the rest of its line when that is itself a math expression, else the first item starting
   within 50 characters after the word (the last such word that has one);
3. the whole response when it is a short math expression (`extract.bare_answer`);
4. the last LaTeX span (`$...$`, `$$...$$`, `\\(...\\)`, `\\[...\\]`; inline ones end at a line break), joined with
   the spans right before it when only `,` / `and` / `or` separate them (`$1$, $2$ and $3$` is one answer);
5. the last number that starts a word (after a space, `=` or a currency sign): `1 000`, `1,000.99`, `2,74`, `.5`.

An item is a span group or a number. Returns `(answer, source)` with source "answer_phrase", "bare", "latex_span"
or "last_number"; the answer is the text as written (numbers are read by `goldforms`, where a prose number's comma
that cannot separate thousands is a decimal comma). Every step is one regex scan or one pass over the spans, with
bounded look-ahead: linear in the length of the text. Nothing here raises.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right

from pasodoble.grader.goldforms import MATH_WORDS, normalise_answer

BARE_MAX_CHARS = 64
_ANSWER_PHRASE = re.compile(r"answer\s*(?:is\s*:?|:|=)[ \t]*", re.IGNORECASE)
_PHRASE_CLOSERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
_PHRASE_MAX_CHARS = 200
_LATEX_TEXT = re.compile(r"\\(?:text|mathrm|textbf|mbox)\s*\{[^{}]*\}|\\[A-Za-z]+")
_WORD = re.compile(r"[A-Za-z]{2,}")
_MATHY = re.compile(r"[0-9\\]")
_SPAN_TOKEN = re.compile(r"\\\\|\\\$|\$\$|\$|\\\[|\\\]|\\\(|\\\)|\n")
_CLOSER = {"$$": "$$", "$": "$", "\\[": "\\]", "\\(": "\\)"}
_INLINE = ("$", "\\(")
_JOINER = re.compile(r"\s*(?:,\s*)?(?:(?:and|or)\s*)?")
_GROUP_MAX = 6  # spans joined into one answer, as math-verify's pattern allows
_FINAL_ANSWER = re.compile(r"final answer", re.IGNORECASE)
_FINAL_IS = re.compile(r"\s+is\b:?\s*")
_FINAL_IS_HOPED = re.compile(r"\s*is\b:?\s*", re.IGNORECASE)
_HOPE = re.compile(r"\.?\s?I hope")
_ANSWER_WORD = re.compile(r"answer", re.IGNORECASE)
_NUMBER = re.compile(
    r"(?:(?<=[\s=$€£¥])|^)-?(?:[1-9]\d{0,2}(?:[ ,]\d{3})+(?!\d)(?:\.\d+)?|\d+(?:[.,]\d+)?(?:/\d+)?|\.\d+)(?:\s*\\?%)?"
)
_FINAL_WINDOW, _ANSWER_WINDOW, _SPAN_MAX_CHARS, _CUT_MAX_CHARS = 100, 50, 2000, 200

Span = tuple[int, int, str]  # (start, end, content) of one LaTeX span
Scan = tuple[list[Span], list[tuple[int, int]]]  # spans, and inline openers cut off by a line break


def extract_answer_phrase(text: str) -> str | None:
    """Return the answer after the last `answer is` / `Answer:` / `answer =` phrase (to the end of its line), or None.

    A leading `$...$`, `$$...$$`, `\\(...\\)` or `\\[...\\]` is taken up to its closer (so `The answer is $5$
    apples.` yields `$5$`); otherwise a trailing full stop is dropped. Longer than 200 characters: None.
    """
    last = None
    for match in _ANSWER_PHRASE.finditer(text):
        last = match
    if last is None:
        return None
    end = text.find("\n", last.end())
    rest = text[last.end() : end if end >= 0 else len(text)].strip()
    for opener, closer in _PHRASE_CLOSERS:
        if rest.startswith(opener):
            close = rest.find(closer, len(opener))
            if close > len(opener):
                rest = rest[: close + len(closer)]
            break
    else:
        rest = rest.rstrip(".").strip()
    return rest if rest and len(rest) <= _PHRASE_MAX_CHARS else None


def bare_answer(text: str) -> str | None:
    """Return the stripped text when it is itself a short math expression (see the module docstring), else None."""
    answer = text.strip()
    if not answer or len(answer) > BARE_MAX_CHARS or "\n" in answer:
        return None
    core = normalise_answer(answer)[0]
    if not _MATHY.search(core):
        return None
    words = _WORD.findall(_LATEX_TEXT.sub(" ", core))
    return answer if all(word.lower() in MATH_WORDS for word in words) else None


def _scan(text: str) -> tuple[list[Span], list[tuple[int, int]]]:
    """(every LaTeX span, the regions of inline spans cut by a line break) in one pass.

    Escaped `\\$` and `\\\\` are content; a `$` right after a digit opens nothing (math-verify's rule). An inline
    span cut by a line break is no span (`Answer $ \\n 9 \\n $`); its region runs to its closer when that comes
    within `_CUT_MAX_CHARS` (the closer is used up), else to the line break, and numbers in it are no answer. A `$`
    right before a digit is taken for a currency sign there, so `costs $5` cuts nothing.
    """
    spans: list[Span] = []
    cut: list[tuple[int, int]] = []
    opener, start, content_start, broken = None, 0, 0, -1
    for token in _SPAN_TOKEN.finditer(text):
        mark = token.group()
        if opener is None:
            if mark in _CLOSER and not (mark == "$" and token.start() and text[token.start() - 1].isdigit()):
                opener, start, content_start, broken = mark, token.start(), token.end(), -1
            continue
        if broken >= 0 and token.start() - start > _CUT_MAX_CHARS:
            cut.append((start, broken))
            opener = None
            if mark in _CLOSER:  # this mark may open a span of its own
                opener, start, content_start, broken = mark, token.start(), token.end(), -1
        elif mark == _CLOSER[opener]:
            content = text[content_start : token.start()].strip()
            if broken >= 0:
                cut.append((start, token.end()))
            elif content and len(content) <= _SPAN_MAX_CHARS:
                spans.append((start, token.end(), content))
            opener = None
        elif mark == "\n" and opener in _INLINE and broken < 0:
            if text[content_start : content_start + 1].isdigit():
                opener = None
            else:
                broken = token.start()
    if opener is not None and broken >= 0:
        cut.append((start, broken))
    return spans, cut


def latex_spans(text: str) -> list[Span]:
    """Every LaTeX span of the text, left to right, in one pass."""
    return _scan(text)[0]


def _inside_cut(cut: list[tuple[int, int]], position: int) -> bool:
    index = bisect_right(cut, position, key=lambda region: region[0]) - 1
    return index >= 0 and position < cut[index][1]


def _joined(text: str, spans: list[Span], left: int, right: int) -> bool:
    """Whether only `,`, `and` or `or` separate span `left` from span `right` (= left + 1)."""
    gap_start, gap_end = spans[left][1], spans[right][0]
    return gap_end - gap_start <= 12 and _JOINER.fullmatch(text, gap_start, gap_end) is not None


def _group(text: str, spans: list[Span], index: int, backwards: bool) -> tuple[str, int]:
    """(the spans joined with span `index`, end of the group) growing backwards or forwards."""
    first = last = index
    while last - first + 1 < _GROUP_MAX:
        if backwards and first > 0 and _joined(text, spans, first - 1, first):
            first -= 1
        elif not backwards and last + 1 < len(spans) and _joined(text, spans, last, last + 1):
            last += 1
        else:
            break
    return ", ".join(content for _, _, content in spans[first : last + 1]), spans[last][1]


def _item_at(text: str, scan: Scan, begin: int, window: int) -> tuple[str, int] | None:
    """(the first span group or number starting in text[begin : begin + window], its end), or None.

    A number inside an inline span that a line break cut off is no item (`Answer $ \\n 9 \\n $`).
    """
    spans, cut = scan
    limit = begin + window
    span_index = bisect_left(spans, begin, key=lambda span: span[0])
    number = _NUMBER.search(text, begin, min(len(text), limit + 60))
    if number is not None and (number.start() > limit or _inside_cut(cut, number.start())):
        number = None
    span_first = span_index < len(spans) and spans[span_index][0] <= limit
    if span_first and (number is None or spans[span_index][0] <= number.start()):
        return _group(text, spans, span_index, backwards=False)
    return (number.group().strip(), number.end()) if number else None


def _after_final_answer(text: str, scan: Scan, hoped: bool) -> str | None:
    """The item after the last `final answer ... is` (`hoped`: only `final answer is X. I hope`)."""
    for match in reversed(list(_FINAL_ANSWER.finditer(text))):
        window_end = match.end() + _FINAL_WINDOW + 8
        verb = (_FINAL_IS_HOPED if hoped else _FINAL_IS).search(text, match.end(), window_end)
        if verb is None or verb.start() - match.end() > (0 if hoped else _FINAL_WINDOW):
            continue
        item = _item_at(text, scan, verb.end(), 0)
        if item and (not hoped or _HOPE.match(text, item[1])):
            return item[0]
    return None


def final_answer_hoped(text: str) -> str | None:
    """The answer of `Final answer is X. I hope it is correct.`, which math-verify reads before any box."""
    if not isinstance(text, str) or "hope" not in text:
        return None
    return _after_final_answer(text, _scan(text), hoped=True)


def _after_answer_word(text: str, scan: Scan) -> str | None:
    phrase = extract_answer_phrase(text)
    if phrase and (bare_answer(phrase) or phrase.startswith(("$", "\\(", "\\["))):
        return phrase
    for match in reversed(list(_ANSWER_WORD.finditer(text))):
        item = _item_at(text, scan, match.end(), _ANSWER_WINDOW)
        if item:
            return item[0]
    return None


def read_prose(text: str) -> tuple[str | None, str | None]:
    """`(answer, source)` read from prose as described above, or `(None, None)`."""
    if not isinstance(text, str) or not text.strip():
        return None, None
    scan = _scan(text)
    found = _after_final_answer(text, scan, hoped=False) or _after_answer_word(text, scan)
    if found:
        return found, "answer_phrase"
    bare = bare_answer(text)
    if bare:
        return bare, "bare"
    spans, cut = scan
    number = None
    for match in _NUMBER.finditer(text):
        if not _inside_cut(cut, match.start()):
            number = match
    if spans and (number is None or spans[-1][1] >= number.end()):
        return _group(text, spans, len(spans) - 1, backwards=True)[0], "latex_span"
    return (number.group().strip(), "last_number") if number else (None, None)
