"""Answer extraction: find the final answer inside a model response.

Every reward and every benchmark number starts here, and it runs outside any time limit, so extraction is a pure
function of the text that never raises and runs in linear time on any input: a 1 MB response of nested braces,
unclosed `<answer>` tags or repeated `\\boxed{` costs a few passes, never a rescan per opener (a regular expression
like `<answer>(.*?)</answer>` rescans the rest of the text for every unclosed opener: quadratic). The test-suite
times 1 MB adversarial inputs of every shape; `bench/parsers.py` prints the table.

Order (the first that finds a non-empty answer wins):
1. the last balanced `\\boxed{...}` / `\\fbox{...}` (the prompts ask for `\\boxed{}`);
2. the content of the last `<answer>...</answer>` tag (Proposer completions without a box);
3. the text after the last GSM8K `####` marker, up to the end of its line;
4. only when asked (`fallback="last_number"`): the last plain number of the text (thousands separators, decimals,
   fractions `a/b`, a trailing `%`);
4'. only when asked (`fallback="auto"`, the default of `pasodoble verify-answers` and `pasodoble eval`): the
   answer read as math-verify reads it (`prose.py`): `Final answer is X. I hope` even before a box; for a gold of
   n >= 2 items, the last n boxes when they answer together (`extract_boxes`, source "boxes"); then, without a
   box, answer phrases, a bare answer, the last LaTeX span or the last number (sources "answer_phrase", "bare",
   "latex_span", "last_number").

The content is returned verbatim (stripped): units, percentages, degrees, `\\text{}`, sets, intervals, matrices and
equations are kept, because math-verify's own normalisation knows how to read them. Escaped braces (`\\{`, `\\}`) do
not count towards the balance, so `\\boxed{\\{1, 2\\}}` yields `\\{1, 2\\}`.

Departure from the reference code: the PasoDoble reference takes the text between the first `\\boxed{` and the next
`}`, which truncates `\\boxed{\\frac{1}{2}}` to `\\frac{1`; we match braces.
"""

from __future__ import annotations

import re

from pasodoble.grader.prose import final_answer_hoped, read_prose

_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
# A backslash escapes the next character (so `\{`, `\}` and `\\` are skipped); bare braces are structure.
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.DOTALL)
_ANSWER_OPEN = re.compile(r"<answer>", re.IGNORECASE)
_ANSWER_CLOSE = re.compile(r"</answer>", re.IGNORECASE)
_GSM8K = re.compile(r"####[ \t]*([^\n]*)")
_LAST_NUMBER = re.compile(
    r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+(?:\.\d+)?)?(?:\s*\\?%)?|-?\.\d+(?:\s*\\?%)?"
)

FALLBACKS = ("none", "last_number", "auto")
_BOX_GAP_CHARS = 60  # text between boxes that answer together
_GROUP_MAX = 16
_CONNECTOR = re.compile(r",|;|\band\b|\bor\b")  # what joins boxes into one answer
_COMMAND = re.compile(r"\\[A-Za-z]+")
_LETTER = re.compile(r"[A-Za-z]")


def _matching_braces(text: str) -> dict[int, int]:
    """Map the index of each balanced `{` to the index of its `}` in one left-to-right pass."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for token in _BRACE_TOKEN.finditer(text):
        char = token.group()
        if char == "{":
            stack.append(token.start())
        elif char == "}" and stack:
            pairs[stack.pop()] = token.start()
    return pairs


def extract_boxed(text: str, which: str = "last") -> str | None:
    """Return the content of the last (or first) balanced `\\boxed{...}` / `\\fbox{...}`, or None.

    `which` is "last" or "first". An unbalanced box (`\\boxed{1` at the end of a truncated response) is skipped.
    """
    if which not in ("last", "first"):
        raise ValueError(f"which must be 'last' or 'first', got {which!r}")
    if not isinstance(text, str) or "box" not in text:
        return None
    opens = [m.end() - 1 for m in _BOX_OPEN.finditer(text)]
    if not opens:
        return None
    pairs = _matching_braces(text)
    ordered = reversed(opens) if which == "last" else iter(opens)
    for brace in ordered:
        close = pairs.get(brace)
        if close is not None:
            return text[brace + 1 : close]
    return None


def _balanced_boxes(text: str) -> list[tuple[int, int, int]]:
    """(start, content start, closing brace) of every balanced box, left to right, in one pass."""
    pairs = _matching_braces(text)
    return [
        (m.start(), m.end(), pairs[m.end() - 1]) for m in _BOX_OPEN.finditer(text) if m.end() - 1 in pairs
    ]


def _together(text: str, left: tuple[int, int, int], right: tuple[int, int, int]) -> bool:
    """Whether two boxes answer together: only a short stretch of one paragraph between them."""
    gap_start, gap_end = left[2] + 1, right[0]
    if not 0 <= gap_end - gap_start <= _BOX_GAP_CHARS:
        return False
    gap = text[gap_start:gap_end]
    if "\n\n" in gap:
        return False
    return _CONNECTOR.search(gap) is not None or _LETTER.search(_COMMAND.sub("", gap)) is None


def extract_boxes(text: str, count: int) -> str | None:
    """The last `count` balanced boxes joined with ", " when they answer together, else None.

    They answer together when a short stretch of one paragraph holding a comma, `;`, `and` or `or`, or no word but
    LaTeX commands, separates each from the next (`\\boxed{1}, \\boxed{2}`, `\\boxed{k = 45} \\quad \\text{and} \\quad
    \\boxed{n = 2}`): at most `_BOX_GAP_CHARS` characters and no blank line. One pass, like `extract_boxed`.
    """
    if count < 2 or not isinstance(text, str) or "box" not in text:
        return None
    boxes = _balanced_boxes(text)[-count:]
    if len(boxes) < count or not all(_together(text, a, b) for a, b in zip(boxes, boxes[1:])):
        return None
    contents = [text[start:close].strip() for _, start, close in boxes]
    return ", ".join(contents) if all(contents) else None


def extract_box_group(text: str) -> str | None:
    """The last box joined with the boxes before it that answer together with it (a gold written as several
    boxes: `\\(\\boxed{1}\\) and \\(\\boxed{-2}\\)` is `1, -2`), or None without a box. At most `_GROUP_MAX` boxes."""
    if not isinstance(text, str) or "box" not in text:
        return None
    boxes = _balanced_boxes(text)
    if not boxes:
        return None
    first = len(boxes) - 1
    while first > 0 and len(boxes) - first < _GROUP_MAX and _together(text, boxes[first - 1], boxes[first]):
        first -= 1
    contents = [text[start:close].strip() for _, start, close in boxes[first:]]
    return ", ".join(content for content in contents if content) or None


def extract_answer_tag(text: str) -> str | None:
    """Return the stripped content of the last `<answer>...</answer>` tag, or None.

    Tags pair up left to right as a lazy `<answer>(.*?)</answer>` would match them (an opener, then the first closer
    after it; a later opener inside that content is text), but every search starts where the last one ended, so
    the whole scan is one pass: an opener without a closer ends it.
    """
    last, position = None, 0
    while (opener := _ANSWER_OPEN.search(text, position)) is not None:
        closer = _ANSWER_CLOSE.search(text, opener.end())
        if closer is None:
            break
        last, position = (opener.end(), closer.start()), closer.end()
    return text[last[0] : last[1]].strip() if last else None


def extract_gsm8k(text: str) -> str | None:
    """Return the text after the last `####` marker (GSM8K style), without a trailing full stop, or None."""
    matches = _GSM8K.findall(text)
    return matches[-1].strip().rstrip(".").strip() if matches else None


def extract_last_number(text: str) -> str | None:
    """Return the last plain number of the text (with its separators, fraction bar or `%`), or None."""
    last = None
    for match in _LAST_NUMBER.finditer(text):
        last = match
    return last.group().strip() if last else None


def extract_answer(text: str, fallback: str = "none", set_size: int = 1) -> tuple[str | None, str | None]:
    """Return `(answer, source)`; source is "boxed", "boxes", "answer_tag", "gsm8k", "last_number",
    "answer_phrase", "bare", "latex_span" or None.

    `set_size`: with `fallback="auto"`, a gold of that many items (2 or more) reads the last boxes as one answer
    when they answer together (`extract_boxes`, source "boxes"). Never raises on any string; a non-string input
    yields `(None, None)`.
    """
    if fallback not in FALLBACKS:
        raise ValueError(f"fallback must be one of {FALLBACKS}, got {fallback!r}")
    if not isinstance(text, str):
        return None, None
    if fallback == "auto":
        hoped = final_answer_hoped(text)
        if hoped:
            return hoped, "answer_phrase"
        boxes = extract_boxes(text, set_size)
        if boxes:
            return boxes, "boxes"
    boxed = extract_boxed(text, "last")
    if boxed is not None and boxed.strip():
        return boxed.strip(), "boxed"
    for source, finder in (("answer_tag", extract_answer_tag), ("gsm8k", extract_gsm8k)):
        found = finder(text)
        if found:
            return found, source
    if fallback == "last_number":
        number = extract_last_number(text)
        if number:
            return number, "last_number"
    if fallback == "auto":
        return read_prose(text)
    return None, None
