"""The verifier detects wrong unwinds, attributes them to the right function,
and its memo of outer frames changes no verdict."""

from dataclasses import replace
from functools import lru_cache

import pytest

from generators.corpus import generate_program
from harness.formats import chrome_v2, ehabi
from harness.formats.chrome_v2.encoder import AddressUnwind, cover_text
from harness.formats.chrome_v2.layout import serialize
from harness.formats.chrome_v2.reader import V2Reader
from harness.formats.chrome_v2.tables import build_tables
from harness.program import CfiRow, FunctionCfi
from harness.unwind.dwarf import DwarfUnwinder
from harness.unwind.registry import build_unwinders
from harness.unwind.v2 import V2Unwinder
from harness.verify.stops import Verify, verify_program


@lru_cache(maxsize=None)
def program():
    return generate_program(0, 3)


def pick_function(min_core_saves: int = 2) -> str:
    """A function that calls others and whose body row saves several registers."""
    ran = set()
    verify_program(program(), [], observe=lambda stop: ran.add(program().function_at(stop.pc).name))
    for info, rows in zip(program().functions, program().cfi["tables"]):
        if info.name not in ran:
            continue
        body = rows.rows[-1]
        core = [reg for reg, _ in body.saved if reg < 16 and reg != 14]
        if "leaf" not in info.traits and len(core) >= min_core_saves and body.cfa_reg == 13 \
                and "huge_frame" not in info.traits:
            return info.name
    raise AssertionError("no suitable function")


def v2_with(name: str, corrupt) -> V2Unwinder:
    """v2 tables from clang-style CFI where `name`'s last run is corrupted."""
    p = program()
    encoded = chrome_v2.encode(p.cfi["tables"], p.text_base, "drop")
    functions = []
    for f in encoded.functions:
        if f.name == name:
            last = f.address_unwinds[-1]
            ops = corrupt(ehabi.decode(last.instructions))
            new = AddressUnwind(last.offset, ehabi.encode(ops))
            f = replace(f, address_unwinds=f.address_unwinds[:-1] + (new,))
        functions.append(f)
    tables = build_tables(cover_text(functions, p.text_base), p.text_base)
    return V2Unwinder(V2Reader.from_blob(serialize(tables)), p.text_base, "v2")


def baseline_failures():
    return {(f.pc, f.kind) for f in verify_program(program(), build_unwinders(program(), ["v2"])).failures}


def stops_in(name: str, position: str) -> set[int]:
    seen = set()
    info = next(f for f in program().functions if f.name == name)
    verify_program(program(), [], observe=lambda stop: seen.add(stop.pc)
                   if info.start <= stop.pc < info.end and info.position(stop.pc) == position else None)
    return seen


def bump_first_vsp(ops):
    """vsp moves 4 bytes too far before the pops."""
    return [ehabi.VspAdd(4)] + list(ops)


def drop_lowest_pop(ops):
    """The lowest register of the pop is skipped instead of restored."""
    out = []
    for op in ops:
        if isinstance(op, ehabi.Pop) and not out_has_pop(out):
            out += [ehabi.VspAdd(4), ehabi.Pop(op.regs[1:])]
        else:
            out.append(op)
    return out


def out_has_pop(ops):
    return any(isinstance(op, ehabi.Pop) for op in ops)


@pytest.mark.parametrize("corrupt, kind", [(bump_first_vsp, "wrong_pc"), (drop_lowest_pop, "wrong_register")])
def test_corrupt_v2_run_fails_exactly_that_function(corrupt, kind):
    name = pick_function()
    result = verify_program(program(), [v2_with(name, corrupt)])
    before = baseline_failures()
    new = [f for f in result.failures if (f.pc, f.kind) not in before]
    assert new, "the corruption went unnoticed"
    assert {f.culprit for f in new} == {name}
    assert {f.kind for f in new} == {kind}
    if corrupt is bump_first_vsp:
        # The return address is read from the wrong slot at every body stop.
        # (A missing pop only shows once the function has changed that register.)
        assert stops_in(name, "body") <= {f.pc for f in new if f.function == name}


def test_corrupt_register_save_in_cfi_gives_wrong_register():
    name = pick_function()
    functions = []
    for f in program().cfi["reference"]:
        if f.name == name:
            rows = []
            for row in f.rows:
                saved = dict(row.saved)
                core = sorted(r for r in saved if r < 14)
                if len(core) >= 2:  # swap the slots of the two lowest registers
                    a, b = core[:2]
                    saved[a], saved[b] = saved[b], saved[a]
                rows.append(CfiRow(row.address, row.cfa_reg, row.cfa_offset, tuple(sorted(saved.items()))))
            f = FunctionCfi(f.name, f.start, f.end, tuple(rows))
        functions.append(f)
    result = verify_program(program(), [DwarfUnwinder(functions)])
    assert result.failures
    assert {f.kind for f in result.failures} == {"wrong_register"}
    assert {f.culprit for f in result.failures} == {name}


def test_memo_changes_no_verdict():
    p = generate_program(0, 0)
    fast = verify_program(p, build_unwinders(p))
    slow = verify_program(p, build_unwinders(p), how=Verify(memoize=False))
    assert fast.counts == slow.counts
    assert fast.failures == slow.failures
    assert fast.stops == slow.stops > 0


def test_measured_properties_of_a_small_corpus():
    """What the report must show, measured on two programs: of the
    unwinders built from full CFI, only v2 fails, and only in epilogues."""
    names = ["v2", "v2+epilogue", "v2-synth", "v2-gcc", "v2-code", "dwarf"]  # ours, from the CFI or the code
    results = [verify_program(p, build_unwinders(p, names)) for p in (generate_program(7, 0), generate_program(7, 1))]
    assert all(r.self_check_ok for r in results)
    failures = [f for r in results for f in r.failures]
    assert {f.unwinder for f in failures} == {"v2"}
    assert {f.position for f in failures} == {"epilogue"}
    positions = {pos for r in results for (_, _, pos, _) in r.counts}
    assert positions == {"prologue", "body", "epilogue"}


def test_walks_in_python_that_fail_alike_share_a_cause_and_keep_their_wording():
    """A walk in Python that fails at every stop with new numbers (vsp
    below sp at a new address each time) is tallied under one cause, whose
    wording has # for the numbers; each logged failure gives its own wording
    back (harness.verify.failures.WalkLog), in some 40 bytes a failure."""
    from harness.classify import Where
    from harness.verify.failures import FailureCause, WalkLog, failure_of, generic

    log = WalkLog()
    where = Where("f", frozenset(), "body")
    wordings = [f"vsp {0x7eff0000 + 8 * n:#x} went below the frame's sp {0x7eff0100 + 8 * n:#x}" for n in range(3)]
    for number, wording in enumerate(wordings):
        cause = FailureCause("v2-chrome", "limit", 0, "f", None, generic(wording), frozenset())
        log.append(number, 0, 0x1000 + 2 * number, where, cause, wording)
    log.append(3, 0, 0x1006, where, FailureCause("v2-chrome", "limit", 0, "f", None, "odd #", frozenset()), "odd #")
    assert list(log.tally().values()) == [3, 1]
    assert [failure_of(*entry).detail for _, _, entry in log.entries()] == [*wordings, "odd #"]
