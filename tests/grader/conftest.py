"""A grader shared by the grader tests: starting worker processes costs about a second each."""

from __future__ import annotations

import pytest

from pasodoble.grader import Grader, GraderConfig


@pytest.fixture(scope="session")
def grader():
    with Grader(GraderConfig(timeout_s=10.0, num_workers=2)) as shared:
        yield shared
