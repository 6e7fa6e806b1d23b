"""Breakpad symbol files: what `export-breakpad` writes (dump_syms's form),
what `encode --input breakpad` reads, and the round trip: through
Breakpad text the tables are those made straight from the ELF."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main
from harness.formats import chrome_v2
from harness.formats.breakpad import BreakpadError, cfi_records, module_id, read_symbol_file
from harness.formats.dwarf_cfi import read_cfi
from harness.formats.elf import load_base, open_elf, text_base
from harness.program import CfiRow, FunctionCfi
from harness.registers import DWARF_D0, LR, SP

ROOT = Path(__file__).resolve().parent.parent
BUILDS = sorted((ROOT / "corpus" / "elf").glob("*.elf"))


def test_records_are_written_as_dump_syms_writes_them():
    """INIT holds every rule, later records the rules that change, each
    record's rules in the order of their names; a register back in itself
    is `r4: r4` (lr: `.ra: lr`), a d register `unnamed_register<n>`."""
    saves = ((4, -8), (LR, -4))
    function = FunctionCfi("f", 0x10100, 0x10140, (
        CfiRow(0x10100), CfiRow(0x10102, SP, 8, saves), CfiRow(0x10104, SP, 16, (*saves, (DWARF_D0 + 8, -16))),
        CfiRow(0x10106, 7, 16, (*saves, (DWARF_D0 + 8, -16))), CfiRow(0x1013c, SP, 0)))
    assert cfi_records(function, 0x10000) == [
        "STACK CFI INIT 100 40 .cfa: sp 0 + .ra: lr",
        "STACK CFI 102 .cfa: sp 8 + .ra: .cfa -4 + ^ r4: .cfa -8 + ^",
        "STACK CFI 104 .cfa: sp 16 + unnamed_register264: .cfa -16 + ^",
        "STACK CFI 106 .cfa: r7 16 +",
        "STACK CFI 13c .cfa: sp 0 + .ra: lr r4: r4 unnamed_register264: unnamed_register264",
    ]


def test_records_read_back_as_the_rows_they_came_from():
    saves = ((4, -8), (LR, -4))
    rows = (CfiRow(0x100), CfiRow(0x102, SP, 8, saves), CfiRow(0x106, 7, 16, saves), CfiRow(0x13c, SP, 0))
    text = "\n".join(["FUNC 100 40 0 f", *cfi_records(FunctionCfi("f", 0x100, 0x140, rows), 0)]) + "\n"
    assert read_symbol_file(text, "f.sym").functions == (FunctionCfi("f", 0x100, 0x140, rows),)


def test_a_row_it_cannot_read_is_left_out_and_named():
    """As Chrome's builders do: the row before stays in force."""
    text = ("STACK CFI INIT 100 40 .cfa: sp 0 + .ra: lr\n"
            "STACK CFI 102 .cfa: sp 8 + .ra: .cfa -4 + ^\n"
            "STACK CFI 104 .cfa: sp 8 + r4: r5\n")  # r4 saved in r5
    module = read_symbol_file(text, "f.sym")
    assert [r.address for r in module.functions[0].rows] == [0x100, 0x102]
    assert module.unparsed == ("line 3: rule r4: r5",)


@pytest.mark.parametrize("text, words", [
    ("STACK CFI 104 .cfa: sp 8 +\n", "line 1: not a Breakpad record (a STACK CFI record before any"),
    ("STACK CFI INIT zz 40 .cfa: sp 0 +\n", "line 1: not a Breakpad record"),
    ("STACK CFI INIT 100 40 sp 0 +\n", "an expression before any register name"),
])
def test_a_file_that_is_not_a_symbol_file_is_a_one_line_error(text, words):
    with pytest.raises(BreakpadError) as caught:
        read_symbol_file(text, "bad.sym")
    assert str(caught.value).startswith("bad.sym: ") and words in str(caught.value)


def test_the_module_id_is_the_build_id_in_guid_order():
    """dump_syms: the first 16 bytes of the build id, the first word and
    the next two half-words byte-swapped, then the age 0."""
    assert module_id(bytes(range(20)), b"") == "03020100" "0504" "0706" "08090A0B0C0D0E0F" "0"


@pytest.mark.parametrize("build", BUILDS, ids=[b.stem for b in BUILDS])
def test_through_breakpad_text_the_tables_are_those_from_the_elf(build, tmp_path, capsys):
    """Byte for byte, for every builder; Chrome's reads a record at address
    0 as a tombstone of dead code, so through the text it leaves out the
    function these bare-metal builds place at their load address."""
    image = open_elf(str(build))
    relative = f"{text_base(image) - load_base(image):#x}"
    symbols = tmp_path / "f.sym"
    assert main(["export-breakpad", str(build), "-o", str(symbols)]) == 0
    for options in (["--format", "v1"], ["--layout", "seed"], ["--layout", "chrome", "--epilogue", "keep"],
                    ["--builder", "chrome"]):
        straight, through = tmp_path / "straight", tmp_path / "through"
        assert main(["encode", str(build), "-o", str(straight), *options]) == 0
        assert main(["encode", str(symbols), "--input", "breakpad", "--text-start", relative, "-o", str(through),
                     *options]) == 0
        if options == ["--builder", "chrome"]:
            live = [f for f in read_cfi(image) if f.start != load_base(image)]
            assert len(live) == len(read_cfi(image)) - 1
            straight.write_bytes(chrome_v2.encode_as_chrome(live, text_base(image)).blob())
        assert straight.read_bytes() == through.read_bytes(), options
    assert "row left out" not in capsys.readouterr().out


def test_options_that_read_an_elf_are_refused_with_a_symbol_file(tmp_path, capsys):
    symbols = tmp_path / "f.sym"
    symbols.write_text("STACK CFI INIT 100 40 .cfa: sp 0 + .ra: lr\n")
    assert main(["encode", str(symbols), "--input", "breakpad", "--from-code", "-o", str(tmp_path / "x")]) == 2
    assert "not with --input breakpad" in capsys.readouterr().err
    symbols.write_text("MODULE Linux arm 0 f\n")
    assert main(["encode", str(symbols), "--input", "breakpad", "-o", str(tmp_path / "x")]) == 2
    assert "no STACK CFI INIT record" in capsys.readouterr().err
