"""Conformance with what Chrome ships: one test per behaviour of Chrome's
own builders and unwinders that our `v1` reproduces, each naming the
upstream file and function whose behaviour it pins (Chromium's sources,
read for the facts; none of their code is here).

v1: build/android/gyp/extract_unwind_tables.py (the builder, as of its
last change, 2021) and base/trace_event/cfi_backtrace_android.cc (the
reader and unwinder). v2 (`v2-chrome` and the chrome layout):
build/android/gyp/create_unwind_table.py (the builder, 2023) and
base/profiler/chrome_unwinder_android_32.cc (ChromeUnwinderAndroid32).
"""

from __future__ import annotations

import struct

import pytest

from generators.corpus import DEFAULT_PROGRAMS, DEFAULT_SEED, generate_program
from harness.cli import main
from harness.elf_program import code_reader
from harness.errors import UnwindFailure
from harness.formats import chrome_v2, ehabi
from harness.formats.breakpad import StackCfi, read_symbol_file
from harness.formats.chrome_v1 import CANT_UNWIND, V1Table, encode_v1
from harness.formats.chrome_v2.chrome_builder import chrome_function_unwind
from harness.formats.chrome_v2.layout import serialize
from harness.formats.dwarf_cfi import read_cfi
from harness.formats.elf import open_elf, text_base
from harness.linux_verify.corpus import cache
from harness.manifest import ELF_CORPUS
from harness.program import CfiRow, FunctionCfi
from harness.registers import DWARF_D0, LR, SP
from harness.unwind.frame import Stack, make_frame
from harness.unwind.v1 import V1Unwinder
from harness.unwind.v2_chrome import ChromeV2Unwinder

BASE = 0x1000


def pushed(address: int, cfa: int, lr_at: int | None = -4) -> CfiRow:
    return CfiRow(address, SP, cfa, ((4, -8), (LR, lr_at)) if lr_at else ((4, -8),))


def function(name: str, start: int, end: int, *rows: CfiRow) -> FunctionCfi:
    return FunctionCfi(name, start, end, (CfiRow(start), *rows))


def push_then_sub(name: str, start: int, end: int) -> FunctionCfi:
    """push {r4, lr}; sub sp, #16."""
    return function(name, start, end, pushed(start + 2, 8), pushed(start + 4, 24))


# --- extract_unwind_tables.py -----------------------------------------------------------

def test_header_counts_index_entries():
    """_WriteCfiData writes the number of UNW_INDEX entries first (since
    October 2019; the byte size before), and ParseCFITables in
    cfi_backtrace_android.cc reads the tables' sizes from that count."""
    blob = encode_v1([push_then_sub("f", 0x1000, 0x1010)], BASE).blob
    (count,) = struct.unpack_from("<I", blob)
    assert count == 2 and len(blob) == 4 + 6 * count + 2 * (1 + 2 * 2)


def test_a_chrome_blob_loads():
    """A blob laid out by hand as ParseCFITables reads it: count, starts,
    indices, then UNW_DATA (count of rows, then offset and CFA | RA / 4)."""
    blob = struct.pack("<I3I3H5H", 3, 0x10, 0x40, 0x52, 0, CANT_UNWIND, CANT_UNWIND,
                       2, 2, 8 | 1, 6, 32)
    table = V1Table.from_blob(blob)
    assert table.starts == [0x10, 0x40, 0x52]
    assert [table.lookup(offset) for offset in (0x12, 0x16, 0x3F, 0x40, 0x45)] == [
        (8, 4), (32, 4), (32, 4), None, None]


def test_cant_unwind_entries_go_2_bytes_past_an_end_and_only_for_gaps_over_4_bytes():
    """_WriteCfiData: an entry of 0xFFFF at the previous function's end + 2
    where the next starts more than 4 bytes later; always one after the last."""
    functions = [push_then_sub("a", 0x1000, 0x1010), push_then_sub("b", 0x1014, 0x1020),
                 push_then_sub("c", 0x1030, 0x1040)]
    table = V1Table.from_blob(encode_v1(functions, BASE).blob)
    assert table.starts == [0x0, 0x14, 0x22, 0x30, 0x42]
    assert [rows is None for rows in table.rows] == [False, False, True, False, True]


@pytest.mark.parametrize("row, why", [
    (CfiRow(0x1008, 7, 16, ((LR, -4),)), "CFA through r7"),  # _GetCfaAndRaOffset: only `sp N +`
    (CfiRow(0x1008, SP, 0), "an epilogue"),  # CFA 0: _GetAllCfiRows drops the function
    (CfiRow(0x1008, SP, 24, ((4, -16), (LR, -4))), "changes no CFA"),  # no .cfa in the row: CFA 0
    (CfiRow(0x1008, SP, 32, ((4, -8),)), "back in lr"),  # `.ra: lr` is no `.cfa -N + ^`
    (CfiRow(0x1008, SP, 32, ((4, -8), (LR, -16))), "CFA-16"),  # RA offset 16 or more
])
def test_one_row_it_does_not_take_drops_the_whole_function(row, why):
    """_GetAllCfiRows clears a function's rows at the first row whose CFA is
    not `sp N +` with 0 < N <= 0xFFFF, or whose return address is not 4 to
    12 bytes below the CFA; no earlier row stays in force."""
    encoded = encode_v1([function("f", 0x1000, 0x1010, pushed(0x1002, 8), pushed(0x1004, 24), row)], BASE)
    assert not encoded.functions and why in encoded.refused[0][1]


def test_functions_over_0xffff_bytes_are_skipped():
    """_GetAllCfiRows skips an INIT record whose size exceeds 0xFFFF."""
    assert not encode_v1([push_then_sub("big", 0x1000, 0x1000 + 0x10000)], BASE).functions
    assert encode_v1([push_then_sub("ok", 0x1000, 0x1000 + 0xFFFF)], BASE).functions


def test_a_function_with_no_row_after_its_entry_gets_no_entry():
    """_GetAllCfiRows keeps a function only with a row after INIT."""
    encoded = encode_v1([function("leaf", 0x1000, 0x1008)], BASE)
    assert encoded.frameless == ("leaf",) and V1Table.from_blob(encoded.blob).starts == []


def test_the_return_address_is_written_where_it_changes_and_0_elsewhere():
    """_GetCfaAndRaOffset gives RA 0 for a row without a `.ra` rule, and
    FindCFIRowForPC keeps the last RA offset given."""
    encoded = encode_v1([push_then_sub("f", 0x1000, 0x1010)], BASE)
    assert [(r.cfa_offset, r.ra_offset) for r in encoded.functions[0].rows] == [(8, 4), (24, 0)]
    assert V1Table.from_blob(encoded.blob).lookup(0x6) == (24, 4)


def test_identical_function_data_is_stored_once():
    """_WriteCfiData keys each function's data by its rows and shares it."""
    one = encode_v1([push_then_sub("a", 0x1000, 0x1010)], BASE).blob
    two = encode_v1([push_then_sub("a", 0x1000, 0x1010), push_then_sub("b", 0x1010, 0x1020)], BASE).blob
    assert len(two) - len(one) == 6  # one more index entry, no more data


# --- cfi_backtrace_android.cc --------------------------------------------------------------

def test_a_pc_at_a_function_start_finds_nothing():
    """FindCFIRowForPC: lower_bound landing on the address itself fails."""
    table = V1Table.from_blob(encode_v1([push_then_sub("f", 0x1000, 0x1010)], BASE).blob)
    assert table.lookup(0x0) is None and table.lookup(0x2) == (8, 4)


def test_before_the_first_row_the_row_is_zero():
    """FindCFIRowForPC returns CFA 0 and RA 0 for a pc before the first
    stored row (release builds): Unwind then reads pc from [sp]."""
    late = function("late", 0x1000, 0x1010, pushed(0x1006, 8))
    table = V1Table.from_blob(encode_v1([late], BASE).blob)
    assert table.lookup(0x2) == (0, 0)


def test_the_return_address_is_looked_up_as_it_is():
    """CFIBacktraceAndroid::Unwind looks the caller's pc up unchanged (no
    pc - 1): a call that is its function's last instruction returns to the
    next function's first, where nothing is found."""
    functions = [push_then_sub("f", 0x1000, 0x1010), push_then_sub("g", 0x1010, 0x1020)]
    unwinder = V1Unwinder(V1Table.from_blob(encode_v1(functions, BASE).blob), BASE)
    assert unwinder.table.lookup(0x1010 - BASE) is None
    stack = Stack(0x7000, bytes(0x30))
    with pytest.raises(UnwindFailure) as caught:
        unwinder.step(make_frame(pc=0x1010, sp=0x7000, lr=0x2001), stack, innermost=False)
    assert caught.value.kind == "no_info"


# --- create_unwind_table.py (v2) -----------------------------------------------------------
# Rows as DWARF gives them (complete states); Chrome reads what dump_syms
# writes of them: the rules each row changes.

def chrome_runs(*rows: CfiRow, end: int = 0x1040) -> list[tuple[int, str]]:
    """(offset, run as hex) of one function at 0x1000 as Chrome's builder writes it."""
    unwind = chrome_function_unwind(FunctionCfi("f", 0x1000, end, (CfiRow(0x1000), *rows)))
    return [(u.offset, u.instructions.hex()) for u in unwind.address_unwinds]


def test_a_push_with_lr_pops_r4_to_rn_and_lr():
    """PushOrSubSpParser, then EncodePop: r4-r5 with lr is `a9` (10101nnn)."""
    assert chrome_runs(CfiRow(0x1002, SP, 12, ((4, -12), (5, -8), (LR, -4)))) == [(0, "b0"), (2, "a9b0")]


def test_a_pop_without_lr_takes_the_mask_form():
    """EncodePop never writes 10100nnn: r4-r5 alone are `80 03`."""
    assert chrome_runs(CfiRow(0x1002, SP, 8, ((4, -8), (5, -4))))[1] == (2, "8003b0")


def test_vfp_saves_are_stepped_over():
    """VPushParser: `vpush {d8}` moves vsp by 8; no VFP register is popped."""
    rows = (pushed(0x1002, 8), CfiRow(0x1004, SP, 16, ((4, -8), (LR, -4), (DWARF_D0 + 8, -16))))
    assert chrome_runs(*rows)[2] == (4, "01a8b0")


def test_r0_to_r3_are_stepped_over():
    """PushOrSubSpParser leaves r0-r3 out (varargs: `push {r0-r3}`) and
    steps vsp over their slots."""
    row = CfiRow(0x1002, SP, 16, ((0, -16), (1, -12), (2, -8), (3, -4)))
    assert chrome_runs(row)[1] == (2, "03b0")


def test_where_a_register_was_saved_is_not_read():
    """PushOrSubSpParser pops the registers a row saves from vsp as it
    stands, in ascending order: a store into the frame (r5 at CFA - 16,
    with no change of the CFA) is popped from the bottom all the same."""
    rows = (pushed(0x1002, 8), pushed(0x1004, 24), CfiRow(0x1006, SP, 24, ((4, -8), (5, -16), (LR, -4))))
    assert chrome_runs(*rows)[3] == (6, "8002" "03" "a8b0")


def test_a_row_no_form_matches_leaves_the_row_before_in_force():
    """ParseAddressCfi drops an unrecognized row (`r4: r4`, a register
    restored; a DWARF expression): its addresses keep the run before."""
    rows = (pushed(0x1002, 8), CfiRow(0x1004, SP, 8, ((LR, -4),)), CfiRow(0x1006, problem="DWARF expression"))
    assert chrome_runs(*rows) == [(0, "b0"), (2, "a8b0")]


def test_an_epilogue_and_every_row_after_it_are_left_out():
    """GenerateUnwinds stops at the first row whose CFA falls below the
    one before (`sp 24` -> `sp 8`): later rows, body ones too, are gone."""
    rows = (pushed(0x1002, 8), pushed(0x1004, 24), pushed(0x100a, 8), pushed(0x100c, 24))
    assert chrome_runs(*rows) == [(0, "b0"), (2, "a8b0"), (4, "03a8b0")]


def test_a_cfa_through_a_register_sets_vsp_from_it():
    """StoreSpParser: `.cfa: r7 8 +` after `push {r4-r7, lr}` (CFA sp + 20)
    is `vsp = r7; vsp -= 12`, then the push undone."""
    saves = ((4, -20), (5, -16), (6, -12), (7, -8), (LR, -4))
    rows = (CfiRow(0x1002, SP, 20, saves), CfiRow(0x1004, 7, 8, saves))
    assert chrome_runs(*rows)[2] == (4, "97" "42" "ab" "b0")


def test_a_row_no_opcode_can_write_is_left_out():
    """A CFA offset that is no multiple of 4 (corrupt CFI) is a vsp
    adjustment no opcode holds: Chrome's builder would stop on an assert;
    ours leaves the row out, as a row no form matches, and goes on."""
    rows = (pushed(0x1002, 8), CfiRow(0x1004, SP, 17, ((LR, -4),)), CfiRow(0x1006, SP, 8, ((LR, -4),)))
    unwind = chrome_function_unwind(FunctionCfi("f", 0x1000, 0x1040, (CfiRow(0x1000), *rows)))
    assert [(u.offset, u.instructions.hex()) for u in unwind.address_unwinds] == [(0, "b0"), (2, "a8b0"), (6, "a8b0")]
    assert unwind.dropped_rows == 1


def test_a_function_whose_first_row_is_not_the_return_to_lr_gets_no_entry():
    """GenerateUnwinds asserts the first row is `.cfa: sp 0 + .ra: lr`;
    our builder leaves such a function to the gap filler instead."""
    odd = FunctionCfi("odd", 0x1000, 0x1010, (CfiRow(0x1000, SP, 8, ((LR, -4),)),))
    assert chrome_function_unwind(odd) is None


def test_its_input_is_breakpads_stack_cfi_and_an_unreadable_row_keeps_the_one_before():
    """ReadFunctionCfi reads `STACK CFI INIT` and `STACK CFI` records (the
    rules each row changes); ParseAddressCfi leaves out a row it cannot
    read, and the run before covers its addresses."""
    text = ("STACK CFI INIT 1000 40 .cfa: sp 0 + .ra: lr\n"
            "STACK CFI 1002 .cfa: sp 8 + .ra: .cfa -4 + ^ r4: .cfa -8 + ^\n"
            "STACK CFI 1004 .cfa: sp 8 + r5: .cfa 12 - ^\n")  # an expression of another form
    module = read_symbol_file(text, "chrome.sym")
    assert [(u.offset, u.instructions.hex()) for u in chrome_function_unwind(module.stack_cfi[0]).address_unwinds] \
        == [(0, "b0"), (2, "a8b0")]


def test_a_function_at_address_0_is_a_tombstone_and_skipped():
    """FilterToNonTombstoneCfi drops `STACK CFI INIT 0` and its records:
    the CFI of code the linker discarded (LLVM bug 47148)."""
    text = ("STACK CFI INIT 0 10 .cfa: sp 0 + .ra: lr\n"
            "STACK CFI 2 .cfa: sp 8 + .ra: .cfa -4 + ^ r4: .cfa -8 + ^\n"
            "STACK CFI INIT 20 10 .cfa: sp 0 + .ra: lr\n")
    assert [(f.start, f.records) for f in read_symbol_file(text, "chrome.sym").stack_cfi] == [
        (0x20, ((0x20, ".cfa: sp 0 + .ra: lr"),))]


def record_runs(*records: tuple[int, str]) -> list[tuple[int, str]]:
    """(offset, run as hex) Chrome's builder writes for one function's
    records, INIT (`.cfa: sp 0 + .ra: lr` at 0x1000) first."""
    cfi = StackCfi("f", 0x1000, 0x40, ((0x1000, ".cfa: sp 0 + .ra: lr"), *records))
    return [(u.offset, u.instructions.hex()) for u in chrome_function_unwind(cfi).address_unwinds]


PUSH_R4_LR = (0x1002, ".cfa: sp 8 + .ra: .cfa -4 + ^ r4: .cfa -8 + ^")


def test_the_return_to_lr_form_after_a_push_is_an_epilogue():
    """NullParser matches `.cfa: sp 0 + .ra: lr` exactly; its CFA of 0 is
    below the one before, so GenerateUnwinds stops there: the body record
    after an early return is never read."""
    later = (0x1008, ".cfa: sp 8 + .ra: .cfa -4 + ^ r4: .cfa -8 + ^")
    assert record_runs(PUSH_R4_LR, (0x1006, ".cfa: sp 0 + .ra: lr"), later) == [(0, "b0"), (2, "a8b0")]


def test_a_restore_no_form_fits_leaves_the_cfa_as_it_was():
    """With `r4: r4` the same record fits no form: it is left out, the CFA
    tracked stays 8, and the record restoring the frame after it is read
    against that: its registers popped again (`a8 a8 b0`)."""
    later = (0x1008, ".cfa: sp 8 + .ra: .cfa -4 + ^ r4: .cfa -8 + ^")
    assert record_runs(PUSH_R4_LR, (0x1006, ".cfa: sp 0 + .ra: lr r4: r4"), later)[-1] == (8, "a8a8b0")


def test_a_vpush_that_moves_no_cfa_repeats_the_run_before():
    """VPushParser without `.cfa` gives NO_ACTION: an entry of its own at
    its offset, whose run is the one before."""
    vpush = (0x1004, "unnamed_register264: .cfa -16 + ^")
    assert record_runs(PUSH_R4_LR, vpush) == [(0, "b0"), (2, "a8b0"), (4, "a8b0")]


def test_a_push_row_with_cfa_0_keeps_the_cfa_tracked():
    """PushOrSubSpParser takes `new CFA or old CFA`: `.cfa: sp 0 +` with a
    save moves vsp by -CFA yet keeps the CFA tracked (no epilogue)."""
    odd = (0x1004, ".cfa: sp 0 + r5: .cfa -12 + ^")
    assert record_runs(PUSH_R4_LR, odd, (0x1006, ".cfa: sp 16 +"))[-2:] == [(4, "41" "8002" "a8b0"), (6, "01" "418002a8b0")]


def two_pushes_and_a_bigger_frame() -> list[FunctionCfi]:
    push_r4_r5 = CfiRow(0x1042, SP, 12, ((4, -12), (5, -8), (LR, -4)))
    return [function("a", 0x1000, 0x1010, pushed(0x1002, 8)), function("b", 0x1010, 0x1020, pushed(0x1012, 8)),
            function("c", 0x1040, 0x1050, push_r4_r5, CfiRow(0x1044, SP, 16, push_r4_r5.saved))]


def test_runs_are_ordered_by_uses_per_byte_then_by_their_bytes_and_share_no_suffix():
    """EncodeUnwindInstructionTable: each distinct run once, by score =
    uses / length, ties by the bytes, both descending. Here b0 (4 uses),
    a8b0 (2 uses, 1 per byte), a9b0 and the refuse filler 8000 (0.5 each:
    a9 > 80), 00a9b0; a9b0 is stored again, not found inside 00a9b0."""
    tables = chrome_v2.encode_as_chrome(two_pushes_and_a_bigger_frame(), BASE).tables
    assert tables.unwind_instruction_table == bytes.fromhex("b0" "a8b0" "a9b0" "8000" "00a9b0")


def test_offset_lists_are_stored_once_in_order_of_first_use_with_no_suffix_shared():
    """EncodeFunctionOffsetTable keys a function's (offset, run) pairs
    whole: a and b share a list; the gap's `b0` list is stored again,
    though every other list ends with its pair (0, 0)."""
    tables = chrome_v2.encode_as_chrome(two_pushes_and_a_bigger_frame(), BASE).tables
    assert tables.function_offset_table == bytes([1, 1, 0, 0,  0, 0,  2, 7, 1, 3, 0, 0,  0, 5])
    assert [e.offset_table_index for e in tables.function_table] == [0, 0, 4, 6, 12]


def test_the_page_table_ends_at_the_page_of_the_last_entry():
    """EncodePageTableAndFunctionTable makes a page-table entry for each
    page up to the last one an entry starts on; with no refuse filler (the
    last function ends on a page boundary) later pages of it have none."""
    long = function("long", BASE, BASE + 3 * (1 << 17), pushed(BASE + 2, 8))
    assert chrome_v2.encode_as_chrome([long], BASE).tables.page_table == (0,)
    assert chrome_v2.encode([long], BASE, layout="chrome").tables.page_table == (0, 1, 1)


# --- chrome_unwinder_android_32.cc (v2) ------------------------------------------------------

LOW, TOP = 0x7000, 0x7100


def chrome_unwinder(*functions: FunctionCfi, seed_dialect: bool = False) -> ChromeV2Unwinder:
    if seed_dialect:  # a blob made by hand with the opcodes of the full EHABI set
        tables = chrome_v2.encode(functions, BASE, "keep").tables
        blob = serialize(tables, "chrome")
    else:
        blob = chrome_v2.encode_as_chrome(functions, BASE).blob()
    return ChromeV2Unwinder(chrome_v2.V2Reader.from_blob(blob, "chrome"), BASE)


def stack_of(words: dict[int, int]) -> Stack:
    data = bytearray(TOP - LOW)
    for address, value in words.items():
        data[address - LOW:address - LOW + 4] = value.to_bytes(4, "little")
    return Stack(LOW, bytes(data))


def test_only_the_opcodes_the_runtime_executes():
    """ExecuteUnwindInstruction: a pop without lr in the 10100nnn form is
    NOTREACHED (its headers list it; its code has no branch for it)."""
    unwinder = chrome_unwinder(function("f", 0x1000, 0x1010, CfiRow(0x1002, SP, 8, ((4, -8), (5, -4)))),
                               seed_dialect=True)
    with pytest.raises(UnwindFailure) as caught:
        unwinder.step(make_frame(pc=0x1004, sp=0x7010, lr=0x2001), stack_of({}), innermost=True)
    assert caught.value.kind == "unsupported" and "0xa1" in caught.value.reason


def test_the_callers_sp_must_be_8_byte_aligned():
    """TryUnwind aborts when the sp after a frame is not 8-byte aligned."""
    unwinder = chrome_unwinder(function("f", 0x1000, 0x1010, CfiRow(0x1002, SP, 4, ((LR, -4),))))
    frame = make_frame(pc=0x1004, sp=0x7010, lr=0x2001)
    with pytest.raises(UnwindFailure) as caught:
        unwinder.step(frame, stack_of({0x7010: 0x3001}), innermost=True)
    assert "8-byte" in caught.value.reason
    caller = unwinder.step(make_frame(pc=0x1004, sp=0x700C, lr=0x2001), stack_of({0x700C: 0x3001}), True)
    assert (caller.pc, caller.sp) == (0x3000, 0x7010)


def test_vsp_may_not_go_below_the_frames_sp():
    """TryUnwind checks sp against the frame's starting sp after every
    instruction: `vsp = r7` with r7 below sp aborts."""
    saves = ((7, -8), (LR, -4))
    unwinder = chrome_unwinder(function("f", 0x1000, 0x1010, CfiRow(0x1002, SP, 8, saves), CfiRow(0x1004, 7, 8, saves)))
    frame = make_frame(pc=0x1006, sp=0x7010, lr=0x2001, r7=0x7008)
    with pytest.raises(UnwindFailure) as caught:
        unwinder.step(frame, stack_of({}), innermost=True)
    assert caught.value.kind == "limit"


def test_a_callers_pc_is_looked_up_as_it_is():
    """TryUnwind takes pc - text start with no step back into the call: a
    return address at the next function's start finds that function's
    entry (return to lr, sp kept), which a caller frame may not do."""
    unwinder = chrome_unwinder(push_then_sub("f", 0x1000, 0x1010), function("g", 0x1010, 0x1020))
    with pytest.raises(UnwindFailure) as caught:
        unwinder.step(make_frame(pc=0x1010, sp=0x7010, lr=0x2001), stack_of({}), innermost=False)
    assert caught.value.kind == "limit"
    caller = unwinder.step(make_frame(pc=0x100E, sp=0x7010, lr=0x2001), stack_of({0x7024: 0x3001}), False)
    assert (caller.pc, caller.sp) == (0x3000, 0x7028)  # inside f: its body row


def test_no_vfp_register_is_restored():
    """ExecuteUnwindInstruction has no VFP pop: `v2-chrome` is checked on
    pc, sp and r4-r11."""
    assert ChromeV2Unwinder.restores.core == tuple(range(4, 12)) and not ChromeV2Unwinder.restores.vfp


# --- every chrome-layout blob of every corpus ----------------------------------------------

def chrome_corpus_inputs():
    """(name, rows, code reader) of every corpus at hand: the generated
    programs of the main job, the compiled ELFs, the Linux builds made."""
    for index in range(DEFAULT_PROGRAMS):
        program = generate_program(DEFAULT_SEED, index)
        yield program.name, program.cfi["tables"], program.code, program.text_base
    for path in sorted(ELF_CORPUS.glob("*.elf")):
        image = open_elf(str(path))
        yield path.name, tuple(read_cfi(image)), code_reader(image), text_base(image)
    for path in sorted(p for p in (cache() / "bin").glob("*") if p.is_file()):
        image = open_elf(str(path))
        rows = tuple(read_cfi(image))
        if rows:
            yield path.name, rows, code_reader(image), text_base(image)


def test_no_chrome_layout_blob_holds_an_opcode_chromes_runtime_lacks():
    """Every run of every chrome-layout blob we write (each epilogue policy,
    and Chrome's own builder) starts each instruction with a byte
    ExecuteUnwindInstruction has a branch for."""
    scanned = 0
    for name, rows, code_at, base in chrome_corpus_inputs():
        blobs = [chrome_v2.encode(rows, base, policy, code_at=code_at, layout="chrome").blob()
                 for policy in chrome_v2.EPILOGUE_POLICIES]
        blobs.append(chrome_v2.encode_as_chrome(rows, base).blob())
        for blob in blobs:
            reader = chrome_v2.V2Reader.from_blob(blob, "chrome")
            for index in reader.runs:
                outside = set(reader.first_bytes[index]) - ehabi.CHROME_RUNTIME_FIRST_BYTES
                assert not outside, f"{name}: run at {index} holds {sorted(outside)}"
                scanned += 1
    assert scanned > 1000


def test_encode_writes_chromes_own_tables_with_builder_chrome(tmp_path, capsys):
    """`encode --builder chrome` writes the blob `v2-chrome` runs: Chrome's
    builder rules, chrome layout; other layouts or epilogue policies are
    not Chrome's, and refused."""
    elf = ELF_CORPUS / "clang-O2-fp.elf"
    out = tmp_path / "chrome.v2"
    assert main(["encode", str(elf), "--builder", "chrome", "-o", str(out)]) == 0
    image = open_elf(str(elf))
    assert out.read_bytes() == chrome_v2.encode_as_chrome(read_cfi(image), text_base(image)).blob()
    assert "(chrome layout)" in capsys.readouterr().out
    for wrong in (["--layout", "seed"], ["--epilogue", "keep"]):
        assert main(["encode", str(elf), "--builder", "chrome", *wrong, "-o", str(out)]) == 2
        assert "--builder chrome" in capsys.readouterr().err
