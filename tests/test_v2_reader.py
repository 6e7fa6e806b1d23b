"""Reading blobs: every corruption gives CorruptTable naming the field."""

import struct

import pytest
from v2_helpers import simple_function

from harness.errors import CorruptTable
from harness.formats.chrome_v2 import V2Reader, encode

PAGE = 1 << 17
FUNCTIONS = [simple_function("a", 0, PAGE + 0x40), simple_function("b", PAGE + 0x40, 0x40, 16)]
SEED = encode(FUNCTIONS, 0).blob("seed")
CHROME = encode(FUNCTIONS, 0, layout="chrome").blob()


def patched(blob: bytes, offset: int, fmt: str, value: int) -> bytes:
    data = bytearray(blob)
    struct.pack_into(fmt, data, offset, value)
    return bytes(data)


def field(blob: bytes, index: int) -> int:
    return struct.unpack_from("<I", blob, 4 * index)[0]


def expect_corrupt(blob: bytes, layout: str, field_name: str):
    with pytest.raises(CorruptTable) as error:
        V2Reader.from_blob(blob, layout)
    assert field_name in str(error.value)
    return error.value


def test_valid_blobs_load():
    assert V2Reader.from_blob(SEED, "seed").lookup(4) is not None
    assert V2Reader.from_blob(CHROME, "chrome").lookup(4) is not None


@pytest.mark.parametrize("length", [0, 3, 39])
def test_short_header(length):
    expect_corrupt(SEED[:length], "seed", "header")


def test_truncated_blob():
    expect_corrupt(SEED[:-3], "seed", "unwind instruction table")


def test_page_table_count_past_the_end():
    expect_corrupt(patched(SEED, 4, "<I", 10_000), "seed", "page table")


def test_function_table_offset_past_the_end():
    expect_corrupt(patched(CHROME, 8, "<I", len(CHROME)), "chrome", "function table")


def test_misaligned_page_table():
    expect_corrupt(patched(SEED, 0, "<I", 41), "seed", "page_table_byte_offset")


def test_page_table_pointing_past_the_functions():
    offset = field(SEED, 0) + 4  # page 1
    expect_corrupt(patched(SEED, offset, "<I", 99), "seed", "page table")


def test_page_zero_not_starting_at_function_zero():
    expect_corrupt(patched(SEED, field(SEED, 0), "<I", 1), "seed", "page table")


def test_bitvector_disagreeing_with_the_tables():
    expect_corrupt(patched(SEED, field(SEED, 2), "<B", 0), "seed", "bitvector")


def test_bitvector_of_wrong_size():
    expect_corrupt(patched(SEED, 12, "<I", 5), "seed", "bitvector")


def test_function_entries_out_of_order():
    # Swap the page offsets of the first two entries of page 1.
    table = field(SEED, 4)
    first_of_page_1 = struct.unpack_from("<I", SEED, field(SEED, 0) + 4)[0]
    entry = table + 4 * first_of_page_1
    data = patched(SEED, entry, "<H", 0x7000)
    expect_corrupt(data, "seed", "function table")


def test_offset_list_index_past_the_table():
    expect_corrupt(patched(SEED, field(SEED, 4) + 2, "<H", 0xFFFF), "seed", "function table")


def test_unterminated_offset_list():
    start, size = field(SEED, 6), field(SEED, 7)
    data = bytearray(SEED)
    data[start : start + size] = b"\x85" * size  # every byte continues a ULEB128
    expect_corrupt(bytes(data), "seed", "function offset table")


def test_offsets_that_do_not_decrease():
    start = field(SEED, 6)
    data = bytearray(SEED)
    data[start] = 0x7F  # a first offset larger than... then 0 must follow; make it equal the next
    data[start + 2] = 0x7F
    expect_corrupt(bytes(data), "seed", "function offset table")


def test_instruction_index_past_the_table():
    start = field(SEED, 6)
    expect_corrupt(patched(SEED, start + 1, "<B", 0x7F), "seed", "function offset table")


def test_spare_instruction_in_a_run():
    start = field(SEED, 8)
    error = expect_corrupt(patched(SEED, start, "<B", 0xD8), "seed", "unwind instruction table")
    assert "spare" in str(error)


def test_run_without_finish():
    start, size = field(SEED, 8), field(SEED, 9)
    data = bytearray(SEED)
    data[start : start + size] = b"\x00" * size  # vsp += 4 forever, never finish
    expect_corrupt(bytes(data), "seed", "unwind instruction table")


def test_empty_page_table():
    expect_corrupt(patched(CHROME, 4, "<I", 0), "chrome", "page_table_entries")
