"""`samples.html` filters by validity, reject reason, pass-rate band and step, with CSS alone.

The page holds no script, so a filter is a radio button plus a rule `body:has(#f-<filter>-<value>:checked)
.card:not(.<filter>-<value>) { display: none; }`. The tests read the page back and apply those rules by hand: for
every option, the cards left showing are exactly the rows that match it.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

from pasodoble.reports.samples_html import render_page

ROWS = [
    {"step": 5, "question": "q1", "pass_rate": 0.5, "invalid_reason": None},
    {"step": 5, "question": "q2", "pass_rate": 0.0, "invalid_reason": None},
    {"step": 5, "question": "", "invalid_reason": "missing_problem"},
    {"step": 10, "question": "q4", "pass_rate": 1.0, "invalid_reason": None},
    {"step": 10, "question": "q5", "invalid_reason": 'leaked <b>"answer"</b>'},
    {"step": 10, "question": "q6", "pass_rate": 0.2, "invalid_reason": None},
]


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.cards: list[set[str]] = []
        self.radios: dict[str, list[str]] = {}
        self.labels: list[str] = []
        self._in_label = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "div" and "card" in (a.get("class") or "").split():
            self.cards.append(set(a["class"].split()))
        if tag == "input" and a.get("type") == "radio":
            self.radios.setdefault(a["name"], []).append(a["id"])
        self._in_label = self._in_label or tag == "label"

    def handle_endtag(self, tag):
        self._in_label = self._in_label and tag != "label"

    def handle_data(self, data):
        if self._in_label:
            self.labels.append(data.strip())


def _shown(page: str, parsed: _Page, radio: str) -> list[int]:
    """Indexes of the cards still displayed with `radio` checked, by the page's own CSS rules."""
    hidden = re.findall(
        rf"body:has\(#{re.escape(radio)}:checked\) \.card:not\(\.([\w-]+)\) \{{ display: none; \}}", page
    )
    return [i for i, classes in enumerate(parsed.cards) if all(name in classes for name in hidden)]


def _filtered(radio_id: str) -> list[int]:
    page = render_page(ROWS, "run", low=0.2)
    parsed = _Page()
    parsed.feed(page)
    return _shown(page, parsed, radio_id)


def test_every_filter_has_all_checked_and_one_option_a_value():
    page = render_page(ROWS, "run", low=0.2)
    parsed = _Page()
    parsed.feed(page)
    assert set(parsed.radios) == {"validity", "reason", "band", "step"}
    assert parsed.radios["step"] == ["f-step-all", "f-step-5", "f-step-10"]
    assert len(parsed.radios["reason"]) == 3 and len(parsed.radios["band"]) == 4
    assert "<b>" not in page  # a reason is text, never markup
    assert "leaked &lt;b&gt;&quot;answer&quot;&lt;/b&gt; (1)" in page
    assert 'id="f-validity-all" checked' in page and len(parsed.cards) == len(ROWS)


def test_each_option_shows_exactly_its_rows():
    assert _filtered("f-validity-all") == [0, 1, 2, 3, 4, 5]
    assert _filtered("f-validity-valid") == [0, 1, 3, 5]
    assert _filtered("f-validity-invalid") == [2, 4]
    # reasons sorted: 'leaked ...' is 0, 'missing_problem' is 1
    assert _filtered("f-reason-0") == [4] and _filtered("f-reason-1") == [2]
    assert _filtered("f-band-hard") == [1, 5]  # p <= 0.2, the low gate
    assert _filtered("f-band-learnable") == [0]
    assert _filtered("f-band-solved") == [3]
    assert _filtered("f-step-5") == [0, 1, 2] and _filtered("f-step-10") == [3, 4, 5]
