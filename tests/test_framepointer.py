"""FramePointerUnwinder: hand-built stacks, and the calls fixtures.

Measured on the calls fixtures (stops / failing stops):
  calls-clang-fp   442 / 435   calls-clang-nofp 420 / 419
  calls-gcc-fp     525 / 524   calls-gcc-nofp   425 / 424
Almost every stop fails, but for different reasons: in clang -fp builds the
pc/sp chain is right and only r4-r11 (never recovered by frame-pointer
walking) mismatch; everywhere else the pc/sp chain itself breaks.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

from harness.compiled import program_from_elf
from harness.errors import UnwindFailure
from harness.frame import Stack, make_frame
from harness.unwinders.framepointer import FramePointerUnwinder
from harness.verify import verify_program

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
    # At body stops of functions with a frame record, pc and sp come out right
    # for every frame; all that fails is wrong_register (r4-r11 other than r7
    # are not restored by frame-pointer walking). Measured: 232 wrong_register,
    # 6 passes (stops where the caller's r4-r11 happened to be untouched).
    result = run("calls-clang-fp")
    kinds = body_kinds(result, frame_pointer=True, leaf=False)
    assert set(kinds) <= {None, "wrong_register"}
    assert kinds.get(None, 0) > 0 and kinds.get("wrong_register", 0) > 0
    fp_functions = {f.name for f in run_program("calls-clang-fp").functions
                    if "frame_pointer" in f.traits}
    for failure in result.failures:
        if failure.function in fp_functions and failure.position == "body":
            assert failure.kind == "wrong_register" and failure.register != "r7"
    assert not any(f.kind in {"wrong_pc", "wrong_sp"} and f.frame == 0 and f.position == "body"
                   and f.function in fp_functions for f in result.failures)


def test_clang_fp_leaf_without_record_skips_its_caller():
    # clang omits the frame record in leaf_mix (no push at all), so r7 still
    # points at the caller's valid record: the heuristic cannot tell, the
    # caller frame is skipped, and every leaf_mix stop is wrong_pc at frame 0.
    result = run("calls-clang-fp")
    leaf = [f for f in result.failures if f.function == "leaf_mix"]
    assert leaf and all(f.kind == "wrong_pc" and f.frame == 0 for f in leaf)


@pytest.mark.parametrize("name", ["calls-clang-nofp", "calls-gcc-nofp", "calls-gcc-fp"])
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
