"""Unwind rows from machine code alone (harness.thumb.frame_analysis): one
test per instruction form that moves sp, saves or restores a register or
ends a path; joins and refusals; and the generators' own rows, which the
analysis must reproduce at every instruction of every generated function."""

import json
import re
from collections import Counter
from functools import partial

import pytest
from test_linux_process import build, sysroot

from generators.assembler import assemble
from generators.corpus import generate_program
from harness import table_commands
from harness.cli import main
from harness.compare_rows import agrees, compare, judge
from harness.elf_program import code_map, elf_functions, program_from_elf
from harness.elf_program import code_reader as load_code
from harness.formats.arm_exidx import read_exidx_sections
from harness.formats.dwarf_cfi import read_cfi
from harness.formats.elf import function_spans, mapping_symbols, open_elf, thumb_functions
from harness.linux_verify.corpus import cache
from harness.program import CfiRow, CodeMap
from harness.registers import DWARF_D0, LR, SP
from harness.thumb import discovery
from harness.thumb.discovery import GAP, analyse_all, coverage_lines
from harness.thumb.analysed import ProgramFacts
from harness.thumb.native import ProgramCode
from harness.thumb.frame_analysis import analyse, analyse_calling, frame_states
from harness.unwind.registry import build_unwinders
from harness.verify.stops import verify_program

BASE = 0x100000
FP = 7


def rows_of(code: bytes, arm: bool = False) -> tuple[tuple[CfiRow, ...], tuple[str, ...]]:
    """The rows and problems of `code` as one function at BASE (ARM code with `arm`)."""
    function = analyse("f", BASE, BASE + len(code), lambda address, size: code[address - BASE:address - BASE + size],
                       arm=arm)
    return function.rows, function.problems


def discovered(lines: list[str], spans, code: bytes | None = None, **found_from) -> tuple:
    """(functions, code map) of `lines` (or `code`) at BASE by
    harness.thumb.discovery, the code one executable range, `spans` its symbols."""
    code = assemble(lines, BASE) if code is None else code
    code_map = CodeMap(spans, ranges=((BASE, BASE + len(code)),), **found_from)
    return analyse_all(code_map, lambda address, size: code[address - BASE:address - BASE + size]), code_map


def states(lines: list[str], arm: bool = False) -> list[tuple[int, int | None, tuple]]:
    """(offset, CFA register, CFA offset, saves) of each row, or the problem."""
    rows, _ = rows_of(assemble(lines, BASE, arm), arm)
    return [(r.address - BASE, r.problem or (r.cfa_reg, r.cfa_offset, r.saved)) for r in rows]


def test_push_sub_and_pop_return():
    assert states(["push {r4, r5, lr}", "sub sp, #16", "ldm r0!, {r4, r5}", "add sp, #16", "pop {r4, r5, pc}"]) == [
        (0, (SP, 0, ())),
        (2, (SP, 12, ((4, -12), (5, -8), (LR, -4)))),
        (4, (SP, 28, ((4, -12), (5, -8), (LR, -4)))),
        (8, (SP, 12, ((4, -12), (5, -8), (LR, -4)))),
    ]


def test_frame_pointer_then_alloca_then_sp_from_the_frame_pointer():
    assert states(["push {r4, r7, lr}", "add r7, sp, #4", "sub sp, sp, r3", "str r0, [sp]",
                   "sub sp, r7, #4", "pop {r4, r7, pc}"]) == [
        (0, (SP, 0, ())),
        (2, (SP, 12, ((FP, -8), (LR, -4)))),  # on sp while sp is known, r7 = CFA - 8 noted (r4, never
        (8, (FP, 8, ((FP, -8), (LR, -4)))),  # written, needs no save); sp moved by r3: the CFA through r7
        (14, (SP, 12, ((FP, -8), (LR, -4)))),  # sp known again: through sp
    ]


def test_vpush_and_vpop_save_and_restore_d_registers():
    found = states(["push {r4, lr}", "vpush {d8-d9}", "movs r4, #1", "vpop {d8-d9}", "pop {r4, pc}"])
    assert found[2] == (6, (SP, 24, ((4, -8), (LR, -4), (DWARF_D0 + 8, -24), (DWARF_D0 + 9, -16))))
    assert found[3] == (12, (SP, 8, ((4, -8), (LR, -4))))


def test_a_large_frame_through_movw_movt():
    found = states(["push {r4, lr}", "movw r12, #0x1000", "movt r12, #0x1", "sub sp, sp, r12", "movs r4, #1",
                    "add sp, sp, r12", "pop {r4, pc}"])
    assert (14, (SP, 8 + 0x11000, ((4, -8), (LR, -4)))) in found


def test_the_bytes_before_a_function_are_none_of_its_code():
    """gcc -O2 (csmith seed 32, func_207, no shrink-wrapping) starts with a
    push of r10 straight after the literal pool of the function before it,
    whose last half-word 0x46ea reads as `mov sl, sp`: a push of sp's value
    (a register dump) to a look-back crossing the function's start, which
    refused the whole function. The look-back stops at the start."""
    pool = bytes.fromhex("f2300000" "fc460000" "ea460000" "ca300000")  # the words 0x30f2, 0x46fc, 0x46ea, 0x30ca
    code = bytes.fromhex("2de9f047" "0025" "8c46" "bde8f087")  # push.w {r4-r10, lr}; movs r5, #0; mov ip, r1; pop.w
    function = analyse("func_207", BASE, BASE + len(code),
                       lambda address, size: (pool + code)[address - BASE + 16:address - BASE + 16 + size])
    assert not function.problems
    assert [(r.address - BASE, r.cfa_offset) for r in function.rows][:2] == [(0, 0), (4, 32)]
    mov_ip_sp_first = bytes.fromhex("ec46" "00b5" "2de90050" "bde80050" "00bd")  # mov ip, sp; push {lr}; push.w {ip, lr}
    assert "a register dump" in "".join(rows_of(mov_ip_sp_first)[1])  # inside it, the dump is still one


def test_str_with_writeback_pushes_and_ldr_post_index_pops():
    code = bytes.fromhex("80b5" "4df8048d" "8046" "5df8048b" "80bd")  # push {r7, lr}; str.w r8, [sp, #-4]!;
    rows, problems = rows_of(code)  # mov r8, r0; ldr.w r8, [sp], #4; pop {r7, pc}: r7, never written, needs no save
    assert not problems
    assert [(r.address - BASE, r.cfa_offset, r.saved) for r in rows] == [
        (0, 0, ()), (2, 8, ((LR, -4),)), (6, 12, ((8, -12), (LR, -4))), (12, 8, ((LR, -4),)),
    ]


def test_a_register_that_no_longer_holds_the_callers_value_is_not_saved_by_a_store():
    """r4 pushed after it was overwritten is not a save; in a function that
    never returns (the frame never resumes: its registers do not matter)
    the rows go on, in one that returns the caller's r4 is lost: refused."""
    assert states(["mov r4, r0", "push {r4, lr}", "bl 0x100020", "b 0x100004"])[1] == (4, (SP, 8, ((LR, -4),)))
    assert states(["mov r4, r0", "push {r4, lr}", "pop {r4, pc}"])[1:] == [(2, "no single frame state is known here")]


def test_a_store_over_a_save_slot_ends_that_save():
    """Debian's GCC: `push {r0-r6, lr}` only makes room (the epilogue is
    `add sp, #28; ldr pc, [sp], #4`); the stack guard stored at [sp, #20]
    lands in r5's slot, so r5 is no longer saved there (it still holds the
    caller's value); a byte store does the same."""
    found = states(["push {r0, r1, r2, r3, r4, r5, r6, lr}", "str r3, [sp, #20]", "strb r3, [sp, #16]",
                    "add sp, #28", "ldr pc, [sp], #4", "ldm r0!, {r4, r5, r6}"])  # r4-r6 written (where no path goes)
    saves = ((4, -16), (5, -12), (6, -8), (LR, -4))
    assert found[:4] == [(0, (SP, 0, ())), (2, (SP, 32, saves)), (4, (SP, 32, saves[:1] + saves[2:])),
                         (8, (SP, 32, saves[2:]))]  # strb.w: 4 bytes


def test_registers_pushed_only_to_make_room_are_not_saved():
    """csmith seed 278, gcc -Os, func_1 (the synthesis fuzz's one finding):
    `push {r0-r6, lr}` makes room and `add r0, sp, #16` hands a callee the
    slots of r4-r6 as a local object, which it writes. The function never
    writes r4-r6: they hold the caller's values throughout, and rows that
    read them from those slots were wrong after the call."""
    code = bytes.fromhex(
        "7fb5"  # 0x00 push {r0, r1, r2, r3, r4, r5, r6, lr}
        "4df28371"  # 0x02 movw r1, #0xd783
        "04a8"  # 0x06 add r0, sp, #16: r4's slot on, a local
        "fff77cfe"  # 0x08 bl func_12
        "0e4a" "0120" "7a44" "92f81a34" "013b" "82f81a34" "0023" "0122" "cde90130" "0023" "0090"
        "fff7b8ff"  # 0x28 bl func_37
        "074b" "0120" "0021" "7b44" "1a68" "5b68" "1268" "1268" "1268" "1268" "1a60"
        "07b0"  # 0x42 add sp, #28
        "5df804fb"  # 0x44 ldr.w pc, [sp], #4
        "04660000" "a6630000")  # the literal pool (whose words decode as `str r4, [r0, #96]`...)
    rows, problems = rows_of(code)
    assert not problems
    assert [(r.address - BASE, r.problem or (r.cfa_reg, r.cfa_offset, r.saved)) for r in rows] == [
        (0, (SP, 0, ())), (2, (SP, 32, ((LR, -4),))), (0x44, (SP, 4, ((LR, -4),))),
        (0x48, "no path reaches this code")]


def test_a_register_capstone_calls_read_keeps_its_save_where_the_code_writes_it():
    """glibc's __free: `mrc p15, 0, r5, c13, c0, 3` (the thread pointer)
    writes r5, though capstone lists r5 as read; r5 keeps its save. r4 and
    r6, never named after the push, need none."""
    found = states(["push {r4, r5, r6, lr}", "mrc p15, 0, r5, c13, c0, 3", "pop {r4, r5, r6, pc}"])
    assert found[1] == (2, (SP, 16, ((5, -12), (LR, -4))))


def test_a_save_sp_has_moved_above_ends_there():
    """Debian's GCC again (Lua's luaH_getstr): `push {r0-r4, lr}` makes
    room; on a path that never touched r4, `add sp, #20` leaves r4's slot
    below sp, where an unwinder must not read (Chrome's copies the stack
    from sp up): r4 holds the caller's value itself. Where the register
    was overwritten, its value is lost there, and a returning function
    refuses."""
    found = states(["push {r0, r1, r2, r3, r4, lr}", "add sp, #20", "ldr lr, [sp], #4", "bx lr", "movs r4, #0"])
    assert found == [(0, (SP, 0, ())), (2, (SP, 24, ((4, -8), (LR, -4)))), (4, (SP, 4, ((LR, -4),))),
                     (8, (SP, 0, ())), (10, "no path reaches this code")]  # r4 written there: its save counts
    lost = states(["push {r0, r1, r2, r3, r4, lr}", "movs r4, #0", "add sp, #20", "ldr lr, [sp], #4", "bx lr"])
    assert lost[-1][1] == "no single frame state is known here" and lost[-1][0] == 6


# ARM code: glibc's memcpy, memmove and memset are written in ARM state.

def test_arm_conditional_return_and_a_ladder_after_a_computed_jump():
    """memmove's shape: `push {r0, r4, lr}`, a return under a condition of
    its own (both paths go on), `add pc, pc, ip` into a ladder of stores
    (each of them a possible target, one frame throughout), the epilogue."""
    found = states(["push {r0, r4, lr}", "cmp r2, #4", "popeq {r0, r4, pc}", "sub sp, sp, #8",
                    "add pc, pc, r3", "mov r4, #0", "str r1, [r0], #4", "str r1, [r0], #4", "add sp, sp, #8",
                    "pop {r0, r4, pc}"], arm=True)
    saves = ((4, -8), (LR, -4))
    assert found == [(0, (SP, 0, ())), (4, (SP, 12, saves)), (16, (SP, 20, saves)),
                     (20, "no path reaches this code"),  # what pc + 8 jumps over (it writes r4)
                     (24, (SP, 20, saves)), (36, (SP, 12, saves))]


def test_arm_conditional_pop_then_a_branch_under_the_same_condition():
    """__memcpy_neon: `popcc {r8}; bcc` leaves with r8 popped where cc holds
    and goes on with it pushed where it fails (the branch knows which: no
    path pops and stays); at the branch itself the frame depends on the
    condition, so no row describes it. `str r9, [sp, #-32]!` and `ldr r9,
    [sp], #32` move sp by more than the register."""
    found = states(["push {r8}", "subs r2, r2, #64", "popcc {r8}", "bcc done", "str r9, [sp, #-32]!",
                    "ldr r9, [sp], #32", "pop {r8}", "done:", "bx lr", "ldm r0, {r8, r9}"], arm=True)
    assert found == [(0, (SP, 0, ())), (4, (SP, 4, ((8, -4),))), (12, "no single frame state is known here"),
                     (16, (SP, 4, ((8, -4),))), (20, (SP, 36, ((8, -4), (9, -36)))),
                     (24, (SP, 4, ((8, -4),))), (28, (SP, 0, ())), (32, "no path reaches this code")]


def test_gccs_frame_pointer_moved_before_sp_is_set_from_it():
    """Finding A of the compiled corpus: GCC's CFI keeps the CFA on r7 while
    `add.w r7, r7, #N` moves r7; the analysis moves the CFA offset with it."""
    found = states(["push {r7, lr}", "sub sp, #8", "add r7, sp, #0", "add.w r7, r7, #8", "mov sp, r7",
                    "pop {r7, pc}"])
    assert found[2:] == [(4, (SP, 16, ((FP, -8), (LR, -4)))),  # r7 = CFA - 16, then CFA - 8 after the add
                         (12, (SP, 8, ((FP, -8), (LR, -4))))]  # sp from r7: 8 below the CFA, not 16


def test_clangs_sp_from_a_copy_of_the_frame_pointer():
    found = states(["push {r4, r7, lr}", "add r7, sp, #4", "sub sp, sp, r3", "sub.w r4, r7, #4", "movs r0, #1",
                    "mov sp, r4", "pop {r4, r7, pc}"])
    assert found[-1][1] == (SP, 12, ((4, -12), (FP, -8), (LR, -4)))


def test_a_conditional_return_ends_one_path_only():
    found = states(["push {r4, lr}", "cmp r0, #0", "it ne", "popne {r4, pc}", "movs r4, #1", "pop {r4, pc}"])
    assert found == [(0, (SP, 0, ())), (2, (SP, 8, ((4, -8), (LR, -4))))]  # the body's row on both sides


def test_a_branch_table_follows_every_case():
    lines = ["push {r4, lr}", "cmp r0, #2", "bhi 0x100014", "tbb [pc, r0]", ".byte 3, 4, 5, 0",
             "movs r0, #1", "movs r0, #2", "movs r0, #3", "pop {r4, pc}"]
    rows, problems = rows_of(assemble(lines, BASE))
    assert not problems and rows[-1].cfa_offset == 8


def test_paths_that_meet_with_different_frames_refuse_there():
    rows, problems = rows_of(assemble(["push {r4, lr}", "cbz r0, 0x100008", "sub sp, #8", "movs r0, #1",
                                       "pop {r4, pc}"], BASE))
    assert problems == ("0x100008: paths meet with different frames",)
    assert [r.address - BASE for r in rows if r.problem] == [8]


def test_after_paths_meet_with_different_frames_nothing_is_known():
    """The refusal flows on: the code after the join is not described by
    the path that happened to reach it first."""
    rows, problems = rows_of(assemble(["push {r4, lr}", "cbz r0, 0x100008", "sub sp, #8", "movs r0, #1",
                                       "movs r1, #2", "add sp, #8", "pop {r4, pc}"], BASE))
    assert problems == ("0x100008: paths meet with different frames",)
    assert [(r.address - BASE, r.problem) for r in rows if r.address >= BASE + 8] == [
        (8, "no single frame state is known here")]  # one refusing row to the end


def test_sp_set_in_a_way_not_modelled_refuses_from_there():
    rows, problems = rows_of(assemble(["push {r4, lr}", "mov sp, r0", "movs r0, #1", "pop {r4, pc}"], BASE))
    assert problems == ("0x100002: 'mov sp, r0' sets sp in a way the analysis does not model",)
    assert [(r.address - BASE, r.problem) for r in rows[1:]] == [(2, "no single frame state is known here")]


def test_a_register_dump_holding_sp_refuses():
    """libgcc's _Unwind_RaiseException: `mov ip, sp; push {lr}; push {ip,
    lr}; ...; add r1, sp, #4; bl`: the unwinder it calls rewrites the block."""
    rows, problems = rows_of(assemble(["mov ip, sp", "push {lr}", "push {ip, lr}", "bl 0x100020",
                                       "add sp, #12", "bx lr"], BASE))
    assert problems == ("0x100004: 'push.w {ip, lr}' stores sp's value: a register dump a callee may rewrite",)
    assert [(r.address - BASE, r.problem or r.cfa_offset) for r in rows] == [
        (0, 0), (4, "no single frame state is known here")]


def test_a_call_without_lr_saved_loses_the_return_address():
    """libstdc++'s __cxa_end_cleanup: `push {r1-r4}; bl; pop {r1-r4}; bl
    _Unwind_Resume`. While a callee runs (its caller's frame is looked up
    at the call) and after it returned, the caller's return address is
    nowhere: the calls and what follows refuse."""
    lines = ["push {r1, r2, r3, r4}", "bl 0x100020", "pop {r1, r2, r3, r4}", "bl 0x100040"]
    assert states(lines) == [
        (0, (SP, 0, ())), (2, "no single frame state is known here"),
        (6, "the return address is lost: lr was overwritten and saved nowhere"),
        (8, "no single frame state is known here")]
    assert rows_of(assemble(lines, BASE))[1] == ("0x100002: 'bl #0x100020' calls with lr saved nowhere",
                                                 "0x100008: 'bl #0x100040' calls with lr saved nowhere")


def test_an_alloca_on_one_path_joins_the_other_through_the_frame_pointer():
    """glibc's __printf_fp_l: sp apart where the paths meet, r7 at one
    distance from the CFA on both."""
    assert states(["push {r4, r7, lr}", "add r7, sp, #4", "cbz r0, 0x10000c", "sub sp, sp, r3", "str r0, [sp]",
                   "movs r4, #1", "sub sp, r7, #4", "pop {r4, r7, pc}"]) == [
        (0, (SP, 0, ())),
        (2, (SP, 12, ((4, -12), (FP, -8), (LR, -4)))),
        (0xA, (FP, 8, ((4, -12), (FP, -8), (LR, -4)))),  # after sub sp, sp, r3 and from the join (0xc) on
        (0x12, (SP, 12, ((4, -12), (FP, -8), (LR, -4)))),
    ]


def test_a_shrink_wrapped_function_returns_as_a_leaf_before_its_push_and_lr_stays_saved_as_scratch():
    """GCC -O2's mix (tests/linux_src/shapes.c), its loop cut to one
    instruction: it compares and returns before `push {r4-r11, lr}` (the
    return, placed after the epilogue, is reached with nothing pushed),
    then uses lr as a general register: the caller's lr is still in its
    save slot, which the rows keep naming (r4-r11, pushed but never written
    in what is left of it, need no save)."""
    code = bytes.fromhex(
        "002a"  # 0x00 cmp r2, #0
        "0bdd"  # 0x02 ble.n 0x1c: nothing to do
        "2de9f04f"  # 0x04 push.w {r4-r11, lr}
        "47f6b91e"  # 0x08 movw lr, #0x79b9: lr a general register from here
        "c9f6376e"  # 0x0c movt lr, #0x9e37
        "83ea0e0e"  # 0x10 eor.w lr, r3, lr
        "013a"  # 0x14 subs r2, #1
        "fbd1"  # 0x16 bne.n 0x10
        "bde8f08f"  # 0x18 pop.w {r4-r11, pc}
        "1846"  # 0x1c mov r0, r3
        "7047")  # 0x1e bx lr
    rows, problems = rows_of(code)
    assert not problems
    assert [(r.address - BASE, r.problem or (r.cfa_reg, r.cfa_offset, r.saved)) for r in rows] == [
        (0, (SP, 0, ())), (8, (SP, 36, ((LR, -4),))), (0x1c, (SP, 0, ()))]


def test_stack_clash_probes_below_an_alloca_keep_the_cfa_on_the_frame_pointer():
    """GCC -O2 -fstack-clash-protection's alloca (with_alloca in
    tests/programs/shapes.c): sp steps down a page at a time to the
    computed size, touching each page, then by the rest. Each step moves sp
    by a constant from where only r7 knows the frame: still unknown, the
    CFA still through r7 (not a refusal from the loop to the return)."""
    code = bytes.fromhex(
        "b0b5"  # 0x00 push {r4, r5, r7, lr}
        "82b0"  # 0x02 sub sp, #8
        "00af"  # 0x04 add r7, sp, #0: r7 = CFA - 24
        "6846"  # 0x06 mov r0, sp
        "adeb0303"  # 0x08 sub.w r3, sp, r3: where sp must get to, whole pages
        "9842"  # 0x0c cmp r0, r3
        "06d0"  # 0x0e beq.n 0x1e: less than a page
        "adf5805d"  # 0x10 sub.w sp, sp, #4096: the probing loop
        "6846"  # 0x14 mov r0, sp
        "9842"  # 0x16 cmp r0, r3
        "cdf8fc0f"  # 0x18 str.w r0, [sp, #4092]: touch the page
        "f8d1"  # 0x1c bne.n 0x10
        "c2f30b02"  # 0x1e ubfx r2, r2, #0, #12: the rest of the size
        "adeb020d"  # 0x22 sub.w sp, sp, r2: sp 0 to 4095 bytes lower still
        "0837"  # 0x26 adds r7, #8: r7 = CFA - 16
        "bd46"  # 0x28 mov sp, r7
        "b0bd")  # 0x2a pop {r4, r5, r7, pc}
    rows, problems = rows_of(code)
    saves = ((FP, -8), (LR, -4))  # r4 and r5 are never written: no save
    assert not problems
    assert [(r.address - BASE, r.problem or (r.cfa_reg, r.cfa_offset, r.saved)) for r in rows] == [
        (0, (SP, 0, ())),
        (2, (SP, 16, saves)),
        (4, (SP, 24, saves)),
        (0x10, (FP, 24, saves)),  # the loop's head: sp at one page or another below, r7 where it was
        (0x28, (FP, 16, saves)),  # r7 moved up by 8
        (0x2a, (SP, 16, saves)),  # sp set from r7: known again
    ]


def test_a_push_below_an_alloca_saves_nothing_and_keeps_the_cfa_on_the_frame_pointer():
    """The same rule for a push (`str rX, [sp, #-4]!` too): below a
    dynamic allocation a push stores r4 at a slot nothing places relative
    to the CFA, so it is no save; r4's stays at the prologue's slot."""
    found = states(["push {r4, r7, lr}", "add r7, sp, #4", "sub sp, sp, r3", "push {r4, r5}", "movs r4, #1",
                    "sub sp, r7, #4", "pop {r4, r7, pc}"])
    assert found == [(0, (SP, 0, ())), (2, (SP, 12, ((4, -12), (FP, -8), (LR, -4)))),
                     (8, (FP, 8, ((4, -12), (FP, -8), (LR, -4)))), (0x10, (SP, 12, ((4, -12), (FP, -8), (LR, -4))))]


@pytest.mark.parametrize("optimization", ["-O2", "-Os"])
def test_gccs_shrink_wrapped_and_stack_clash_shapes_are_known_at_every_instruction(tmp_path, capsys, optimization):
    """tests/linux_src/shapes.c built as distributions build packages
    (-fstack-clash-protection): its shrink-wrapped function using lr as a
    general register and its probed alloca and VLAs, compared with GCC's
    CFI at every instruction of its five functions and run: no refusal,
    and no stop where the rows disagree (at -Os, a `nop` after a call that
    never returns, which no run executes, has a row GCC's CFI leaves
    unchanged)."""
    program = build("shapes.c", optimization, "-fstack-clash-protection")
    assert main(["encode", program, "--from-code", "--compare", "--run", "--sysroot", sysroot(),
                 "-o", str(tmp_path / "x.bin")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"of 5 functions with CFI: \d+ agree, \d+ disagree \(0 more where the analysis refuses\)", out), out
    assert "ran the program: 0 stops at disagreeing instructions" in out


def test_a_computed_goto_jumps_to_the_labels_the_data_holds():
    """Lua's dispatch: `bx r3` with the frame set up is no tail call."""
    code = assemble(["push {r4, lr}", "bx r3", "movs r0, #1", "bx r3", "pop {r4, pc}"], BASE)
    reader = lambda address, size: code[address - BASE:address - BASE + size]
    found = analyse("f", BASE, BASE + len(code), reader, labels=(BASE + 4, BASE + 8, BASE + 0x40))
    assert not found.problems and not any(row.problem for row in found.rows)
    assert [(r.address - BASE, r.cfa_offset) for r in found.rows] == [(0, 0), (2, 8)]
    _, problems = rows_of(code)  # no label known: refused, never taken for a tail call
    assert problems == ("0x100002: 'bx r3' jumps with the frame set up, and no data holds a label here",)


def test_a_tail_call_through_a_register_leaves_with_the_frame_gone():
    rows, problems = rows_of(assemble(["push {r4, lr}", "pop {r4, lr}", "bx r3"], BASE))
    assert not problems and [r.cfa_offset for r in rows] == [0, 8, 0]


def test_a_table_branch_from_a_base_register_set_by_adr():
    """clang: `adr r0, table; ...; tbh [r0, r5, lsl #1]`, offsets counted
    from the tbh as ever."""
    code = bytearray(assemble(["push {r4, lr}", "cmp r5, #1", "bhi 0x100016"], BASE))  # 0x0-0x6
    code += bytes.fromhex("02a0" "00bf" "d0e815f0" "0000")  # 0x6 adr r0, 0x10; nop; 0xa tbh [r0, r5, lsl #1]
    code += (3).to_bytes(2, "little") + (4).to_bytes(2, "little")  # 0x10: 0xe + 2 * (3, 4) = 0x14, 0x16
    code += assemble(["movs r0, #1", "pop {r4, pc}"], BASE + 0x14)
    rows, problems = rows_of(bytes(code))
    assert not problems
    assert [(r.address - BASE, r.problem or r.cfa_offset) for r in rows] == [
        (0, 0), (2, 8), (0xE, "no path reaches this code"), (0x14, 8)]  # padding and the table; both cases run


def test_after_a_call_that_never_returns_the_next_function_is_found():
    """s's tail call finds g; g calls abort through the PLT
    (CodeMap.noreturn), so its path ends there, and the code after it,
    which pushes lr after a `movs`, is the next function (h), not g's."""
    lines = ["push {r3, lr}", "pop {r3, lr}", "b 0x100008",  # s (symbol): 0x0-0x8, a tail call
             "push {r4, lr}", "bl 0x100040",  # g: 0x8, abort@plt at 0x40
             "movs r0, #1", "push {r4, lr}", "pop {r4, pc}"]  # h: 0xe
    found, _ = discovered(lines, ((BASE, BASE + 8, "s"),), noreturn=(BASE + 0x40,))
    assert [(f.name, f.start - BASE, f.end - BASE) for f in found] == [
        ("s", 0, 8), ("fn_100008", 8, 0xE), ("fn_10000e", 0xE, 0x14)]
    assert [(r.address - BASE, r.cfa_offset) for r in found[2].rows] == [(0xE, 0), (0x12, 8)]
    assert not any(f.problems for f in found)


def test_after_a_call_that_never_returns_a_shrink_wrapped_function_is_found():
    """As above, with h as GCC -O2 builds a shrink-wrapped function
    (`void free_list(struct node *p)`, freeing a list): it returns, as a
    leaf, before its push of lr where there is nothing to do. That is its
    prologue still: h is a function of its own, not code of g's that only
    the unwinder enters (whose frame it would have been given)."""
    head = assemble(["push {r3, lr}", "pop {r3, lr}", "b 0x100008",  # s (symbol): 0x0-0x8, a tail call
                     "push {r4, lr}", "bl 0x100040"], BASE)  # g: 0x8, abort@plt at 0x40
    code = head + bytes.fromhex(
        "40b1"  # 0x0e cbz r0, 0x22: an empty list
        "10b5"  # 0x10 push {r4, lr}
        "0446"  # 0x12 mov r4, r0
        "2046"  # 0x14 mov r0, r4
        "2468"  # 0x16 ldr r4, [r4]
    ) + assemble(["bl 0x100024"], BASE + 0x18) + bytes.fromhex(  # 0x18 bl free (k, 0x24, called by h alone)
        "002c"  # 0x1c cmp r4, #0
        "f9d1"  # 0x1e bne.n 0x14
        "10bd"  # 0x20 pop {r4, pc}
        "7047"  # 0x22 bx lr
        "7047")  # 0x24 k: bx lr
    code_map = CodeMap(((BASE, BASE + 8, "s"),), ranges=((BASE, BASE + len(code)),), noreturn=(BASE + 0x40,))
    found = analyse_all(code_map, lambda address, size: code[address - BASE:address - BASE + size])
    assert [(f.name, f.start - BASE, f.end - BASE) for f in found] == [
        ("s", 0, 8), ("fn_100008", 8, 0xE), ("fn_10000e", 0xE, 0x24), ("fn_100024", 0x24, 0x26)]
    assert [(r.address - BASE, r.cfa_offset) for r in found[2].rows] == [(0xE, 0), (0x12, 8), (0x22, 0)]
    assert not any(f.problems for f in found)


def test_calls_with_and_without_r7_set_share_one_frame_for_landing_pads():
    pad = ["push {r4, r7, lr}", "sub sp, #4", "bl 0x100040", "add r7, sp, #0", "bl 0x100040", "add sp, #4",
           "pop {r4, r7, pc}", "movs r0, #1", "b 0x10000e"]  # @ 0x12: the pad
    rows, problems = rows_of(assemble(pad, BASE))
    assert not problems and not any(r.problem for r in rows)
    assert [r for r in rows if r.address == BASE + 0x12][0].cfa_offset == 16


def test_code_between_function_symbols_is_not_analysed():
    found, _ = discovered(["push {r4, lr}", "pop {r4, pc}", "movs r0, #1", "bx lr", "bx lr"],
                          ((BASE, BASE + 4, "f"), (BASE + 8, BASE + 10, "g")))
    assert [(f.name, f.start - BASE, f.end - BASE) for f in found] == [("f", 0, 4), (GAP, 4, 8), ("g", 8, 10)]
    assert found[1].rows[0].problem == "no function found here"


def test_arm_function_symbols_are_analysed_in_arm_state():
    """A Thumb function, then an ARM one (a symbol without the Thumb bit,
    as glibc's memset): each analysed in its own state."""
    thumb = assemble(["push {r4, lr}", "pop {r4, pc}"], BASE)
    arm = assemble(["push {r4, r5, lr}", "ldm r0, {r4, r5}", "pop {r4, r5, pc}"], BASE + 8, arm=True)
    code = thumb + bytes(8 - len(thumb)) + arm
    code_map = CodeMap(((BASE, BASE + 4, "t"),), ranges=((BASE, BASE + len(code)),),
                       arm_spans=((BASE + 8, BASE + len(code), "a"),))
    found = analyse_all(code_map, lambda address, size: code[address - BASE:address - BASE + size])
    assert [(f.name, f.start - BASE) for f in found] == [("t", 0), (GAP, 4), ("a", 8)]
    assert [(r.address - BASE, r.cfa_offset, r.saved) for r in found[2].rows] == [
        (8, 0, ()), (12, 12, ((4, -12), (5, -8), (LR, -4)))]
    assert not found[2].problems


def test_a_thumb_to_arm_veneer_goes_on_in_arm_state():
    """A linker's veneer (`__memmove_from_thumb`): Thumb `bx pc; nop`, then
    ARM code at the next word, here a tail call. The ARM branch has the
    entry's frame, and its target is a function entered in ARM state."""
    thumb = assemble(["bx pc", "nop"], BASE)
    arm = assemble(["b 0x100100"], BASE + 4, arm=True)
    code = thumb + arm
    found = analyse_calling("v", BASE, BASE + len(code), lambda address, size: code[address - BASE:][:size])
    assert [(r.address - BASE, r.problem or r.cfa_offset) for r in found.function.rows] == [
        (0, 0), (2, "no path reaches this code"), (4, 0)]
    assert (found.callees, found.arm_callees) == (frozenset(), {BASE + 0x100})


def test_an_arm_function_restores_sp_from_its_r11_frame():
    """Chromium's ARM-mode code (Rust, its 0x1a00094): `push {r4, r5, fp,
    lr}; add fp, sp, #8` ... `sub sp, fp, #8; pop {r4, r5, fp, pc}`. In ARM
    state r11 is the frame pointer as r7 is in Thumb: sp set from it is
    known (4,600 such instructions of Chromium's refused before)."""
    code = bytes.fromhex("30482de908b08de218d04de20240a0e10020a0e108008de200408de504308de50130a0e1090000eb"
                         "08209be508009de5000052e30c109de514509d1510409d15f040c21108d04be23088bde8fedeffe7")
    base = 0x1A00094
    found = analyse_calling("f", base, base + len(code), lambda address, size: code[address - base:][:size], arm=True)
    rows = {row.address - base: (row.cfa_reg, row.cfa_offset, row.saved) for row in found.function.rows}
    saves = ((4, -16), (5, -12), (11, -8), (LR, -4))
    assert rows[0x48] == (SP, 16, saves)  # after `sub sp, fp, #8`: sp at the saves again, for the pop
    assert rows[0x0C] == (SP, 40, saves) and not found.function.problems and found.returns


def test_a_long_branch_thunk_is_a_tail_call_to_its_target():
    """Chromium (lld) calls `__stack_chk_fail` through a thunk at 0x5909c98:
    `movw ip, #0x68fc; movt ip, #0x625; add ip, pc; bx ip`, into the PLT
    entry at 0xbb605a0 (ARM). The thunk tail-calls it: where the entry never
    returns, neither does the thunk, so a caller's path ends at its `bl`
    (taken as returning, the path ran on through the literal pool into the
    next function, whose start was never found: v2-code wrong in 3 of
    Chromium's own samples). The compiled analysis and the Python agree
    (Chromium has a thunk in every fifth function it finds: given to the
    Python, they took half of its synthesis time)."""
    thunk = bytes.fromhex("46f6fc0cc0f2256cfc446047")
    code = ProgramCode([(0x5909C98, thunk)])
    for noreturn in (frozenset(), frozenset({0xBB605A0})):
        compiled = code.native.analyse(0x5909C98, 0x5909CA4, noreturn, (), (), True, False, True)
        assert compiled is not None  # the compiled analysis takes it
        found = analyse_calling("thunk", 0x5909C98, 0x5909CA4, code, ProgramFacts(noreturn=noreturn))
        python = analyse_calling("thunk", 0x5909C98, 0x5909CA4, lambda a, n: code(a, n),
                                 ProgramFacts(noreturn=noreturn))
        assert found == python and found.arm_callees == {0xBB605A0} and not found.function.problems
        assert found.returns == (not noreturn) and 0xBB605A0 in found.asked


def test_a_plt_entrys_thumb_stub_is_a_tail_call_into_its_arm_entry():
    """Debian's grep (stripped, binutils 2.40): `atexit` tail-calls
    `__cxa_atexit@plt` at its Thumb stub, `bx pc` then `b.n` back to it
    (never run); the ARM entry after it jumps through the GOT. The stub's
    function, found apart from the ARM entry, leaves by a tail call into
    it: it returns, and so does `atexit`. (Taken for never returning, it
    had made every caller's code after `atexit(...)` unreachable: grep's
    main refused from there to its end.)"""
    stub = bytes.fromhex("7847fde7")  # 0x2310: bx pc; b.n 0x2310
    arm_entry = bytes.fromhex("00c68fe21cca8ce2bcfbbce5")  # add ip, pc, #0, 12; add ip, ip, #28, 20; ldr pc, [ip, #3004]!
    atexit = bytes.fromhex("024b00217b441a68e6f794bd")  # 0x1b7dc: ldr r3, [pc, #8]; movs r1, #0; add r3, pc; ...
    code = {0x2310: stub + arm_entry, 0x1B7DC: atexit}

    def code_at(address, size):  # nothing elsewhere
        base = max((b for b in code if b <= address < b + len(code[b])), default=None)
        return b"" if base is None else code[base][address - base:][:size]

    found = analyse_calling("stub", 0x2310, 0x2312, code_at)
    assert found.returns and found.arm_callees == {0x2314} and not found.function.problems
    caller = analyse_calling("atexit", 0x1B7DC, 0x1B7E8, code_at)  # ... ldr r2, [r3]; b.w 0x2310
    assert caller.returns and caller.callees == {0x2310}
    never = analyse_calling("stub", 0x2310, 0x2312, code_at, ProgramFacts(noreturn=frozenset({0x2314})))
    assert not never.returns  # into an ARM entry that never returns: neither does the stub


def test_the_halfword_after_a_thumb_bx_pc_begins_no_function():
    """A stripped reading of grep's stub: a function found by a call at the
    stub (`bx pc; b.n` back, then the ARM entry) keeps its ARM word; the
    `b.n`, never run, is no start of its own (taken for one, it cut the
    stub short and made the ARM word a false start: `___fini_from_thumb`
    in the static builds)."""
    code = bytes.fromhex("00b500f005f800bd") + bytes(8) + bytes.fromhex("7847fde700c68fe21cca8ce2bcfbbce5")
    found, _ = discovered([], ((BASE, BASE + 8, "f"),), code=code)
    starts = [(f.name, f.start - BASE, f.end - BASE) for f in found if not f.name.startswith("<")]
    assert ("fn_100010", 0x10, 0x20) in starts and not any(start in (0x12, 0x14) for _, start, _ in starts)


def test_blx_enters_arm_state_and_arm_code_calls_in_its_own():
    """`blx` from Thumb enters ARM code, which no symbol names; its `bl`
    stays in ARM state and its `blx` enters Thumb: each found function is
    analysed in the state it is entered in."""
    thumb = assemble(["push {r4, lr}", "blx 0x100008", "pop {r4, pc}"], BASE)  # f: 0x0-0x8
    arm = assemble(["push {r4, lr}", "bl 0x100018", "blx 0x100020", "pop {r4, pc}",  # 0x8: ARM
                    "push {r4, r5, lr}", "pop {r4, r5, pc}"], BASE + 8, arm=True)  # 0x18: ARM
    last = assemble(["push {r3, lr}", "pop {r3, pc}"], BASE + 0x20)  # 0x20: Thumb
    code = thumb + arm + last
    code_map = CodeMap(((BASE, BASE + 8, "f"),), ranges=((BASE, BASE + len(code)),))
    found = analyse_all(code_map, lambda address, size: code[address - BASE:][:size])
    assert [(f.name, f.start - BASE, f.end - BASE) for f in found] == [
        ("f", 0, 8), ("fn_100008", 8, 0x18), ("fn_100018", 0x18, 0x20), ("fn_100020", 0x20, 0x24)]
    assert not any(f.problems for f in found)
    assert [r.saved for r in found[2].rows][-1] == ((LR, -4),)  # push {r4, r5, lr} in ARM (r4, r5 never written)


def test_mapping_symbols_say_which_state_and_where_data_is():
    """Data (`$d`: a literal pool) is never decoded: a path that reaches
    it ends, with no refusal (after a call that never returns, or a branch
    no run takes); a `$a` symbol makes a `bl` target ARM code."""
    lines = ["push {r4, lr}", "cbz r0, 0x100008", "bl 0x100014", ".word 0", ".word 0", "pop {r4, pc}"]
    code = assemble(lines, BASE)
    code += bytes(0x14 - len(code)) + assemble(["push {r4, lr}", "pop {r4, pc}"], BASE + 0x14, arm=True)
    modes = ((BASE, "t"), (BASE + 8, "d"), (BASE + 0x10, "t"), (BASE + 0x14, "a"))
    code_map = CodeMap(((BASE, BASE + 0x14, "f"),), ranges=((BASE, BASE + len(code)),), modes=modes)
    found = analyse_all(code_map, lambda address, size: code[address - BASE:][:size])
    assert [(f.name, f.start - BASE) for f in found] == [("f", 0), ("fn_100014", 0x14)]
    rows = {row.address - BASE: row.problem for row in found[0].rows}
    assert not found[0].problems and rows[8] == "no path reaches this code"  # the data
    assert not found[1].problems and found[1].rows[-1].saved == ((LR, -4),)  # r4 never written: no save


def test_glibcs_arm_string_functions_get_rows():
    """The Linux slice's static build holds glibc's ARM-state memmove,
    memset and memcpy (NEON and VFP): each is analysed without a problem;
    the linker's veneer to memmove goes on in ARM state."""
    program = cache() / "bin" / "cjmp-gcc-O2-fp-static"
    assert program.exists(), f"{program} is not built: run `make linux-slice` (make test does)"
    image = open_elf(str(program))
    arm = {name for start, end, name, thumb in function_spans(image) if not thumb}
    wanted = {"memmove", "memset", "__memcpy_neon", "__memcpy_vfp"}
    assert wanted <= arm
    found = {f.name: f for f in analyse_all(code_map(image, read_exidx_sections(image)), load_code(image))}
    assert [found[name].problems for name in sorted(wanted)] == [()] * len(wanted)
    assert ((4, -8), (LR, -4)) in {r.saved for r in found["memmove"].rows}  # push {r0, r4, lr}
    veneer = found["__memmove_from_thumb"]  # bx pc; nop; then `b memmove` in ARM state, where `$a` says
    modes = dict(mapping_symbols(image))
    assert (modes[veneer.start], modes[veneer.start + 4]) == ("t", "a")
    assert veneer.rows[-1].address == veneer.start + 4 and veneer.rows[-1].problem is None


def test_functions_no_symbol_names_are_found_from_calls():
    """A stripped library: `g` (0x8) and `h` (0x10) are found from the calls
    of `f`, the only symbol; each ends at the next start or bound; `h`,
    found after `g`, cuts it short; the `.ARM.exidx` entry at 0x18 starts
    a function of its own. Nothing is found outside the code."""
    lines = ["push {r4, lr}", "bl 0x100008", "pop {r4, pc}",  # f: 0x0-0x8
             "push {r4, lr}", "bl 0x100010", "pop {r4, pc}",  # g: 0x8-0x10, calls h
             "push {r3, lr}", "bl 0x200000", "pop {r3, pc}", "bx lr"]  # h: 0x10-0x18, then 0x18: an index entry
    found, code_map = discovered(lines, ((BASE, BASE + 8, "f"),), bounds=(BASE + 0x18,))
    assert [(f.name, f.start - BASE, f.end - BASE) for f in found] == [
        ("f", 0, 8), ("fn_100008", 8, 0x10), ("fn_100010", 0x10, 0x18), ("fn_100018", 0x18, 0x1A)]
    assert not any(f.problems for f in found) and found[2].rows[1].cfa_offset == 8
    assert coverage_lines(found, code_map.ranges) == [
        "functions: 4 (1 by symbol, 3 found from calls and data)",
        "code bytes: 26; in functions 26 (100.0%); with rows that unwind 26 (100.0%), the rest refuses"]


def test_a_function_whose_address_is_formed_pc_relative_is_found():
    """Position-independent code takes a function's address as `ldr r3,
    [pc, #8]; add r3, pc` (literal 9: pc reads 0x8 at the add, so 0x11, a
    Thumb address): `g` at 0x10 is found though no symbol or call names it."""
    lines = ["push {r4, lr}", "ldr r3, [pc, #8]", "add r3, pc", "blx r3", "pop {r4, pc}", "nop", ".word 9",
             "push {r4, lr}", "pop {r4, pc}"]  # g at 0x10
    found, _ = discovered(lines, ((BASE, BASE + 0x10, "f"),))
    assert [(f.name, f.start - BASE, f.end - BASE) for f in found] == [("f", 0, 0x10), ("fn_100010", 0x10, 0x14)]
    assert not found[1].problems and found[1].rows[1].cfa_offset == 8


def test_a_function_running_into_the_next_is_not_noreturn():
    """libgcc's `__aeabi_idiv`: `cmp r1, #0; beq div0`, then it runs on into
    the division routine (another start, found by another call): no path
    returns inside its bounds, yet it returns; a call to it must not end
    its caller's path (a noreturn callee would)."""
    code = assemble(["cmp r1, #0", "beq 0x100004", "movs r0, #1", "bx lr"], BASE)
    runs_on = analyse_calling("g", BASE, BASE + 4, lambda address, size: code[address - BASE:address - BASE + size],
                              bounded=False)
    assert runs_on.returns and not runs_on.function.problems


def test_callers_are_analysed_again_only_where_what_they_asked_became_noreturn(monkeypatch):
    """Noreturn spreads round by round: h loops, so g and m, which call it,
    never return, nor f, which calls g, nor main. A function is analysed
    again only where one it asked about became noreturn since its last
    analysis: once its path ends at `bl h`, m never asks about g. The rows
    are those of analysing every caller of a noreturn function again in
    every round. (Only main has a symbol: functions found by calls have no
    landing pads looked for until the end, which would ask about the code
    after a call; then each, having code no path reaches, once more.)"""
    def stuck(offset: int, count: int) -> list[str]:  # padding that starts no function: each a `b .`
        return [f"b {BASE + offset + 2 * index:#x}" for index in range(count)]

    lines = ["push {r4, lr}", "bl 0x100040", "bl 0x100030", "pop {r4, pc}", *stuck(0xc, 2),  # main @ 0x0
             "b 0x100010", *stuck(0x12, 7),  # h @ 0x10
             "push {r4, lr}", "bl 0x100010", "pop {r4, pc}", *stuck(0x28, 4),  # g @ 0x20
             "push {r4, lr}", "bl 0x100010", "bl 0x100020", "pop {r4, pc}", *stuck(0x3c, 2),  # m @ 0x30
             "push {r4, lr}", "bl 0x100020", "movs r0, #1", "pop {r4, pc}"]  # f @ 0x40
    real, analysed = discovery.analyse_calling, Counter()

    def counted(name, *args, everything=False, **options):
        analysed[name] += 1
        one = real(name, *args, **options)
        return one._replace(asked=frozenset(range(BASE, BASE + 0x50, 2))) if everything else one

    monkeypatch.setattr(discovery, "analyse_calling", counted)
    found, _ = discovered(lines, ((BASE, BASE + 0x10, "main"),))
    h, g, m, f = (f"{discovery.FOUND}{BASE + offset:x}" for offset in (0x10, 0x20, 0x30, 0x40))

    def named() -> Counter:  # not the trials of the padding no path reaches (is it a function of its own?)
        return Counter({name: count for name, count in analysed.items() if name in ("main", h, g, m, f)})
    assert named() == Counter({"main": 3, h: 2, g: 3, m: 3, f: 3})
    # after the call, the `pop` no path reaches starts no function (alone, it pops a frame it has not):
    # it keeps the frame of the calls, as a landing pad would
    assert [(one.rows[-1].address - BASE, one.rows[-1].problem) for one in found if one.name in (g, f)] == [
        (0x22, None), (0x42, None)]
    analysed.clear()
    monkeypatch.setattr(discovery, "analyse_calling", partial(counted, everything=True))
    assert discovered(lines, ((BASE, BASE + 0x10, "main"),))[0] == found
    assert named() == Counter({"main": 3, h: 2, g: 5, m: 5, f: 4})


def test_a_jump_into_an_unrolled_loop_reaches_every_step():
    """libgcc's Thumb-2 division: `adr r0, ladder; add.w r2, r0, r2, lsl #2;
    mov pc, r2` enters its unrolled loop part way; every step is reached
    (the padding before it is not)."""
    found = states(["clz r2, r3", ".short 0xa002", "add.w r2, r0, r2, lsl #2", "mov pc, r2", "nop", "nop",
                    "adds r3, r3, r1", "adds r3, r3, r1", "adds r3, r3, r1", "adds r3, r3, r1", "bx lr"])
    assert found == [(0, (SP, 0, ())), (12, "no path reaches this code"), (16, (SP, 0, ()))]  # 0xa002: adr r0, #8


LANDING_PAD = ["push {r4, lr}", "sub sp, #8", "bl 0x100010", "add sp, #8", "pop {r4, pc}",
               "movs r4, #1", "b 0x100008"]  # @ 0x10000c: entered only by the unwinder, back to the epilogue


def test_code_only_the_unwinder_enters_resumes_with_the_frame_of_the_calls():
    """A landing pad is entered by the unwinder, never by a branch, with the
    frame of the call that threw: the one frame all calls are made with."""
    rows, problems = rows_of(assemble(LANDING_PAD, BASE))
    assert not problems and not any(r.problem for r in rows)
    pad = [r for r in rows if r.address == BASE + 0xC][0]
    assert (pad.cfa_reg, pad.cfa_offset, pad.saved) == (SP, 16, ((4, -8), (LR, -4)))


def test_code_no_path_reaches_refuses_when_a_branch_was_not_followed():
    lines = LANDING_PAD[:3] + ["cbz r0, 0x10000e", "add pc, r0", "movs r0, #1", "add sp, #8", "pop {r4, pc}"]
    rows, problems = rows_of(assemble(lines, BASE))
    assert problems == ("0x10000a: 'add pc, r0' leaves for an address the analysis cannot follow",)
    assert [(r.address - BASE, r.problem) for r in rows if r.problem] == [
        (0xA, "no single frame state is known here"), (0xC, "no path reaches this code")]


def test_an_epilogue_over_two_it_blocks_is_followed_under_one_condition():
    """clang: `itttt lt; ...; addlt sp, #4; itt lt; ldmialt ...; blt.w f`. The
    path where lt holds tears the frame down and leaves; the other keeps the
    body's frame. Where both reach one pc with different frames, no row can
    say which: that pc refuses; the rest is exact."""
    code = bytes.fromhex("f0b5" "81b0" "8a42" "bfbf" "2046" "1146" "3a46" "01b0" "bcbf" "bde8f040" "00f065b8"
                         "01b0" "f0bd")
    rows, problems = rows_of(code)
    assert not problems
    refused = [r.address - BASE for r in rows if r.problem]
    assert refused == [0x10]  # the second `itt lt`: released on one path, not on the other
    body = [r for r in rows if r.address - BASE == 0x1A][0]
    assert (body.cfa_reg, body.cfa_offset) == (SP, 24)  # after the blocks: the path where lt failed


@pytest.mark.parametrize("index", range(12))
def test_the_generators_rows_at_every_instruction(index):
    """Before each instruction of each generated function, the frame found
    from its code alone means what the rows its generator derived from the
    instructions it chose (gcc style) say: the same CFA (the generator's
    through r7 where the analysis knows r7's distance to it) and the same
    save slots."""
    program = generate_program(7, index)
    reference = {f.start: f for f in program.cfi["reference"]}
    for info in program.functions:
        expected = reference[info.start]
        assert analyse(info.name, info.start, info.end, program.code).problems == ()
        for address, state in frame_states(info.start, info.end, program.code).items():
            assert state is not None and agrees(expected.row_at(address), state), (info.name, hex(address))


def test_v2_code_unwinds_every_stop_of_generated_programs():
    for index in range(4):
        program = generate_program(11, index)
        result = verify_program(program, build_unwinders(program, ["v2-code"]))
        assert result.self_check_ok and result.stops > 500
        assert not any(kind for (_u, _t, _p, kind) in result.counts), result.counts


def test_gccs_table_of_addresses_is_followed():
    """GCC -O0: `cmp r3, #n; bhi default; adr r2, table; ldr.w pc, [r2, r3, lsl #2]`."""
    cases = [BASE + 0x20, BASE + 0x22]
    code = bytearray(assemble(["push {r7, lr}", "cmp r3, #1", "bhi 0x100024"], BASE))  # 0x0-0x6
    code += bytes.fromhex("00bf" "01a2" "52f823f0" "00bf")  # 0x6 nop; 0x8 adr r2, 0x10; 0xa ldr.w pc, [...]
    code += b"".join((case | 1).to_bytes(4, "little") for case in cases) + b"\0" * 8  # 0x10: the table
    code += assemble(["movs r0, #1", "movs r0, #2", "pop {r7, pc}"], BASE + 0x20)
    rows, problems = rows_of(bytes(code))
    assert not problems
    assert [(r.address - BASE, r.problem or r.cfa_offset) for r in rows] == [
        (0, 0), (2, 8), (0xE, "no path reaches this code"), (0x20, 8)]  # padding and the table; both cases run


def test_function_starts_come_from_thumb_symbols():
    """Not from unwind rules: libgcc's division wrappers, which have no CFI,
    get rows too (an alias keeps one span; spans are sorted and disjoint)."""
    spans = thumb_functions(open_elf("corpus/elf/gcc-O2-fp.elf"))
    names = {name for _, _, name in spans}
    assert {"entry", "__udivsi3", "__aeabi_idivmod"} <= names and "__aeabi_uidiv" not in names  # its alias
    assert all(start < end for start, end, _ in spans)
    assert all(end <= following for (_, end, _), (following, _, _) in zip(spans, spans[1:]))


def test_encode_from_code_writes_tables_that_unwind_every_stop(tmp_path, capsys, monkeypatch):
    elf, blob = "corpus/elf/clang-O2-nofp.elf", tmp_path / "code.bin"
    monkeypatch.setattr(table_commands, "SHOWN_EVERY", 0.0)  # stderr is no terminal here: a line each start
    assert main(["encode", elf, "--from-code", "--epilogue", "keep", "-o", str(blob)]) == 0
    out, err = capsys.readouterr()
    assert "CFI the encoder could not express or ignored: 0" in out
    shown = err.splitlines()
    image = open_elf(elf)
    functions = sum(f.name != GAP for f in analyse_all(code_map(image, read_exidx_sections(image)), load_code(image)))
    assert shown[0] == f"{elf}: 1 of {shown[0].split(' of ')[1].split()[0]} function starts analysed"
    assert re.fullmatch(rf"{elf}: {functions} function starts analysed in [0-9.]+ s \([0-9,]+ a second\)", shown[-1])
    counts = [re.fullmatch(rf"{elf}: (\d+) of (\d+) function starts analysed", line).groups() for line in shown[:-1]]
    assert len(counts) >= functions and all(int(done) <= int(known) for done, known in counts)  # a line an analysis
    report = tmp_path / "report.json"
    assert main(["verify-elf", elf, "--entry", "entry", "--unwinder", "v2", "--v2-table", str(blob),
                 "--json", str(report)]) == 0
    rows = json.loads(report.read_text())["results"]
    whole = next(r for r in rows if (r["unwinder"], r["category"], r["position"]) == ("v2", "all", "all"))
    assert whole["stops"] > 5000 and whole["failed"] == 0  # clang describes no epilogue: these rows do


def test_encode_from_code_of_a_stripped_elf_finds_its_functions_else_a_one_line_error(tmp_path, capsys):
    """Without `.symtab`, the functions are found from the entry point, the
    `.ARM.exidx` index, the data's pointers at code (.rodata holds a table
    of six) and the calls; with none of the first three, none."""
    data = bytearray(open("corpus/elf/gcc-O2-fp.elf", "rb").read())
    elf = open_elf("corpus/elf/gcc-O2-fp.elf").elf
    headers = {section.name: elf["e_shoff"] + index * elf["e_shentsize"]
               for index, section in enumerate(elf.iter_sections())}
    data[headers[".symtab"] + 4:headers[".symtab"] + 8] = (1).to_bytes(4, "little")  # SHT_PROGBITS: no symbols
    stripped = tmp_path / "stripped.elf"
    stripped.write_bytes(bytes(data))
    assert main(["encode", str(stripped), "--from-code", "-o", str(tmp_path / "out.bin")]) == 0
    data[0x18:0x1C] = bytes(4)  # e_entry 0
    name = elf.get_section(elf["e_shstrndx"])["sh_offset"] + elf.get_section_by_name(".ARM.exidx")["sh_name"]
    data[name:name + 10] = b".ARM.other"  # no index by that name
    rodata = elf.get_section_by_name(".rodata")
    data[rodata["sh_offset"]:rodata["sh_offset"] + rodata["sh_size"]] = bytes(rodata["sh_size"])
    stripped.write_bytes(bytes(data))
    (tmp_path / "out.bin").unlink()
    capsys.readouterr()
    status = main(["encode", str(stripped), "--from-code", "-o", str(tmp_path / "out.bin")])
    error = capsys.readouterr().err.strip()
    assert status == 2 and "no Thumb function symbols" in error and "\n" not in error
    assert not (tmp_path / "out.bin").exists()


def test_compare_sets_the_rows_beside_the_compilers_and_running_says_who_was_right():
    """gcc-O2-fp's large frames (finding A): GCC keeps the CFA on r7 while
    `adds r7, #12` moves it before `mov sp, r7`; the analysis follows r7.
    Running the program shows the compiler's rows wrong there, ours right."""
    image = open_elf("corpus/elf/gcc-O2-fp.elf")
    compiler = read_cfi(image)
    found = compare(compiler, load_code(image))
    assert found.functions == len(compiler) and found.agree > 2900 and found.refused == 0
    at = {(d.function, d.instruction): d for d in found.disagreements}
    moved = at[("frame4k_big", "adds r7, #0xc")]
    # sp is still 5016 below the CFA; r7, moved by 12, is 24 below it, not 5016
    assert (moved.compiler, moved.synthesized) == ("cfa=r7+5016 r4@cfa-12, r7@cfa-8, r14@cfa-4",
                                                   "cfa=r13+5016 r4@cfa-12, r7@cfa-8, r14@cfa-4")
    program = program_from_elf("corpus/elf/gcc-O2-fp.elf", "entry")
    judged = judge(found, program, compiler, elf_functions(image, True))
    totals = sum(found.verdicts.values(), Counter())
    # tc_with_frame pushes r4 only to keep sp aligned: the compiler describes a save, the rows none; both right
    both_right = sum(1 for d in found.disagreements if d.function == "tc_with_frame")
    assert judged > 0 and totals == Counter({"compiler wrong": judged - both_right, "compiler right": both_right,
                                            "synthesized right": judged})


def test_compare_runs_a_linux_program_and_says_who_was_right(tmp_path, capsys):
    """The Linux slice's cxxvirt-clang-O2-nofp, run as a process: clang
    describes no epilogue, so at `pop {r4, pc}` of `visit` (after `vpop
    {d8}`) its rule still counts the VFP save; every stop there is judged
    against the shadow stack, the executable loaded where the run put it."""
    program = cache() / "bin" / "cxxvirt-clang-O2-nofp"
    assert program.exists(), f"{program} is not built: run `make linux-slice` (make test does)"
    assert main(["encode", str(program), "--from-code", "--compare", "--run", "--sysroot", str(cache() / "sysroot"),
                 "-o", str(tmp_path / "x.bin")]) == 0
    lines = capsys.readouterr().out.splitlines()
    ran = next(line for line in lines if line.startswith("ran the program"))
    judged = int(ran.split(": ")[1].split()[0])
    assert judged > 0 and ran.endswith(f"compiler right at 0, synthesized right at {judged}")
    visit = next(line for line in lines if "visitERKNS_5Shape" in line and "pop {r4, pc}" in line)
    assert "compiler cfa=r13+16" in visit and "synthesized cfa=r13+8" in visit
    assert re.search(r"\| compiler wrong (\d+); synthesized right \1$", visit)


@pytest.mark.parametrize("extra", [["--compare"], ["--from-code", "--run"], ["--from-code", "--entry", "entry"],
                                   ["--from-code", "--compare", "--entry", "entry", "--run"],
                                   ["--from-code", "--compare", "--sysroot", "/"],
                                   ["--from-code", "--compare", "--", "an-argument"]])
def test_compare_options_that_do_not_go_together(tmp_path, capsys, extra):
    position = extra.index("--") if "--" in extra else len(extra)
    argv = ["encode", "corpus/elf/gcc-O2-fp.elf", *extra[:position], "-o", str(tmp_path / "x.bin"), *extra[position:]]
    assert main(argv) == 2 and capsys.readouterr().err.count("\n") == 1
    assert not (tmp_path / "x.bin").exists()


def test_v2_code_without_any_function_to_analyse_refuses_everywhere():
    from harness.errors import UnwindFailure
    from harness.program import Program
    from harness.unwind.frame import Frame

    code = assemble(["push {r4, lr}", "pop {r4, pc}"], BASE)
    stripped = Program("stripped", ((BASE, code),), BASE, BASE, ())  # no symbols, no layout
    unwinder = build_unwinders(stripped, ["v2-code"])[0]
    with pytest.raises(UnwindFailure) as refused:
        unwinder.step(Frame(r=(0,) * 13 + (0x8000, 0, BASE)), None, True)
    assert refused.value.kind == "no_info" and unwinder.name == "v2-code"


def test_gccs_position_independent_switch_is_followed():
    """GCC -Os: `adr r2, table; ldr.w r3, [r2, r3, lsl #2]; add r2, r3; bx r2`
    (bzip2's BZ2_bzCompress): offsets from the table, not a tail call."""
    code = bytearray(assemble(["push {r7, lr}", "cmp r3, #1", "bhi 0x10001c"], BASE))  # 0x0-0x6
    code += bytes.fromhex("02a2" "52f82330" "1a44" "1047")  # 0x6 adr r2, 0x10; ldr.w; add r2, r3; bx r2
    code += (0x18 - 0x10 + 1).to_bytes(4, "little") + (0x1A - 0x10 + 1).to_bytes(4, "little")  # 0x10: offsets
    code += assemble(["movs r0, #1", "movs r0, #2", "pop {r7, pc}"], BASE + 0x18)
    rows, problems = rows_of(bytes(code))
    assert not problems
    assert [(r.address - BASE, r.problem or r.cfa_offset) for r in rows] == [
        (0, 0), (2, 8), (0x10, "no path reaches this code"), (0x18, 8)]  # the table is data; both cases run


def test_clangs_frame_pointer_copy_scheduled_far_before_sp_is_set_from_it():
    """clang-14 -O2's epilogue of a function with variable-length arrays
    (tests/linux_src/shapes.c, with_vla): `sub.w r4, r7, #12` is 18 bytes
    before `mov sp, r4`, the epilogue's arithmetic between them; the return
    after it is known, not refused."""
    code = bytes.fromhex(
        "2de9f04f"  # push.w {r4-r11, lr}
        "03af"  # add r7, sp, #12
        "81b0"  # sub sp, #4
        "ebad0601"  # sub.w r6, sp, r1: sp moves by a computed amount
        "b546"  # mov sp, r6
        "55f82410"  # ldr.w r1, [r5, r4, lsl #2]
        "a7f10c04"  # sub.w r4, r7, #12
        "89ea0802"  # eor.w r2, r9, r8
        "86ea0a03"  # eor.w r3, r6, sl
        "1a44"  # add r2, r3
        "4840"  # eors r0, r1
        "1044"  # add r0, r2
        "a546"  # mov sp, r4
        "bde8f08f")  # ldmia.w sp!, {r4-r11, pc}
    rows, problems = rows_of(code)
    assert not problems
    saves = tuple((reg, -36 + 4 * n) for n, reg in enumerate((4, 5, 6, FP, 8, 9, 10))) + ((LR, -4),)  # r11 unnamed
    assert (rows[-1].address - BASE, rows[-1].cfa_reg, rows[-1].cfa_offset, rows[-1].saved) == (38, SP, 36, saves)


def _switch_through_lr(at: int) -> bytes:
    """GCC's switch in CPython's code (python3.11, 0x787b6): the table's
    address made with `addw lr, pc, #4`, then `ldr.w pc, [lr, r1, lsl #2]`;
    the function at `at`, three cases each returning."""
    words = b"".join((at + case + 1).to_bytes(4, "little") for case in (0x1C, 0x20, 0x24))
    return bytes.fromhex(
        "10b5"  # 0x00 push {r4, lr}
        "0229"  # 0x02 cmp r1, #2
        "0cd8"  # 0x04 bhi.n 0x20
        "00bf"  # 0x06 nop
        "0ff2040e"  # 0x08 addw lr, pc, #4: the table, at 0x10
        "5ef821f0"  # 0x0c ldr.w pc, [lr, r1, lsl #2]
    ) + words + bytes.fromhex("002010bd" "012010bd" "022010bd")  # 0x1c, 0x20, 0x24: movs r0, #n; pop {r4, pc}


def test_a_switch_whose_table_address_gcc_makes_with_addw_is_followed():
    rows, problems = rows_of(_switch_through_lr(BASE))
    assert not problems
    assert [(r.address - BASE, r.cfa_offset) for r in rows if not r.problem] == [(0, 0), (2, 8), (0x1C, 8)]


def test_a_word_inside_a_function_found_by_a_pointer_is_no_start_of_its_own():
    """In code linked where it runs, words of the data that look like Thumb
    addresses are taken one at a time, lowest first: the function a pointer
    leads to (no symbol names it) is found before the word pointing at one
    of its cases is looked at, and that case is then code it reaches."""
    code = assemble(["push {r4, lr}", "pop {r4, pc}"], BASE) + _switch_through_lr(BASE + 4)
    found, _ = discovered([], (), pointers=(BASE + 4 + 0x20 + 1, BASE + 4 + 1), fixed=True, code=code)
    assert [(f.name, f.start - BASE, f.end - BASE) for f in found if f.name != GAP] == [("fn_100004", 4, 0x2C)]
    assert not found[-1].problems


def test_a_long_analysis_of_a_module_says_how_far_it_is(monkeypatch, capsys):
    """v2-code's tables of a module met for the first time: once the
    analysis has taken NOTE_AFTER seconds, a line on stderr every NOTE_EVERY
    names the module and the starts analysed (quick ones stay quiet)."""
    from harness import unwind

    program = program_from_elf("corpus/elf/gcc-O2-fp.elf", "entry")
    unwind.code_cfi(program, unwind.AnalysisNote(program.name))
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(unwind, "NOTE_AFTER", -1.0)
    monkeypatch.setattr(unwind, "NOTE_EVERY", 0.0)
    unwind.code_cfi(program, unwind.AnalysisNote(program.name))
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) > 10 and all(line.startswith("unwind-harness: v2-code: making gcc-O2-fp.elf's tables from its "
                                                   "code") for line in lines), lines[:3]
    assert re.search(r": (\d+) of (\d+) function starts analysed, \d+ s$", lines[-1])


def test_a_table_bound_no_compiler_writes_leaves_the_table_unbounded():
    """`cmp.w r0, #0x7f000000` before `tbb [pc, r0]` (a hostile file's):
    no two billion entries are read; the table ends at its first case, in
    the Python and in the compiled analysis alike."""
    from harness.thumb.native import ProgramCode

    code = assemble(["push {r4, lr}", "cmp.w r0, #0x7f000000", "bhi done", "tbb [pc, r0]", "nop", "done:",
                     "pop {r4, pc}"], BASE)
    python = analyse_calling("f", BASE, BASE + len(code), lambda address, size: code[address - BASE:][:size])
    compiled = analyse_calling("f", BASE, BASE + len(code), ProgramCode([(BASE, code)]))
    assert compiled == python
    assert not python.function.problems  # one entry, 0: the nop after it; the next leads out, and ends it


def test_a_large_function_may_visit_more_states():
    """The guard against pathological code grows with the function: csmith's
    main at gcc -O0 (388 KB in one function, seeds 193 and 279 of the fuzz)
    needs more than 200,000 (path, fact) states, and was refused whole."""
    from harness.thumb.frame_analysis import MAX_STATES, STATES_PER_BYTE, _Analysis
    from harness.thumb.successors import Body

    nothing = lambda address, size: b""  # noqa: E731
    assert _Analysis(Body(BASE, BASE + 1000, nothing)).max_states == MAX_STATES
    assert _Analysis(Body(BASE, BASE + 388_000, nothing)).max_states == STATES_PER_BYTE * 388_000 > MAX_STATES


def test_padding_and_code_that_runs_off_the_end_are_no_landing_pads():
    """Code no branch reaches is tried as a landing pad from the frame of the
    function's calls. Padding before data or the function's end (the `nop`
    before a literal pool, those before the next function, which a function
    found without a symbol ends at) is never run and never a pad: no gap,
    its rows refuse, and discovery has nothing to analyse again for pads
    there. Nor is code whose path runs off the end into the next function.
    A real pad (it returns) is kept. The compiled analysis and the Python
    agree."""
    body = ["push {r7, lr}", "bl 0x100040", "pop {r7, pc}"]
    pool = ["push {r7, lr}", "ldr r0, [pc, #8]", "bl 0x100040", "pop {r7, pc}", "nop", ".word 0x12345678"]
    for lines, tail, pad, gaps in ((body + ["nop", "nop"], 8, False, ()),
                                   (body + ["movs r0, #1", "movs r0, #2"], 8, False, ((8, 12),)),
                                   (body + ["movs r0, #1", "pop {r7, pc}"], 8, True, ()), (pool, 10, False, ())):
        code = assemble(lines, BASE)
        compiled = ProgramCode([(BASE, code)])
        found = analyse_calling("f", BASE, BASE + len(code), compiled)
        python = analyse_calling("f", BASE, BASE + len(code), lambda address, size: compiled(address, size))
        assert found == python and not found.falls_through
        assert tuple((low - BASE, high - BASE) for low, high in found.unreached) == gaps
        in_force = [row for row in found.function.rows if row.address <= BASE + tail][-1]
        assert bool(in_force.problem) != pad, (lines, found.function.rows)
