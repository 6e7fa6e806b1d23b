"""The unwinder `v2+epilogue`: at the innermost frame, simulate the
epilogue ahead of pc if there is one; otherwise, and for every caller
frame, use the v2 tables.

The simulation decodes the instructions from pc on. If, up to a return,
they are all stack releases, register restores and at most one final
return or tail call (harness.thumb.epilogue.classify), it executes them on
the registers and the stack and returns the caller's frame. Anything else,
an instruction it does not know included, makes it decline, and the
unwinder falls back to the tables unchanged.
"""

from __future__ import annotations

from array import array
from collections import Counter
from functools import lru_cache
from typing import Callable

from harness.registers import LR, PC, SP
from harness.thumb.disasm import Instruction, decode_one, decodes_anywhere, instruction_key
from harness.thumb.encoding import condition_holds, it_state, may_start_epilogue
from harness.thumb.epilogue import (
    LIMIT,
    AdjustFramePointer,
    Branch,
    Release,
    Restore,
    RestoreVfp,
    ReturnToLr,
    Step,
    classify,
    ends_frame,
)
from harness.unwind.frame import Frame, StackReader
from harness.unwind.rule import Rule, RuleRange
from harness.unwind.rule_map import RuleMap
from harness.unwind.walk import Unwinder, check_caller

# (instruction, step) by the instruction's bytes, for those whose decoding
# does not depend on their address (its address is the first one met: a
# plan reads only its size, condition, operation and text).
_STEPS: dict[bytes, tuple[Instruction, Step | None]] = {}


class EpilogueSimulator:
    """Recognises and executes the epilogue ahead of a stop, or declines."""

    def __init__(self, code_at: Callable[[int, int], bytes], same_function: Callable[[int, int], bool],
                 segments: tuple[tuple[int, bytes], ...] = (), functions: tuple[array, int] | None = None):
        """`segments`: the (address, bytes) `code_at` reads, where the
        kernel looks for pcs that may start an epilogue itself; `functions`:
        (the sorted first pcs of the functions, an int64 array as the kernel
        reads it, and the end of the last), where
        `same_function` tells whether two pcs lie in one of them (as
        bisecting them does: csrc/epilogue.c plans tail calls by them)."""
        self._code_at = code_at
        self._same_function = same_function
        self.segments = segments
        self.functions = functions
        self.outcomes: Counter = Counter()  # "simulated" or the reason for declining
        self._plans: dict[int, tuple[Step, ...] | str] = {}  # by pc (not an lru_cache of a bound
        # method, which would hold the simulator in a reference cycle, its program's code and
        # tables with it, until the cycle collector walks them all)

    def plan(self, pc: int) -> tuple[Step, ...] | str:
        """The epilogue steps from pc to its return, or why there is none (made once per pc)."""
        plan = self._plans.get(pc)
        if plan is None:
            plan = self._plans[pc] = self._plan(pc)
        return plan

    def _step_at(self, address: int) -> tuple[Instruction, Step | None] | None:
        """The instruction at address and what `classify` makes of it (by its
        bytes alone where its decoding does not depend on its address)."""
        code = self._code_at(address, 4)
        key = instruction_key(code)
        known = _STEPS.get(key)
        if known is not None:
            return known
        insn = decode_one(code, address)
        if insn is None:
            return None
        found = insn, classify(insn)
        if decodes_anywhere(insn) and len(_STEPS) < 1 << 16:
            _STEPS[key] = found
        return found

    def _plan(self, pc: int) -> tuple[Step, ...] | str:
        steps: list[Step] = []
        address = pc
        starts = []  # of the steps after the first
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
            if isinstance(step, Branch) and step.target is not None and self._same_function(pc, step.target):
                return "a branch within the function"
            steps.append(step)
            if ends_frame(step):
                if not isinstance(step, Branch) or step.target is None:  # the plan from pc's alone
                    self._plan_the_rest(starts, steps)
                return tuple(steps)
            starts.append(address)
        return "no return within reach"

    def _plan_the_rest(self, starts: list[int], steps: list[Step]) -> None:
        """The plans from the steps after the first, which are the rest of
        this one: the same instructions, decoded alike, to the same return
        (a tail call's depends on the pc it is planned from: not this way)."""
        for number, address in enumerate(starts, 1):
            self._plans.setdefault(address, tuple(steps[number:]))

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

    def simulate(self, frame: Frame, stack: StackReader) -> Frame | None:
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


def execute(steps: tuple[Step, ...], frame: Frame, stack: StackReader) -> Frame:
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


class EpilogueFirst(Unwinder):
    """At the innermost frame, simulate the epilogue ahead if there is one;
    otherwise (and for every caller frame) use the fallback unwinder."""

    def __init__(self, simulator: EpilogueSimulator, fallback, name: str):
        self.simulator = simulator
        self.fallback = fallback
        self.name = name

    # Its own step: an epilogue no rule states (rule_of's None) only the simulator can follow, and the tables' too.
    def step(self, frame: Frame, stack: StackReader, innermost: bool) -> Frame:
        if innermost:
            caller = self.simulator.simulate(frame, stack)
            if caller is not None:
                check_caller(frame, caller, innermost)
                return caller
        return self.fallback.step(frame, stack, innermost)

    @property
    def rule_maps(self) -> tuple[RuleMap, RuleMap]:
        """The fallback's: every caller's rules, and the innermost frame's
        where no epilogue may start (`rule_at`)."""
        return self.fallback.rule_maps

    def rule_at(self, pc: int, innermost: bool) -> RuleRange:
        """Callers: the fallback's rules. The innermost frame: the simulated
        epilogue's rule at a pc whose plan goes through; the fallback's over
        the (halfword-aligned) pcs from pc on where plans decline (the
        kernel finds those itself: csrc/sources.c)."""
        if not innermost:
            return self.fallback.rule_at(pc, False)
        fallback = self.fallback.rule_at(pc, True)
        end = self.simulator.declines_from(pc, min(256, fallback.high - pc))
        if end > pc:
            return RuleRange(fallback.rule, pc, end)
        goes, rule = self.plan_rule(pc)
        return RuleRange(rule if goes else fallback.rule, pc, pc + 1)

    def plan_rule(self, pc: int) -> tuple[bool, Rule | None]:
        """Whether the epilogue ahead of an innermost frame at pc is simulated,
        and if so its rule (the kernel has the tables' where it is not)."""
        plan = self.simulator.plan(pc)
        return (False, None) if isinstance(plan, str) else (True, rule_of(plan))
