"""ARM EHABI compact unwind instructions (EHABI section 10.3): encode, decode, execute.

One dataclass per instruction kind. `decode` yields one op per instruction in
the bytes; `encode` writes each op in its shortest form, which for a large
`VspAdd` or a VFP range crossing d15/d16 may be more than one instruction.

Execution follows the EHABI virtual stack pointer model: `vsp` starts at the
frame's sp, pops read upwards from it, and `finish` copies lr to pc unless pc
was popped. After each instruction vsp must still lie within the stack.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Union

from harness import uleb128
from harness.errors import (
    SpareEncoding,
    TruncatedSequence,
    UnsupportedInstruction,
    UnwindFailure,
)
from harness.frame import LR, PC, SP, Frame, Stack
from harness.rule import Rule
from harness.walk import check_caller


@dataclass(frozen=True)
class VspAdd:
    """vsp = vsp + amount (amount a multiple of 4, may be negative)."""

    amount: int

    def __str__(self) -> str:
        sign = "+" if self.amount >= 0 else "-"
        return f"vsp = vsp {sign} {abs(self.amount)}"


@dataclass(frozen=True)
class SetVsp:
    """vsp = r[reg] (reg is neither 13 nor 15)."""

    reg: int

    def __str__(self) -> str:
        return f"vsp = r{self.reg}"


@dataclass(frozen=True)
class Pop:
    """Pop core registers, lowest-numbered from the lowest address."""

    regs: tuple[int, ...]

    def __str__(self) -> str:
        return f"pop {{{_ranges('r', self.regs)}}}"


@dataclass(frozen=True)
class PopVfp:
    """Pop d[first]..d[first+count-1]; `fstmfdx` frames carry one extra word."""

    first: int
    count: int
    fstmfdx: bool = False

    def __str__(self) -> str:
        regs = tuple(range(self.first, self.first + self.count))
        suffix = " (fstmfdx)" if self.fstmfdx else ""
        return f"pop {{{_ranges('d', regs)}}}{suffix}"


@dataclass(frozen=True)
class Finish:
    def __str__(self) -> str:
        return "finish"


@dataclass(frozen=True)
class Refuse:
    """0x80 0x00: the region must not be unwound."""

    def __str__(self) -> str:
        return "refuse to unwind"


Op = Union[VspAdd, SetVsp, Pop, PopVfp, Finish, Refuse]
FINISH = Finish()
REFUSE = Refuse()


def _ranges(prefix: str, regs: Iterable[int]) -> str:
    parts: list[str] = []
    run: list[int] = []
    for reg in sorted(regs):
        if run and reg == run[-1] + 1:
            run.append(reg)
            continue
        if run:
            parts.append(_run_text(prefix, run))
        run = [reg]
    if run:
        parts.append(_run_text(prefix, run))
    return ", ".join(parts)


def _run_text(prefix: str, run: list[int]) -> str:
    if len(run) == 1:
        return f"{prefix}{run[0]}"
    return f"{prefix}{run[0]}-{prefix}{run[-1]}"


# ----------------------------------------------------------------- encoding


def encode(ops: Iterable[Op]) -> bytes:
    return b"".join(encode_op(op) for op in ops)


def encode_op(op: Op) -> bytes:
    if isinstance(op, VspAdd):
        return _encode_vsp_add(op.amount)
    if isinstance(op, SetVsp):
        if op.reg in (SP, PC) or not 0 <= op.reg <= 15:
            raise ValueError(f"vsp = r{op.reg} is not encodable")
        return bytes([0x90 | op.reg])
    if isinstance(op, Pop):
        return _encode_pop(op.regs)
    if isinstance(op, PopVfp):
        return _encode_pop_vfp(op)
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


def _encode_pop(regs: tuple[int, ...]) -> bytes:
    regset = sorted(set(regs))
    if not regset or len(regset) != len(regs) or regset[0] < 0 or regset[-1] > 15:
        raise ValueError(f"bad pop register list {regs}")
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
        if contiguous_from_r4 and LR not in high:
            out.append(0xA0 | n)
        elif contiguous_from_r4 and high == run_without_lr + [LR]:
            out.append(0xA8 | n)
        else:
            mask = sum(1 << (r - 4) for r in high)
            out += bytes([0x80 | (mask >> 8), mask & 0xFF])
    return bytes(out)


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


# ----------------------------------------------------------------- decoding


def decode(data: bytes | memoryview, pos: int = 0, end: int | None = None,
           run: bool = False) -> list[Op]:
    """Decode instructions from data[pos:end].

    With `run=True`, stop after the first `finish` or refuse-to-unwind, and raise
    TruncatedSequence if `end` comes first (a table run must be terminated).
    """
    stop = len(data) if end is None else end
    ops: list[Op] = []
    while pos < stop:
        op, pos = _decode_one(data, pos, stop)
        ops.append(op)
        if run and isinstance(op, (Finish, Refuse)):
            return ops
    if run:
        raise TruncatedSequence("sequence ends without finish", pos)
    return ops


def _decode_one(data, pos: int, stop: int) -> tuple[Op, int]:
    start = pos
    byte = data[pos]
    pos += 1

    def operand() -> int:
        if pos >= stop:
            raise TruncatedSequence(f"instruction {byte:#04x} lacks its operand byte", start)
        return data[pos]

    if byte < 0x40:
        return VspAdd(((byte & 0x3F) << 2) + 4), pos
    if byte < 0x80:
        return VspAdd(-(((byte & 0x3F) << 2) + 4)), pos
    if byte < 0x90:
        mask = ((byte & 0x0F) << 8) | operand()
        if mask == 0:
            return REFUSE, pos + 1
        return Pop(tuple(4 + i for i in range(12) if mask >> i & 1)), pos + 1
    if byte < 0xA0:
        reg = byte & 0x0F
        if reg in (SP, PC):
            raise SpareEncoding(f"reserved instruction {byte:#04x} (vsp = r{reg})", start)
        return SetVsp(reg), pos
    if byte < 0xA8:
        return Pop(tuple(range(4, 5 + (byte & 7)))), pos
    if byte < 0xB0:
        return Pop(tuple(range(4, 5 + (byte & 7))) + (LR,)), pos
    if byte == 0xB0:
        return FINISH, pos
    if byte == 0xB1:
        mask = operand()
        if mask == 0 or mask & 0xF0:
            raise SpareEncoding(f"spare encoding b1 {mask:02x}", start)
        return Pop(tuple(i for i in range(4) if mask >> i & 1)), pos + 1
    if byte == 0xB2:
        try:
            value, pos = uleb128.decode(data, pos, stop)
        except IndexError:
            raise TruncatedSequence("unterminated ULEB128 after 0xb2", start) from None
        return VspAdd(0x204 + (value << 2)), pos
    if byte == 0xB3:
        arg = operand()
        first, count = arg >> 4, (arg & 0x0F) + 1
        if first + count > 16:
            raise SpareEncoding(f"b3 {arg:02x} names registers past d15", start)
        return PopVfp(first, count, fstmfdx=True), pos + 1
    if byte < 0xB8:
        raise SpareEncoding(f"spare encoding {byte:#04x}", start)
    if byte < 0xC0:
        return PopVfp(8, (byte & 7) + 1, fstmfdx=True), pos
    if byte < 0xC8:
        if byte == 0xC7:
            arg = operand()
            if arg == 0 or arg & 0xF0:
                raise SpareEncoding(f"spare encoding c7 {arg:02x}", start)
        elif byte == 0xC6:
            operand()
        raise UnsupportedInstruction(f"Intel Wireless MMX pop {byte:#04x}", start)
    if byte in (0xC8, 0xC9):
        arg = operand()
        base = 16 if byte == 0xC8 else 0
        first, count = base + (arg >> 4), (arg & 0x0F) + 1
        if first + count > 32:
            raise SpareEncoding(f"{byte:02x} {arg:02x} names registers past d31", start)
        return PopVfp(first, count), pos + 1
    if 0xD0 <= byte < 0xD8:
        return PopVfp(8, (byte & 7) + 1), pos
    raise SpareEncoding(f"spare encoding {byte:#04x}", start)


def text(ops: Iterable[Op]) -> str:
    return "; ".join(str(op) for op in ops)


# ---------------------------------------------------------------- execution


def execute(ops: Iterable[Op], frame: Frame, stack: Stack) -> Frame:
    """Apply an instruction run to `frame`; return the caller's frame.

    Raises UnwindFailure: `no_info` for refuse-to-unwind, `bad_read` for a read
    outside the stack or vsp leaving it, `corrupt_table` if no finish comes.
    """
    regs = list(frame.r)
    dregs = list(frame.d)
    vsp = regs[SP]
    pc_popped = False
    for op in ops:
        kind = type(op)
        if kind is Pop:
            for reg in op.regs:
                regs[reg] = stack.read_u32(vsp)
                vsp += 4
            if SP in op.regs:
                vsp = regs[SP]  # a popped sp replaces vsp
            pc_popped = pc_popped or PC in op.regs
        elif kind is VspAdd:
            vsp += op.amount
        elif kind is SetVsp:
            vsp = regs[op.reg]
        elif kind is PopVfp:
            for reg in range(op.first, op.first + op.count):
                dregs[reg] = stack.read_u64(vsp)
                vsp += 8
            if op.fstmfdx:
                vsp += 4
        elif kind is Finish:
            if not pc_popped:
                regs[PC] = regs[LR]
            regs[SP] = vsp
            return Frame(r=tuple(regs), d=tuple(dregs))
        elif kind is Refuse:
            raise UnwindFailure("no_info", "refuse to unwind")
        if not stack.contains(vsp):
            raise UnwindFailure(
                "bad_read", f"vsp {vsp:#x} left the stack after '{op}'"
            )
    raise UnwindFailure("corrupt_table", "instruction run has no finish")


@dataclass(frozen=True)
class Plan:
    """A run without surprises, flattened: every load at a fixed offset from
    the starting vsp (sp, or the register of a leading `vsp = rN`), and the
    range vsp moves through. `execute` remains the definition; a plan only
    runs when no read can leave the stack, and gives the same frame."""

    base: int
    loads: tuple[tuple[int, int], ...]  # (core register, offset)
    vfp_loads: tuple[tuple[int, int], ...]  # (d register number, offset)
    end: int  # vsp offset after the run: the caller's sp
    lowest: int  # least and greatest vsp offset the run passes through
    highest: int
    pc_popped: bool


def plan(ops: tuple[Op, ...]) -> Plan | None:
    """The plan of a run, or None where only `execute` will do (a popped sp,
    a later `vsp = rN`, refuse-to-unwind, no finish)."""
    base, offset, loads, vfp_loads, seen = SP, 0, [], [], [0]
    for number, op in enumerate(ops):
        kind = type(op)
        if kind is SetVsp and number == 0:
            base = op.reg
        elif kind is VspAdd:
            offset += op.amount
        elif kind is Pop and SP not in op.regs:
            for reg in op.regs:
                loads.append((reg, offset))
                offset += 4
        elif kind is PopVfp:
            for reg in range(op.first, op.first + op.count):
                vfp_loads.append((reg, offset))
                offset += 8
            offset += 4 if op.fstmfdx else 0
        elif kind is Finish:
            pc_popped = any(reg == PC for reg, _ in loads)
            return Plan(base, tuple(loads), tuple(vfp_loads), offset, min(seen), max(seen), pc_popped)
        else:
            return None
        seen.append(offset)
    return None


_PLANS: dict[int, tuple[tuple[Op, ...], Plan | None]] = {}  # id(run) -> (run, plan)


def _plan_of(ops: tuple[Op, ...]) -> Plan | None:
    cached = _PLANS.get(id(ops))
    if cached is None or cached[0] is not ops:  # keyed by identity: runs are long-lived tuples
        cached = _PLANS[id(ops)] = (ops, plan(ops))
    return cached[1]


def apply_plan(flat: Plan, frame: Frame, stack: Stack) -> Frame | None:
    """The caller's frame (pc still with its Thumb bit) by a plan, or None if
    vsp would leave the stack (then only `execute` says how)."""
    vsp = frame.r[flat.base]
    # Both ends are checked through the stack, so that a recording stack notes them.
    if not (stack.contains(vsp + flat.lowest) and stack.contains(vsp + flat.highest)):
        return None
    regs = list(frame.r)
    read = stack.read_u32
    for reg, offset in flat.loads:
        regs[reg] = read(vsp + offset)
    if not flat.pc_popped:
        regs[PC] = regs[LR]
    regs[SP] = vsp + flat.end
    dregs = frame.d
    if flat.vfp_loads:
        dregs = list(dregs)
        for reg, offset in flat.vfp_loads:
            dregs[reg] = stack.read_u64(vsp + offset)
        dregs = tuple(dregs)
    return Frame(r=tuple(regs), d=dregs)


def caller_of(ops: tuple[Op, ...], frame: Frame, stack: Stack) -> Frame:
    """`execute`, and the return address without its Thumb bit; by the run's
    plan where it has one (the same frame, faster)."""
    flat = _plan_of(ops) if type(ops) is tuple else None
    caller = apply_plan(flat, frame, stack) if flat is not None else None
    if caller is None:
        caller = execute(ops, frame, stack)
    regs = list(caller.r)
    regs[PC] &= ~1
    return Frame(r=tuple(regs), d=caller.d)


_RULES: dict[tuple[Op, ...], Rule | None] = {}  # by the run's value: every program repeats the same runs
_RULES_BY_ID: dict[int, tuple[tuple[Op, ...], Rule | None]] = {}  # id(run) -> (run, rule): cheaper to find


def rule_of(ops: tuple[Op, ...]) -> Rule | None:
    """The kernel's rule for a run: its plan, guarded by the plan's vsp range."""
    if type(ops) is not tuple:
        return None
    cached = _RULES_BY_ID.get(id(ops))
    if cached is not None and cached[0] is ops:
        return cached[1]
    rule = _RULES.get(ops, _RULES)
    if rule is _RULES:
        flat = plan(ops)
        rule = None if flat is None else Rule(
            base=flat.base, loads=flat.loads, vfp_loads=flat.vfp_loads, end=flat.end,
            bounds=(flat.lowest, flat.highest), pc_from_lr=not flat.pc_popped)
        if len(_RULES) < 1 << 16:
            _RULES[ops] = rule
    if len(_RULES_BY_ID) < 1 << 16:
        _RULES_BY_ID[id(ops)] = (ops, rule)
    return rule


def unwind_step(ops: tuple[Op, ...], frame: Frame, stack: Stack, innermost: bool) -> Frame:
    """One unwinder step from an instruction run: the caller's frame, with
    the loop guards applied."""
    caller = caller_of(ops, frame, stack)
    check_caller(frame, caller, innermost)
    return caller
