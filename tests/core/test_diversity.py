"""Diversity history: Jaccard, the d_i fraction, FIFO, within-step semantics, state round trip."""

from __future__ import annotations

import json

import pytest

from pasodoble.core.diversity import QuestionHistory, jaccard, token_set


def test_token_set_and_jaccard_hand_computed():
    a, b = token_set([1, 2, 3, 3]), token_set([2, 3, 4])
    assert a == frozenset({1, 2, 3})
    assert jaccard(a, b) == 0.5  # |{2,3}| / |{1,2,3,4}| = 2/4
    assert jaccard(a, a) == 1.0
    assert jaccard(token_set([1]), token_set([2])) == 0.0
    assert jaccard(frozenset(), frozenset()) == 1.0  # as the reference
    assert jaccard(frozenset(), a) == 0.0


def test_empty_history_gives_one():
    assert QuestionHistory().scores([[1, 2], [3]]) == [1.0, 1.0]


def test_fraction_of_dissimilar_history_items():
    h = QuestionHistory(maxlen=100, similarity_threshold=0.8)
    base = list(range(10))
    # history: identical (J=1); 9 of base + 1 new (J=9/11=0.818 > 0.8); a subset of 8 (J=8/10=0.8, not > 0.8);
    # 8 of base + 2 new, same size (J=8/12=0.667); unrelated (J=0)
    h.extend([base, list(range(9)) + [99], list(range(8)), list(range(8)) + [98, 99], [50, 51]])
    # similar to 2 of 5 -> d = 3/5
    assert h.scores([base]) == [0.6]
    # J exactly 0.8 with equal sizes: {0..8} vs {0..7, 9} share 8 of 10 -> not similar (the test is J > 0.8)
    h2 = QuestionHistory()
    h2.extend([list(range(9))])
    assert h2.scores([list(range(8)) + [9]]) == [1.0]


def test_own_step_questions_do_not_count_against_each_other():
    h = QuestionHistory()
    h.extend([[7, 8, 9]])
    step = [[1, 2, 3]] * 6
    assert h.scores(step) == [1.0] * 6  # six copies, each compared with the one old question only
    h.extend(step)
    # now the history is [7 8 9] + six copies: the copies are similar to 6 of 7
    assert h.scores([[1, 2, 3]]) == pytest.approx([1 / 7])


def test_fifo_keeps_last_maxlen():
    h = QuestionHistory(maxlen=3)
    h.extend([[1], [2], [3], [4]])
    assert len(h) == 3
    assert h.scores([[1]]) == [1.0]  # [1] fell out
    assert h.scores([[4]]) == pytest.approx([2 / 3])


def test_state_dict_round_trip_is_json():
    h = QuestionHistory(maxlen=5, similarity_threshold=0.7)
    h.extend([[3, 1, 2], [9]])
    state = json.loads(json.dumps(h.state_dict()))
    g = QuestionHistory()
    g.load_state_dict(state)
    assert (g.maxlen, g.similarity_threshold, len(g)) == (5, 0.7, 2)
    probe = [[1, 2, 3], [9, 10], [4]]
    assert g.scores(probe) == h.scores(probe)
    g.extend([[i] for i in range(10)])
    assert len(g) == 5


def test_bad_arguments():
    with pytest.raises(ValueError):
        QuestionHistory(maxlen=0)
    with pytest.raises(ValueError):
        QuestionHistory(similarity_threshold=1.5)
