"""The v2 unwinder's safety checks and the stack walk's loop guards."""

import pytest

from harness.errors import UnwindFailure
from harness.formats.chrome_v2 import V2Reader, encode
from harness.program import CfiRow, FunctionCfi
from harness.unwind.frame import Stack, make_frame
from harness.unwind.v2 import V2Unwinder
from harness.unwind.walk import walk

BASE = 0x10000
STACK = Stack(0x8000, bytes(0x100))


def unwinder_for(*functions: FunctionCfi) -> V2Unwinder:
    encoded = encode(list(functions), BASE)
    return V2Unwinder(V2Reader.from_blob(encoded.blob()), BASE)


def leaf(start=BASE, size=0x20):
    return FunctionCfi("leaf", start, start + size, (CfiRow(start),))


def test_leaf_with_unchanged_sp_returns_to_lr():
    unwinder = unwinder_for(leaf())
    caller = unwinder.step(make_frame(BASE + 4, 0x8080, lr=0x20001), STACK, innermost=True)
    assert (caller.pc, caller.sp) == (0x20000, 0x8080)


def test_unchanged_sp_is_a_loop_outside_the_innermost_frame():
    unwinder = unwinder_for(leaf())
    with pytest.raises(UnwindFailure) as failure:
        unwinder.step(make_frame(BASE + 4, 0x8080, lr=0x20001), STACK, innermost=False)
    assert failure.value.kind == "limit"


def test_unchanged_sp_and_pc_is_a_loop_even_innermost():
    unwinder = unwinder_for(leaf())
    with pytest.raises(UnwindFailure) as failure:
        unwinder.step(make_frame(BASE + 4, 0x8080, lr=BASE + 4), STACK, innermost=True)
    assert failure.value.kind == "limit"


def test_misaligned_sp_fails():
    row = CfiRow(BASE + 2, 7, 8)  # CFA = r7 + 8, and r7 holds a misaligned value
    unwinder = unwinder_for(FunctionCfi("f", BASE, BASE + 0x20, (CfiRow(BASE), row)))
    frame = make_frame(BASE + 4, 0x8080, lr=0x20001, r7=0x8092)
    with pytest.raises(UnwindFailure) as failure:
        unwinder.step(frame, STACK, innermost=True)
    assert failure.value.kind == "bad_read"


def test_sp_leaving_the_stack_fails():
    row = CfiRow(BASE + 2, 13, 0x1000)
    unwinder = unwinder_for(FunctionCfi("f", BASE, BASE + 0x20, (CfiRow(BASE), row)))
    with pytest.raises(UnwindFailure) as failure:
        unwinder.step(make_frame(BASE + 4, 0x8080, lr=0x20001), STACK, innermost=True)
    assert failure.value.kind == "bad_read"


def test_pc_outside_the_tables_has_no_info():
    unwinder = unwinder_for(leaf())
    for pc in (BASE - 2, BASE + 0x40000):
        with pytest.raises(UnwindFailure) as failure:
            unwinder.step(make_frame(pc, 0x8080, lr=0x20001), STACK, innermost=True)
        assert failure.value.kind == "no_info"


def test_return_address_is_looked_up_one_byte_earlier():
    # A call to a no-return function can be the last instruction of "a": its
    # return address is the first byte of "b". The caller frame must use "a".
    a = FunctionCfi("a", BASE, BASE + 0x10, (CfiRow(BASE), CfiRow(BASE + 2, 13, 8, ((14, -4),))))
    b = FunctionCfi("b", BASE + 0x10, BASE + 0x20, (CfiRow(BASE + 0x10),))
    unwinder = unwinder_for(a, b)
    assert "vsp = vsp + 4" in str(unwinder.instructions_for(BASE + 0x10 - 1)[0])
    assert str(unwinder.instructions_for(BASE + 0x10)[0]) == "finish"


def test_walk_stops_after_the_frames_asked_for():
    # A self-recursive frame layout: the walk goes on as long as it is asked to.
    saves = ((14, -4),)
    f = FunctionCfi("f", BASE, BASE + 0x20, (CfiRow(BASE), CfiRow(BASE + 2, 13, 8, saves)))
    unwinder = unwinder_for(f)
    words = []
    for _ in range(32):
        words += [0, BASE + 0x11]  # padding, return address back into f
    stack = Stack(0x8000, b"".join(w.to_bytes(4, "little") for w in words))
    frames = list(walk(unwinder, make_frame(BASE + 4, 0x8000), stack, 10))
    assert len(frames) == 10
    assert [f.sp for f in frames] == [0x8000 + 8 * n for n in range(1, 11)]
    assert all(f.pc == BASE + 0x10 for f in frames)
