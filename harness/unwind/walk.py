"""Walking a stack by repeating one unwinder step: the unwinder protocol,
the registers each strategy claims to restore, the loop guards every
strategy shares (Chrome's unwinder applies the same ones), and the walk."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

from harness.errors import UnwindFailure
from harness.registers import CALLEE_SAVED, reg_name
from harness.unwind.frame import Frame, StackReader


@dataclass(frozen=True)
class Restores:
    """The callee-saved registers a strategy claims to recover in caller
    frames; the verifier checks pc, sp and these. Table formats restore all;
    v1 and frame-pointer walking, by design, (almost) none."""

    core: tuple[int, ...] = CALLEE_SAVED
    vfp: bool = True

    def describe(self) -> str:
        names = ["pc", "sp", *(reg_name(r) for r in self.core)]
        if self.core == CALLEE_SAVED:
            names[2:] = ["r4-r11"]
        return ", ".join(names + (["d8-d15"] if self.vfp else []))


ALL_CALLEE_SAVED = Restores()
PC_SP_ONLY = Restores((), False)


class Unwinder:
    """What the walk, the verifier and the reports know of an unwinder:
    its name and `step` (required), what it restores, and the optional
    capabilities below, each declared here with the value that means "not
    offered", so that no caller has to probe for them."""

    name: str
    restores: Restores = ALL_CALLEE_SAVED
    # Its step as data: rule_at(pc, innermost) -> harness.unwind.rule.RuleRange, whose rule
    # None means "only `step` can say, at this pc". Without it, `step` runs at every stop.
    rule_at: Callable[[int, bool], tuple] | None = None
    # Its step may give another caller than its rule where the caller's own rule is None
    # (harness.unwind.sigframes: a trampoline's frame becomes the context the signal
    # interrupted): the compiled kernel defers such a walk before comparing that caller.
    looks_ahead: bool = False
    # Its table's rules by pc range (two harness.unwind.rule_map.RuleMap: caller frames', the
    # innermost frame's): the compiled kernel looks pcs up there instead of calling rule_at.
    rule_maps: tuple | None = None
    # The harness.unwind.v2_epilogue.EpilogueSimulator run at the innermost frame before the
    # tables (v2+epilogue).
    simulator: object | None = None
    # A chain's methods in the order it tries them, and its step naming the method
    # that gave each caller: step_by(frame, stack, innermost) -> (caller, method name).
    methods: tuple[Unwinder, ...] = ()
    step_by: Callable[[Frame, StackReader, bool], tuple[Frame, str]] | None = None
    # Told the return address of the walk's outermost frame before a run (a scan
    # accepts the harness's own sentinel there as a call site).
    entered_from: Callable[[int], None] | None = None
    # The harness.formats.chrome_v2.V2Reader behind it, for tables shared with v2+epilogue.
    reader: object | None = None

    def step(self, frame: Frame, stack: StackReader, innermost: bool) -> Frame:
        """The caller of `frame`, or raise UnwindFailure."""
        raise NotImplementedError


def check_caller(callee: Frame, caller: Frame, innermost: bool) -> None:
    """Reject a caller frame that cannot be right: sp misaligned, or sp not
    above the callee's (a leaf may return with sp unchanged, but must move pc)."""
    if caller.sp % 4 == 0 and (caller.sp > callee.sp or (
            innermost and caller.sp == callee.sp and caller.pc != callee.pc)):
        return
    raise UnwindFailure(*caller_failure(caller.sp, callee.sp))


def caller_failure(caller_sp: int, callee_sp: int) -> tuple[str, str]:
    """(kind, reason) of a caller check_caller rejects."""
    if caller_sp % 4:
        return "bad_read", f"caller sp {caller_sp:#x} is not 4-byte aligned"
    return "limit", f"caller sp {caller_sp:#x} does not rise above callee sp {callee_sp:#x}"


def without_scratch(frame: Frame) -> Frame:
    """r0-r3 and r12 are caller-saved: in a caller frame they hold nothing the
    caller relies on. They are cleared before a walk goes on, so that no
    unwinder can lean on leftovers of the innermost function."""
    r = frame.r
    return Frame(r=(0, 0, 0, 0) + r[4:12] + (0,) + r[13:], d=frame.d)


def walk(unwinder: Unwinder, frame: Frame, stack: StackReader, frames: int,
         innermost: bool = True) -> Iterator[Frame | UnwindFailure]:
    """The callers of `frame`, outwards, at most `frames` of them, each as
    its step gave it; a step that fails ends the walk with its failure.
    Scratch registers are cleared between steps (`without_scratch`), and
    only the first step is at the innermost frame (when `innermost`). The
    one walk every caller makes: verification, bench, mutants and tests.
    (The compiled kernel's walk, rules.c's verifier_walk, is its twin.)"""
    for index in range(frames):
        try:
            caller = unwinder.step(frame, stack, innermost and index == 0)
        except UnwindFailure as failure:
            yield failure
            return
        yield caller
        frame = without_scratch(caller)
