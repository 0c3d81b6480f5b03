import math

import pytest

from pasodoble.sandbox.values import MAX_DEPTH, canonical, decode, encode


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -(2**80),
        1.5,
        math.inf,
        "é\x00",
        b"\xff",
        [1, [2]],
        (1, "a"),
        {1: (2,), "k": None},
        {3, 1},
        frozenset({2}),
    ],
)
def test_plain_values_round_trip_with_their_types(value):
    back = decode(encode(value))
    assert back == value and type(back) is type(value)


def test_nan_and_order_free_containers_have_one_canonical_form():
    assert canonical(encode(math.nan)) == canonical(encode(float("nan")))
    assert canonical(encode({"b": 1, "a": 2})) != canonical(encode({"a": 2, "b": 1}))  # dict order is kept
    assert canonical(encode({3, 1, 2})) == canonical(encode({2, 3, 1}))
    assert canonical(encode(1)) != canonical(encode(True)) != canonical(encode(1.0))


class AlwaysEqual:
    def __eq__(self, other):
        return True


class LyingInt(int):
    def __eq__(self, other):
        return True


@pytest.mark.parametrize(
    "value",
    [AlwaysEqual(), LyingInt(3), [1, AlwaysEqual()], iter([1]), 1 << (1 << 21)],
    ids=["always_equal", "int_subclass", "nested", "iterator", "huge_int"],
)
def test_anything_but_plain_data_is_refused(value):
    with pytest.raises(ValueError):
        encode(value)


def test_nesting_is_bounded():
    deep = []
    for _ in range(MAX_DEPTH + 2):
        deep = [deep]
    with pytest.raises(ValueError, match="nested"):
        encode(deep)
