"""`v2-chrome`: Chrome's v2 unwinder as it ships (ChromeUnwinderAndroid32,
base/profiler/chrome_unwinder_android_32.cc), over a chrome-layout blob.

What it does that our `v2` does not:
- a caller's pc is looked up as it is (no step back into the call);
- it executes only vsp += / -=, pops of r4-r15 (mask, or r4-rN with lr),
  vsp = rN, finish and vsp += uleb; any other instruction stops it;
- after every instruction vsp must stay 4-byte aligned, inside the stack
  and not below the frame's sp; after the frame, the caller's sp must be
  8-byte aligned (AAPCS at a call) and above the callee's (a leaf may keep
  it, if pc moves);
- it restores r4-r12, sp, lr and pc, no VFP register: it is checked on pc,
  sp and r4-r11.
"""

from __future__ import annotations

from functools import cached_property, lru_cache, partial

from harness.errors import UnwindFailure
from harness.formats import ehabi
from harness.formats.chrome_v2.reader import V2Reader
from harness.registers import CALLEE_SAVED, LR, PC, SP
from harness.unwind.ehabi_run import rule_of_run
from harness.unwind.frame import Frame, StackReader
from harness.unwind.rule import PcWording, Rule, RuleRange, failing, replayed_failure
from harness.unwind.rule_map import RuleMap, rule_maps
from harness.unwind.v2 import v2_partition
from harness.unwind.walk import Restores, Unwinder, check_caller

Run = tuple[ehabi.Op, ...]


class ChromeV2Unwinder(Unwinder):
    restores = Restores(CALLEE_SAVED, vfp=False)

    def __init__(self, reader: V2Reader, text_base: int, name: str = "v2-chrome"):
        self.reader = reader
        self.text_base = text_base
        self.name = name
        self._runs: dict[int, Run] = {}

    def _found(self, pc: int) -> tuple[Run, int, int]:
        """The run for pc (looked up as it is), and the pcs [low, high) that find the same."""
        found = self.reader.lookup(pc - self.text_base)
        if found is None:
            raise UnwindFailure("no_info", f"no v2 entry covers pc {pc:#x}")
        return self._run(found.instruction_index, pc), self.text_base + found.low, self.text_base + found.high

    def _run(self, index: int, pc: int) -> Run:
        run = self._runs.get(index)
        if run is None:
            unsupported = self._unsupported(index)
            if unsupported:
                raise UnwindFailure("unsupported", unsupported.format(pc=pc))
            run = self._runs[index] = self.reader.run(index)
        return run

    def _unsupported(self, index: int) -> str | None:
        """Why Chrome's runtime does not execute run `index` ("{pc}" left
        for the pc), or None where it does."""
        outside = [byte for byte in self.reader.first_bytes[index] if byte not in ehabi.CHROME_RUNTIME_FIRST_BYTES]
        return f"at pc {{pc:#x}}: instruction {outside[0]:#04x} is not one Chrome's runtime executes" \
            if outside else None

    # Its own step (Chrome's runtime): a run no rule states (chrome_rule's None) only the runtime can follow.
    def step(self, frame: Frame, stack: StackReader, innermost: bool) -> Frame:
        regs, vsp, popped_pc = _executed(self._found(frame.pc)[0], list(frame.r), frame.sp, frame.pc, stack)
        regs[SP] = vsp
        regs[PC] = (regs[PC] if popped_pc else regs[LR]) & ~1
        caller = Frame(r=tuple(regs), d=frame.d)
        if caller.sp % 8:
            raise UnwindFailure("bad_read", f"caller sp {caller.sp:#x} is not 8-byte aligned")
        check_caller(frame, caller, innermost)
        return caller

    @cached_property
    def rule_maps(self) -> tuple[RuleMap, RuleMap]:
        """(callers', innermost) rules, a caller's pc looked up as it is."""
        partition, indices = v2_partition(self.reader, self.text_base)
        runs = [(self.reader.run(index), self._unsupported(index)) for index in indices]
        return rule_maps(partition, runs, _rule_of_row, "no v2 entry covers pc {pc:#x}", caller_shift=0)

    def rule_at(self, pc: int, innermost: bool) -> RuleRange:
        return self.rule_maps[innermost].rule_at(pc)


def _executed(run: Run, regs: list[int], sp: int, pc: int, stack: StackReader) -> tuple[list[int], int, bool]:
    """Chrome's runtime over `run` from a frame at sp and pc: the registers,
    vsp and whether pc was popped, checking vsp after each instruction."""
    vsp, popped_pc = sp, False
    for op in run:
        if isinstance(op, ehabi.Finish):
            break
        if isinstance(op, ehabi.Refuse):
            raise UnwindFailure("no_info", f"refuse to unwind at pc {pc:#x}")
        if isinstance(op, ehabi.VspAdd):
            vsp += op.amount
        elif isinstance(op, ehabi.SetVsp):
            vsp = regs[op.reg]
        else:
            for reg in op.regs:
                regs[reg] = stack.read_u32(vsp)
                vsp = regs[SP] if reg == SP else vsp + 4
            popped_pc = popped_pc or PC in op.regs
        _check_vsp(vsp, sp, stack)
    return regs, vsp, popped_pc


def _check_vsp(vsp: int, frame_sp: int, stack: StackReader) -> None:
    if vsp % 4:
        raise UnwindFailure("bad_read", f"vsp {vsp:#x} is not 4-byte aligned")
    if vsp < frame_sp:
        raise UnwindFailure("limit", f"vsp {vsp:#x} went below the frame's sp {frame_sp:#x}")
    if not stack.contains(vsp):
        raise UnwindFailure("bad_read", f"vsp {vsp:#x} left the stack")


def _rule_of_row(row: tuple[Run, str | None]) -> Rule | None:
    """A row's rule: (its run, why Chrome's runtime does not execute it, or None)."""
    run, unsupported = row
    return chrome_rule(run) if unsupported is None else failing("unsupported", PcWording(unsupported, 0))


@lru_cache(maxsize=1 << 14)
def chrome_rule(run: Run) -> Rule | None:
    """The kernel's rule for a run under Chrome's checks: the run's rule,
    failing where vsp goes below the frame's sp on the way (sp-based), or
    guarded above it (a run from a register: its base moved down to the
    lowest vsp the run passes through, so that the guard covers them all),
    with the caller's sp 8-byte aligned; None (the step decides) where
    vsp's path is not fixed. A run that sets vsp from the same register
    again and again before it reads (GCC's epilogue rows through r7, each
    written as a step) is the rule of its last part, guarded over every vsp
    of the whole run."""
    rule = rule_of_run(run)
    if rule is None:
        last = _from_the_last_base(run)
        rule = None if last is None else rule_of_run(last)
    if rule is None:
        return None
    vsp, from_register, lowest, highest = 0, False, 0, 0
    for op in run:
        kind = type(op)  # the ops are NamedTuples, none subclassed
        if kind is ehabi.SetVsp:
            if not from_register:  # from here on, vsp is the register's value plus vsp
                lowest = highest = 0
            vsp, from_register = 0, True
        elif kind is ehabi.VspAdd:
            vsp += op.amount
        elif kind is ehabi.Pop:
            if SP in op.regs:
                return None
            vsp += 4 * len(op.regs)
        if vsp < lowest:
            lowest = vsp
            if not from_register:
                return failing("limit", "vsp went below the frame's sp")
        elif vsp > highest:
            highest = vsp
    bounds, offset, moved = rule.bounds, rule.offset + lowest, {}
    if from_register:  # every vsp lies in the stack: base + lowest to base + highest
        bounds = (min(bounds[0], lowest), max(bounds[1], highest))
    if lowest:  # from a register: every vsp is at or above base + lowest
        bounds = (bounds[0] - lowest, bounds[1] - lowest)
        moved = {"end": rule.end - lowest, "loads": tuple((reg, at - lowest) for reg, at in rule.loads),
                 "vfp_loads": tuple((reg, at - lowest) for reg, at in rule.vfp_loads)}
    # Chrome checks vsp's alignment after each instruction: from sp too, where sp is not aligned
    checked = bool(run) and not isinstance(run[0], ehabi.Finish)
    return rule._replace(bounds=bounds, above_sp=from_register, aligned=from_register or checked, caller_aligned8=True,
                         # where its guards fail, the first of Chrome's checks the step fails (the register vsp
                         # is set from holds base - offset; the values read do not matter to a run `_replayable`)
                         guard_failure=replayed_failure(partial(_replayed, run, offset), "a Chrome rule")
                         if _replayable(run) else None,
                         # Chrome's checks fail as bad_read, or as limit where vsp goes below the frame's sp,
                         # which only a run from a register can (from sp, that is a failure rule above)
                         guard_kind=None if from_register else "bad_read", offset=offset, **moved)


def _replayable(run: Run) -> bool:
    """Does the run set vsp only from a register it has not popped?"""
    popped: set[int] = set()
    for op in run:
        if isinstance(op, ehabi.SetVsp) and op.reg in popped:
            return False
        popped.update(getattr(op, "regs", ()))
    return True


def _replayed(run: Run, offset: int, base: int, sp: int, stack: StackReader) -> None:
    _executed(run, [base - offset] * 16, sp, 0, stack)


def _from_the_last_base(run: Run) -> Run | None:
    """The part of a run from its last `vsp = rN`, where it sets vsp from
    one register more than once and reads nothing before the last time
    (what the run leaves is that part's); None for any other run."""
    sets = [index for index, op in enumerate(run) if isinstance(op, ehabi.SetVsp)]
    if len(sets) < 2 or len({run[index].reg for index in sets}) > 1:
        return None
    if not all(isinstance(op, (ehabi.SetVsp, ehabi.VspAdd)) for op in run[:sets[-1]]):
        return None
    return run[sets[-1]:]
