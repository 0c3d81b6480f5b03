"""Question buffer: order, cursor, wrap, eviction, state round trip."""

from __future__ import annotations

import json

import pytest

from pasodoble.core.buffer import BufferItem, QuestionBuffer


def items(n: int, start: int = 0) -> list[BufferItem]:
    return [
        BufferItem(question=f"q{i}", answer=str(i), pass_rate=0.5, step=i) for i in range(start, start + n)
    ]


def questions(batch: list[BufferItem]) -> list[str]:
    return [item.question for item in batch]


def test_take_in_order_without_wrap():
    buf = QuestionBuffer()
    buf.add(items(5))
    assert questions(buf.take(3)) == ["q0", "q1", "q2"]
    assert buf.unread == 2
    assert questions(buf.take(3)) == ["q3", "q4"]
    assert buf.take(3) == []
    buf.add(items(2, start=5))
    assert questions(buf.take(6)) == ["q5", "q6"]
    assert len(buf) == 7  # the reference never evicts


def test_wrap_cycles_without_repeats_in_one_take():
    buf = QuestionBuffer(wrap=True)
    assert buf.take(2) == []
    buf.add(items(5))
    assert questions(buf.take(3)) == ["q0", "q1", "q2"]
    assert questions(buf.take(3)) == ["q3", "q4", "q0"]
    assert questions(buf.take(9)) == ["q1", "q2", "q3", "q4", "q0"]  # capped at the 5 distinct items


def test_bound_without_eviction_drops_new_items():
    buf = QuestionBuffer(max_size=3)
    buf.add(items(5))
    assert questions(buf.take(5)) == ["q0", "q1", "q2"]
    assert buf.dropped == 2


def test_fifo_eviction_keeps_cursor_on_the_next_unread_item():
    buf = QuestionBuffer(max_size=3, eviction="fifo")
    buf.add(items(3))
    assert questions(buf.take(2)) == ["q0", "q1"]
    buf.add(items(2, start=3))  # evicts q0 and q1, both already served
    assert questions(buf.take(5)) == ["q2", "q3", "q4"]
    assert buf.dropped == 2


def test_state_dict_round_trip_is_json():
    buf = QuestionBuffer(max_size=10, eviction="fifo", wrap=True)
    buf.add(items(4))
    buf.take(3)
    state = json.loads(json.dumps(buf.state_dict()))
    other = QuestionBuffer()
    other.load_state_dict(state)
    assert (len(other), other.max_size, other.eviction, other.wrap) == (4, 10, "fifo", True)
    assert questions(other.take(2)) == questions(buf.take(2)) == ["q3", "q0"]


def test_bad_arguments():
    with pytest.raises(ValueError):
        QuestionBuffer(eviction="lru")
    with pytest.raises(ValueError):
        QuestionBuffer(max_size=0)
    with pytest.raises(ValueError):
        QuestionBuffer().take(-1)
