"""DWARF CFI reading: conversion of synthetic rules, real GCC/clang ELFs, bad ELFs."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from elftools.dwarf.callframe import FDE, CFARule, RegisterRule
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.errors import ElfError
from harness.formats.dwarf_cfi import function_cfi, read_cfi
from harness.formats.elf import function_symbols, open_elf, text_base
from harness.program import TRACKED_REGS, CfiRow
from harness.registers import DWARF_D0, LR, SP

FIXTURES = Path(__file__).resolve().parent.parent / "corpus" / "fixtures"
FIXTURE_FILES = sorted(FIXTURES.glob("*.elf"))
needs_fixtures = pytest.mark.skipif(not FIXTURE_FILES, reason=f"no fixtures in {FIXTURES}")

START, END = 0x1000, 0x1040
D8 = DWARF_D0 + 8


def off(n: int) -> RegisterRule:
    return RegisterRule(RegisterRule.OFFSET, n)


def sp(n: int) -> CFARule:
    return CFARule(reg=SP, offset=n)


def convert(*lines):
    return function_cfi("f", START, END, lines)


def pushed(*rules_after_push):
    """A function start row, then one row at START+2 with the given rules."""
    return convert((START, sp(0), {}), (START + 2, sp(16), dict(rules_after_push)))


# --- synthetic rules -------------------------------------------------------


def test_offset_rules_become_sorted_saves():
    fn = pushed((LR, off(-4)), (4, off(-8)))
    assert fn.rows == (CfiRow(START), CfiRow(START + 2, SP, 16, ((4, -8), (LR, -4))))
    assert fn.problems == ()


def test_thumb_bit_is_cleared_from_row_addresses():
    fn = convert((START | 1, sp(0), {}), (START + 3, sp(8), {LR: off(-4)}))
    assert [r.address for r in fn.rows] == [START, START + 2]


def test_d_registers_in_dwarf_256_numbering_are_kept():
    fn = pushed((D8, off(-16)), (D8 + 1, off(-8)))
    assert fn.rows[1].saved == ((D8, -16), (D8 + 1, -8))


def test_legacy_s_register_pairs_become_d_registers():
    # GCC: vpush {d8, d9} is described as s16..s19 (DWARF 80..83).
    fn = pushed((80, off(-24)), (81, off(-20)), (82, off(-16)), (83, off(-12)))
    assert fn.rows[1].saved == ((D8, -24), (D8 + 1, -16))
    assert fn.problems == ()


def test_lone_s_register_makes_the_row_unusable():
    fn = pushed((80, off(-24)), (LR, off(-4)))
    assert "d8 not saved as one pair (s16: cfa-24, s17: no rule)" in fn.rows[1].problem
    assert fn.problems == ("0x1002: d8 not saved as one pair (s16: cfa-24, s17: no rule)",)


def test_s_register_halves_not_adjacent_make_the_row_unusable():
    fn = pushed((80, off(-24)), (81, off(-12)))
    assert "d8 not saved as one pair" in fn.rows[1].problem


def test_untracked_legacy_s_pair_is_noted_not_stored():
    fn = pushed((64, off(-8)), (65, off(-4)))
    assert fn.rows[1].saved == () and fn.rows[1].problem is None
    assert fn.problems == ("0x1002: save of d0 ignored (not a callee-saved register)",)


def test_expression_cfa_is_a_row_problem():
    fn = convert((START, sp(0), {}), (START + 4, CFARule(expr=[0x7D, 0x10]), {}))
    row = fn.rows[1]
    assert (row.problem, row.cfa_reg, row.cfa_offset) == ("CFA is a DWARF expression", SP, 0)
    assert fn.problems == ("0x1004: CFA is a DWARF expression",)


@pytest.mark.parametrize(
    "rule, message",
    [
        (RegisterRule(RegisterRule.REGISTER, 5), "r4 kept in r5"),
        (RegisterRule(RegisterRule.VAL_OFFSET, -8), "r4 = cfa-8 (val_offset rule)"),
        (RegisterRule(RegisterRule.EXPRESSION, [0x7D, 0]), "r4 saved at a DWARF expression"),
        (RegisterRule(RegisterRule.VAL_EXPRESSION, [0x7D, 0]), "r4 is a DWARF expression value"),
        (RegisterRule(RegisterRule.ARCHITECTURAL), "r4 has an unsupported architectural rule"),
    ],
)
def test_non_offset_rule_for_tracked_register_is_a_row_problem(rule, message):
    fn = pushed((4, rule), (LR, off(-4)))
    assert fn.rows[1].problem == message
    assert fn.problems == (f"0x1002: {message}",)


def test_untracked_save_is_noted_but_row_stays_usable():
    fn = pushed((12, off(-8)), (LR, off(-4)))
    assert fn.rows[1] == CfiRow(START + 2, SP, 16, ((LR, -4),))
    assert fn.problems == ("0x1002: save of r12 ignored (not a callee-saved register)",)


def test_same_value_and_undefined_mean_not_saved():
    fn = pushed(
        (4, RegisterRule(RegisterRule.SAME_VALUE)), (LR, RegisterRule(RegisterRule.UNDEFINED))
    )
    assert fn.rows[1].saved == () and fn.rows[1].problem is None
    assert fn.problems == ("0x1002: r14 is undefined (outermost frame)",)


def test_identical_consecutive_rows_are_merged_and_problems_counted():
    state = {12: off(-8), LR: off(-4)}
    fn = convert((START, sp(0), {}), (START + 2, sp(8), state), (START + 6, sp(8), state),
                 (START + 8, sp(16), state))
    assert [r.address for r in fn.rows] == [START, START + 2, START + 8]
    assert fn.problems == ("0x1002: save of r12 ignored (not a callee-saved register) (2 rows)",)


def test_last_line_at_an_address_is_the_one_in_force():
    fn = convert((START, sp(0), {}), (START + 2, sp(4), {}), (START + 2, sp(8), {LR: off(-4)}))
    assert fn.rows[1] == CfiRow(START + 2, SP, 8, ((LR, -4),))


def test_rows_outside_the_function_or_out_of_order_are_dropped_with_a_problem():
    fn = convert(
        (START, sp(0), {}), (START + 8, sp(8), {}), (START + 4, sp(4), {}), (END, sp(0), {})
    )
    assert [r.address for r in fn.rows] == [START, START + 8]
    assert fn.problems == (
        "0x1004: row before the previous row ignored",
        "0x1040: row outside the function ignored",
    )


def test_missing_first_row_gives_an_unusable_row_at_start():
    fn = convert((START + 2, sp(8), {}))
    assert fn.rows[0] == CfiRow(START, problem="no CFI row at the function start")
    assert fn.rows[1].address == START + 2


# --- committed fixtures (GCC 12 / clang 14, see corpus/fixtures/build.sh) ----


def by_name(path: Path) -> dict:
    return {f.name: f for f in read_cfi(open_elf(str(path)))}


@needs_fixtures
@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.stem)
def test_fixture_every_fde_becomes_a_well_formed_function(path):
    image = open_elf(str(path))
    functions = read_cfi(image)
    fdes = [e for e in image.elf.get_dwarf_info().CFI_entries() if isinstance(e, FDE)]
    symbols = {address: name for address, _, name in function_symbols(image)}
    assert len(functions) == len(fdes)
    assert [f.start for f in functions] == sorted(f.start for f in functions)
    for fn in functions:
        assert symbols[fn.start] == fn.name
        assert fn.rows[0] == CfiRow(fn.start)  # the CIE says cfa=sp+0, nothing saved
        addresses = [r.address for r in fn.rows]
        assert addresses == sorted(set(addresses))
        assert fn.start <= addresses[-1] < fn.end
        for row in fn.rows:
            assert row.problem is None, row.describe()
            assert row.saved == tuple(sorted(row.saved))
            assert {reg for reg, _ in row.saved} <= TRACKED_REGS
        # GCC's `push {r3, lr}` (to keep sp 8-byte aligned) is the only ignored save.
        assert all("save of r3 ignored" in p for p in fn.problems), fn.problems


@needs_fixtures
def test_gcc_vfp_s_register_pairs_map_to_d8_d15():
    many_d = by_name(FIXTURES / "vfp-gcc-fp.elf")["many_d"]
    saves = set().union(*(r.saved for r in many_d.rows))
    assert {(DWARF_D0 + k, -72 + 8 * (k - 8)) for k in range(8, 16)} <= saves


@needs_fixtures
def test_clang_vfp_uses_dwarf_d_numbers():
    keep_live = by_name(FIXTURES / "vfp-clang-nofp.elf")["keep_live"]
    d8_d13 = tuple((DWARF_D0 + k, -56 + 8 * (k - 8)) for k in range(8, 14))
    assert keep_live.rows[-1].saved[-6:] == d8_d13


@needs_fixtures
@pytest.mark.parametrize("path", sorted(FIXTURES.glob("alloca-*.elf")), ids=lambda p: p.stem)
def test_alloca_uses_r7_as_cfa_register(path):
    use_alloca = by_name(path)["use_alloca"]
    assert any(row.cfa_reg == 7 for row in use_alloca.rows)


@needs_fixtures
def test_gcc_remember_restore_state_is_applied():
    # consume: epilogue on an early-return path (cfa back to sp+0), then
    # restore_state brings the body's cfa=r7+4 back for the rest.
    consume = by_name(FIXTURES / "alloca-gcc-fp.elf")["consume"]
    cfas = [(r.cfa_reg, r.cfa_offset) for r in consume.rows]
    assert cfas == [(SP, 0), (SP, 4), (7, 4), (SP, 4), (SP, 0), (7, 4), (SP, 4), (SP, 0)]


@needs_fixtures
def test_elf_helpers_on_a_fixture():
    image = open_elf(str(FIXTURES / "calls-gcc-fp.elf"))
    assert text_base(image) == 0x10000
    symbols = function_symbols(image)
    assert symbols == sorted(symbols)
    assert all(address % 2 == 0 for address, _, _ in symbols)
    assert "entry" in {name for _, _, name in symbols}


# --- assembled at test time: .eh_frame and unusual CFI ---------------------

ASM_BOTH = """
    .syntax unified
    .thumb
    .cfi_sections .eh_frame, .debug_frame
    .text
    .global both
    .type both, %function
    .thumb_func
both:
    .cfi_startproc
    push {r4, lr}
    .cfi_def_cfa_offset 8
    .cfi_offset 4, -8
    .cfi_offset 14, -4
    mov r4, r12
    .cfi_register 5, 12
    .cfi_undefined 14
    .cfi_escape 0x0f, 0x02, 0x7d, 0x10
    nop
    pop {r4, pc}
    .cfi_endproc
    .size both, .-both
"""

ASM_EH_ONLY = """
    .syntax unified
    .thumb
    .cfi_sections .eh_frame
    .text
    .global eh_only
    .type eh_only, %function
    .thumb_func
eh_only:
    .cfi_startproc
    push {r4, lr}
    .cfi_def_cfa_offset 8
    .cfi_offset 4, -8
    .cfi_offset 14, -4
    pop {r4, pc}
    .cfi_endproc
    .size eh_only, .-eh_only
"""


@pytest.fixture(scope="module")
def assembled(tmp_path_factory) -> Path:
    tools = ("arm-none-eabi-as", "arm-none-eabi-ld")
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed")
    work = tmp_path_factory.mktemp("asm")
    objects = []
    for name, text in (("both", ASM_BOTH), ("eh", ASM_EH_ONLY)):
        (work / f"{name}.s").write_text(text)
        assemble = [tools[0], "-march=armv7-a", f"{name}.s", "-o", f"{name}.o"]
        subprocess.run(assemble, cwd=work, check=True)
        objects.append(f"{name}.o")
    link = [tools[1], "-Ttext=0x10000", "-e", "both", *objects, "-o", "t.elf"]
    subprocess.run(link, cwd=work, check=True)
    return work / "t.elf"


def test_eh_frame_is_read_and_debug_frame_wins_without_duplicates(assembled, tmp_path):
    # Change the first def_cfa_offset 8 of .eh_frame (the `both` FDE) to 12:
    # `both` must still come from .debug_frame.
    image = open_elf(str(assembled))
    eh = image.elf.get_section_by_name(".eh_frame")
    data = bytearray(assembled.read_bytes())
    at = data.index(b"\x0e\x08", eh["sh_offset"], eh["sh_offset"] + eh["sh_size"])
    data[at + 1] = 12
    patched = tmp_path / "patched.elf"
    patched.write_bytes(bytes(data))
    functions = read_cfi(open_elf(str(patched)))
    assert [f.name for f in functions] == ["both", "eh_only"]
    both, eh_only = functions
    assert both.rows[1] == CfiRow(0x10002, SP, 8, ((4, -8), (LR, -4)))
    assert eh_only.rows == (CfiRow(0x10008), CfiRow(0x1000A, SP, 8, ((4, -8), (LR, -4))))


def test_unusual_cfi_from_the_assembler(assembled):
    both = read_cfi(open_elf(str(assembled)))[0]
    assert both.rows[-1].address == 0x10004
    assert both.rows[-1].problem == "CFA is a DWARF expression; r5 kept in r12"
    assert both.problems == (
        "0x10004: CFA is a DWARF expression",
        "0x10004: r14 is undefined (outermost frame)",
        "0x10004: r5 kept in r12",
    )


# --- bad input -------------------------------------------------------------


def expect_elf_error(path: Path, fragment: str):
    with pytest.raises(ElfError) as info:
        read_cfi(open_elf(str(path)))
    message = str(info.value)
    assert str(path) in message and fragment in message and "\n" not in message


def test_missing_file(tmp_path):
    expect_elf_error(tmp_path / "nope.elf", "cannot read")


def test_not_an_elf(tmp_path):
    path = tmp_path / "junk.elf"
    path.write_bytes(b"this is not an ELF file at all\n" * 4)
    expect_elf_error(path, "not an ELF file")


@needs_fixtures
def test_truncated_elf(tmp_path):
    path = tmp_path / "short.elf"
    path.write_bytes(FIXTURE_FILES[0].read_bytes()[:100])
    expect_elf_error(path, "truncated or corrupt ELF")


def test_x86_elf():
    ls = Path("/bin/ls")
    if not ls.exists() or ls.read_bytes()[:4] != b"\x7fELF":
        pytest.skip("no host ELF at /bin/ls")
    expect_elf_error(ls, "not a 32-bit ARM ELF")


@needs_fixtures
def test_elf_without_cfi(tmp_path):
    # Rename .debug_frame in the section name table: same ELF, no CFI.
    source = FIXTURES / "calls-gcc-fp.elf"
    names = open_elf(str(source)).elf.get_section_by_name(".shstrtab")
    data = bytearray(source.read_bytes())
    at = data.index(b".debug_frame\0", names["sh_offset"])
    data[at : at + 12] = b".nodbg_frame"
    path = tmp_path / "nocfi.elf"
    path.write_bytes(bytes(data))
    expect_elf_error(path, "has no .debug_frame or .eh_frame")


@needs_fixtures
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=8))
def test_corrupt_debug_frame_gives_elf_error_or_functions(edits):
    source = FIXTURES / "vfp-gcc-fp.elf"
    section = open_elf(str(source)).elf.get_section_by_name(".debug_frame")
    data = bytearray(source.read_bytes())
    for position, value in edits:
        data[section["sh_offset"] + position % section["sh_size"]] = value
    with tempfile.NamedTemporaryFile(suffix=".elf") as f:
        f.write(data)
        f.flush()
        try:
            functions = read_cfi(open_elf(f.name))
        except ElfError as e:
            assert "corrupt .debug_frame" in str(e)
            return
    for fn in functions:
        assert fn.rows[0].address == fn.start
        assert all(fn.start <= r.address < fn.end for r in fn.rows)


def test_corrupt_debug_frame_names_section_and_byte(tmp_path):
    # An invalid CFA opcode (0x1c) as the first instruction of the first FDE
    # (at byte 16: length, CIE pointer, location and range, then instructions).
    source = FIXTURES / "calls-gcc-fp.elf"
    section = open_elf(str(source)).elf.get_section_by_name(".debug_frame")
    data = bytearray(source.read_bytes())
    data[section["sh_offset"] + 32] = 0x1C
    broken = tmp_path / "broken.elf"
    broken.write_bytes(bytes(data))
    with pytest.raises(ElfError) as caught:
        read_cfi(open_elf(str(broken)))
    message = str(caught.value)
    assert f"{broken}: corrupt .debug_frame near byte" in message
    assert "28 is not a valid DW_CFA" in message
