"""The design's worked example: the start of std::istream::operator>>(double&).

    9ef4dc: b570  push {r4, r5, r6, lr}
    9ef4de: b086  sub  sp, #24
    9ef4e0: ...   body
"""

import struct

import pytest

from harness.formats import ehabi
from harness.formats.chrome_v2 import LAYOUTS, V2Reader, encode
from harness.program import CfiRow, FunctionCfi
from harness.unwind.frame import Frame, Stack
from harness.unwind.v2 import V2Unwinder

START = 0x9EF4DC
SAVES = ((4, -16), (5, -12), (6, -8), (14, -4))
FUNCTION = FunctionCfi(
    "std::istream::operator>>(double&)",
    START,
    START + 0x40,
    (CfiRow(START), CfiRow(START + 2, 13, 16, SAVES), CfiRow(START + 4, 13, 40, SAVES)),
)
CALLER_SP = 0x7FFF0100
CALLER = {"r4": 0x44444444, "r5": 0x55555555, "r6": 0x66666666, "lr": 0x00401235}


def test_three_offsets_and_their_runs():
    encoded = encode([FUNCTION], START)
    unwinds = encoded.functions[0].address_unwinds
    assert [(u.offset, u.instructions.hex(" ")) for u in unwinds] == [
        (0, "b0"),
        (2, "aa b0"),
        (4, "05 aa b0"),
    ]
    assert [ehabi.text(ehabi.decode(u.instructions)) for u in unwinds] == [
        "finish",
        "pop {r4-r6, r14}; finish",
        "vsp = vsp + 24; pop {r4-r6, r14}; finish",
    ]


def stopped_at(offset: int) -> tuple[Frame, Stack]:
    """Registers and stack as they really are after executing up to `offset`."""
    saved = struct.pack("<4I", CALLER["r4"], CALLER["r5"], CALLER["r6"], CALLER["lr"])
    locals_ = bytes(range(0xA0, 0xA0 + 24))
    low = CALLER_SP - 40
    memory = locals_ + saved + b"\xEE" * 64  # the caller's frame lies above
    sp = {0: CALLER_SP, 2: CALLER_SP - 16}.get(offset, CALLER_SP - 40)
    # The callee may already have reused r4-r6; lr still holds the return address.
    regs = [0] * 16
    regs[4:7] = [0xBAD4, 0xBAD5, 0xBAD6] if offset else [CALLER["r4"], CALLER["r5"], CALLER["r6"]]
    regs[13], regs[14], regs[15] = sp, CALLER["lr"], START + offset
    return Frame(r=tuple(regs)), Stack(low, memory)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("offset", [0, 2, 4, 6, 0x20])
def test_unwinds_from_each_address(layout, offset):
    blob = encode([FUNCTION], START, layout=layout).blob()
    unwinder = V2Unwinder(V2Reader.from_blob(blob, layout), START)
    frame, stack = stopped_at(offset)
    caller = unwinder.step(frame, stack, innermost=True)
    assert caller.pc == CALLER["lr"] & ~1
    assert caller.sp == CALLER_SP
    assert caller.r[4:7] == (CALLER["r4"], CALLER["r5"], CALLER["r6"])
