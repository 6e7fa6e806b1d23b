"""Function starts without a symbol table: discovery on the committed
compiled corpus read as `strip` leaves it (`.symtab` gone), against the
true starts its symbols name (harness.stripped)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace

import pytest

from harness.formats.elf import open_elf
from harness.manifest import ELF_CORPUS, elf_builds
from harness.stripped import compared, found_starts, start_row, table_lines, true_starts

BUILDS = sorted(build["file"] for build in elf_builds())

STRIP = "arm-linux-gnueabihf-strip"  # what the stripped reading is held to


@pytest.fixture(scope="module")
def rows() -> dict[str, dict]:
    return {name: start_row(str(ELF_CORPUS / name)) for name in BUILDS}


def test_starts_of_the_stripped_compiled_corpus(rows):
    """Every true start is found, in the right state; the false ones are
    libgcc's division entry `.divsi3_skip_div0_test`, which `bl` calls but
    no function symbol names (a label), one a build. With the symbols,
    exactly the symbols' starts."""
    for name, row in rows.items():
        bare, full = row["stripped"], row["symbols"]
        assert bare["hit"] == bare["true"] > 100 and bare["wrong_state"] == 0, name
        assert bare["false"] <= 1, (name, bare["false_addresses"])
        assert full["hit"] == full["found"] == full["true"] and full["false"] == 0, name
    true, false, found = (sum(row["stripped"][key] for row in rows.values()) for key in ("true", "false", "found"))
    assert false / found < 0.01 and true >= 1200


def test_a_stripped_file_is_read_as_the_stripped_view(tmp_path):
    """The in-memory reading (`.symtab` ignored) finds what discovery finds
    in the file `arm-linux-gnueabihf-strip` writes."""
    assert shutil.which(STRIP), f"{STRIP} not installed (make toolchains)"
    source = ELF_CORPUS / "clang-O2-nofp.elf"
    copy = tmp_path / "stripped.elf"
    subprocess.run([STRIP, "-o", str(copy), str(source)], check=True)
    image = open_elf(str(copy))
    assert not any(section.name == ".symtab" for section in image.elf.iter_sections())
    view = replace(open_elf(str(source)), stripped=True)
    assert found_starts(image) == found_starts(view)
    measured = compared(true_starts(open_elf(str(source))), found_starts(image), {})
    assert measured["hit"] == measured["true"] and measured["false"] <= 1


def test_the_table_has_a_row_per_build_and_the_total(rows):
    lines = table_lines([{"build": name, **row} for name, row in rows.items()])
    assert len(lines) == 2 + len(BUILDS) + 1 and lines[-1].startswith("| **all** | 1,2")
    assert "100.00%" in lines[-1]


def test_the_stripped_tables_are_made_from_the_stripped_reading(monkeypatch):
    """`make stripped`'s second run really reads the build without its
    symbols (a path that named another file would verify the same tables
    twice, and find no cost)."""
    import harness.stripped as stripped
    from harness.elf_program import program_from_elf

    program = program_from_elf(str(ELF_CORPUS / "gcc-O2-nofp.elf"), "entry")
    given = []
    monkeypatch.setattr(stripped, "build_unwinders", lambda read, names: given.append(read) or [])
    stripped._read_stripped(program.name, program)
    assert program.code_map.spans and not given[0].code_map.spans  # its function symbols gone
    assert given[0].code_map.ranges == program.code_map.ranges  # the same code, where it was
