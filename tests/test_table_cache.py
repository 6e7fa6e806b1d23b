"""harness.table_cache: tables from code kept on disk, never trusted blindly."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from harness import table_cache
from harness.elf_program import program_from_elf
from harness.unwind.registry import build_unwinders

ROOT = Path(__file__).resolve().parent.parent
ELF = ROOT / "corpus" / "elf" / "clang-O2-fp.elf"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty cache for the test, and no entry held in memory."""
    monkeypatch.setenv("UNWIND_HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(table_cache, "_held", {})
    return tmp_path / "cache" / "tables" / table_cache.source_digest()


def built(value: bytes | None):
    calls = []

    def build():
        calls.append(1)
        return value

    return build, calls


def forget() -> None:
    table_cache._held.clear()  # as a new process would start


def test_an_entry_is_built_once_and_read_back_by_a_later_process(cache):
    build, calls = built(b"table")
    assert table_cache.cached("k1", build) == b"table"
    forget()
    assert table_cache.cached("k1", build) == b"table"
    assert len(calls) == 1 and (cache / "k1.bin").is_file()
    nothing, calls = built(None)  # no table (no function found) is kept as such
    assert table_cache.cached("k2", nothing) is None
    forget()
    assert table_cache.cached("k2", nothing) is None and len(calls) == 1


@pytest.mark.parametrize("damage", ["truncated", "flipped", "empty"])
def test_a_damaged_entry_is_built_again_and_replaced(cache, damage):
    build, calls = built(b"the right table")
    table_cache.cached("k", build)
    forget()
    path = cache / "k.bin"
    data = path.read_bytes()
    path.write_bytes({"truncated": data[:-3], "flipped": data[:-1] + bytes([data[-1] ^ 1]), "empty": b""}[damage])
    assert table_cache.cached("k", build) == b"the right table" and len(calls) == 2
    assert path.read_bytes() == data


def test_a_cache_that_cannot_be_written_still_gives_the_table(tmp_path, monkeypatch):
    (tmp_path / "a file").write_text("not a directory")
    monkeypatch.setenv("UNWIND_HARNESS_CACHE", str(tmp_path / "a file"))
    monkeypatch.setattr(table_cache, "_held", {})
    build, calls = built(b"table")
    assert table_cache.cached("k", build) == b"table"
    forget()
    assert table_cache.cached("k", build) == b"table" and len(calls) == 2
    assert (tmp_path / "a file").read_text() == "not a directory"


def test_only_the_newest_sources_are_kept(cache):
    tables = cache.parent
    for age, name in enumerate(["old1", "old2", "old3", "old4"]):
        (tables / name).mkdir(parents=True)
        os.utime(tables / name, (1000 + age, 1000 + age))
    table_cache.cached("k", built(b"x")[0])
    kept = sorted(p.name for p in tables.iterdir())
    assert kept == sorted([table_cache.source_digest(), "old4", "old3"][:table_cache.KEPT_SOURCES])


def test_keys_tell_their_parts_apart():
    assert table_cache.key_of("ab", "c") != table_cache.key_of("a", "bc")
    assert table_cache.key_of(1, b"x") == table_cache.key_of("1", b"x")


def test_v2_code_from_the_cache_is_the_table_the_analysis_builds(cache):
    """The same blob cold, from disk, and a different entry for other code."""
    program = program_from_elf(str(ELF), "entry")
    cold = build_unwinders(program, ["v2-code"])[0].reader.tables
    assert len(list(cache.iterdir())) == 1
    forget()
    warm = build_unwinders(program, ["v2-code"])[0].reader.tables
    assert warm == cold
    (start, data), *rest = program.segments
    changed = replace(program, segments=((start, data[:-1] + bytes([data[-1] ^ 0xFF])), *rest))
    build_unwinders(changed, ["v2-code"])
    assert len(list(cache.iterdir())) == 2
