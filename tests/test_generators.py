"""Generators: deterministic, every family present, CFI derived from the
instructions agrees with execution, traits and positions as designed."""

import random
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from generators.corpus import NON_LEAF_FAMILIES, default_corpus, generate_program, program_plans
from generators.ehabi_writer import Inexpressible, frame_instructions, vsp_add
from generators.layout import PAGE, TEXT_BASE, body_instructions
from harness.formats import ehabi
from harness.formats.arm_exidx import parse_sections
from harness.formats.chrome_v2.encoder import InexpressibleState, state_instructions
from harness.program import CfiRow, FunctionCfi
from harness.registers import DWARF_D0, LR, PC, SP
from harness.unwind.exidx import exidx_unwinder_for
from harness.unwind.registry import build_unwinders
from harness.verify.stops import verify_program


def test_same_seed_same_program():
    a, b = generate_program(3, 1), generate_program(3, 1)
    assert a == b
    assert generate_program(3, 2).segments != a.segments


def test_every_family_is_in_every_program():
    for index in range(3):
        plans, _ = program_plans(random.Random(f"unwind-harness:0:{index}"))
        families = {p.family for p in plans}
        assert set(NON_LEAF_FAMILIES) - {"huge_code", "stack_1m"} <= families
        assert {"huge_code", "stack_1m"} & families


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000))
def test_generated_cfi_agrees_with_execution(seed):
    program = generate_program(seed, 0)
    result = verify_program(program, build_unwinders(program, ["dwarf", "v2-gcc"]))
    assert result.self_check_ok, result.fault or (result.result, result.expected)
    assert result.failures == []
    assert result.stops > 300


def test_clang_style_rows_stop_at_the_prologue_and_gcc_style_rows_do_not():
    program = generate_program(0, 0)
    epilogue_rows = 0
    for info, clang, gcc in zip(program.functions, program.cfi["tables"], program.cfi["reference"]):
        assert all(row.address <= info.prologue_end for row in clang.rows)
        epilogue_rows += sum(any(s <= row.address <= e for s, e in info.epilogues) for row in gcc.rows)
    assert epilogue_rows > 0


def test_traits_follow_the_plans():
    program = generate_program(0, 0)
    by_family = {}
    plans, _ = program_plans(random.Random("unwind-harness:0:0"))
    family = {p.name: p.family for p in plans}
    for info in program.functions:
        by_family.setdefault(family.get(info.name, "entry"), []).append(info)
    for info in by_family["huge_code"]:
        assert info.end - info.start > PAGE
        assert "page_crossing" in info.traits
        # It covers a whole page, so some page has no function starting in it.
        assert (info.end - TEXT_BASE) // PAGE - (info.start - TEXT_BASE) // PAGE >= 2
    for info in by_family["stack_1m"]:
        assert {"huge_frame", "large_frame"} <= info.traits
    for info in by_family["alloca"]:
        assert {"alloca", "frame_pointer"} <= info.traits
    for info in by_family["straddle"]:
        assert "page_crossing" in info.traits
    for info in by_family.get("leaf", []) + by_family.get("leaf_push", []):
        assert "leaf" in info.traits


def test_exidx_holds_each_functions_body_state():
    """One entry per function, as a compiler emits: the state its last
    clang-style row describes (the end of the prologue), then the linker's
    closing CANTUNWIND; the sections lie beside the code, not in it."""
    for program in default_corpus(0, 3):
        sections = program.exidx
        entries = parse_sections(sections)
        functions = program.functions
        assert [e.start for e in entries] == [f.start for f in functions] + [functions[-1].end]
        assert sections.end == functions[-1].end and entries[-1].kind == "cantunwind"
        text_end = max(a + len(data) for a, data in program.segments)
        assert text_end <= sections.exidx_address and sections.exidx_address % 4 == 0
        assert sections.extab_address == sections.exidx_address + len(sections.exidx)
        for entry, function in zip(entries, program.cfi["tables"]):
            if body_instructions(function) is None:  # none in these programs, measured
                assert entry.kind == "cantunwind"
                continue
            run = state_instructions(function.rows[-1])
            assert entry.kind == "compact" and entry.ops == tuple(ehabi.decode(run, run=True))


@pytest.mark.parametrize("row, instructions", [
    (CfiRow(0x10), ehabi.encode([ehabi.FINISH])),  # frameless
    (CfiRow(0x10, cfa_offset=8, saved=((4, -8), (LR, -4))), ehabi.encode([ehabi.Pop((4, LR)), ehabi.FINISH])),
    (CfiRow(0x10, cfa_offset=6), None),  # inexpressible: CANTUNWIND
    (CfiRow(0x10, problem="DWARF expression"), None),
])
def test_body_instructions(row, instructions):
    assert body_instructions(FunctionCfi("f", 0, 0x20, (CfiRow(0), row))) == instructions


@pytest.mark.parametrize("index", [0, 1])
def test_exidx_is_right_in_bodies(index):
    """EXIDX holds the body state only: right at every body stop, wrong at
    prologue and epilogue stops once the frame is half built or torn down."""
    program = generate_program(0, index)
    result = verify_program(program, [exidx_unwinder_for(program.exidx)])
    assert result.self_check_ok
    expressible = {f.name for f in program.cfi["tables"] if body_instructions(f) is not None}
    by_position = Counter(f.position for f in result.failures if f.culprit in expressible)
    passes = Counter()
    for (_, _, position, kind), n in result.counts.items():
        passes[position] += n if kind is None else 0
    assert by_position["body"] == 0 and passes["body"] > 0
    # A half-built frame is not the body state: most prologue stops fail.
    assert by_position["prologue"] > passes["prologue"]
    assert by_position["epilogue"] > 0
    assert all(f.frame == 0 for f in result.failures)  # callers are always at a body stop


# ------------------------------------------- the generators' EHABI instructions
# generators.ehabi_writer writes the instructions from the EHABI spec, apart
# from the v2 encoder; the two must agree wherever the generators use them.


def _encoder_run(row: CfiRow) -> bytes | None:
    """The v2 encoder's run for `row`, None where it refuses (a ValueError is
    the codec refusing a register EHABI cannot name)."""
    try:
        return state_instructions(row)
    except (InexpressibleState, ValueError):
        return None


def _generator_run(row: CfiRow) -> bytes | None:
    try:
        return frame_instructions(row)
    except Inexpressible:
        return None


def test_body_instructions_agree_with_the_v2_encoder():
    """Every function of the default corpus: the body state the generators
    write into .ARM.exidx is, byte for byte, what the v2 encoder makes of the
    same row (or both refuse); and so is every other row of either flavour."""
    bodies = rows = 0
    for program in default_corpus():
        for function in program.cfi["tables"]:
            row = function.rows[-1]
            expected = None if row.problem else _encoder_run(row)
            assert body_instructions(function) == expected, (program.name, function.name, row.describe())
            bodies += 1
        for function in program.cfi["tables"] + program.cfi["reference"]:
            for row in function.rows:
                if not row.problem:
                    assert _generator_run(row) == _encoder_run(row), (program.name, row.describe())
                    rows += 1
    assert bodies == 880 and rows > 5000


def d(n: int) -> int:
    return DWARF_D0 + n


@pytest.mark.parametrize("amount, expected", [
    (0, ""),
    (4, "00"), (0x100, "3f"),  # 00xxxxxx: 4 + (x << 2)
    (0x104, "3f00"), (0x200, "3f3f"),  # two short adds, the first of 0x100
    (0x204, "b200"), (0x208, "b201"), (0x404, "b28001"),  # b2 + ULEB128((n - 0x204) >> 2)
    (-4, "40"), (-0x100, "7f"), (-0x108, "7f41"),  # 01xxxxxx: - 4 - (x << 2), whole steps first
])
def test_vsp_add_forms(amount, expected):
    assert vsp_add(amount).hex() == expected


def test_vsp_add_is_exact_and_shortest():
    """Read back by the harness decoder, every amount adds up, in as few
    bytes as the shorter of a chain of one-byte adds (up to 0x100 each) and,
    from 0x204 on, b2 with its ULEB128."""
    for amount in range(-0x800, 0x2000, 4):
        run = vsp_add(amount)
        assert sum(op.amount for op in ehabi.decode(run)) == amount
        chain = -(-abs(amount) // 0x100)
        uleb = 1 + max(1, (((amount - 0x204) >> 2).bit_length() + 6) // 7) if amount >= 0x204 else chain
        assert len(run) == min(chain, uleb), hex(amount)


def row(cfa_offset: int, *saved: tuple[int, int], cfa_reg: int = SP) -> CfiRow:
    return CfiRow(0x10, cfa_reg, cfa_offset, tuple(sorted(saved)))


@pytest.mark.parametrize("state, expected", [
    # vsp adds: the frame below the saves, and what lies between them
    (row(0), "b0"),  # frameless: finish (lr -> pc)
    (row(0x10C, (4, -8), (LR, -4)), "3f00" "a8" "b0"),  # add sp 0x104 below push {r4, lr}
    (row(0x210, (4, -8), (LR, -4)), "b201" "a8" "b0"),  # 0x208 below: b2 + ULEB128(1)
    (row(16, (4, -16), (LR, -4)), "a0" "01" "8400" "b0"),  # r4, 8 bytes unused, lr: two pops
    (row(0, (4, -8)), "41" "a0" "00" "b0"),  # a slot below the CFA offset: vsp - 8 first
    (row(0, (4, 0)), "a0" "40" "b0"),  # a slot at the CFA: vsp - 4 after it
    # core pops
    (row(8, (0, -8), (3, -4)), "b109" "b0"),  # r0, r3: b1 + mask
    (row(12, (4, -12), (5, -8), (6, -4)), "a2" "b0"),  # r4-r6: a0 + 2
    (row(20, (4, -20), (5, -16), (6, -12), (7, -8), (LR, -4)), "ab" "b0"),  # r4-r7, lr: a8 + 3
    (row(8, (5, -8), (LR, -4)), "8402" "b0"),  # r5, lr: not from r4, mask 0x402
    (row(12, (4, -12), (6, -8), (LR, -4)), "8405" "b0"),  # r4, r6, lr: a gap, mask 0x405
    (row(12, (3, -12), (4, -8), (LR, -4)), "b108" "a8" "b0"),  # r0-r3 first, then r4, lr
    (row(8, (5, -8), (4, -4)), "8002" "a0" "b0"),  # descending slots: two pops
    # VFP pops
    (row(16, (d(8), -16), (d(9), -8)), "d1" "b0"),  # d8-d9: d0 + 1
    (row(16, (d(0), -16), (d(1), -8)), "c901" "b0"),  # d0-d1: c9, first 0, count - 1
    (row(16, (d(16), -16), (d(17), -8)), "c801" "b0"),  # d16-d17: c8, first 16 + 0
    (row(32, *((d(14 + i), -32 + 8 * i) for i in range(4))), "c9e1" "c801" "b0"),  # d14-d17: split at d16
    (row(80, *((d(8 + i), -80 + 8 * i) for i in range(10))), "d7" "c801" "b0"),  # d8-d17: d8-d15, d16-d17
    (row(16, (d(8), -16), (d(10), -8)), "d0" "c9a0" "b0"),  # d8, d10: not consecutive, two pops
    (row(24, (d(8), -16), (4, -8), (LR, -4)), "01" "d0" "a8" "b0"),  # sub sp 8; vpush {d8}; push {r4, lr}
    # CFA through a register
    (row(8, (7, -8), (LR, -4), cfa_reg=7), "97" "8408" "b0"),  # vsp = r7; pop {r7, lr}
    (row(16, (4, -16), (7, -12), (LR, -8), cfa_reg=7), "97" "8409" "00" "b0"),  # r4, r7, lr, then vsp + 4
])
def test_frame_instructions_by_hand(state, expected):
    assert frame_instructions(state).hex() == expected
    assert _encoder_run(state).hex() == expected


@pytest.mark.parametrize("state, words", [
    (row(6), "CFA offset 6 is not a multiple of 4"),
    (row(8, cfa_reg=PC), "CFA through r15"),
    (row(8, cfa_reg=SP + 16), "CFA through r29"),
    (row(8, (4, -6)), "r4 saved at unaligned CFA-6"),
    (row(8, (4, -8), (5, -8)), "r5 at CFA-8 overlaps another save"),
    (row(16, (d(8), -16), (4, -12)), "r4 at CFA-12 overlaps another save"),  # inside d8's 8 bytes
    (row(8, (16, -8)), "register 16 is neither r0-r15 nor d0-d31"),
    (row(8, (d(32), -8)), "register 288 is neither r0-r15 nor d0-d31"),
])
def test_inexpressible_states_are_refused(state, words):
    with pytest.raises(Inexpressible) as caught:
        frame_instructions(state)
    assert str(caught.value) == words
    assert _encoder_run(state) is None  # the v2 encoder refuses them too
    assert body_instructions(FunctionCfi("f", 0, 0x20, (CfiRow(0), state))) is None  # CANTUNWIND
