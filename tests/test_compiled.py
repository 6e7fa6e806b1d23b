"""The committed compiled corpus (corpus/elf): it runs to its checksums, and
where unwinding fails outside epilogues, the compiler's CFI is at fault at
exactly the places listed here (README, "Compiler findings")."""

import hashlib
import json
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest

from harness.elf_program import program_from_elf
from harness.formats import chrome_v2
from harness.formats.chrome_v2 import V2Reader
from harness.formats.chrome_v2.encoder import cover_text
from harness.formats.chrome_v2.grouping import group_at_excursions
from harness.formats.chrome_v2.layout import serialize
from harness.formats.chrome_v2.tables import build_tables
from harness.unwind.registry import build_unwinders
from harness.verify.stops import verify_program

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus" / "elf"
BUILDS = json.loads((CORPUS / "manifest.json").read_text())["builds"]
BY_FILE = {b["file"]: b for b in BUILDS}

# A: GCC moves r7 (add.w r7, r7, #N ... mov sp, r7) while its CFA is still r7 + offset.
# B: a stack adjustment split in two instructions gets one row, after the second
#    (clang: sub.w sp, #N; sub sp, #M in prologues; GCC: add.w sp, #N; add sp, #M in epilogues).
# C: clang shrink-wraps sw_small; the frameless switch cases placed after its
#    mid-function `pop {r7, pc}` are still described with the frame's CFI row.
CLANG_V2_OUTSIDE_EPILOGUES = {
    "clang-O2-fp.elf": {("sw_small", 0x11932), ("sw_small", 0x11936), ("sw_small", 0x1193A),  # C
                        ("sw_small", 0x1193E)},
    "clang-O2-nofp.elf": {("frame256k_huge", 0x103F8), ("frame256k_live", 0x1058C),  # B
                          ("frame4k_big", 0x10646),  # B
                          ("sw_small", 0x117A0), ("sw_small", 0x117A4), ("sw_small", 0x117A8),  # C
                          ("sw_small", 0x117AC)},
}
GCC_DWARF = {
    "gcc-O0-fp.elf": {("frame256k_huge", 0x10840), ("frame256k_live", 0x10972), ("frame4k_big", 0x10B12)},  # A
    "gcc-O0-nofp.elf": {("frame256k_huge", 0x107EC), ("frame256k_live", 0x10904), ("frame4k_big", 0x10A7C),
                        ("frame4k_regs", 0x10BBE)},  # B
    "gcc-O2-fp.elf": {("frame256k_huge", 0x1045E), ("frame256k_live", 0x104A4), ("frame256k_live", 0x104A8),
                      ("frame4k_big", 0x10560), ("frame4k_big", 0x10562), ("frame4k_regs", 0x105B2),
                      ("frame4k_regs", 0x105B4)},  # A
    "gcc-O2-nofp.elf": {("frame256k_huge", 0x10414), ("frame256k_live", 0x1045C), ("frame4k_big", 0x10508)},  # B
    "gcc-Os-fp.elf": {("frame256k_huge", 0x103BC), ("frame256k_live", 0x103FE), ("frame4k_big", 0x1049E),
                      ("frame4k_big", 0x104A0), ("frame4k_regs", 0x104F4), ("frame4k_regs", 0x104F6)},  # A
    "gcc-Os-nofp.elf": {("frame256k_huge", 0x1038C), ("frame256k_live", 0x103D2), ("frame4k_big", 0x10464)},  # B
}


@lru_cache(maxsize=None)
def program(file: str):
    build = BY_FILE[file]
    return program_from_elf(str(CORPUS / file), build["entry"], build["expected_checksum"])


def test_manifest_matches_the_files():
    assert len(BUILDS) == 12
    for build in BUILDS:
        data = (CORPUS / build["file"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == build["sha256"], build["file"]


@pytest.mark.parametrize("file", sorted(BY_FILE))
def test_every_build_runs_to_its_checksum(file):
    # `entry` runs every program of the build and combines their checksums.
    result = verify_program(program(file), [])
    assert result.self_check_ok, (file, result.fault, result.result, result.expected)


def failures_with_cfi(file: str, unwinder: str):
    """Failures where the stop and the frame that went wrong both have CFI."""
    p = program(file)
    known = {f.name for f in p.functions}
    result = verify_program(p, build_unwinders(p, [unwinder]))
    assert result.self_check_ok
    return [f for f in result.failures if f.function in known and f.culprit in known]


@pytest.mark.parametrize("file", sorted(CLANG_V2_OUTSIDE_EPILOGUES))
def test_clang_O2_v2_fails_only_in_epilogues_or_where_clang_cfi_is_wrong(file):
    found = {(f.function, f.pc) for f in failures_with_cfi(file, "v2") if f.position != "epilogue"}
    assert found == CLANG_V2_OUTSIDE_EPILOGUES[file]


@pytest.mark.parametrize("file", sorted(GCC_DWARF))
def test_gcc_dwarf_fails_only_where_gcc_cfi_is_wrong(file):
    found = {(f.function, f.pc) for f in failures_with_cfi(file, "dwarf")}
    assert found == GCC_DWARF[file]


@pytest.mark.parametrize("file", sorted(BY_FILE))
def test_regrouped_entries_give_every_address_the_same_run(file):
    """Tables with synthesized epilogue rows, their entries regrouped at
    excursions (chrome_v2.grouping), against the same rows with an entry at
    each function start: the same run at every half-word of the text;
    `encode` keeps the smaller."""
    p = program(file)
    encoded = chrome_v2.encode(p.cfi["tables"], p.text_base, "synthesize", code_at=p.code, layout="chrome")
    at_starts = cover_text(encoded.functions, p.text_base)
    tables = [build_tables(entries, p.text_base) for entries in (group_at_excursions(at_starts), at_starts)]
    readers = [V2Reader.from_blob(serialize(t, "seed"), "seed") for t in tables]
    for offset in range(0, max(f.end for f in at_starts) - p.text_base, 2):
        grouped, plain = (r.run(r.lookup(offset).instruction_index) for r in readers)
        assert grouped == plain, f"{file} at {p.text_base + offset:#x}"
    assert len(tables[0].function_table) != len(tables[1].function_table)
    assert len(encoded.blob("chrome")) == min(len(serialize(t, "chrome")) for t in tables)


@pytest.mark.skipif(not all(shutil.which(t) for t in ("arm-none-eabi-gcc", "clang", "ld.lld", "gcc")),
                    reason="cross toolchains not installed (`make toolchains`)")
def test_rebuild_reproduces_the_committed_corpus(tmp_path):
    subprocess.run(["bash", str(ROOT / "generators" / "compiled" / "build.sh"), str(tmp_path)],
                   check=True, capture_output=True)
    for build in BUILDS:
        assert (tmp_path / build["file"]).read_bytes() == (CORPUS / build["file"]).read_bytes(), build["file"]
    assert json.loads((tmp_path / "manifest.json").read_text()) == json.loads((CORPUS / "manifest.json").read_text())
