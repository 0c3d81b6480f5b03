"""Hypothesis fuzz of every text parser and every JSONL reader: no exception escapes but the documented ones.

The default suite draws a few hundred inputs per target; the `slow` variants draw 1,000 (the
10,000-string run of the acceptance is `bench/fuzz.py`, which takes about half an hour on 2 cores). Targets and their
documented exceptions are listed in `targets.py` (shared with `bench/fuzz.py`, which also times them).
"""

from __future__ import annotations

import contextlib
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.adversarial.targets import PARSERS, PIECES, READERS, fuzz_jsonl

FAST, SLOW = 200, 1_000
READER_FAST, READER_SLOW = 60, 300

_char = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, blacklist_categories=())  # lone surrogates too
TEXT = st.lists(st.one_of(st.sampled_from(PIECES), st.text(_char, max_size=4)), max_size=60).map("".join)


def _settings(examples: int):
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
    )


def _fuzz_parser(name: str, examples: int) -> None:
    call, allowed = PARSERS[name]

    @_settings(examples)
    @given(TEXT)
    def run(text: str) -> None:
        with contextlib.suppress(*allowed):
            call(text)

    run()


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_parsers_never_raise(name):
    _fuzz_parser(name, FAST)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PARSERS))
def test_parsers_never_raise_10k(name):
    _fuzz_parser(name, SLOW)


def _fuzz_reader(name: str, examples: int, folder) -> None:
    call, allowed = READERS[name]

    @_settings(examples)
    @given(st.integers(min_value=0, max_value=2**32))
    def run(seed: int) -> None:
        path = folder / "data.jsonl"
        path.write_bytes(fuzz_jsonl(random.Random(seed)))
        with contextlib.suppress(*allowed):
            call(path)

    run()


@pytest.mark.parametrize("name", sorted(READERS))
def test_jsonl_readers_never_raise(name, tmp_path, capsys):
    _fuzz_reader(name, READER_FAST, tmp_path)
    capsys.readouterr()  # the readers' skip reports


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(READERS))
def test_jsonl_readers_never_raise_10k(name, tmp_path, capsys):
    _fuzz_reader(name, READER_SLOW, tmp_path)
    capsys.readouterr()
