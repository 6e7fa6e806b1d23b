"""One unwinder step by an EHABI instruction run (the tables of `v2` and
`exidx` both hold such runs): the interpreter's caller frame, and the
kernel's rule for the same run."""

from __future__ import annotations

from functools import lru_cache

from harness.errors import UnwindFailure
from harness.formats import ehabi
from harness.registers import PC
from harness.unwind.frame import Frame, Stack, StackReader
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
                pre_loads=first.loads if first else (), pre_bounds=(first.lowest, first.highest) if first else None,
                guard_failure=_replayed(ops) if first is None and _checks_its_start(ops) else None,
                guard_kind="bad_read" if first is None and _checks_its_start(ops) else None)  # a read or vsp outside


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


def _replayed(ops: tuple[ehabi.Op, ...]):
    """A flat run's guard_failure: its guards are exactly the interpreter's
    checks, and its addresses depend on its base alone, so where they fail
    the interpreter run over the stack's addresses (every register the
    base) fails first where the step does, in the step's words: always
    bad_read (a read outside the stack, or vsp leaving it)."""
    def failure(base: int, sp: int, low: int, high: int) -> tuple[str, str]:
        try:
            ehabi.execute(ops, [base] * 16, [None] * 32, Stack(low, b"", high))
        except UnwindFailure as failed:
            return failed.kind, failed.reason
        raise AssertionError("the guards of an EHABI rule failed where the interpreter does not")
    return failure
