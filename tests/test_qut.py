"""QUT (harness.formats.qut, harness.unwind.qut): each instruction form on
annotated bytes, the encoder's collapsing of CFI rows and EHABI runs, the
table's bytes and the reader's checks, the step, and verification."""

from __future__ import annotations

import struct
from dataclasses import replace
from pathlib import Path

import pytest

from generators.corpus import generate_program
from harness.elf_program import program_from_elf
from harness.errors import CorruptTable, UnwindFailure
from harness.formats import ehabi
from harness.formats.qut import (
    FrameRecord,
    Inexpressible,
    Load,
    Mark,
    QutTable,
    SetVsp,
    VspAdd,
    VspSet,
    decode_run,
    dump_qut,
    encode_from_cfi,
    exidx_run,
    state_run,
)
from harness.program import CfiRow, FunctionCfi
from harness.registers import LR, PC, SP
from harness.unwind.frame import Stack, make_frame
from harness.unwind.qut import QutUnwinder, rule_of_ops
from harness.unwind.registry import build_unwinders
from harness.verify.stops import verify_program

BASE = 0x1000
END = Mark("end")
ELF = Path(__file__).resolve().parent.parent / "corpus" / "elf"


@pytest.mark.parametrize("hex_bytes, ops", [
    ("0a 99", (VspAdd(40),)),  # 00nnnnnn: vsp += n << 2
    ("4a 99", (VspAdd(-40),)),  # 01nnnnnn: vsp -= n << 2
    ("80 99", (SetVsp(7),)),  # vsp = r7
    ("81 99", (FrameRecord(7),)),  # vsp = r7 + 8, lr = [vsp - 4], r7 = [vsp - 8]
    ("82 99", (SetVsp(11),)), ("83 99", (FrameRecord(11),)), ("84 99", (SetVsp(SP),)),
    ("85 03 99", (SetVsp(7, 12),)),  # vsp = r7 + (3 << 2)
    ("86 7f 99", (SetVsp(11, 508),)),  # the largest one-byte operand
    ("95 02 99", (SetVsp(10, 8),)),  # vsp = r10 + 8 (ART's JNI frames)
    ("96 80 01 99", (VspSet(128),)),  # vsp = SLEB128 128
    ("97 99", (Mark("dex pc"),)),
    ("a5 b2 c1 d0 ef 99", (Load(4, 20), Load(7, 8), Load(10, 4), Load(11, 0), Load(LR, 60))),
    ("f9 c0 00 99", (Load(7, 64),)), ("fa 40 99", (Load(10, -64),)),  # SLEB128 64, then -64
    ("fb 10 fc 10 fd 10 fe 10 99", (Load(11, 16), Load(SP, 16), Load(LR, 16), Load(PC, 16))),
    ("ff 80 02 99", (VspAdd(256),)),  # vsp += SLEB128 256
])
def test_each_instruction_form_decodes(hex_bytes, ops):
    assert decode_run(bytes.fromhex(hex_bytes), 0) == (*ops, END)


def test_finish_ends_a_run_too():
    assert decode_run(bytes.fromhex("0a 9f 0b"), 0) == (VspAdd(40), Mark("finish"))


@pytest.mark.parametrize("hex_bytes, message", [
    ("87 99", "run \\(byte 0\\): reserved instruction byte 0x87"),
    ("0a f0 99", "run \\(byte 1\\): reserved instruction byte 0xf0"),
    ("0a", "no end of instructions"),
    ("85 80 99", "operand byte missing or above 0x7f"),
    ("ff 80", "SLEB128 operand runs past the run"),
])
def test_bad_runs_are_named(hex_bytes, message):
    with pytest.raises(CorruptTable, match=message):
        decode_run(bytes.fromhex(hex_bytes), 0, "run")


@pytest.mark.parametrize("cfa_reg, cfa_offset, saved, hex_bytes", [
    (SP, 0, {}, "99"),  # at an entry: nothing to do, pc = lr
    (SP, 16, {4: -16, 7: -8, LR: -4}, "04 a4 b2 e1 99"),  # r5, r6 are not QUT's: not loaded
    (7, 8, {7: -8, LR: -4}, "81 99"),  # clang's frame record, one byte
    (7, 8, {4: -20, 7: -8, LR: -4}, "81 a5 99"),
    (7, 16, {LR: -4}, "85 04 e1 99"),
    (SP, 1024, {LR: -4}, "ff 80 08 e1 99"),  # vsp += 1024 needs SLEB128
    (SP, 8, {11: -100, LR: -4}, "02 fb e4 00 e1 99"),  # r11 beyond 60 bytes: the long form
])
def test_states_collapse_to_one_vsp_rule_and_loads(cfa_reg, cfa_offset, saved, hex_bytes):
    assert state_run(cfa_reg, cfa_offset, saved) == bytes.fromhex(hex_bytes)


@pytest.mark.parametrize("cfa_reg, cfa_offset, saved, reason", [
    (9, 8, {}, "CFA r9\\+8"),
    (SP, 6, {}, "not a multiple of 4"),
    (SP, 100, {4: -100}, "QUT reaches r4 60 bytes below the CFA at most"),
    (SP, 8, {LR: 4}, "a word below the CFA"),
])
def test_states_qut_cannot_express_are_refused(cfa_reg, cfa_offset, saved, reason):
    with pytest.raises(Inexpressible, match=reason):
        state_run(cfa_reg, cfa_offset, saved)


def test_an_ehabi_run_collapses_as_the_seed_describes():
    """The seed's example: vsp += 28; vsp += 256; pop {r4-r11, lr} is one
    offset (28 + 256 + 36 = 320) and one load per register QUT keeps."""
    run = exidx_run((ehabi.VspAdd(28), ehabi.VspAdd(256), ehabi.Pop((4, 5, 6, 7, 8, 9, 10, 11, LR)), ehabi.FINISH))
    assert decode_run(run, 0) == (VspAdd(320), Load(4, 36), Load(7, 24), Load(10, 12), Load(11, 8), Load(LR, 4), END)
    with pytest.raises(Inexpressible):
        exidx_run((ehabi.REFUSE,))


def framed(name: str, start: int, end: int) -> FunctionCfi:
    record = ((7, -8), (LR, -4))
    return FunctionCfi(name, start, end, (CfiRow(start), CfiRow(start + 2, SP, 8, record),
                                          CfiRow(start + 4, 7, 8, record), CfiRow(start + 6, 7, 8, ((4, -12),) + record)))


def test_table_bytes_by_hand():
    encoded = encode_from_cfi([framed("f", 0x1000, 0x1010)], BASE)
    assert encoded.blob == bytes.fromhex(
        "05000000"  # five entries
        "00000000" "99999980"  # +0: inline (bit 31): end, padded with ends (bits 23-16 first)
        "02000000" "00000000"  # +2: vsp += 8; r7 = [vsp - 8]; lr = [vsp - 4]; end: 4 bytes, at offset 0
        "04000000" "99998180"  # +4: the frame record and end, inline
        "06000000" "99a38180"  # +6: the frame record; r4 = [vsp - 12]; end
        "10000000" "01000000"  # the function's end: no entry
        "02b2e199"  # the instruction bytes
    )
    table = QutTable.from_blob(encoded.blob)
    assert [table.lookup_range(offset)[0] for offset in (0, 2, 4, 6, 0x10)] == [
        (END,), (VspAdd(8), Load(7, 8), Load(LR, 4), END), (FrameRecord(7), END), (FrameRecord(7), Load(4, 12), END),
        None]
    assert encoded.source == "CFI" and not encoded.refused


def test_runs_longer_than_three_bytes_are_stored_once_in_the_instruction_bytes():
    row = CfiRow(0, SP, 1024, ((4, -12), (LR, -4)))
    functions = [FunctionCfi(name, start, start + 8, (replace(row, address=start),))
                 for name, start in (("f", 0x1000), ("g", 0x1010))]
    blob = encode_from_cfi(functions, BASE).blob
    count = struct.unpack_from("<I", blob)[0]
    words = struct.unpack_from(f"<{2 * count}I", blob, 4)
    assert [words[i] for i in range(1, 2 * count, 2)] == [0, 1, 0, 1]  # the same run at offset 0; ends
    assert blob[4 + 8 * count:] == bytes.fromhex("ff 80 08 a3 e1 99")


@pytest.mark.parametrize("blob, message", [
    (b"\x01", "the entry count needs 4"),
    (struct.pack("<I", 3), "3 entries need 24 bytes"),
    (struct.pack("<5I", 2, 8, 1, 4, 1), "does not ascend"),
    (struct.pack("<3I", 1, 0, 9) + b"\x99", "run offset 9 is past the 1 instruction bytes"),
    (struct.pack("<3I", 1, 0, 0x80870000), "reserved instruction byte 0x87"),
])
def test_corrupt_tables_are_named(blob, message):
    with pytest.raises(CorruptTable, match=message) as error:
        QutTable.from_blob(blob)
    assert "\n" not in str(error.value) and "qut" in str(error.value)


def test_dump_lists_each_entry():
    table = QutTable.from_blob(encode_from_cfi([framed("f", 0x1000, 0x1010)], BASE).blob)
    assert dump_qut(table, BASE).splitlines()[2:] == [
        "  0x1000: end", "  0x1002: vsp += 8; r7 = [vsp - 8]; lr = [vsp - 4]; end",
        "  0x1004: vsp = r7 + 8, lr = [vsp - 4], r7 = [vsp - 8]; end",
        "  0x1006: vsp = r7 + 8, lr = [vsp - 4], r7 = [vsp - 8]; r4 = [vsp - 12]; end", "  0x1010: no entry"]


def unwinder() -> QutUnwinder:
    return QutUnwinder(QutTable.from_blob(encode_from_cfi([framed("f", 0x1000, 0x1010)], BASE).blob), BASE, "CFI")


def test_step_through_a_frame_record_restores_r4_r7_and_the_return_address():
    stack = Stack(0x7000, struct.pack("<6I", 0x44, 0x7100, 0x2345, 0, 0, 0))  # r4, r7, lr from 0x7000
    caller = unwinder().step(make_frame(pc=0x1008, sp=0x7000, lr=0x9999, r7=0x7004), stack, True)
    assert (caller.pc, caller.sp, caller.r[4], caller.r[7]) == (0x2344, 0x700C, 0x44, 0x7100)


def test_at_the_entry_the_return_address_is_lr_and_outside_there_is_no_entry():
    caller = unwinder().step(make_frame(pc=0x1000, sp=0x7000, lr=0x2345), Stack(0x7000, bytes(16)), True)
    assert (caller.pc, caller.sp) == (0x2344, 0x7000)
    with pytest.raises(UnwindFailure, match="QUT \\(from CFI\\) has no entry for pc 0x1010") as failure:
        unwinder().step(make_frame(pc=0x1010, sp=0x7000), Stack(0x7000, bytes(16)), True)
    assert failure.value.kind == "no_info"


def test_finish_says_outermost_and_the_kernel_leaves_odd_runs_to_step():
    table = QutTable([0], [(VspAdd(8), Mark("finish"))])
    with pytest.raises(UnwindFailure, match="outermost"):
        QutUnwinder(table, BASE, "CFI").step(make_frame(pc=0x1002, sp=0x7000), Stack(0x7000, bytes(16)), True)
    assert rule_of_ops((VspAdd(8), Mark("finish"))) is None
    assert rule_of_ops((Load(7, 8), VspAdd(8), END)) is None  # a vsp change after a load
    assert rule_of_ops((VspSet(0x7000), END)) is None
    rule = rule_of_ops((SetVsp(7, 12), Load(LR, 4), END))
    assert (rule.base, rule.offset, rule.loads, rule.pc_from_lr) == (7, 12, ((LR, -4),), True)


@pytest.mark.parametrize("index", range(3))
def test_generated_programs_unwind_at_every_stop(index):
    program = generate_program(0, index)
    qut = build_unwinders(program, ["qut"])
    result = verify_program(program, qut)
    assert qut[0].source == "CFI" and result.self_check_ok and result.stops > 100
    assert not result.failures


def test_from_exidx_alone_it_fails_only_where_exidx_does():
    """A build without CFI: QUT comes from the EXIDX, which describes each
    function's body only. It checks fewer registers than `exidx` (r4, r7,
    r10, r11), so it fails at a subset of exidx's stops."""
    program = program_from_elf(str(ELF / "gcc-O2-nofp.elf"), "entry")
    program = replace(program, cfi={flavour: () for flavour in program.cfi})
    unwinders = build_unwinders(program, ["qut", "exidx"])
    result = verify_program(program, unwinders)
    failing = {name: {f.stop for f in result.failures if f.unwinder == name} for name in ("qut", "exidx")}
    assert unwinders[0].source == "EXIDX" and result.self_check_ok
    assert failing["qut"] and failing["qut"] <= failing["exidx"]
