"""Lookup across 128 KiB pages, each edge case on its own, for both layouts."""

from dataclasses import replace

import pytest
from v2_helpers import read_back, run_text, simple_function

from harness.formats.chrome_v2 import LAYOUTS, V2Reader, serialize
from harness.formats.chrome_v2.encoder import cover_text, function_unwind
from harness.formats.chrome_v2.tables import build_tables

PAGE = 1 << 17
pytestmark = pytest.mark.parametrize("layout", LAYOUTS)


def test_function_starting_on_a_page_boundary_does_not_continue(layout):
    functions = [simple_function("a", 0, PAGE), simple_function("b", PAGE, 0x100, 16)]
    _, reader = read_back(functions, 0, layout)
    assert reader.tables.continuation == (False, False)
    found = reader.lookup(PAGE + 4)
    assert (found.function_start, found.function_offset) == (PAGE, 2)


def test_pc_in_continued_part_before_first_function_of_the_page(layout):
    # "a" runs from page 0 into page 1; "b" starts 0x40 bytes into page 1.
    functions = [simple_function("a", 0x100, PAGE), simple_function("b", 0x100 + PAGE, 0x80, 16)]
    _, reader = read_back(functions, 0, layout)
    assert reader.tables.continuation[1]
    found = reader.lookup(PAGE + 0x10)  # page 1, before "b"
    assert found.function_start == 0x100
    assert found.function_offset == (PAGE + 0x10 - 0x100) // 2
    assert run_text(reader, PAGE + 0x10) == "vsp = vsp + 8; finish"
    after = reader.lookup(PAGE + 0x100 + 4)  # page 1, inside "b"
    assert (after.function_start, after.function_offset) == (PAGE + 0x100, 2)
    assert run_text(reader, PAGE + 0x104) == "vsp = vsp + 16; finish"


def test_page_in_which_no_function_starts(layout):
    # One 300 KiB function spans pages 0, 1 and 2; nothing starts in page 1.
    functions = [simple_function("huge", 0, 300 * 1024), simple_function("next", 300 * 1024, 0x40, 16)]
    _, reader = read_back(functions, 0, layout)
    assert reader.tables.page_table[1] == reader.tables.page_table[2]
    assert reader.tables.continuation[1] and reader.tables.continuation[2]
    for pc in (PAGE, PAGE + 0x1234, 2 * PAGE - 2):
        found = reader.lookup(pc)
        assert (found.function_start, found.function_offset) == (0, pc // 2)


def test_function_offsets_beyond_16_bits(layout):
    # A row 0x30000 bytes in: its half-word offset 0x18000 needs a 3-byte ULEB128.
    from harness.program import CfiRow, FunctionCfi

    rows = (CfiRow(0), CfiRow(2, 13, 8), CfiRow(0x30000, 13, 24))
    _, reader = read_back([FunctionCfi("big", 0, 0x30100, rows)], 0, layout)
    assert run_text(reader, 0x2FFFE) == "vsp = vsp + 8; finish"
    assert run_text(reader, 0x30000) == "vsp = vsp + 24; finish"
    assert reader.lookup(0x30004).function_offset == 0x18002


def test_last_page(layout):
    functions = [simple_function("a", 0, PAGE + 0x200), simple_function("b", PAGE + 0x200, 0x40, 16)]
    _, reader = read_back(functions, 0, layout)
    assert len(reader.tables.page_table) == 2
    assert run_text(reader, PAGE + 0x204) == "vsp = vsp + 16; finish"
    # After the last function: refuse, then past the page table: nothing.
    assert run_text(reader, PAGE + 0x240) == "refuse to unwind"
    assert reader.lookup(2 * PAGE) is None


def test_last_entry_running_into_a_page_no_entry_starts_in(layout):
    # Entries grouped across functions (chrome_v2.grouping) may end with
    # one that starts in page 0 and runs on into page 2: the page table
    # reaches the end of the text, not only the last entry's start.
    functions = [simple_function("a", 0, 0x100), simple_function("b", 0x100, 2 * PAGE, 16)]
    covering = cover_text([function_unwind(f, "drop") for f in functions], 0)
    tables = build_tables([covering[0], replace(covering[1], end=covering[-1].end)], 0)
    reader = V2Reader.from_blob(serialize(tables, layout), layout)
    assert len(reader.tables.page_table) == 3
    assert reader.tables.continuation == (False, True, True)
    for pc in (PAGE, 2 * PAGE + 0x80):
        found = reader.lookup(pc)
        assert (found.function_start, found.function_offset) == (0x100, (pc - 0x100) // 2)
        assert run_text(reader, pc) == "vsp = vsp + 16; finish"


def test_last_function_ending_on_a_page_boundary_adds_no_page(layout):
    functions = [simple_function("a", 0, PAGE)]
    _, reader = read_back(functions, 0, layout)
    assert len(reader.tables.page_table) == 1
    assert reader.lookup(PAGE) is None


def test_space_before_first_function_refuses(layout):
    _, reader = read_back([simple_function("a", 0x1000, 0x40)], 0, layout)
    assert run_text(reader, 0) == "refuse to unwind"
    assert run_text(reader, 0xFFE) == "refuse to unwind"
    assert run_text(reader, 0x1000) == "finish"


def test_gap_between_functions_is_trivial(layout):
    functions = [simple_function("a", 0, 0x40), simple_function("b", 0x80, 0x40, 16)]
    _, reader = read_back(functions, 0, layout)
    assert run_text(reader, 0x40) == "finish"
    assert run_text(reader, 0x7E) == "finish"
    assert run_text(reader, 0x84) == "vsp = vsp + 16; finish"


def test_text_base_is_subtracted_before_paging(layout):
    base = 0x12340
    functions = [simple_function("a", base, PAGE + 0x20), simple_function("b", base + PAGE + 0x20, 0x20, 16)]
    _, reader = read_back(functions, base, layout)
    found = reader.lookup(PAGE + 0x10)
    assert (found.function_start, found.function_offset) == (0, (PAGE + 0x10) // 2)
