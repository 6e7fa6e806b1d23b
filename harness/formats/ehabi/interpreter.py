"""Running an EHABI instruction run: `execute`, the one interpreter, and
`flatten`, the same run as fixed offsets from one register (what the
compiled verification kernel applies).

The interpreter follows EHABI's virtual stack pointer model: `vsp` starts at
the frame's sp, pops read upwards from it, and `finish` copies lr to pc
unless pc was popped; after each instruction vsp must still lie within the
stack.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple, Protocol, Sequence

from harness.errors import UnwindFailure
from harness.formats.ehabi.ops import Finish, Op, Pop, PopVfp, PopWmmx, Refuse, SetVsp, VspAdd
from harness.registers import LR, PC, SP


class Memory(Protocol):
    """What the interpreter reads: a bounded stack (harness.unwind.frame.StackReader)."""

    def contains(self, address: int) -> bool: ...
    def read_u32(self, address: int) -> int: ...
    def read_u64(self, address: int) -> int: ...


def execute(ops: Iterable[Op], core: Sequence[int], vfp: Sequence[int | None],
            stack: Memory) -> tuple[list[int], list[int | None]]:
    """Apply an instruction run to a frame's registers (core: r0-r15, vfp:
    d0-d31, None where unknown); return the caller's, pc as popped or from
    lr (its Thumb bit still set).

    Raises UnwindFailure: `no_info` for refuse-to-unwind, `bad_read` for a read
    outside the stack or vsp leaving it, `corrupt_table` if no finish comes.
    """
    regs = list(core)
    dregs = list(vfp)
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
        elif kind is PopWmmx:
            vsp += op.size  # registers no frame of ours holds: stepped over
        elif kind is Finish:
            if not pc_popped:
                regs[PC] = regs[LR]
            regs[SP] = vsp
            return regs, dregs
        elif kind is Refuse:
            raise UnwindFailure("no_info", "refuse to unwind")
        if not stack.contains(vsp):
            raise UnwindFailure("bad_read", f"vsp {vsp:#x} left the stack after '{op}'")
    raise UnwindFailure("corrupt_table", "instruction run has no finish")


class Flat(NamedTuple):
    """A run without surprises, flattened: every load at a fixed offset from
    the starting vsp (sp, or the register of a leading `vsp = rN`), and the
    range vsp moves through. Where no read leaves the stack, applying it
    gives the frame `execute` gives."""

    base: int
    loads: tuple[tuple[int, int], ...]  # (core register, offset)
    vfp_loads: tuple[tuple[int, int], ...]  # (d register number, offset)
    end: int  # vsp offset after the run: the caller's sp
    lowest: int  # least and greatest vsp offset the run passes through
    highest: int
    pc_popped: bool


def flatten_two(ops: Sequence[Op]) -> tuple[Flat, Flat] | None:
    """A run that pops from sp and then sets vsp from a register, each part
    flat (clang's Thumb frames that save r8-r11 below their {r7, lr}
    record: `pop {r8-r11}; vsp = r7; vsp -= 12; pop {r4-r7, lr}`): the part
    from sp (core loads only) and the part from the register, whose value
    is read after the first part's loads; None for any other run."""
    at = next((number for number, op in enumerate(ops) if type(op) is SetVsp), 0)
    if at == 0:
        return None
    first, rest = flatten((*ops[:at], Finish())), flatten(ops[at:])
    if first is None or rest is None or first.vfp_loads or first.pc_popped:
        return None
    return first, rest


def flatten(ops: Sequence[Op]) -> Flat | None:
    """The flat form of a run, or None where only `execute` will do (a
    popped sp, a later `vsp = rN`, refuse-to-unwind, no finish)."""
    base, offset, lowest, highest, loads, vfp_loads, pc_popped = SP, 0, 0, 0, [], [], False
    for number, op in enumerate(ops):
        kind = type(op)
        if kind is Pop and SP not in op.regs:
            for reg in op.regs:
                loads.append((reg, offset))
                offset += 4
            pc_popped = pc_popped or PC in op.regs
        elif kind is VspAdd:
            offset += op.amount
        elif kind is Finish:
            return Flat(base, tuple(loads), tuple(vfp_loads), offset, lowest, highest, pc_popped)
        elif kind is SetVsp and number == 0:
            base = op.reg
        elif kind is PopVfp:
            for reg in range(op.first, op.first + op.count):
                vfp_loads.append((reg, offset))
                offset += 8
            offset += 4 if op.fstmfdx else 0
        elif kind is PopWmmx:
            offset += op.size
        else:
            return None
        if offset < lowest:
            lowest = offset
        elif offset > highest:
            highest = offset
    return None
