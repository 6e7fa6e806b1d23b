"""The encoder at scale keeps its bytes: a fixed synthetic text (copies of
the compiled corpus's functions, as `bench` encodes at Chrome's scale) has
pinned blobs, reads back in both layouts, and shares what copies share."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pytest

from harness.bench.scale import synthetic_text
from harness.formats import ehabi
from harness.formats.chrome_v2 import V2Reader, encode
from harness.formats.chrome_v2.layout import parse, serialize
from harness.formats.chrome_v2.tables import FunctionTable, FunctionTableEntry

FUNCTIONS = 2_000

# sha256 of encode(synthetic_text(2000), ...).blob(), as the encoder wrote
# them before it shared runs and lists and packed its function table.
PINNED = {
    ("chrome", "drop"): "4129eb022232ae930ad23357e5b5427207943a5a61ebdc598b54196845f47e83",
    ("chrome", "keep"): "a7fe8f730c3ae96d4c01a37d7f0e02c3b63a4f9e3d7dbb3c5161f1c577090aab",
    ("seed", "drop"): "9cdb4c7f9d8da599b8e3c100eed332cd02d576243e5bdfa483c12d17e4560d32",
    ("seed", "keep"): "a175f1e5fb32b5d232d5607d24ecda7ffe419b9d0414b945dea45b17a2be3183",
}


@pytest.fixture(scope="module")
def text():
    return synthetic_text(FUNCTIONS)


@pytest.mark.parametrize("layout, policy", sorted(PINNED))
def test_blob_of_a_fixed_synthetic_text_is_pinned(text, layout, policy):
    blob = encode(text, text[0].start, policy, layout=layout).blob()
    assert hashlib.sha256(blob).hexdigest() == PINNED[layout, policy]


@pytest.mark.parametrize("layout, policy", sorted(PINNED))
def test_reader_finds_every_encoded_run(text, layout, policy):
    base = text[0].start
    encoded = encode(text, base, policy, layout=layout)
    reader = V2Reader.from_blob(encoded.blob(), layout)
    for function in encoded.covering:
        unwinds = function.address_unwinds
        ends = [u.offset for u in unwinds[1:]] + [function.end - function.start]
        for unwind, end in zip(unwinds, ends):
            for address in {function.start + unwind.offset, function.start + max(unwind.offset, end - 2)}:
                found = reader.lookup(address - base)
                assert found is not None and found.function_start == function.start - base, hex(address)
                run = ehabi.encode(reader.run(found.instruction_index), layout == "chrome")
                assert run == unwind.instructions, hex(address)


def test_copies_of_one_function_share_their_runs(text):
    encoded = encode(text, text[0].start, layout="chrome")
    by_shape = {}
    for source, function in zip(text, encoded.functions):
        shape = tuple((row.address - source.start, row.cfa_reg, row.cfa_offset, row.saved) for row in source.rows)
        by_shape.setdefault(shape, []).append(function.address_unwinds)
    shared = [lists for lists in by_shape.values() if len(lists) > 1]
    assert shared
    assert all(unwinds is lists[0] for lists in shared for unwinds in lists)


def test_packed_function_table_reads_as_its_entries(text):
    tables = encode(text[:300], text[0].start, layout="chrome").tables
    packed = tables.function_table
    assert isinstance(packed, FunctionTable)
    parsed = parse(serialize(tables, "chrome"), "chrome")[0].function_table
    as_tuple = tuple(packed)
    assert parsed == as_tuple and packed == parsed and as_tuple == packed and hash(packed) == hash(as_tuple)
    assert packed[-1] == as_tuple[-1] and packed[5:9] == as_tuple[5:9] and len(packed) == len(as_tuple)
    assert all(isinstance(entry, FunctionTableEntry) for entry in packed)
    with pytest.raises(IndexError):
        packed[len(packed)]
    for layout in ("chrome", "seed"):
        assert serialize(replace(tables, function_table=as_tuple), layout) == serialize(tables, layout)
