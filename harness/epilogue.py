"""Epilogues: recognising their instructions, and simulating them at a stop.

`classify` names what one instruction does to the frame if it belongs to an
epilogue; the runtime simulation (unwinder `v2+epilogue`) and the encode-time
synthesis (harness.v2.synthesize) both build on it.

The simulation decodes the instructions from pc on. If, up to a return, they
are all stack releases, register restores and at most one final return or
tail call, it executes them on the registers and the stack and returns the
caller's frame. Anything else, an instruction it does not know included,
makes it decline, and the unwinder falls back to the v2 tables unchanged.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Union

from harness.disasm import Instruction, decode_one, sweep
from harness.frame import DWARF_D0, LR, PC, SP, Frame, Stack
from harness.rule import RangeCache, Rule, RuleRange
from harness.walk import check_caller

FRAME_POINTERS = (7, 11)
LIMIT = 16  # instructions scanned for a return


@dataclass(frozen=True)
class Release:
    """sp += amount, sp += r[reg], or sp = r[frame_pointer] - below."""

    amount: int = 0
    reg: int | None = None
    frame_pointer: int | None = None
    below: int = 0


@dataclass(frozen=True)
class AdjustFramePointer:
    """r7 += amount, as GCC does before `mov sp, r7` when a frame is large."""

    reg: int
    amount: int


@dataclass(frozen=True)
class Restore:
    """pop / ldr rX, [sp], #4 / ldm sp!: core registers from the stack (pc: a return)."""

    regs: tuple[int, ...]


@dataclass(frozen=True)
class RestoreVfp:
    first: int  # d register number
    count: int


@dataclass(frozen=True)
class ReturnToLr:
    """bx lr."""


@dataclass(frozen=True)
class Branch:
    """b / b.w: a tail call when it leaves the function."""

    target: int


Step = Union[Release, AdjustFramePointer, Restore, RestoreVfp, ReturnToLr, Branch]


def classify(insn: Instruction) -> Step | None:
    """What `insn` does as an epilogue instruction, or None if it is none."""
    op, regs = insn.op, insn.regs
    if op == "add" and regs[:1] == (SP,):
        sources = regs[1:] if regs[1:2] != (SP,) else regs[2:]
        if insn.imm is not None and not sources:
            return Release(amount=insn.imm)
        if insn.imm is None and len(sources) == 1 and 0 <= sources[0] < SP:
            return Release(reg=sources[0])
    if op in ("add", "adds") and insn.imm is not None and regs[:1] in ((7,), (11,)) \
            and all(r == regs[0] for r in regs):
        return AdjustFramePointer(regs[0], insn.imm)
    if op == "mov" and len(regs) == 2 and regs[0] == SP and regs[1] in FRAME_POINTERS:
        return Release(frame_pointer=regs[1])
    if op == "sub" and len(regs) == 2 and regs[0] == SP and regs[1] in FRAME_POINTERS and insn.imm is not None:
        return Release(frame_pointer=regs[1], below=insn.imm)
    if op == "pop" and regs and all(0 <= r <= PC and r != SP for r in regs):
        return Restore(regs)
    if op in ("ldm", "ldmia") and regs[:1] == (SP,) and len(regs) > 1 and SP not in regs[1:]:
        return Restore(regs[1:])
    if op == "ldr" and insn.post_index and insn.mem == (SP, 0) and insn.imm == 4 and len(regs) == 1 \
            and 0 <= regs[0] <= PC and regs[0] != SP:
        return Restore(regs)
    if op == "vpop" and regs and all(r >= DWARF_D0 for r in regs) \
            and list(regs) == list(range(regs[0], regs[0] + len(regs))):
        return RestoreVfp(regs[0] - DWARF_D0, len(regs))
    if op == "bx" and regs == (LR,):
        return ReturnToLr()
    if op == "b" and insn.imm is not None and not insn.conditional:
        return Branch(insn.imm)
    return None


# Registers an unwind recovers or depends on: an instruction writing none of
# them (and storing nothing, and not transferring control) cannot change the
# outcome of an epilogue it sits in.
UNWIND_REGISTERS = frozenset((*range(4, 16), *range(DWARF_D0 + 8, DWARF_D0 + 16)))
STORES = ("str", "stm", "push", "vst", "vpush")


def is_neutral(insn: Instruction) -> bool:
    """An instruction scheduled into an epilogue that does not affect it
    (GCC moves body work between `vpop` and `pop`, for example). Finding
    epilogues and synthesizing their rows step over these; the runtime
    simulation does not (it declines on anything but teardown)."""
    return not (
        insn.transfers
        or insn.op == "it" or insn.op.startswith("it")
        or insn.op.startswith(STORES)
        or UNWIND_REGISTERS.intersection(insn.writes)
        or -1 in insn.writes
    )


def ends_frame(step: Step) -> bool:
    return isinstance(step, (ReturnToLr, Branch)) or (isinstance(step, Restore) and PC in step.regs)


# ------------------------------------------------------------- condition codes


def it_state(cpsr: int) -> int:
    """ITSTATE (IT[7:0]) from CPSR: IT[7:2] = cpsr[15:10], IT[1:0] = cpsr[26:25]."""
    return ((cpsr >> 8) & 0xFC) | ((cpsr >> 25) & 0x3)


def condition_holds(cond: int, cpsr: int) -> bool:
    n, z, c, v = (cpsr >> 31) & 1, (cpsr >> 30) & 1, (cpsr >> 29) & 1, (cpsr >> 28) & 1
    base = {
        0: z, 1: z, 2: c, 3: c, 4: n, 5: n, 6: v, 7: v,
        8: c and not z, 9: c and not z, 10: n == v, 11: n == v,
        12: not z and n == v, 13: not z and n == v, 14: True, 15: True,
    }[cond]
    return bool(base) if cond % 2 == 0 or cond >= 14 else not base


# Encodings that may end a frame (little-endian): pop {..., pc}, b (16-bit),
# bx lr, pop.w/ldm sp! with pc, ldr pc, [sp], #4, b.w. Found by one regex
# scan, so only short windows before them are ever disassembled.
_MAY_END_FRAME = re.compile(
    rb"(?=[\x00-\xff][\xbd\xe0-\xe7]|\x70\x47|\xbd\xe8[\x00-\xff][\x80-\xff]"
    rb"|\x5d\xf8\x04\xfb|[\x00-\xff][\xf0-\xf7][\x00-\xff][\x90-\x9f\xb0-\xbf])",
    re.DOTALL,
)


def _window_ending_at(code: bytes, start: int, offset: int) -> list[tuple[int, int, str]]:
    """Boundaries of up to LIMIT instructions before `offset`, ending with the
    one at `offset`; [] if no sweep lands on it. A window may start inside an
    instruction, so later starts are tried too."""
    for window in range(max(0, offset - 4 * LIMIT), offset + 1, 2):
        found = sweep(code[window : offset + 4], start + window)
        for index, (address, _, _) in enumerate(found):
            if address == start + offset:
                return found[: index + 1]
    return []


def _in_it_block(window: list[tuple[int, int, str]], index: int) -> bool:
    """Whether instruction `index` is governed by an IT before it (IT covers
    as many instructions as its mnemonic has letters after the I)."""
    for back in range(1, 5):
        if index - back < 0:
            return False
        mnemonic = window[index - back][2]
        if mnemonic.startswith("it"):
            return back <= len(mnemonic) - 1
    return False


def find_epilogues(code: bytes, start: int, end: int):
    """(prelude, instructions, steps) of every unconditional epilogue of the
    function [start, end) whose bytes are `code`: the instructions from its
    first teardown to its return or tail call, and up to four before it.
    Only instructions near a return are ever decoded."""
    for match in _MAY_END_FRAME.finditer(code):
        offset = match.start()
        if offset % 2:
            continue
        window = _window_ending_at(code, start, offset)
        if not window or _in_it_block(window, len(window) - 1):
            continue
        last = decode_one(code[offset : offset + 4], start + offset)
        step = classify(last) if last else None
        if step is None or not ends_frame(step) or last.conditional:
            continue
        if isinstance(step, Branch) and start <= step.target < end:
            continue  # a branch inside the function, not a tail call
        # Walk back over teardown instructions, and over neutral ones scheduled
        # between them; the epilogue starts at the earliest teardown reached.
        walked: list[tuple[Instruction, Step | None]] = []
        index = len(window) - 1
        while index > 0:
            insn = _decoded(code, start, window[index - 1])
            if insn is None or insn.conditional or _in_it_block(window, index - 1):
                break
            before = classify(insn)
            if before is None and not is_neutral(insn) or before is not None and ends_frame(before):
                break
            walked.insert(0, (insn, before))
            index -= 1
        while walked and walked[0][1] is None:  # neutral work before the teardown is body
            walked.pop(0)
            index += 1
        if isinstance(step, Branch) and not walked:
            continue  # a plain branch out, with no frame to tear down here
        insns = [insn for insn, _ in walked] + [last]
        steps = [before for _, before in walked] + [step]
        prelude = [i for i in (_decoded(code, start, w) for w in window[max(0, index - 4) : index]) if i]
        yield prelude, insns, steps


def _decoded(code: bytes, start: int, boundary: tuple[int, int, str]):
    address, size, _ = boundary
    return decode_one(code[address - start : address - start + size], address)


# ------------------------------------------------------------------ simulation


def may_start_epilogue(code: bytes) -> bool:
    """False only for bytes that cannot start an instruction `plan` takes, so
    that `plan` declines at once: a superset, by encoding, of the
    instructions `classify` accepts (tests/test_epilogue.py checks every
    16-bit encoding and random 32-bit ones). A pure function of up to four
    bytes, whatever their address; too few bytes for an instruction say True."""
    if len(code) < 2:
        return True
    first = code[0] | code[1] << 8
    if first >> 11 not in (0x1D, 0x1E, 0x1F):  # a 16-bit instruction
        return (first & 0xFE00 == 0xBC00  # pop
                or first & 0xFF80 == 0xB000  # add sp, sp, #imm
                or first & 0xFF87 in (0x4485, 0x4685)  # add sp, rm / mov sp, rm
                or first & 0xFFF8 == 0x4770  # bx lr
                or first & 0xF800 == 0xE000  # b
                or first & 0xFF00 == 0x3700  # adds r7, #imm8
                or first & 0xFE3F == 0x1C3F)  # adds r7, r7, #imm3
    if len(code) < 4:
        return True
    second = code[2] | code[3] << 8
    return (first & 0xFFDF == 0xE89D  # ldm sp{!}, pop.w
            or first == 0xF85D and second & 0x0FFF == 0x0B04  # ldr rt, [sp], #4
            or first & 0xFFBF == 0xECBD  # vpop
            or first & 0xF800 == 0xF000 and second & 0xD000 == 0x9000  # b.w
            or not second & 0x8000 and _data_processing_teardown(first, (second >> 8) & 0xF))


def _data_processing_teardown(first: int, rd: int) -> bool:
    """32-bit data processing into sp, r7 or r11 that `classify` may accept:
    add to sp, sub from r7/r11 into sp, mov r7/r11 into sp, or add an
    immediate to r7/r11 in place (`first` is the first half-word)."""
    rn = first & 0xF
    add_immediate = first & 0xFBE0 == 0xF100 or first & 0xFBF0 == 0xF200  # add.w / addw
    if rd == SP:
        return (add_immediate or first & 0xFFE0 == 0xEB00  # add.w (register)
                or (first & 0xFBE0 == 0xF1A0 or first & 0xFBF0 == 0xF2A0) and rn in FRAME_POINTERS  # sub
                or first & 0xFFEF == 0xEA4F)  # mov.w sp, rm
    return rd in FRAME_POINTERS and add_immediate and rn == rd


class EpilogueSimulator:
    """Recognises and executes the epilogue ahead of a stop, or declines."""

    def __init__(self, code_at: Callable[[int, int], bytes], same_function: Callable[[int, int], bool]):
        self._code_at = code_at
        self._same_function = same_function
        self.outcomes: Counter = Counter()  # "simulated" or the reason for declining
        self.plan = lru_cache(maxsize=None)(self._plan)

    def _step_at(self, address: int) -> tuple[Instruction, Step | None] | None:
        """The instruction at address and what `classify` makes of it."""
        insn = decode_one(self._code_at(address, 4), address)
        return None if insn is None else (insn, classify(insn))

    def _plan(self, pc: int) -> tuple[Step, ...] | str:
        """The epilogue steps from pc to its return, or why there is none."""
        steps: list[Step] = []
        address = pc
        for _ in range(LIMIT):  # one at a time: most stops decline at the first
            try:
                decoded = self._step_at(address)
            except KeyError:
                return "no code ahead"
            if decoded is None:
                return "undecodable instruction"
            insn, step = decoded
            address += insn.size
            if step is None or (insn.conditional and insn.op != "b"):
                return f"'{insn.text}' is not an epilogue instruction"
            # A branch out of the function is a tail call: any teardown is
            # done by then (possibly before pc), and control returns to lr.
            if isinstance(step, Branch) and self._same_function(pc, step.target):
                return "a branch within the function"
            steps.append(step)
            if ends_frame(step):
                return tuple(steps)
        return "no return within reach"

    def declines_from(self, pc: int, limit: int = 256) -> int:
        """The end of the halfword-aligned pcs from pc on, at most `limit`
        bytes, where `plan` surely declines (pc itself if it may not)."""
        try:
            code = self._code_at(pc, limit + 4)
        except KeyError:
            return pc
        end = 0
        while end < limit and len(code) - end >= 4 and not may_start_epilogue(code[end : end + 4]):
            end += 2
        return pc + min(end, limit)

    def simulate(self, frame: Frame, stack: Stack) -> Frame | None:
        plan = self.plan(frame.pc)
        if isinstance(plan, str):
            self.outcomes[plan] += 1
            return None
        state = it_state(frame.cpsr)
        if state:
            # Inside an IT block: only a last, taken instruction may start an epilogue.
            if state & 0x7:
                self.outcomes["conditional epilogue continues in its IT block"] += 1
                return None
            if not condition_holds(state >> 4, frame.cpsr):
                self.outcomes["IT condition fails"] += 1
                return None
        self.outcomes["simulated"] += 1
        return execute(plan, frame, stack)


def execute(steps: tuple[Step, ...], frame: Frame, stack: Stack) -> Frame:
    regs = list(frame.r)
    dregs = list(frame.d)
    sp = regs[SP]
    for step in steps:
        kind = type(step)
        if kind is Restore:
            for reg in step.regs:
                regs[reg] = stack.read_u32(sp)
                sp += 4
        elif kind is Release:
            if step.frame_pointer is not None:
                sp = regs[step.frame_pointer] - step.below
            elif step.reg is not None:
                sp = (sp + regs[step.reg]) & 0xFFFFFFFF
            else:
                sp += step.amount
        elif kind is RestoreVfp:
            for index in range(step.first, step.first + step.count):
                dregs[index] = stack.read_u64(sp)
                sp += 8
        elif kind is AdjustFramePointer:
            regs[step.reg] = (regs[step.reg] + step.amount) & 0xFFFFFFFF
        if kind is ReturnToLr or kind is Branch:
            regs[PC] = regs[LR]
    regs[SP] = sp
    regs[PC] &= ~1
    return Frame(r=tuple(regs), d=tuple(dregs))


@lru_cache(maxsize=1 << 16)  # by the plan's value: epilogues repeat across functions and programs
def rule_of(steps: tuple[Step, ...]) -> Rule | None:
    """The kernel's rule for an epilogue outside IT blocks, or None where it
    moves r7 first or sets sp from a register anywhere but at its start."""
    base, base_offset, index = SP, 0, None
    offset, loads, vfp_loads, pc_from_lr = 0, [], [], False
    for position, step in enumerate(steps):
        kind = type(step)
        if kind is Restore:
            for reg in step.regs:
                loads.append((reg, offset))
                offset += 4
        elif kind is RestoreVfp:
            for number in range(step.first, step.first + step.count):
                vfp_loads.append((number, offset))
                offset += 8
        elif kind is Release and step.frame_pointer is None and step.reg is None:
            offset += step.amount
        elif kind is Release and position == 0:  # sp = r7 - below, or sp += rN: the base moves
            if step.frame_pointer is not None:
                base, base_offset = step.frame_pointer, -step.below
            else:
                index = step.reg
        elif kind is ReturnToLr or kind is Branch:
            pc_from_lr = True
        else:
            return None
    return Rule(base=base, offset=base_offset, index=index, loads=tuple(loads), vfp_loads=tuple(vfp_loads),
                end=offset, pc_from_lr=pc_from_lr, outside_it=True)


class EpilogueFirst:
    """At the innermost frame, simulate the epilogue ahead if there is one;
    otherwise (and for every caller frame) use the fallback unwinder."""

    def __init__(self, simulator: EpilogueSimulator, fallback, name: str):
        self.simulator = simulator
        self.fallback = fallback
        self.name = name
        self._fallback_rules = RangeCache(fallback.rule_at)

    def step(self, frame: Frame, stack: Stack, innermost: bool) -> Frame:
        if innermost:
            caller = self.simulator.simulate(frame, stack)
            if caller is not None:
                check_caller(frame, caller, innermost)
                return caller
        return self.fallback.step(frame, stack, innermost)

    def rule_at(self, pc: int, innermost: bool) -> RuleRange:
        """Callers: the fallback's rules. The innermost frame: the simulated
        epilogue's rule at a pc whose plan goes through; the fallback's over
        the (halfword-aligned) pcs from pc on where plans decline."""
        if not innermost:
            return self.fallback.rule_at(pc, False)
        fallback = self._fallback_rules(pc)
        end = self.simulator.declines_from(pc, min(256, fallback.high - pc))
        if end > pc:
            return RuleRange(fallback.rule, pc, end)
        plan = self.simulator.plan(pc)
        return RuleRange(fallback.rule if isinstance(plan, str) else rule_of(plan), pc, pc + 1)
