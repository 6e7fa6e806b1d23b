"""EHABI instruction bytes (EHABI section 10.3, table 4): `encode` writes
each op in its shortest form, which for a large `VspAdd` or a VFP range
crossing d15/d16 may be more than one instruction; `decode` reads them back,
one handler per bit pattern of the table."""

from __future__ import annotations

from typing import Callable, Iterable

from harness.errors import EhabiError, SpareEncoding, TruncatedSequence
from harness.formats import uleb128
from harness.formats.ehabi.ops import FINISH, REFUSE, Finish, Op, Pop, PopVfp, PopWmmx, Refuse, SetVsp, VspAdd
from harness.registers import LR, PC, SP

# The opcodes Chrome's v2 runtime executes (ChromeUnwinderAndroid32's
# ExecuteUnwindInstruction): vsp += / -= (00-7f), pop under a mask of
# r4-r15 (80-8f), vsp = rN (90-9f), pop r4-rN and lr (a8-af), finish
# (b0) and vsp += uleb (b2). Anything else stops it (NOTREACHED).
CHROME_RUNTIME_FIRST_BYTES = frozenset((*range(0x00, 0xA0), *range(0xA8, 0xB1), 0xB2))


def encode(ops: Iterable[Op], chrome: bool = False) -> bytes:
    """The bytes of `ops`; with `chrome`, only in opcodes Chrome's runtime
    executes (pops of r4-r15 only: a pop without lr in the mask form)."""
    return b"".join(encode_op(op, chrome) for op in ops)


def encode_op(op: Op, chrome: bool = False) -> bytes:
    if isinstance(op, VspAdd):
        return _encode_vsp_add(op.amount)
    if isinstance(op, SetVsp):
        if op.reg in (SP, PC) or not 0 <= op.reg <= 15:
            raise ValueError(f"vsp = r{op.reg} is not encodable")
        return bytes([0x90 | op.reg])
    if isinstance(op, Pop):
        return _encode_pop(op.regs, chrome)
    if isinstance(op, PopVfp):
        if chrome:
            raise ValueError(f"{op}: Chrome's runtime pops no VFP register")
        return _encode_pop_vfp(op)
    if isinstance(op, PopWmmx):
        return _encode_pop_wmmx(op)
    if isinstance(op, Finish):
        return b"\xb0"
    if isinstance(op, Refuse):
        return b"\x80\x00"
    raise TypeError(f"not an EHABI op: {op!r}")


def _encode_vsp_add(amount: int) -> bytes:
    if amount % 4:
        raise ValueError(f"vsp adjustment {amount} is not a multiple of 4")
    if amount == 0:
        return b""
    if amount < 0:
        # 01xxxxxx subtracts up to 0x100 at a time.
        out = bytearray()
        remaining = -amount
        while remaining:
            step = min(remaining, 0x100)
            out.append(0x40 | ((step - 4) >> 2))
            remaining -= step
        return bytes(out)
    if amount <= 0x100:
        return bytes([(amount - 4) >> 2])
    if amount <= 0x200:
        return bytes([0x3F, (amount - 0x100 - 4) >> 2])
    # From 0x204 on, 0xb2 + ULEB128 is never longer than any chain of short forms.
    return b"\xb2" + uleb128.encode((amount - 0x204) >> 2)


def _encode_pop(regs: tuple[int, ...], chrome: bool = False) -> bytes:
    regset = sorted(set(regs))
    if not regset or len(regset) != len(regs) or regset[0] < 0 or regset[-1] > 15:
        raise ValueError(f"bad pop register list {regs}")
    if chrome and regset[0] < 4:
        raise ValueError(f"pop {regs}: Chrome's runtime pops no r0-r3")
    low = [r for r in regset if r < 4]
    high = [r for r in regset if r >= 4]
    # r0-r3 sit below r4-r15 in one push, so they are popped first.
    out = bytearray()
    if low:
        out += bytes([0xB1, sum(1 << r for r in low)])
    if high:
        run_without_lr = [r for r in high if r != LR]
        n = len(run_without_lr) - 1
        contiguous_from_r4 = 0 <= n <= 7 and run_without_lr == list(range(4, 5 + n))
        if contiguous_from_r4 and LR not in high and not chrome:
            out.append(0xA0 | n)
        elif contiguous_from_r4 and high == run_without_lr + [LR]:
            out.append(0xA8 | n)
        else:
            mask = sum(1 << (r - 4) for r in high)
            out += bytes([0x80 | (mask >> 8), mask & 0xFF])
    return bytes(out)


def _encode_pop_wmmx(op: PopWmmx) -> bytes:
    regs = sorted(op.regs)
    if op.control:
        if not regs or regs[0] < 0 or regs[-1] > 3 or len(set(regs)) != len(regs):
            raise ValueError(f"bad wCGR pop {op.regs}")
        return bytes([0xC7, sum(1 << r for r in regs)])
    first, count = regs[0] if regs else -1, len(regs)
    if first < 0 or regs != list(range(first, first + count)) or first + count > 16:
        raise ValueError(f"bad wR pop {op.regs}")
    if first == 10 and count <= 6:
        return bytes([0xC0 | (count - 1)])
    return bytes([0xC6, (first << 4) | (count - 1)])


def _encode_pop_vfp(op: PopVfp) -> bytes:
    first, count = op.first, op.count
    last = first + count - 1
    if count < 1 or first < 0 or last > 31:
        raise ValueError(f"bad VFP pop d{first} x{count}")
    if op.fstmfdx:
        if last > 15:
            raise ValueError("FSTMFDX pops cannot name d16-d31")
        if first == 8:
            return bytes([0xB8 | (count - 1)])
        return bytes([0xB3, (first << 4) | (count - 1)])
    if first <= 15 < last:
        below = PopVfp(first, 16 - first)
        above = PopVfp(16, last - 15)
        return _encode_pop_vfp(below) + _encode_pop_vfp(above)
    if first == 8 and count <= 8:
        return bytes([0xD0 | (count - 1)])
    if first >= 16:
        return bytes([0xC8, ((first - 16) << 4) | (count - 1)])
    return bytes([0xC9, (first << 4) | (count - 1)])


def decode(data: bytes | memoryview, pos: int = 0, end: int | None = None,
           run: bool = False, first_bytes: list[int] | None = None) -> list[Op]:
    """Decode instructions from data[pos:end].

    With `run=True`, stop after the first `finish` or refuse-to-unwind, and raise
    TruncatedSequence if `end` comes first (a table run must be terminated).
    With `first_bytes`, each instruction's first byte is appended to it
    (which instructions a runtime executes is decided by those: Chrome's).
    """
    stop = len(data) if end is None else end
    ops: list[Op] = []
    while pos < stop:
        reader = _Reader(data, pos, stop)
        op, pos = reader.op()
        ops.append(op)
        if first_bytes is not None:
            first_bytes.append(reader.byte)
        if run and isinstance(op, (Finish, Refuse)):
            return ops
    if run:
        raise TruncatedSequence("sequence ends without finish", pos)
    return ops


class _Reader:
    """One instruction at `start`: its first byte, and its operands after it."""

    def __init__(self, data, start: int, stop: int):
        self.data, self.start, self.stop = data, start, stop
        self.byte = data[start]
        self.pos = start + 1

    def operand(self) -> int:
        if self.pos >= self.stop:
            raise TruncatedSequence(f"instruction {self.byte:#04x} lacks its operand byte", self.start)
        self.pos += 1
        return self.data[self.pos - 1]

    def op(self) -> tuple[Op, int]:
        return _BY_FIRST_BYTE[self.byte](self), self.pos

    def spare(self, what: str) -> SpareEncoding:
        return SpareEncoding(what, self.start)


# One handler per instruction pattern of EHABI table 4, named by its bits.


def _00xxxxxx(r: _Reader) -> Op:  # vsp = vsp + (xxxxxx << 2) + 4
    return VspAdd(((r.byte & 0x3F) << 2) + 4)


def _01xxxxxx(r: _Reader) -> Op:  # vsp = vsp - (xxxxxx << 2) - 4
    return VspAdd(-(((r.byte & 0x3F) << 2) + 4))


def _1000iiii_iiiiiiii(r: _Reader) -> Op:  # pop r4-r15 under a mask; all zeros: refuse to unwind
    mask = ((r.byte & 0x0F) << 8) | r.operand()
    if mask == 0:
        return REFUSE
    return Pop(tuple(4 + i for i in range(12) if mask >> i & 1))


def _1001nnnn(r: _Reader) -> Op:  # vsp = r[nnnn]; 13 and 15 reserved
    reg = r.byte & 0x0F
    if reg in (SP, PC):
        raise r.spare(f"reserved instruction {r.byte:#04x} (vsp = r{reg})")
    return SetVsp(reg)


def _10100nnn(r: _Reader) -> Op:  # pop r4-r[4+nnn]
    return Pop(tuple(range(4, 5 + (r.byte & 7))))


def _10101nnn(r: _Reader) -> Op:  # pop r4-r[4+nnn], r14
    return Pop(tuple(range(4, 5 + (r.byte & 7))) + (LR,))


def _10110000(r: _Reader) -> Op:  # finish
    return FINISH


def _10110001_0000iiii(r: _Reader) -> Op:  # pop r0-r3 under a mask; others spare
    mask = r.operand()
    if mask == 0 or mask & 0xF0:
        raise r.spare(f"spare encoding b1 {mask:02x}")
    return Pop(tuple(i for i in range(4) if mask >> i & 1))


def _10110010_uleb128(r: _Reader) -> Op:  # vsp = vsp + 0x204 + (uleb128 << 2)
    try:
        value, r.pos = uleb128.decode(r.data, r.pos, r.stop)
    except IndexError:
        raise TruncatedSequence("unterminated ULEB128 after 0xb2", r.start) from None
    except ValueError as error:
        raise EhabiError(f"{error} after 0xb2", r.start) from None
    return VspAdd(0x204 + (value << 2))


def _10110011_sssscccc(r: _Reader) -> Op:  # pop d[ssss]-d[ssss+cccc] saved by FSTMFDX
    arg = r.operand()
    first, count = arg >> 4, (arg & 0x0F) + 1
    if first + count > 16:
        raise r.spare(f"b3 {arg:02x} names registers past d15")
    return PopVfp(first, count, fstmfdx=True)


def _101101nn(r: _Reader) -> Op:  # spare
    raise r.spare(f"spare encoding {r.byte:#04x}")


def _10111nnn(r: _Reader) -> Op:  # pop d8-d[8+nnn] saved by FSTMFDX
    return PopVfp(8, (r.byte & 7) + 1, fstmfdx=True)


def _11000nnn(r: _Reader) -> Op:  # Intel Wireless MMX: pop wR10-wR[10+nnn] (c0-c5), c6, c7
    if r.byte == 0xC7:  # pop wCGR under a mask; 00 and 1x-ff spare
        arg = r.operand()
        if arg == 0 or arg & 0xF0:
            raise r.spare(f"spare encoding c7 {arg:02x}")
        return PopWmmx(tuple(i for i in range(4) if arg >> i & 1), control=True)
    if r.byte == 0xC6:  # pop wR[ssss]-wR[ssss+cccc]
        arg = r.operand()
        first, count = arg >> 4, (arg & 0x0F) + 1
        if first + count > 16:
            raise r.spare(f"c6 {arg:02x} names registers past wR15")
        return PopWmmx(tuple(range(first, first + count)))
    return PopWmmx(tuple(range(10, 11 + (r.byte & 7))))


def _1100100x_sssscccc(r: _Reader) -> Op:  # pop d[16+ssss]... (c8) or d[ssss]... (c9) saved by VPUSH
    arg = r.operand()
    first, count = (16 if r.byte == 0xC8 else 0) + (arg >> 4), (arg & 0x0F) + 1
    if first + count > 32:
        raise r.spare(f"{r.byte:02x} {arg:02x} names registers past d31")
    return PopVfp(first, count)


def _11010nnn(r: _Reader) -> Op:  # pop d8-d[8+nnn] saved by VPUSH
    return PopVfp(8, (r.byte & 7) + 1)


def _spare(r: _Reader) -> Op:  # 11001yyy (y != 000, 001) and 11xxxyyy past d7: spare
    raise r.spare(f"spare encoding {r.byte:#04x}")


_HANDLERS: tuple[tuple[int, int, Callable[[_Reader], Op]], ...] = (
    (0x00, 0x3F, _00xxxxxx), (0x40, 0x7F, _01xxxxxx), (0x80, 0x8F, _1000iiii_iiiiiiii),
    (0x90, 0x9F, _1001nnnn), (0xA0, 0xA7, _10100nnn), (0xA8, 0xAF, _10101nnn),
    (0xB0, 0xB0, _10110000), (0xB1, 0xB1, _10110001_0000iiii), (0xB2, 0xB2, _10110010_uleb128),
    (0xB3, 0xB3, _10110011_sssscccc), (0xB4, 0xB7, _101101nn), (0xB8, 0xBF, _10111nnn),
    (0xC0, 0xC7, _11000nnn), (0xC8, 0xC9, _1100100x_sssscccc), (0xD0, 0xD7, _11010nnn),
    (0x00, 0xFF, _spare),
)
# The handler of each first byte: the first of _HANDLERS whose range holds it.
_BY_FIRST_BYTE = tuple(next(handler for low, high, handler in _HANDLERS if low <= byte <= high) for byte in range(256))
