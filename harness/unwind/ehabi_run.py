"""One unwinder step by an EHABI instruction run (the tables of `v2` and
`exidx` both hold such runs): the interpreter's caller frame, and the
kernel's rule for the same run."""

from __future__ import annotations

from functools import lru_cache

from harness.formats import ehabi
from harness.registers import PC
from harness.unwind.frame import Frame, StackReader
from harness.unwind.rule import Rule, failing
from harness.unwind.walk import check_caller


def caller_by_run(ops: tuple[ehabi.Op, ...], frame: Frame, stack: StackReader, innermost: bool) -> Frame:
    """The caller of `frame` by `ops` (the return address without its Thumb
    bit), with the loop guards applied."""
    core, vfp = ehabi.execute(ops, frame.r, frame.d, stack)
    core[PC] &= ~1
    caller = Frame(r=tuple(core), d=tuple(vfp))
    check_caller(frame, caller, innermost)
    return caller


@lru_cache(maxsize=1 << 16)  # by the run's value: every program repeats the same runs
def rule_of_run(ops: tuple[ehabi.Op, ...]) -> Rule | None:
    """The kernel's rule for a run: its flat form, guarded by the vsp range
    it passes through (None where only the interpreter will do)."""
    if ops and isinstance(ops[0], ehabi.Refuse):  # an entry that refuses (v2's CANT_UNWIND): the interpreter's failure
        return failing("no_info", "refuse to unwind")
    flat, first = ehabi.flatten(ops), None
    if flat is None:
        split = ehabi.flatten_two(ops)
        if split is None:
            return None
        first, flat = split
    return Rule(base=flat.base, loads=flat.loads, vfp_loads=flat.vfp_loads, end=flat.end,
                bounds=(flat.lowest, flat.highest), pc_from_lr=not flat.pc_popped,
                pre_loads=first.loads if first else (), pre_bounds=(first.lowest, first.highest) if first else None)
