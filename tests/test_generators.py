"""Generators: deterministic, every family present, CFI derived from the
instructions agrees with execution, traits and positions as designed."""

import random
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from generators.corpus import NON_LEAF_FAMILIES, default_corpus, generate_program, program_plans
from generators.layout import PAGE, TEXT_BASE, body_instructions
from harness.formats import ehabi
from harness.formats.arm_exidx import parse_sections
from harness.program import CfiRow, FunctionCfi
from harness.registers import LR
from harness.unwind import build_unwinders
from harness.unwind.exidx import exidx_unwinder_for
from harness.formats.chrome_v2.encoder import state_instructions
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
