"""A process's modules: found by a first run, each unwound by its own
tables, and walks counted right, wrong, or stopped (an honest no_info in a
module without tables, which the report keeps apart from failures)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from test_linux_process import build, sysroot

from harness.abi import Limits
from harness.classify import JIT, JIT_NAME, MODULE_PREFIX, MODULES, NO_INFO, OWN, module_trait
from harness.errors import UnwindFailure
from harness.linux.process import LinuxRun
from harness.linux_verify.modules import discover, label_of
from harness.linux_verify.verify import verify_process
from harness.report.data import module_table, report_data, result_rows
from harness.report.summary import summarize
from harness.unwind.frame import Stack, make_frame
from harness.unwind.modules import Covered, PerModule
from harness.unwind.registry import build_unwinders
from harness.unwind.rule import LEAF, RuleRange
from harness.unwind.walk import Unwinder
from harness.verify.failures import FailureCause, failure_of
from harness.verify.stops import Verify
from harness.verify.tally import counted_kind, is_stop


def own_unwinders(names):
    return lambda program: build_unwinders(program, names)


@pytest.fixture(scope="module")
def calls_run():
    """calls.c, dynamically linked, verified by dwarf, exidx and v2."""
    names = ["dwarf", "exidx", "v2"]
    run = LinuxRun(build("calls.c", "-Wl,-z,now"), (), sysroot())
    return verify_process(run, names, own_unwinders(names))


def test_the_first_run_finds_every_library_where_ld_so_put_it():
    modules = discover(LinuxRun(build("throw.cc", "-Wl,-z,now"), (), sysroot()), Limits()).modules
    labels = Counter(module.label for module in modules)
    assert labels == Counter({"own": 1, "ld.so": 1, "libc": 1, "libstdcxx": 1, "libgcc": 1, "lib": 1})  # + libm
    spans = sorted((m.start, m.end) for m in modules)
    assert all(end <= following for (_, end), (following, _) in zip(spans, spans[1:]))  # disjoint
    assert {label_of("libc.so.6"), label_of("libz.so.1"), label_of("ld-linux-armhf.so.3")} == {"libc", "lib", "ld.so"}


def test_compiler_cfi_unwinds_every_stop_of_own_code_it_covers(calls_run):
    """dwarf and v2 fail at no body stop of a function with CFI in the
    executable: their walks are right, or stop honestly in libc or ld.so
    (v2 drops epilogue rows by design: its epilogue stops may fail)."""
    assert calls_run.fault is None
    covered = Counter()
    for (unwinder, traits, position, kind), stops in calls_run.counts.items():
        if unwinder in ("dwarf", "v2") and OWN in traits and NO_INFO not in traits and position == "body":
            covered[unwinder] += stops
            assert kind is None or kind.startswith("stopped:"), (unwinder, traits, kind, stops)
    assert covered["dwarf"] > 400 and covered["v2"] == covered["dwarf"]


def test_walks_that_stop_in_a_system_library_are_not_failures(calls_run):
    rows = {(r["unwinder"], r["category"], r["position"]): r for r in result_rows([summarize(calls_run)],
                                                                                     ["dwarf", "exidx"])}
    libc = rows[("dwarf", "libc", "all")]
    # Right only at the first instructions of _start (crt1.o's, glibc's): the
    # process's first frame, with no caller to unwind to.
    assert libc["stops"] > 1000 and libc["failed"] == 0 and 0 < libc["stops"] - libc["stopped"] < 20
    assert rows[("dwarf", "all", "all")]["stopped_in"]["libc"] >= libc["stops"]  # and walks from own code into libc
    exidx = rows[("exidx", "libc", "all")]
    assert exidx["stopped"] < exidx["stops"]  # Debian's libc has EXIDX for part of its code: exidx walks there
    for row in rows.values():
        assert row["failed"] == sum(row["failure_kinds"].values())
        assert row["stopped"] == sum(n for module, n in row["stopped_in"].items() if module != OWN)


def test_a_refusal_in_the_programs_own_code_stays_a_failure():
    cause = FailureCause("dwarf", "no_info", 1, "_init", None, "", frozenset({NO_INFO, OWN}))
    assert counted_kind(cause) == "no_info"
    assert counted_kind(cause._replace(culprit_traits=frozenset({NO_INFO, "libc"}))) == "stopped:libc"
    assert counted_kind(cause._replace(kind="wrong_pc", culprit_traits=frozenset({"libc"}))) == "wrong_pc"
    assert counted_kind(cause._replace(culprit_traits=frozenset({NO_INFO}))) == "no_info"  # bare metal


class _Leaf(Unwinder):
    """An unwinder that knows every pc of its module: return to lr."""

    name = "leaf"

    def step(self, frame, stack, innermost):
        return make_frame(pc=frame.r[14] & ~1, sp=frame.sp, lr=0)

    def rule_at(self, pc, innermost):
        return RuleRange(LEAF, 0, 1 << 32)


def test_per_module_dispatch_and_its_rule_ranges():
    each = PerModule("leaf", [Covered(0x2000, 0x3000, _Leaf()), Covered(0x8000, 0x9000, _Leaf())])
    stack = Stack(0x100, bytes(64))
    assert each.step(make_frame(pc=0x2100, sp=0x100, lr=0x8001), stack, True).pc == 0x8000
    with pytest.raises(UnwindFailure) as refused:
        each.step(make_frame(pc=0x5000, sp=0x100, lr=0), stack, True)
    assert refused.value.kind == "no_info"
    # A caller's pc is a return address: 0x3000 returns into the first module's last call.
    assert each.step(make_frame(pc=0x3000, sp=0x100, lr=0x2001), stack, False).pc == 0x2000
    inside = each.rule_at(0x2100, True)
    assert inside.rule is LEAF and (inside.low, inside.high) == (0x2000, 0x3000)
    gap = each.rule_at(0x5000, True)
    assert gap.rule.kind == "no_info" and (gap.low, gap.high) == (0x3000, 0x8000)
    caller_gap = each.rule_at(0x5000, False)
    assert (caller_gap.low, caller_gap.high) == (0x3001, 0x8001)


def test_both_hooks_count_a_process_alike():
    """The compiled kernel applies each module's rules (PerModule.rule_at)
    where the Python hook runs each module's step: the same counts."""
    names = ["dwarf", "exidx", "v2+epilogue"]
    run = LinuxRun(build("throw.cc", "-Wl,-z,now"), (), sysroot())
    compiled = verify_process(run, names, own_unwinders(names), how=Verify(every=5, compiled=True))
    in_python = verify_process(run, names, own_unwinders(names), how=Verify(every=5, compiled=False))
    assert compiled.fault is None and compiled.stops > 10_000
    assert compiled.counts == in_python.counts
    # Walks stopped in a library are tallied, never logged (the compiled
    # tracer by its quiet ranges, the Python hook by is_stop): the samples
    # are real failures, the same from both hooks.
    stopped = sum(n for (_, _, _, kind), n in compiled.counts.items() if kind and kind.startswith("stopped:"))
    assert stopped > 10_000
    first = [failure_of(*entry) for entry in compiled.failure_log.first(10)]
    assert first and first == [failure_of(*entry) for entry in in_python.failure_log.first(10)]
    assert not any(is_stop(entry[3]) for entry in compiled.failure_log)
    assert len(compiled.failure_log) == len(in_python.failure_log) == compiled.tally.logged()


def test_a_scan_that_finds_nothing_in_a_library_is_a_stop_both_hooks_leave_unlogged():
    """scan's guard failure (no return address in its window) is a no_info
    refusal of one kind: in a library, a stop, which the compiled tracer
    tallies without logging, as the Python hook does."""
    run = LinuxRun(build("throw.cc", "-Wl,-z,now"), (), sysroot())
    compiled = verify_process(run, ["scan"], own_unwinders(["scan"]), how=Verify(every=50, compiled=True))
    in_python = verify_process(run, ["scan"], own_unwinders(["scan"]), how=Verify(every=50, compiled=False))
    assert compiled.counts == in_python.counts
    assert any(kind == "stopped:libc" for (_, _, _, kind) in compiled.counts)
    assert not any(is_stop(entry[3]) for entry in compiled.failure_log)
    assert [failure_of(*entry) for entry in compiled.failure_log] == [failure_of(*entry) for entry in in_python.failure_log]


def test_stops_between_a_throw_and_its_landing_pad_are_cxx_exception():
    """throw.cc throws three times through five frames with a destructor
    each: the stops of the C++ runtime and libgcc while the exception is on
    its way count as cxx_exception; the program's own code (its cleanups
    run at landing pads, from where _Unwind_Resume raises again) never."""
    run = LinuxRun(build("throw.cc", "-Wl,-z,now"), (), sysroot())
    result = verify_process(run, ["dwarf"], own_unwinders(["dwarf"]), how=Verify(every=3))
    assert result.fault is None
    flying, grounded = Counter(), Counter()
    for (_unwinder, traits, _position, _kind), stops in result.counts.items():
        module = next(t for t in traits if t in MODULES)
        (flying if "cxx_exception" in traits else grounded)[module] += stops
    assert flying["libgcc"] > 1000 and flying["libstdcxx"] > 100 and flying[OWN] == 0
    assert grounded[OWN] > 0 and grounded["libc"] > 0


def test_an_executable_without_cfi_is_verified_and_its_refusals_are_own_failures():
    """Debian ships its executables stripped, with no CFI: v2 and dwarf have
    no tables for them (their refusals there are the program's failures),
    while the libraries keep theirs."""
    names = ["v2", "dwarf", "exidx", "framepointer"]
    run = LinuxRun(build("calls.c", "-g0", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables", "-s",
                         "-Wl,-z,now"), (), sysroot())
    result = verify_process(run, names, own_unwinders(names), how=Verify(every=11))
    assert result.fault is None and result.result == 0
    own_refusals = sum(n for (unwinder, traits, _, kind), n in result.counts.items()
                       if unwinder == "dwarf" and OWN in traits and kind == "no_info")
    assert own_refusals > 0


def test_each_stop_names_its_module_and_code_in_no_module_is_jit():
    """A process's stops carry the file their code comes from; code in
    anonymous executable memory (jit.c's leaf made at run time) is `jit`.
    There a table-driven walk takes lr for the caller, as for a call through
    a bad pointer (harness.unwind.sigframes): right at a leaf. The report
    counts per module the walks right to the bottom."""
    names = ["dwarf", "exidx"]
    run = LinuxRun(build("jit.c", "-Wl,-z,now"), (), sysroot())
    result = verify_process(run, names, own_unwinders(names))
    assert result.fault is None and result.result == 40
    assert all(sum(trait.startswith(MODULE_PREFIX) for trait in traits) == 1 for (_, traits, _, _) in result.counts)
    jit = Counter()
    for (unwinder, traits, position, kind), n in result.counts.items():
        assert (JIT in traits) == (module_trait(JIT_NAME) in traits)
        if JIT in traits:
            assert NO_INFO in traits and position == "body", traits
            jit[(unwinder, kind)] += n
    # two instructions, forty calls: exidx walks on through libc's EXIDX, dwarf stops in libc (no CFI there)
    assert jit == {("exidx", None): 80, ("dwarf", "stopped:libc"): 80}
    summary = summarize(result)
    table = module_table([summary], names)
    assert table[JIT_NAME] == {"stops": 80, "failed": {"dwarf": 0, "exidx": 0}, "right": {"dwarf": 0, "exidx": 80}}
    assert {"libc.so.6", "ld-linux-armhf.so.3", Path(run.program).name} <= set(table)
    assert sum(row["stops"] for row in table.values()) == summary.stops
    for unwinder in names:
        assert sum(row["right"][unwinder] for row in table.values()) == sum(
            n for (u, _, _, kind), n in summary.counts.items() if u == unwinder and kind is None) > 0
    data = report_data([summary], names, None, run.program)
    assert data["modules"] == table and not any(row["category"].startswith(MODULE_PREFIX) for row in data["results"])
    assert ("jit", "all") in {(r["category"], r["position"]) for r in data["results"]}
