"""Conformance with libunwindstack's reading of `.ARM.exidx` / `.ARM.extab`
(Android's unwinder: system/unwinding/libunwindstack, ArmExidx.cpp and
ElfInterfaceArm.cpp): one test per behaviour our `exidx` unwinder shares,
each naming the upstream function it pins (facts read from its source;
none of its code is here). Where GCC's unwinder (libgcc's pr-support.c)
reads the same bytes alike, it is named too.
"""

from __future__ import annotations

import pytest

from harness.errors import SpareEncoding, UnwindFailure
from harness.formats import ehabi
from harness.formats.arm_exidx import parse_exidx
from harness.registers import LR
from harness.unwind.exidx import ExidxUnwinder
from harness.unwind.frame import Stack, make_frame

EXIDX_AT, EXTAB_AT = 0x1000, 0x2000
STACK = 0x8000


def prel31(target: int, at: int) -> int:
    return (target - at) & 0x7FFFFFFF


def word(value: int) -> bytes:
    return value.to_bytes(4, "little")


def entry(index: int, function: int, second: int | None = None, extab_offset: int | None = None) -> bytes:
    at = EXIDX_AT + 8 * index
    if second is None:
        second = prel31(EXTAB_AT + extab_offset, at + 4)
    return word(prel31(function, at)) + word(second)


def one(second: int | None = None, extab: bytes = b"", extab_offset: int | None = None):
    """The entry of a function at 0x100, followed by a CANTUNWIND one at 0x200."""
    exidx = entry(0, 0x100, second, extab_offset) + entry(1, 0x200, 1)
    return parse_exidx(exidx, EXIDX_AT, extab, EXTAB_AT)[0]


def stack(*words: int) -> Stack:
    return Stack(STACK, b"".join(map(word, words)) + bytes(16))


def unwinder(*entries) -> ExidxUnwinder:
    return ExidxUnwinder(entries, end=0x400)


# --- ElfInterfaceArm::FindEntry ------------------------------------------------------------

def test_a_pc_before_the_first_entry_finds_nothing():
    """FindEntry fails below the first function start (ERROR_UNWIND_INFO)."""
    with pytest.raises(UnwindFailure) as caught:
        unwinder(one(0x80A8B0B0)).step(make_frame(0xFE, STACK), stack(), innermost=True)
    assert caught.value.kind == "no_info"


def test_the_last_entry_runs_to_the_end_of_its_code():
    """FindEntry maps every pc at or past the last start to the last entry
    (ours bounds it by the end of the section that holds it)."""
    found = unwinder(*parse_exidx(entry(0, 0x100, 0x80A8B0B0) + entry(1, 0x300, 0x80A8B0B0), EXIDX_AT))
    assert found.entry_for(0x3FE).start == 0x300


# --- ArmExidx::ExtractEntryData ------------------------------------------------------------

def test_cantunwind_ends_the_walk():
    """EXIDX_CANTUNWIND (1): ARM_STATUS_NO_UNWIND, the frame is the last."""
    cant = parse_exidx(entry(0, 0x100, 1), EXIDX_AT)[0]
    with pytest.raises(UnwindFailure) as caught:
        unwinder(cant).step(make_frame(0x110, STACK), stack(), innermost=True)
    assert caught.value.kind == "no_info"


def test_an_inline_entry_takes_personality_0_only():
    """Bit 31 set in the index: three instructions, personality index 0; any
    other index is ARM_STATUS_INVALID_PERSONALITY."""
    assert one(0x80A8B0B0).ops == (ehabi.Pop((4, LR)), ehabi.FINISH)
    assert one(0x8100B0B0).kind == "unreadable"


def test_pr1_counts_its_extra_words_in_bits_16_to_23():
    """Personality 1 (Lu16): byte 2 counts the words after the first, whose
    bytes 1 and 0 are the first two instructions."""
    extab = word(0x8101A8B0) + word(0xB0B0B0B0)
    assert one(extab=extab, extab_offset=0).ops == (ehabi.Pop((4, LR)), ehabi.FINISH)


def test_a_generic_personality_counts_from_the_word_after_it():
    """Bit 31 clear in .ARM.extab: the personality routine's address is
    skipped; the next word's top byte counts extra words, its low three
    bytes are instructions (libgcc's __gnu_unwind_frame reads the same)."""
    extab = word(prel31(0x9000, EXTAB_AT)) + word(0x01A8B0B0) + word(0xB0B0B0B0)
    found = one(extab=extab, extab_offset=0)
    assert (found.kind, found.ops) == ("generic", (ehabi.Pop((4, LR)), ehabi.FINISH))


def test_more_than_5_extra_words_is_malformed():
    """ExtractEntryData: more than 5 additional words is ARM_STATUS_MALFORMED
    (GCC would read up to 255); that entry only."""
    extab = word(prel31(0x9000, EXTAB_AT)) + word(0x06A8B0B0) + bytes(24)
    found = one(extab=extab, extab_offset=0)
    assert found.kind == "unreadable" and "at most 5" in found.problem


def test_a_missing_finish_is_implied():
    """A finish is appended when the last byte is not one."""
    assert one(0x80A8A8A8).ops == (ehabi.Pop((4, LR)), ehabi.Pop((4, LR)), ehabi.Pop((4, LR)), ehabi.FINISH)


def test_one_bad_entry_fails_that_function_only():
    """StepExidx builds an ArmExidx per step: a malformed entry fails its
    own step; the next function unwinds."""
    walker = unwinder(*parse_exidx(entry(0, 0x100, 0x80B4B0B0) + entry(1, 0x201, 0x80A8B0B0), EXIDX_AT))
    with pytest.raises(UnwindFailure) as caught:
        walker.step(make_frame(0x110, STACK), stack(), innermost=True)
    assert caught.value.kind == "corrupt_table"
    caller = walker.step(make_frame(0x210, STACK), stack(0x44, 0x1235), innermost=True)
    assert (caller.pc, caller.r[4]) == (0x1234, 0x44)


# --- ArmExidx::Decode ----------------------------------------------------------------------

@pytest.mark.parametrize("code", ["b100", "b110", "b4", "b5", "b6", "b7", "c700", "c710", "ca", "cf", "d8", "ff",
                                  "9d", "9f"])
def test_spare_and_reserved_instructions_fail(code):
    """DecodePrefix_10_11_*, _11_*: spare encodings (ARM_STATUS_SPARE) and
    `vsp = r13` / `vsp = r15` (ARM_STATUS_RESERVED) end the step."""
    with pytest.raises(SpareEncoding):
        ehabi.decode(bytes.fromhex(code + "00"), run=True)


def test_refuse_to_unwind_ends_the_walk():
    """`80 00`: ARM_STATUS_NO_UNWIND."""
    refusing = one(0x808000B0)
    with pytest.raises(UnwindFailure) as caught:
        unwinder(refusing).step(make_frame(0x110, STACK), stack(), innermost=True)
    assert caught.value.kind == "no_info"


def test_wmmx_pops_move_vsp_only():
    """DecodePrefix_11_000: wR pops move vsp 8 bytes each, wCGR pops 4 each;
    no register is restored."""
    wmmx = one(0x80C1B0B0)  # pop {wR10, wR11}
    caller = unwinder(wmmx).step(make_frame(0x110, STACK, lr=0x3001), stack(), innermost=True)
    assert (caller.pc, caller.sp) == (0x3000, STACK + 16)


def test_fstmfdx_vfp_pops_skip_the_format_word():
    """`b8`: pop d8 saved by FSTMFDX: 8 bytes and one more word."""
    vfp = one(0x80B8B0B0)
    caller = unwinder(vfp).step(make_frame(0x110, STACK, lr=0x3001), stack(), innermost=True)
    assert caller.sp == STACK + 12


def test_finish_takes_pc_from_lr_unless_pc_was_popped():
    """Eval: pc = lr at the end when no pop set pc."""
    popped = one(0x80A8B0B0)
    caller = unwinder(popped).step(make_frame(0x110, STACK, lr=0x3001), stack(0x44, 0x1235), innermost=True)
    assert caller.pc == 0x1234  # lr popped, then pc = lr: the popped value
