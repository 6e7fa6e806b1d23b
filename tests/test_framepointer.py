"""FramePointerUnwinder: hand-built stacks, and the calls fixtures.

Frame-pointer walking is checked on pc, sp and r7 only: a frame record says
nothing about r4-r6 and r8-r11. Where clang keeps {r7, lr} records, and in
GCC code whose frames hold nothing but {r7, lr} (fpchain), the chain is right
at every body stop of a function with a record; with r7 a general register
(nofp builds) it breaks.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

from harness.elf_program import program_from_elf
from harness.errors import UnwindFailure
from harness.unwind.frame import Stack, make_frame
from harness.unwind.framepointer import FramePointerUnwinder
from harness.verify.stops import verify_program

FIXTURES = Path(__file__).resolve().parent.parent / "corpus" / "fixtures"
CHAIN_KINDS = {"wrong_pc", "wrong_sp", "bad_read", "limit"}  # the pc/sp chain broke


@lru_cache(maxsize=None)
def run_program(name: str):
    return program_from_elf(str(FIXTURES / f"{name}.elf"), "entry")


@lru_cache(maxsize=None)
def run(name: str):
    program = run_program(name)
    result = verify_program(program, [FramePointerUnwinder()])
    assert result.self_check_ok
    return result


def body_kinds(result, *, frame_pointer: bool, leaf: bool) -> dict:
    """Failure kind (None: pass) -> stops, over body stops of matching functions."""
    kinds: dict = {}
    for (_, traits, position, kind), n in result.counts.items():
        if (position == "body" and ("frame_pointer" in traits) == frame_pointer
                and ("leaf" in traits) == leaf):
            kinds[kind] = kinds.get(kind, 0) + n
    return kinds


# --- hand-built stacks -------------------------------------------------------

LOW = 0x1000


def stack_with(words: dict[int, int], size: int = 0x100) -> Stack:
    data = bytearray(size)
    for address, value in words.items():
        data[address - LOW : address - LOW + 4] = value.to_bytes(4, "little")
    return Stack(LOW, bytes(data))


# Two frame records: inner at 0x1020 -> outer at 0x1040 -> end of chain (0).
CHAIN = stack_with({0x1020: 0x1040, 0x1024: 0x8001, 0x1040: 0, 0x1044: 0x9003})


def test_two_frame_chain_exact_pc_sp():
    unwinder = FramePointerUnwinder()
    frame = make_frame(pc=0x7000, sp=0x1010, lr=0x7777, r7=0x1020, r4=0x44, r11=0xBB)
    caller = unwinder.step(frame, CHAIN, innermost=True)
    assert (caller.pc, caller.sp, caller.r[7]) == (0x8000, 0x1028, 0x1040)
    # Frame-pointer walking cannot restore other callee-saved registers.
    assert (caller.r[4], caller.r[11]) == (0x44, 0xBB)
    outer = unwinder.step(caller, CHAIN, innermost=False)
    assert (outer.pc, outer.sp, outer.r[7]) == (0x9002, 0x1048, 0)


def test_leaf_heuristic_word_at_fp_below_fp_is_not_a_saved_fp():
    # r7 points into the stack, but the word there (0x0801) is smaller than r7:
    # by the seed's rule that is code, not a saved frame pointer -> leaf.
    stack = stack_with({0x1020: 0x0801, 0x1024: 0x9001})
    frame = make_frame(pc=0x7000, sp=0x1010, lr=0x6001, r7=0x1020)
    caller = FramePointerUnwinder().step(frame, stack, innermost=True)
    assert (caller.pc, caller.sp, caller.r[7]) == (0x6000, 0x1010, 0x1020)


def test_leaf_heuristic_fp_outside_stack_innermost():
    frame = make_frame(pc=0x7000, sp=0x1010, lr=0x6001, r7=0x12345)
    caller = FramePointerUnwinder().step(frame, CHAIN, innermost=True)
    assert (caller.pc, caller.sp) == (0x6000, 0x1010)


@pytest.mark.parametrize("fp", [0x12345678, 0x0, 0x1008, 0x1022, 0x10FC])
def test_bad_read_when_fp_outside_stack_or_misaligned(fp):
    # outside the stack, below sp, misaligned, record running off the top
    frame = make_frame(pc=0x7000, sp=0x1010, r7=fp)
    with pytest.raises(UnwindFailure) as caught:
        FramePointerUnwinder().step(frame, CHAIN, innermost=False)
    assert caught.value.kind == "bad_read"


# --- the calls fixtures ------------------------------------------------------

def test_clang_fp_chain_is_right_at_frame_record_bodies():
    # clang -fno-omit-frame-pointer: push {..., r7, lr}; add r7, sp, #k.
    # Every body stop of a calling function walks right down to the sentinel.
    kinds = body_kinds(run("calls-clang-fp"), frame_pointer=True, leaf=False)
    assert set(kinds) == {None} and kinds[None] > 100


@pytest.mark.parametrize("name", ["fpchain-gcc-fp", "fpchain-clang-fp"])
def test_fp_chain_walks_when_frames_are_just_records(name):
    # GCC's Thumb r7 points at the bottom of the frame; in fpchain no frame
    # holds more than {r7, lr}, so r7 points at a record and the walk works
    # at every body and epilogue stop of the calling functions.
    result = run(name)
    for position in ("body", "epilogue"):
        kinds = {kind: n for (_, traits, where, kind), n in result.counts.items()
                 if where == position and "leaf" not in traits}
        assert set(kinds) == {None}, (position, kinds)


def test_gcc_fp_leaf_pushing_r7_alone_defeats_the_heuristic():
    # GCC's fp_leaf: push {r7}; add r7, sp, #0. The word at r7 is the saved
    # (higher) r7, so the heuristic takes it for a record and reads the
    # return address from the caller's frame: wrong pc at frame 0.
    leaf = [f for f in run("fpchain-gcc-fp").failures if f.function == "fp_leaf"]
    assert leaf and {f.kind for f in leaf} == {"wrong_pc"} and {f.frame for f in leaf} == {0}


def test_clang_fp_leaf_without_record_skips_its_caller():
    # clang omits the frame record in leaf_mix (no push at all), so r7 still
    # points at the caller's valid record: the heuristic cannot tell, the
    # caller frame is skipped, and every leaf_mix stop is wrong_pc at frame 0.
    result = run("calls-clang-fp")
    leaf = [f for f in result.failures if f.function == "leaf_mix"]
    assert leaf and all(f.kind == "wrong_pc" and f.frame == 0 for f in leaf)


@pytest.mark.parametrize("name", ["calls-clang-nofp", "calls-gcc-nofp", "calls-gcc-fp",
                                  "fpchain-gcc-nofp", "fpchain-clang-nofp"])
def test_chain_breaks_without_clang_frame_records(name):
    # nofp builds: r7 is a general register. calls-gcc-fp: GCC's Thumb r7
    # points at the bottom of the frame (no {r7, lr} record), so [r7] and
    # [r7 + 4] are locals/saved registers, not a caller fp and return address.
    # Either way no body stop of a calling function walks, and every failure
    # is a broken pc/sp chain, never just a register mismatch.
    result = run(name)
    kinds = body_kinds(result, frame_pointer=name.endswith("-fp"), leaf=False)
    assert kinds and None not in kinds
    assert set(kinds) <= CHAIN_KINDS
    assert {f.kind for f in result.failures} <= CHAIN_KINDS
    assert {"wrong_pc", "wrong_sp"} <= {f.kind for f in result.failures}


def test_clang_nofp_leaf_heuristic_gets_frame_zero_then_breaks():
    # In the nofp leaf_mix r7 holds no record, so the heuristic takes pc = lr
    # (frame 0 right); the walk then breaks in the caller (bad_read, frame 1).
    leaf = [f for f in run("calls-clang-nofp").failures if f.function == "leaf_mix"]
    assert leaf and all(f.kind == "bad_read" and f.frame == 1 for f in leaf)
