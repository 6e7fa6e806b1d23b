"""Table building: deduplication, suffix sharing, index order, field limits."""

import pytest
from v2_helpers import simple_function

from harness.errors import TableOverflow
from harness.formats import uleb128
from harness.formats.chrome_v2 import V2Reader, encode
from harness.formats.chrome_v2.tables import pack_sharing_suffixes
from harness.program import CfiRow, FunctionCfi


def test_suffix_is_stored_inside_its_host():
    table, index = pack_sharing_suffixes([b"\xaa\xb0", b"\x05\xaa\xb0", b"\xb0"])
    assert table == b"\x05\xaa\xb0"
    assert index == {b"\x05\xaa\xb0": 0, b"\xaa\xb0": 1, b"\xb0": 2}


def test_unrelated_items_are_concatenated_in_priority_order():
    table, index = pack_sharing_suffixes([b"\x01\xb0", b"\x02\xb0"])
    assert table == b"\x01\xb0\x02\xb0"
    assert index == {b"\x01\xb0": 0, b"\x02\xb0": 2}


def test_duplicate_items_are_stored_once():
    table, index = pack_sharing_suffixes([b"\x01\xb0", b"\x01\xb0"])
    assert table == b"\x01\xb0" and index == {b"\x01\xb0": 0}


def test_identical_functions_share_one_offset_list():
    functions = [simple_function(f"f{i}", 0x40 * i, 0x40) for i in range(50)]
    encoded = encode(functions, 0)
    indices = {entry.offset_table_index for entry in encoded.tables.function_table[:50]}
    assert len(indices) == 1


def test_frequent_runs_get_one_byte_indices():
    # 200 distinct rare runs, and one run that every function uses.
    functions = []
    for i in range(200):
        start = 0x100 * i
        rows = (CfiRow(start), CfiRow(start + 2, 13, 8 + 4 * i), CfiRow(start + 4, 13, 4096))
        functions.append(FunctionCfi(f"f{i}", start, start + 0x100, rows))
    encoded = encode(functions, 0)
    reader = V2Reader(encoded.tables)
    common = reader.lookup(4).instruction_index
    assert uleb128.size(common) == 1
    assert len(encoded.tables.unwind_instruction_table) > 128  # so the order mattered


def test_offset_table_index_over_16_bits_is_an_error():
    # Thousands of distinct functions make the offset table outgrow its 16-bit index.
    functions = []
    for i in range(9000):
        start = 0x20 * i
        rows = (CfiRow(start), CfiRow(start + 2, 13, 8 + 4 * i), CfiRow(start + 4, 13, 16 + 4 * i),
                CfiRow(start + 6, 13, 24 + 4 * i))
        functions.append(FunctionCfi(f"f{i}", start, start + 0x20, rows))
    with pytest.raises(TableOverflow, match="16-bit"):
        encode(functions, 0)


def test_encoding_is_deterministic():
    functions = [simple_function(f"f{i}", 0x40 * i, 0x40, 8 + 4 * (i % 5)) for i in range(40)]
    assert encode(functions, 0).blob() == encode(list(reversed(functions)), 0).blob()
