"""Rules by a table's rows (harness.unwind.rule_map, csrc/sources.c): each
table's partition is its lookup written out, and the kernel finds in it,
pc by pc, the rule Python's rule_at gives."""

from __future__ import annotations

import random
from array import array

import pytest

from generators.corpus import generate_program
from harness.elf_program import program_from_elf
from harness.errors import UnwindFailure
from harness.manifest import ELF_CORPUS, elf_builds
from harness.thumb.encoding import may_start_epilogue
from harness.unwind.dwarf import DwarfUnwinder
from harness.unwind.exidx import ExidxUnwinder
from harness.unwind.qut import QutUnwinder
from harness.unwind.registry import build_unwinders
from harness.unwind.rule import EVERYWHERE, NOWHERE, Chain
from harness.unwind.rule_map import NO_ROW, partition_of
from harness.unwind.v1 import V1Unwinder
from harness.unwind.v2 import V2Unwinder, v2_partition
from harness.unwind.v2_chrome import ChromeV2Unwinder
from harness.unwind.v2_epilogue import EpilogueFirst, EpilogueSimulator
from harness.unwind.vmkunwind import VmkunwindUnwinder
from harness.verify import kernel
from harness.verify._kernel import epilogue_plan
from harness.verify.kernel import StopKernel, pack_rule

BASE, SIZE = 0x7000_0000, 0x400


def segments(partition) -> list[tuple[int, int]]:
    return list(zip(partition.starts, partition.rows))


# ------------------------------------------------------------ partition_of


def test_segments_hold_up_to_the_next_start_and_none_before_the_first():
    partition, values = partition_of([(0x10, "a"), (0x20, "b"), (0x30, None), (0x40, "a")])
    assert values == ["a", "b"]
    assert segments(partition) == [(NOWHERE, NO_ROW), (0x10, 0), (0x20, 1), (0x30, NO_ROW), (0x40, 0)]
    assert partition.find(0x0F) == (NO_ROW, NOWHERE, 0x10)
    assert partition.find(0x10) == (0, 0x10, 0x20)
    assert partition.find(0x2F) == (1, 0x20, 0x30)
    assert partition.find(1 << 39) == (0, 0x40, EVERYWHERE)


def test_a_later_segment_at_the_same_start_replaces_the_earlier_and_equal_neighbours_merge():
    partition, values = partition_of([(0x10, "a"), (0x20, "b"), (0x20, "a"), (0x30, "a"), (0x40, None),
                                      (0x40, "c")])
    assert values == ["a", "b", "c"]
    assert segments(partition) == [(NOWHERE, NO_ROW), (0x10, 0), (0x40, 2)]
    only_none, _ = partition_of([(0x10, None)])
    assert segments(only_none) == [(NOWHERE, NO_ROW)]


# ------------------------------------------------------------ partitions against the lookups


def looked_up(unwinder, lookup_pc: int):
    """What the unwinder's table finds at lookup_pc by its own lookup, as the
    value its partition numbers rows by; None where nothing."""
    if isinstance(unwinder, (V2Unwinder, ChromeV2Unwinder)):
        found = unwinder.reader.lookup(lookup_pc - unwinder.text_base) if lookup_pc >= unwinder.text_base else None
        return None if found is None else found.instruction_index  # as v2_partition numbers rows
    if isinstance(unwinder, (V1Unwinder, VmkunwindUnwinder)):
        return unwinder.table.lookup_range(lookup_pc - unwinder.text_base)[0] if lookup_pc >= unwinder.text_base \
            else None
    lookup = {DwarfUnwinder: "row_of", ExidxUnwinder: "entry_for", QutUnwinder: "ops_of"}[type(unwinder)]
    try:
        found = getattr(unwinder, lookup)(lookup_pc)
    except UnwindFailure:
        return None
    return unwinder.entries.index(found) if isinstance(unwinder, ExidxUnwinder) else found


def table_unwinders(program):
    kinds = (V2Unwinder, ChromeV2Unwinder, V1Unwinder, DwarfUnwinder, ExidxUnwinder, VmkunwindUnwinder, QutUnwinder)
    return [u for u in build_unwinders(program) if isinstance(u, kinds)]


def partition_values(unwinder):
    """The partition of the unwinder's table and the value of each row."""
    if isinstance(unwinder, (V2Unwinder, ChromeV2Unwinder)):
        return v2_partition(unwinder.reader, unwinder.text_base)
    return partition_of(table_segments(unwinder))


def table_segments(unwinder) -> list:
    """The (start, value) segments of the unwinder's table."""
    if isinstance(unwinder, (V2Unwinder, ChromeV2Unwinder)):
        return [(unwinder.text_base + offset, index) for offset, index in unwinder.reader.segments()]
    if isinstance(unwinder, (DwarfUnwinder, ExidxUnwinder)):
        return list(unwinder.segments())
    return [(unwinder.text_base + offset, value) for offset, value in unwinder.table.segments()]


def pcs_to_check(program, partition, rng: random.Random) -> list[int]:
    """Every byte pc within 4 of a segment start, and a random sample."""
    low = min(f.start for f in program.functions) - 8
    high = max(f.end for f in program.functions) + 8
    near = {start + delta for start in partition.starts if low <= start <= high for delta in range(-4, 5)}
    return sorted(near | {rng.randrange(low, high) for _ in range(2000)})


def programs():
    yield generate_program(0, 1)
    yield generate_program(4, 3)
    for build in elf_builds():
        if build["file"] in ("gcc-O2-fp.elf", "clang-Os-nofp.elf"):
            yield program_from_elf(str(ELF_CORPUS / build["file"]), build["entry"], build["expected_checksum"])


@pytest.mark.parametrize("program", list(programs()), ids=lambda p: p.name)
def test_every_partition_finds_what_its_table_lookup_finds(program):
    rng = random.Random(7)
    checked = 0
    for unwinder in table_unwinders(program):
        partition, values = partition_values(unwinder)
        for pc in pcs_to_check(program, partition, rng):
            row = partition.find(pc)[0]
            found = None if row == NO_ROW else values[row]
            assert found == looked_up(unwinder, pc), (unwinder.name, hex(pc))
            checked += 1
    assert checked > 20_000


def test_a_v2_partition_crosses_pages_as_the_lookup_does():
    """A function that runs across a 128 KiB page boundary is found from the
    next page by the continuation bit: the partition holds it there too."""
    program = next(program for program in map(lambda index: generate_program(0, index), range(40))
                   if any("page_crossing" in f.traits for f in program.functions))
    v2 = next(u for u in build_unwinders(program, ("v2",)))
    partition, values = v2_partition(v2.reader, v2.text_base)
    page_end = (len(v2.reader.tables.page_table) << 17) + v2.text_base
    crossing = [f for f in program.functions if (f.start - v2.text_base) >> 17 != (f.end - 1 - v2.text_base) >> 17]
    assert crossing
    for function in crossing:
        boundary = v2.text_base + (((function.end - 1 - v2.text_base) >> 17) << 17)
        for pc in range(boundary - 8, boundary + 8):
            assert values[partition.find(pc)[0]] == looked_up(v2, pc)
    assert partition.find(page_end)[0] == NO_ROW and looked_up(v2, page_end) is None


# ------------------------------------------------------------ the kernel's rules


def kernel_rules_hold(program, rng: random.Random) -> int:
    """At sampled pcs of every unwinder, both kinds of frames: the kernel's
    rule (found in C for a table's unwinder, a chain, an epilogue scan) is
    the packed rule Python's rule_at gives."""
    unwinders = build_unwinders(program)
    stop_kernel = StopKernel(unwinders, bytearray(SIZE), BASE, BASE + SIZE)
    low = min(f.start for f in program.functions) - 8
    high = max(f.end for f in program.functions) + 8
    pcs = sorted({rng.randrange(low, high) & ~1 for _ in range(600)} | set(range(low, low + 400, 2)))
    checked = 0
    for index, unwinder in enumerate(unwinders):
        for innermost in (False, True):
            for pc in pcs:
                rule = unwinder.rule_at(pc, innermost).rule
                want = None if rule is None else pack_rule(rule, stop_kernel._site_table)
                rule_id, got = stop_kernel.verifier.rule(index, pc, innermost)
                assert got == want, (unwinder.name, innermost, hex(pc))
                if got is not None and type(rule) is Chain:  # a chain composed in C: worded by its methods
                    assert rule_id == -1
                elif got is not None and rule_id == -1:  # an epilogue planned in C (csrc/epilogue.c)
                    assert innermost and hasattr(unwinder, "simulator") and rule.outside_it
                elif got is not None:
                    assert stop_kernel.rule(rule_id) == rule
                checked += 1
    return checked


@pytest.mark.parametrize("program", list(programs()), ids=lambda p: p.name)
def test_the_kernel_finds_the_rule_rule_at_gives(program):
    assert kernel_rules_hold(program, random.Random(3)) > 10_000


def test_every_unwinder_of_a_program_has_its_rules_found_in_c(monkeypatch):
    """Python makes rules for rows, never for ranges of pcs; where an
    epilogue may start (v2+epilogue's innermost frame, nowhere else) and
    the kernel does not plan it itself (csrc/epilogue.c), Python plans it,
    one pc at a time."""
    program = generate_program(0, 3)
    unwinders = build_unwinders(program)
    ranges, plans = [], []
    monkeypatch.setattr(StopKernel, "_provide", lambda self, index, pc, innermost: ranges.append(index))
    planned = StopKernel._provide_plan
    monkeypatch.setattr(StopKernel, "_provide_plan", lambda self, index, pc: plans.append((index, pc)) or
                        planned(self, index, pc))
    stop_kernel = StopKernel(unwinders, bytearray(SIZE), BASE, BASE + SIZE)
    epilogue = [u.name for u in unwinders].index("v2+epilogue")
    starts = set()
    for function in program.functions:
        for pc in range(function.start, min(function.end, function.start + 512), 2):
            if may_start_epilogue(program.code(pc, 4)):
                starts.add((epilogue, pc))
            for index in range(len(unwinders)):
                stop_kernel.verifier.rule(index, pc, True)
                stop_kernel.verifier.rule(index, pc + 2, False)
    functions = unwinders[epilogue].simulator.functions
    in_python = {(index, pc) for index, pc in starts if epilogue_plan(program.code(pc, 1 << 20), pc, functions) is None}
    assert ranges == [] and set(plans) == in_python and len(plans) == len(in_python)
    assert len(starts) > len(in_python) + 10  # most planned in C


def test_a_released_kernel_refuses_to_make_a_rule_and_keeps_those_made():
    """After its run a Verifier drops its providers (harness.verify.stops):
    a rule made before is still there, one never made is an error, not a crash."""
    program = generate_program(0, 3)
    stop_kernel = StopKernel(build_unwinders(program, ("v2", "v2+epilogue")), bytearray(SIZE), BASE, BASE + SIZE)
    pc = program.functions[0].start
    made = stop_kernel.verifier.rule(0, pc, True)
    stop_kernel.verifier.release()
    assert stop_kernel.verifier.rule(0, pc, True) == made
    functions = stop_kernel.unwinders[1].simulator.functions
    unmade = next(p for p in range(pc, pc + 4096, 2)  # an epilogue Python plans (an instruction C does not know)
                  if may_start_epilogue(program.code(p, 4)) and epilogue_plan(program.code(p, 1 << 20), p, functions)
                  is None)
    with pytest.raises(RuntimeError, match="after the verifier's run"):
        stop_kernel.verifier.rule(1, unmade, True)


def test_a_partition_that_is_not_one_is_refused():
    stop_kernel = StopKernel(build_unwinders(generate_program(0, 0), ("dwarf",)), bytearray(SIZE), BASE,
                             BASE + SIZE)
    fresh = kernel.Verifier(bytearray(SIZE), BASE, BASE + SIZE, [(0, False, False)], stop_kernel._provide,
                            stop_kernel._provide_book, stop_kernel._provide_plan)
    book, numbers = stop_kernel.book.packed, array("q", [0, 0, 0])
    with pytest.raises(ValueError, match="starts must increase"):
        fresh.set_map(0, True, array("q", [5, 5]), array("q", [0, 1]), 0, numbers, book)
    with pytest.raises(ValueError, match="int64 arrays"):
        fresh.set_map(0, True, array("i", [5]), array("q", [0]), 0, numbers, book)
    with pytest.raises(ValueError, match="rule numbers are an int64 array"):
        fresh.set_map(0, True, array("q", [5, 6]), array("q", [0, 1]), 0, array("q", [0, 0]), book)
    with pytest.raises(ValueError, match="not in the book"):
        fresh.set_map(0, True, array("q", [5]), array("q", [0]), 0, array("q", [0, len(book)]), book)
    with pytest.raises(IndexError, match="no unwinder 3"):
        fresh.set_map(3, True, array("q", [5]), array("q", [0]), 0, numbers, book)
    fresh.set_map(0, True, array("q", [NOWHERE]), array("q", [0]), 0, numbers, book)
    with pytest.raises(ValueError, match="already has its rules"):
        fresh.set_map(0, True, array("q", [NOWHERE]), array("q", [0]), 0, numbers, book)


# ------------------------------------------------------------ may_start_epilogue's twin


def test_the_c_epilogue_filter_is_the_python_one():
    rng = random.Random(11)
    samples = [bytes(), b"\x00", b"\xbd\xe8", b"\xbd\xe8\xf0"]
    samples += [half.to_bytes(2, "little") + b"\x00\xbf" for half in range(0x10000)]
    for first in range(0xE800, 0x10000):
        for rd in (7, 11, 13, rng.randrange(16)):
            samples.append(first.to_bytes(2, "little") + (rng.getrandbits(16) & 0xF0FF | rd << 8).to_bytes(2, "little"))
    samples += [rng.randbytes(4) for _ in range(20_000)]
    for code in samples:
        assert kernel.may_start_epilogue(code) == may_start_epilogue(code), code.hex()


def test_an_epilogue_simulator_without_its_code_has_its_innermost_rules_from_rule_at():
    """Given no segments to scan, the kernel cannot tell where an epilogue
    may start: v2+epilogue's innermost frame asks rule_at for each range,
    its callers still take the tables' rows."""
    program = generate_program(0, 1)
    built = build_unwinders(program, ("v2", "v2+epilogue"))[1]
    blind = EpilogueFirst(EpilogueSimulator(program.code, built.simulator._same_function), built.fallback,
                          "v2+epilogue")
    stop_kernel = StopKernel([blind], bytearray(SIZE), BASE, BASE + SIZE)
    plans = 0
    for function in program.functions[:6]:
        for pc in range(function.start, min(function.end, function.start + 512), 2):
            for innermost in (False, True):
                rule = blind.rule_at(pc, innermost).rule
                want = None if rule is None else pack_rule(rule, stop_kernel._site_table)
                assert stop_kernel.verifier.rule(0, pc, innermost)[1] == want, (hex(pc), innermost)
            plans += blind.rule_at(pc, True).high - pc == 1
    assert plans > 5
