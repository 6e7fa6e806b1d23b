"""Several v2 tables for one text (harness.formats.chrome_v2.parts): where
one table's 16-bit offset list index cannot reach every list (Chromium's
rows from code), runs of functions go into tables of their own, kept in
one parts file; each pc is unwound by the table whose text holds it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.bench.scale import synthetic_text
from harness.errors import CorruptTable, TableOverflow
from harness.formats import ehabi
from harness.formats.chrome_v2 import encode, encode_parts, parts_blob, read_tables, tables
from harness.formats.chrome_v2.parts import pack_parts, unpack_parts
from harness.unwind.v2 import V2Unwinder, v2_over_tables

FUNCTIONS = 2_000
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def text():
    return synthetic_text(FUNCTIONS)


def test_a_table_whose_offset_lists_pass_the_index_is_cut_into_parts(text, monkeypatch):
    base = text[0].start
    whole = encode(text, base, "keep")
    assert len(whole.tables.function_offset_table) > 1000  # 1,690 bytes of lists
    monkeypatch.setattr(tables, "OFFSET_INDEX_MAX", 400)
    with pytest.raises(TableOverflow, match="does not fit the 16-bit field"):
        encode(text, base, "keep")
    parts = encode_parts(text, base, "keep")
    assert len(parts) > 2 and parts[0].text_base == base
    assert [part.text_base for part in parts[1:]] == [part.functions[0].start for part in parts[1:]]
    assert sum(len(part.functions) for part in parts) == FUNCTIONS
    found, layout = read_tables(parts_blob(parts))
    assert layout == "seed" and [offset for offset, _ in found] == [part.text_base - base for part in parts]
    unwinder = v2_over_tables(found, base)
    for function in whole.functions:  # every row's run, from whichever table holds it
        for unwind in function.address_unwinds:
            address = function.start + unwind.offset
            part = unwinder.covered[unwinder._find(address)].unwinder
            hit = part.reader.lookup(address - part.text_base)
            assert ehabi.encode(part.reader.run(hit.instruction_index)) == unwind.instructions, hex(address)


def test_one_table_is_written_as_before(text):
    parts = encode_parts(text, text[0].start, "keep")
    assert len(parts) == 1 and parts_blob(parts) == encode(text, text[0].start, "keep").blob()
    (offset, reader), = read_tables(parts_blob(parts))[0]
    assert offset == 0 and isinstance(v2_over_tables(((0, reader),), text[0].start), V2Unwinder)


def test_a_corrupt_parts_file_is_named_where_it_breaks():
    good = pack_parts([(0, b"first"), (0x100, b"second")])
    assert unpack_parts(good) == ((0, b"first"), (0x100, b"second"))
    broken = {
        "count": good[:8] + (1).to_bytes(4, "little") + good[12:],  # one table is no parts file
        "table 1 text offset": good[:24] + (0).to_bytes(4, "little") + good[28:],  # not above the first
        "table 1 blob": good[:28] + (10_000).to_bytes(4, "little") + good[32:],  # past the end
    }
    for field, blob in broken.items():
        with pytest.raises(CorruptTable, match=f"corrupt v2 parts table: {field}"):
            unpack_parts(blob)
    with pytest.raises(CorruptTable, match="count"):
        unpack_parts(good[:10])


def test_encode_writes_a_parts_file_that_dump_and_verify_elf_read(tmp_path, monkeypatch, capsys):
    """The command line with a table too large for one (the index limit
    made small): encode writes a parts file and says so, dump lists each
    table, verify-elf runs v2 over them (right as over one table) and
    refuses the unwinders that take one table."""
    from harness.cli import main

    elf = ROOT / "corpus" / "fixtures" / "calls-gcc-nofp.elf"
    one, parts = tmp_path / "one.bin", tmp_path / "parts.bin"
    assert main(["encode", str(elf), "-o", str(one)]) == 0
    monkeypatch.setattr(tables, "OFFSET_INDEX_MAX", 8)
    assert main(["encode", str(elf), "-o", str(parts)]) == 0
    monkeypatch.undo()  # (verify-elf builds v2's own table before the given one stands in)
    said = capsys.readouterr().out
    count = int(re.search(r"^(\d+) tables \(seed layout\) in a parts file", said, re.MULTILINE).group(1))
    assert count >= 2 and parts.read_bytes().startswith(b"V2PARTS\0")
    assert main(["dump", str(parts)]) == 0
    listing = capsys.readouterr().out
    assert f"v2 parts file: {count} tables" in listing and listing.count("v2 unwind info (seed layout)") == count
    verdicts = []
    for table in (one, parts):
        assert main(["verify-elf", str(elf), "--entry", "entry", "--v2-table", str(table), "--unwinder", "v2"]) == 0
        verdicts.append(re.search(r"│ v2 .*", capsys.readouterr().out).group(0))
    assert verdicts[0] == verdicts[1]
    assert main(["verify-elf", str(elf), "--entry", "entry", "--v2-table", str(parts), "--unwinder", "v2",
                 "--unwinder", "v2+epilogue"]) == 2
    assert f"v2+epilogue run one v2 table, and the parts file given holds {count}" in capsys.readouterr().err
