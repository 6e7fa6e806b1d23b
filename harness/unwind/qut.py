"""The QUT walk (seed 003; harness.formats.qut) over tables built from a
module's CFI where it has some, else from its `.ARM.exidx` (as Matrix
builds them from whichever the library ships): `source` says which.

One step runs the entry's instructions with vsp starting at sp: caller sp
= vsp, caller pc = lr, and r4, r7, r10, r11 and lr as loaded (the only
registers QUT restores, so the verifier checks pc, sp and those four). A
caller's pc is looked up one byte back, in its call.
"""

from __future__ import annotations

from functools import cached_property, lru_cache

from harness.errors import UnwindFailure
from harness.formats.qut import FrameRecord, Load, Mark, Op, QutTable, SetVsp, VspAdd, VspSet
from harness.registers import LR, PC, SP
from harness.unwind.frame import Frame, StackReader
from harness.unwind.rule import Defers, Rule, RuleRange, step_by_rule
from harness.unwind.rule_map import RuleMap, found_in, partition_of, rule_maps
from harness.unwind.walk import Restores, Unwinder, check_caller


class QutUnwinder(Unwinder):
    restores = Restores((4, 7, 10, 11), vfp=False)

    def __init__(self, table: QutTable, text_base: int, source: str, name: str = "qut"):
        self.table = table
        self.text_base = text_base
        self.source = source  # "CFI" or "EXIDX"
        self.name = name

    def ops_of(self, lookup_pc: int) -> tuple[Op, ...]:
        return found_in(self.table.lookup_range, self.text_base, lookup_pc, self._nothing)

    @property
    def _nothing(self) -> str:
        return f"QUT (from {self.source}) has no entry for pc {{pc:#x}}"

    def step(self, frame: Frame, stack: StackReader, innermost: bool) -> Frame:
        """Its rule's (harness.unwind.rule.apply: a load outside the stack
        fails as a read there); where no rule states the entry (an absolute
        vsp, finish, a loaded sp, another order than the encoder's:
        `rule_of_ops` gives None), its own: the entry's ops run here."""
        try:
            return step_by_rule(self, frame, stack, innermost)
        except Defers:  # no rule: a QUT rule defers nowhere else (but at a load, which fails)
            return self._run_ops(frame, stack, innermost)

    def _run_ops(self, frame: Frame, stack: StackReader, innermost: bool) -> Frame:
        """The entry's ops, run in order with vsp starting at sp."""
        ops = self.ops_of(frame.pc if innermost else frame.pc - 1)
        regs = list(frame.r)
        vsp, loaded = frame.sp, set()
        for op in ops:
            if isinstance(op, SetVsp):
                vsp = regs[op.reg] + op.offset
            elif isinstance(op, FrameRecord):
                vsp = regs[op.reg] + 8
                regs[LR], regs[op.reg] = stack.read_u32(vsp - 4), stack.read_u32(vsp - 8)
            elif isinstance(op, VspAdd):
                vsp += op.amount
            elif isinstance(op, VspSet):
                vsp = op.value
            elif isinstance(op, Load):
                regs[op.reg] = stack.read_u32(vsp - op.below)
                loaded.add(op.reg)
            elif op.what == "finish":
                raise UnwindFailure("limit", "QUT says this is the outermost frame")
            vsp &= 0xFFFFFFFF
        if SP not in loaded:
            regs[SP] = vsp
        regs[PC] = (regs[PC] if PC in loaded else regs[LR]) & ~1
        caller = Frame(r=tuple(regs), d=frame.d)
        check_caller(frame, caller, innermost)
        return caller

    @cached_property
    def rule_maps(self) -> tuple[RuleMap, RuleMap]:
        """(callers', innermost) rules: each entry's."""
        return rule_maps(*partition_of(self.table.segments(), self.text_base), rule_of_ops, self._nothing)

    def rule_at(self, pc: int, innermost: bool) -> RuleRange:
        return self.rule_maps[innermost].rule_at(pc)


@lru_cache(maxsize=1 << 14)
def rule_of_ops(ops: tuple[Op, ...]) -> Rule | None:
    """The kernel's rule for a run in the encoder's order (a vsp rule, vsp
    additions, loads below the final vsp, end); None for any other order,
    a loaded sp, an absolute vsp or finish, which `step` runs as ops."""
    base, offset, loads, seen_load = SP, 0, [], False
    for number, op in enumerate(ops):
        if isinstance(op, (SetVsp, FrameRecord)) and number == 0:
            base, offset = op.reg, op.offset if isinstance(op, SetVsp) else 8
            if isinstance(op, FrameRecord):
                loads += [(LR, -4), (op.reg, -8)]
                seen_load = True
        elif isinstance(op, VspAdd) and not seen_load:
            offset += op.amount
        elif isinstance(op, Load) and op.reg != SP:
            loads.append((op.reg, -op.below))
            seen_load = True
        elif isinstance(op, Mark) and op.what == "end":
            pc_loaded = any(reg == PC for reg, _ in loads)
            return Rule(base=base, offset=offset, loads=tuple(loads), pc_from_lr=not pc_loaded)
        elif not (isinstance(op, Mark) and op.what == "dex pc"):
            return None
    return None
