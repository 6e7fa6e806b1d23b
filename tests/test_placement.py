"""The stack and the return sentinel go where the program is not: at the
usual places when they are free, elsewhere when the program is there, and
an ELF linked anywhere verifies as it does at the usual address."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.elf_program import program_from_elf
from harness.emulation.emulator import Emulator
from harness.emulation.placement import DEFAULT, PAGE, RESERVED, NoRoom, pages_of, place
from harness.errors import InputError
from harness.unwind.registry import build_unwinders
from harness.verify.stops import verify_program

FIXTURES = Path(__file__).resolve().parent.parent / "corpus" / "fixtures"
PLACED = ["placed-gnu-default", "placed-high", "placed-in-stack"]


def overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def check(segments, placement) -> None:
    """Nothing the harness adds touches the program or the reserved pages;
    the stack keeps an unmapped page on either side."""
    stack = (placement.stack_bottom, placement.stack_top)
    sentinel = (placement.sentinel, placement.sentinel + PAGE)
    assert placement.stack_top % PAGE == 0 and placement.sentinel % PAGE == 0
    assert not overlaps(sentinel, stack)
    for taken in pages_of(segments) + list(RESERVED):
        assert not overlaps((stack[0] - PAGE, stack[1] + PAGE), taken) or placement.stack_top == DEFAULT.stack_top
        assert not overlaps(stack, taken) and not overlaps(sentinel, taken)


def test_ordinary_programs_get_the_usual_places():
    assert place([(0x100000, bytes(0x40000))]) == DEFAULT


def test_a_segment_over_the_sentinel_moves_it():
    segments = [(0x8000, bytes(0x200)), (0x91B4, bytes(0x1000C))]  # GNU ld's default layout, a large .bss
    placement = place(segments)
    assert placement.sentinel != DEFAULT.sentinel and placement.stack_top == DEFAULT.stack_top
    check(segments, placement)


def test_a_segment_in_the_stack_moves_the_stack():
    segments = [(0x7E800000, bytes(0x2000))]
    placement = place(segments)
    assert placement.stack_top != DEFAULT.stack_top
    check(segments, placement)


def test_a_program_that_leaves_no_room_is_refused():
    everywhere = [(start, bytes(0x1000000 - PAGE)) for start in range(PAGE, 0xFF000000, 0x1000000)]
    with pytest.raises(NoRoom, match="no free 16 MiB for the stack"):
        place(everywhere)


def test_a_segment_past_the_address_space_is_refused():
    with pytest.raises(InputError, match="runs past the 32-bit address space"):
        place([(0xFFFFF000, bytes(0x2000))])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 0xFFFF).map(lambda page: page * PAGE), st.integers(1, 64 << 20)),
                max_size=8))
def test_placement_never_touches_the_program(spans):
    segments = [(start, _Sized(min(size, (1 << 32) - start))) for start, size in spans]
    try:
        placement = place(segments)
    except NoRoom:
        return
    check(segments, placement)


class _Sized(bytes):
    """A segment of a given size without its bytes (placement reads only lengths)."""

    def __new__(cls, size: int):
        instance = super().__new__(cls)
        instance.size = size
        return instance

    def __len__(self) -> int:
        return self.size


@pytest.mark.parametrize("name", PLACED)
def test_elfs_linked_anywhere_verify_as_at_the_usual_address(name):
    usual = program_from_elf(str(FIXTURES / "calls-gcc-nofp.elf"), "entry")
    placed = program_from_elf(str(FIXTURES / f"{name}.elf"), "entry")
    assert Emulator(placed.segments).placement != DEFAULT or name == "placed-high"
    results = [verify_program(p, build_unwinders(p)) for p in (usual, placed)]
    assert results[1].fault is None and results[1].result == results[0].result
    assert results[1].stops == results[0].stops
    by_unwinder = [Counter() for _ in results]
    for tally, result in zip(by_unwinder, results):
        for (unwinder, _, _, kind), stops in result.counts.items():
            tally[(unwinder, kind)] += stops
    assert by_unwinder[1] == by_unwinder[0]
