"""harness.thumb.apart: analyses spread over forked children give what one
after another gives, in order; a child's failure is reported, never lost."""

from __future__ import annotations

import os

import pytest

from harness.thumb import apart
from harness.thumb.apart import ChildFailed, analysed_apart


@pytest.fixture
def cores(monkeypatch):
    monkeypatch.setattr(apart, "SMALLEST_SHARE", 3)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)


def test_shares_in_children_come_back_in_order(cores):
    parent = os.getpid()
    found = list(analysed_apart(lambda value, scale: (value * scale, os.getpid()), [(value, 3) for value in range(10)]))
    assert [product for product, _ in found] == [3 * value for value in range(10)]
    assert {pid for _, pid in found[:3]} == {parent}
    assert len({pid for _, pid in found[3:]} - {parent}) == 3  # (shares of 3, 3, 3, 1: three children)


def test_a_failing_child_is_reported(cores):
    def analyse(value):
        if value == 7:
            raise ValueError("no such function")
        return value

    with pytest.raises(ChildFailed, match="ValueError: no such function"):
        list(analysed_apart(analyse, [(value,) for value in range(10)]))


def test_few_jobs_stay_in_the_process(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    parent = os.getpid()
    assert {pid for pid in analysed_apart(lambda _: os.getpid(), [(value,) for value in range(100)])} == {parent}
