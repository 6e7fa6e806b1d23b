"""A run's tally by ids (harness.verify.tally): sums and groups by keys made
of the where's and the cause's parts, and the (where, cause) counter a
tally stands for."""

from __future__ import annotations

from array import array
from collections import Counter

from harness.classify import Where
from harness.verify.failures import FailureCause
from harness.verify.tally import Grouping, KeyParts, Tally, counted_kind

BODY, LEAF = Where("f", frozenset(), "body"), Where("g", frozenset({"leaf"}), "epilogue")
BAD_READ = FailureCause("v2", "bad_read", 0, "f", None, "", frozenset())
WRONG_R4 = FailureCause("exidx", "wrong_register", 1, "g", "r4", "", frozenset())
IN_LIBC = FailureCause("v2", "no_info", 1, "memcpy", None, "", frozenset({"libc"}))  # an honest stop


def test_sums_add_up_entries_by_their_key_and_leave_out_a_none_part():
    """Alike causes under two ids add up; a None head or middle leaves the entry out."""
    tally = Tally([BODY, LEAF], [BAD_READ, WRONG_R4, BAD_READ, IN_LIBC],
                  [(0, 0, 3), (1, 1, 2), (0, 2, 4), (1, 3, 7)])
    failing = tally.sums(tally.failing, [(where[0],) for where in tally.wheres], tally.kind_parts)
    assert failing == {("v2", "f", "bad_read"): 7, ("exidx", "g", "wrong_register"): 2}
    assert tally.sums([()] * 4, [None, ()]) == {(): 9}
    assert tally.sums(tally.unwinders) == {("v2",): 14, ("exidx",): 2}
    assert tally.kinds == ["bad_read", "wrong_register", "bad_read", "stopped:libc"]
    assert tally.logged() == 9  # all but the stop in libc


def test_groups_number_each_key_once_in_the_order_of_its_first_entry():
    """Alike causes under two ids share their group and add up; an entry
    whose head or middle is None has none (-1)."""
    tally = Tally([BODY, LEAF], [BAD_READ, WRONG_R4, BAD_READ, IN_LIBC],
                  [(1, 1, 2), (0, 0, 3), (1, 3, 7), (0, 2, 4)])
    key = KeyParts(tally.failing, [(where[0],) for where in tally.wheres], tally.kind_parts, None)
    assert tally.grouped(key) == Grouping([("exidx", "g", "wrong_register"), ("v2", "f", "bad_read")], [2, 7],
                                          array("q", [0, 1, -1, 1]).tobytes())
    assert tally.grouped(KeyParts([()] * 4, [None, ()], [()] * 4, None)) == Grouping(
        [()], [9], array("q", [0, -1, 0, -1]).tobytes())


def test_a_tally_stands_for_its_counter():
    counted = Counter({(BODY, BAD_READ): 3, (LEAF, WRONG_R4): 2, (LEAF, IN_LIBC): 7})
    tally = Tally.of(counted)
    assert tally.logged() == 5
    tally.add(Counter({(BODY, BAD_READ): 1}))  # what was made of the causes before is made again
    assert tally.counter() == counted + Counter({(BODY, BAD_READ): 1})
    assert tally.kinds == [counted_kind(cause) for cause in tally.causes] and tally.logged() == 6
