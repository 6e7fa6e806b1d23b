"""One unwinder step by an EHABI instruction run (the tables of `v2` and
`exidx` both hold such runs): the interpreter's caller frame, and the
kernel's rule for the same run."""

from __future__ import annotations

from functools import lru_cache

from harness.formats import ehabi
from harness.registers import PC
from harness.unwind.frame import Frame, StackReader
from harness.unwind.rule import Fails, Offsets, Rule, replayed_failure
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
        return Fails("no_info", "refuse to unwind")
    flat, first = ehabi.flatten(ops), None
    if flat is None:
        split = ehabi.flatten_two(ops)
        if split is None:
            return None
        first, flat = split
    # Where the guards are the interpreter's checks, the interpreter over the stack's addresses (every
    # register the base) words the failure: always bad_read (a read outside the stack, or vsp leaving it).
    replayable = first is None and _checks_its_start(ops)
    return Offsets(base=flat.base, loads=flat.loads, vfp_loads=flat.vfp_loads, end=flat.end,
                bounds=(flat.lowest, flat.highest), pc_from_lr=not flat.pc_popped,
                pre_loads=first.loads if first else (), pre_bounds=(first.lowest, first.highest) if first else None,
                guard_failure=replayed_failure(lambda base, sp, stack: ehabi.execute(ops, [base] * 16, [None] * 32, stack),
                                               "an EHABI rule") if replayable else None,
                guard_kind="bad_read" if replayable else None)


def _checks_its_start(ops: tuple[ehabi.Op, ...]) -> bool:
    """Does the interpreter fail wherever the rule's bounds do, its
    starting vsp included? It checks vsp after each instruction, and reads
    from vsp: a run that first pops, or sets vsp, checks where it starts.
    One that first moves vsp up never looks there, but starts at the
    frame's sp, which is not below the stack (each caller's sp rises above
    its callee's), and if above, so is the vsp it checks next. A run that
    first moves vsp down, or only finishes, defers where its guards fail."""
    first = ops[0]
    return isinstance(first, (ehabi.Pop, ehabi.PopVfp, ehabi.SetVsp)) \
        or (isinstance(first, ehabi.VspAdd) and first.amount > 0) \
        or (isinstance(first, ehabi.PopWmmx) and first.size > 0)
