"""Generators: deterministic, every family present, CFI derived from the
instructions agrees with execution, traits and positions as designed."""

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from generators.corpus import NON_LEAF_FAMILIES, generate_program, program_plans
from generators.layout import PAGE, TEXT_BASE
from harness.unwinders import build_unwinders
from harness.verify import verify_program


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
