"""The digest of failing stops a report keeps for the gate
(harness.report.failing): counts exact from the tally, pcs only where
every failing walk of the unwinder was logged, ranges that merge adjacent
instructions, and what a later run names as new."""

from __future__ import annotations

from collections import Counter

from harness.classify import Where
from harness.report.failing import (
    PCS_PER_UNWINDER,
    Group,
    combined,
    digest,
    digest_groups,
    from_json,
    new_failures,
    to_json,
    uncovered,
)
from harness.verify.failures import FailureCause, FailureLog, ranges_of
from harness.verify.tally import Tally

BODY = Where("f", frozenset(), "body")
BAD_READ = FailureCause("v2", "bad_read", 0, "f", None, "", frozenset())
LIMIT = FailureCause("exidx", "limit", 0, "f", None, "", frozenset())
IN_LIBC = FailureCause("v2", "no_info", 1, "memcpy", None, "", frozenset({"libc"}))  # an honest stop


def entry(stop: int, pc: int, cause: FailureCause) -> tuple:
    return (stop, pc, BODY, cause, None)


def test_pcs_merge_into_ranges_of_adjacent_instructions():
    assert ranges_of([0x100, 0x102, 0x106, 0x110, 0x10c]) == ((0x100, 0x106), (0x10c, 0x110))


def test_counts_come_from_the_tally_and_pcs_only_from_a_complete_log():
    """v2's three failing walks are all logged; exidx's two are not (one
    logged): its group keeps its count and no pcs. Stops in a library are
    not failures and are left out."""
    tally = Counter({(BODY, BAD_READ): 3, (BODY, LIMIT): 2, (BODY, IN_LIBC): 7})
    log = [entry(1, 0x100, BAD_READ), entry(2, 0x102, BAD_READ), entry(5, 0x200, BAD_READ),
           entry(6, 0x300, LIMIT)]
    found = digest(Tally.of(tally), FailureLog(entries=log))
    assert found == {"v2": {("f", "body", "bad_read"): Group(3, ((0x100, 0x102), (0x200, 0x200)))},
                     "exidx": {("f", "body", "limit"): Group(2, None)}}


def test_a_groups_pcs_are_kept_where_its_unwinders_walks_were_all_logged_within_the_cap():
    """digest_groups keeps no pcs for an unwinder whose walks were not all
    logged, or are more than the cap; and for a complete one, none (an
    empty tuple) for a group none of whose walks was logged."""
    def groups(stops, logged, cap=PCS_PER_UNWINDER):
        return digest_groups(list(stops), list(stops.values()), [logged.get(key) for key in stops], cap)

    stops = {("v2", "f", "body", "bad_read"): 3, ("v2", "g", "body", "limit"): 1, ("exidx", "f", "body", "limit"): 2}
    logged = {("v2", "f", "body", "bad_read"): (3, ((0x100, 0x102),)), ("exidx", "f", "body", "limit"): (1, ())}
    every_one = {**logged, ("v2", "g", "body", "limit"): (1, ((0x300, 0x300),))}
    assert groups(stops, every_one, cap=3) == {
        "v2": {("f", "body", "bad_read"): Group(3, None), ("g", "body", "limit"): Group(1, None)},  # 4 > 3
        "exidx": {("f", "body", "limit"): Group(2, None)}}
    assert groups(stops, every_one, cap=4)["v2"][("g", "body", "limit")] == Group(1, ((0x300, 0x300),))
    stops[("v2", "f", "body", "bad_read")] = 4  # v2's walks: 5, all logged but the one of g's
    logged[("v2", "f", "body", "bad_read")] = (5, ((0x100, 0x102),))
    assert groups(stops, logged)["v2"] == {("f", "body", "bad_read"): Group(4, ((0x100, 0x102),)),
                                           ("g", "body", "limit"): Group(1, ())}


def test_shards_combine_into_the_digest_of_the_whole():
    one = {"v2": {("f", "body", "bad_read"): Group(1, ((0x100, 0x100),))}}
    two = {"v2": {("f", "body", "bad_read"): Group(2, ((0x102, 0x104),)), ("g", "prologue", "limit"): Group(1, None)}}
    assert combined([one, two]) == {"v2": {("f", "body", "bad_read"): Group(3, ((0x100, 0x104),)),
                                           ("g", "prologue", "limit"): Group(1, None)}}
    assert combined([two, {"v2": {("g", "prologue", "limit"): Group(1, ((0x8, 0x8),))}}])["v2"][
        ("g", "prologue", "limit")] == Group(2, None)


def test_the_parts_of_ranges_outside_others():
    assert uncovered(((0x10, 0x20),), ((0x12, 0x14), (0x18, 0x30))) == ((0x10, 0x11), (0x15, 0x17))
    assert uncovered(((0x10, 0x20),), ((0x0, 0x100),)) == ()


def test_new_failures_are_the_groups_that_fail_more_with_their_new_pcs():
    before = to_json({"v2": {("f", "body", "bad_read"): Group(2, ((0x100, 0x102),)),
                             ("g", "body", "limit"): Group(5, ((0x300, 0x300),))}})
    now = to_json({"v2": {("f", "body", "bad_read"): Group(3, ((0x100, 0x102), (0x180, 0x180))),
                          ("g", "body", "limit"): Group(5, ((0x300, 0x300),)),
                          ("h", "epilogue", "wrong_pc"): Group(1, None)}})
    found = new_failures("p", now, before, ["v2"])
    assert [(f.function, f.before, f.now, f.new_pcs) for f in found] == [
        ("f", 2, 3, ((0x180, 0x180),)), ("h", 0, 1, None)]
    assert found[0].line() == "f (p): v2 body bad_read: 2 -> 3 failing stops; new at 0x180"


def test_a_report_holds_a_group_as_one_line_and_reads_it_back():
    failing = {"v2": {("f", "body", "bad_read"): Group(3, ((0x100, 0x106), (0x10c, 0x10c))),
                      ("g", "epilogue", "limit"): Group(2, None), ("h", "prologue", "wrong_pc"): Group(1, ())}}
    lines = to_json(failing)
    assert lines == {"v2": ["f\tbody\tbad_read\t3\t100-106 10c", "g\tepilogue\tlimit\t2\t?",
                            "h\tprologue\twrong_pc\t1\t"]}
    assert from_json(lines) == failing
