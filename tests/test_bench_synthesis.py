"""bench's figures of rows from code: a binary's synthesis in a fresh
process (Chrome's, where `make chromium` fetched it)."""

from __future__ import annotations

from harness.bench.synthesis import CHROMIUM, chromium_binary, synthesis_binary, synthesis_of_binary
from harness.elf_program import elf_functions
from harness.formats.elf import open_elf
from harness.thumb.discovery import GAP


def test_a_binarys_synthesis_counts_its_functions_and_its_v2_bytes():
    path = synthesis_binary()
    found = synthesis_of_binary(str(path))
    functions = [f for f in elf_functions(open_elf(str(path)), from_code=True) if f.name != GAP]
    assert found["functions"] == len(functions) > 100
    assert 1 < found["bytes_per_function"] < 20 and found["peak_mb"] > 10
    assert found["functions_per_second"] == found["functions"] / found["seconds"]


def test_chromes_binary_is_measured_where_make_chromium_put_it(tmp_path, monkeypatch):
    monkeypatch.setenv("UNWIND_HARNESS_CACHE", str(tmp_path))
    assert chromium_binary() is None
    (tmp_path / CHROMIUM).parent.mkdir(parents=True)
    (tmp_path / CHROMIUM).write_bytes(b"\x7fELF")
    assert chromium_binary() == tmp_path / CHROMIUM
