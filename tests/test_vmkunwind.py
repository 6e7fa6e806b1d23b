"""vmkunwind adapted to ARM32 (harness.formats.vmkunwind, harness.unwind.vmkunwind):
hand-checked bytes, each row rule and refusal, the reader's checks, the
step, and verification on generated and compiled programs."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from generators.corpus import generate_program
from harness.elf_program import program_from_elf
from harness.errors import CorruptTable, UnwindFailure
from harness.formats.vmkunwind import Inexpressible, VmkRow, VmkTable, dump_vmkunwind, encode_vmkunwind, vmk_row
from harness.program import CfiRow, FunctionCfi
from harness.registers import LR, SP
from harness.unwind.frame import Stack, make_frame
from harness.unwind.registry import build_unwinders
from harness.unwind.vmkunwind import VmkunwindUnwinder
from harness.verify.stops import verify_program

BASE = 0x1000
R7 = 7
ELF = Path(__file__).resolve().parent.parent / "corpus" / "elf"


def clang_frame(name: str, start: int, end: int) -> FunctionCfi:
    """push {r7, lr}; mov r7, sp; sub sp, #8 ... (clang's Thumb frame record)."""
    pushed = ((R7, -8), (LR, -4))
    return FunctionCfi(name, start, end, (
        CfiRow(start), CfiRow(start + 2, SP, 8, pushed), CfiRow(start + 4, R7, 8, pushed)))


def test_example_bytes_by_hand():
    encoded = encode_vmkunwind([clang_frame("f", 0x1000, 0x1010), clang_frame("g", 0x1014, 0x1020)], BASE)
    expected = bytes.fromhex(
        "08000000" "03000000"  # 8 ranges, 3 distinct rows
        "00000000" "02000000" "04000000" "10000000"  # f: entry, after push, r7-based; its end (a gap)
        "14000000" "16000000" "18000000" "20000000"  # g the same; past its end
        "0000" "0100" "0200" "ffff" "0000" "0100" "0200" "ffff"  # row indices, 0xffff: no row
        # (8 + 32 + 16 = 56 bytes: already a multiple of 4)
        "00000000" "0000" "0000"  # CFA = sp + 0, r7 unchanged, pc = lr
        "08000000" "0200" "0100"  # CFA = sp + 8, r7 at CFA - 8, pc at CFA - 4
        "08000080" "0200" "0100"  # CFA = r7 + 8 (bit 31), the same slots
    )
    assert encoded.blob == expected
    assert (encoded.ranges, encoded.rows, encoded.refused) == (8, 3, ())


@pytest.mark.parametrize("row, expected", [
    (CfiRow(0), VmkRow(False, 0, 0, 0)),
    (CfiRow(0, SP, 24, ((4, -12), (R7, -8), (LR, -4))), VmkRow(False, 24, 2, 1)),  # r4 is not kept
    (CfiRow(0, R7, 16, ((R7, -16), (LR, -12))), VmkRow(True, 16, 4, 3)),
    (CfiRow(0, SP, 1 << 20, ((LR, -4),)), VmkRow(False, 1 << 20, 0, 1)),  # a 1 MiB frame
])
def test_rows_keep_the_cfa_r7_and_the_return_address(row, expected):
    assert vmk_row(row) == expected


@pytest.mark.parametrize("row, reason", [
    (CfiRow(0, 11, 8, ((LR, -4),)), "CFA through r11"),
    (CfiRow(0, SP, 6), "CFA offset 6"),
    (CfiRow(0, SP, 8, ((LR, 4),)), "lr saved at CFA\\+4"),
    (CfiRow(0, SP, 8, ((R7, -6),)), "r7 saved at CFA-6"),
    (CfiRow(0, SP, 8, problem="DW_CFA_expression"), "DW_CFA_expression"),
])
def test_rows_the_triple_cannot_express_are_refused_with_the_reason(row, reason):
    with pytest.raises(Inexpressible, match=reason):
        vmk_row(row)


def test_a_refused_row_loses_its_range_only():
    f = FunctionCfi("f", 0x1000, 0x1010, (CfiRow(0x1000), CfiRow(0x1002, 11, 8), CfiRow(0x1004, SP, 8, ((LR, -4),))))
    encoded = encode_vmkunwind([f], BASE)
    table = VmkTable.from_blob(encoded.blob)
    assert [table.lookup_range(offset)[0] for offset in (0, 2, 4, 0x10)] == [
        VmkRow(False, 0, 0, 0), None, VmkRow(False, 8, 0, 1), None]
    assert encoded.refused == (("f", "0x1002: CFA through r11 (vmkunwind takes sp or r7)"),)


def test_lookup_gives_the_range_that_finds_the_same_row():
    table = VmkTable.from_blob(encode_vmkunwind([clang_frame("f", 0x1000, 0x1010)], BASE).blob)
    assert table.lookup_range(5) == (VmkRow(True, 8, 2, 1), 4, 0x10)
    assert table.lookup_range(0x10) == (None, 0x10, None)


@pytest.mark.parametrize("blob, message", [
    (b"\x01", "1 bytes; the two counts need 8"),
    (struct.pack("<II", 2, 0) + struct.pack("<II", 4, 2) + struct.pack("<HH", 0xFFFF, 0xFFFF), "does not ascend"),
    (struct.pack("<II", 1, 1) + struct.pack("<I", 0) + struct.pack("<HH", 1, 0) + bytes(8), "names row 1 of 1"),
    (struct.pack("<II", 1000, 1), "take 6016 bytes; the blob has 8"),
])
def test_corrupt_blobs_are_named(blob, message):
    with pytest.raises(CorruptTable, match=message) as error:
        VmkTable.from_blob(blob)
    assert "\n" not in str(error.value) and "vmkunwind" in str(error.value)


def test_dump_lists_each_range():
    table = VmkTable.from_blob(encode_vmkunwind([clang_frame("f", 0x1000, 0x1010)], BASE).blob)
    assert dump_vmkunwind(table, BASE).splitlines()[2:] == [
        "  0x1000: CFA = sp + 0, r7 unchanged, pc = lr",
        "  0x1002: CFA = sp + 8, r7 = [CFA - 8], pc = [CFA - 4]",
        "  0x1004: CFA = r7 + 8, r7 = [CFA - 8], pc = [CFA - 4]",
        "  0x1010: no row",
    ]


def unwinder() -> VmkunwindUnwinder:
    return VmkunwindUnwinder(VmkTable.from_blob(encode_vmkunwind([clang_frame("f", 0x1000, 0x1010)], BASE).blob), BASE)


def test_step_through_the_frame_record_restores_r7_and_the_return_address():
    stack = Stack(0x7000, struct.pack("<6I", 0xAA, 0xBB, 0x7100, 0x2345, 0, 0))  # r7 at 0x7008, lr at 0x700c
    caller = unwinder().step(make_frame(pc=0x1006, sp=0x7000, lr=0x9999, r7=0x7008), stack, True)
    assert (caller.pc, caller.sp, caller.r[R7]) == (0x2344, 0x7010, 0x7100)


def test_at_the_entry_the_return_address_is_lr_and_sp_stays():
    caller = unwinder().step(make_frame(pc=0x1000, sp=0x7000, lr=0x2345), Stack(0x7000, bytes(16)), True)
    assert (caller.pc, caller.sp) == (0x2344, 0x7000)


def test_a_caller_is_looked_up_in_its_call_and_outside_the_table_has_no_info():
    # A return address at f's end belongs to f's last call: looked up one byte back.
    stack = Stack(0x7000, struct.pack("<4I", 0, 0, 0x7100, 0x2345))
    caller = unwinder().step(make_frame(pc=0x1010, sp=0x7000, r7=0x7008), stack, False)
    assert caller.pc == 0x2344
    with pytest.raises(UnwindFailure, match="vmkunwind has no row for pc 0x1010") as failure:
        unwinder().step(make_frame(pc=0x1010, sp=0x7000), stack, True)
    assert failure.value.kind == "no_info"


@pytest.mark.parametrize("index", range(4))
def test_complete_cfi_unwinds_every_stop_of_generated_programs(index):
    """The generated programs' reference CFI describes every instruction,
    epilogues included: the triples lose nothing vmkunwind checks."""
    program = generate_program(0, index)
    result = verify_program(program, build_unwinders(program, ["vmkunwind"]))
    assert result.self_check_ok and result.stops > 100
    assert not result.failures


def test_on_compiled_code_it_fails_exactly_where_the_cfi_itself_does():
    """clang's CFI has no epilogue rows (and a few wrong rows in bodies):
    vmkunwind, built from it, fails at the very stops where interpreting
    that CFI directly (`dwarf`) fails, and nowhere else."""
    program = program_from_elf(str(ELF / "clang-O2-nofp.elf"), "entry")
    result = verify_program(program, build_unwinders(program, ["vmkunwind", "dwarf"]))
    failing = {name: {f.stop for f in result.failures if f.unwinder == name} for name in ("vmkunwind", "dwarf")}
    assert result.self_check_ok and failing["vmkunwind"]
    assert failing["vmkunwind"] == failing["dwarf"]
    assert "epilogue" in {f.position for f in result.failures}
