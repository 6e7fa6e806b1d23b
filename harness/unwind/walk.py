"""Walking a stack by repeating one unwinder step, with the loop guards every
strategy shares (Chrome's unwinder applies the same ones)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

from harness.errors import UnwindFailure
from harness.registers import CALLEE_SAVED, reg_name
from harness.unwind.frame import Frame, StackReader

DEFAULT_FRAME_LIMIT = 256


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


class Unwinder(Protocol):
    name: str
    restores: Restores  # optional: ALL_CALLEE_SAVED when absent

    def step(self, frame: Frame, stack: StackReader, innermost: bool) -> Frame:
        """The caller of `frame`, or raise UnwindFailure."""


def check_caller(callee: Frame, caller: Frame, innermost: bool) -> None:
    """Reject a caller frame that cannot be right: sp misaligned, or sp not
    above the callee's (a leaf may return with sp unchanged, but must move pc)."""
    if caller.sp % 4:
        raise UnwindFailure("bad_read", f"caller sp {caller.sp:#x} is not 4-byte aligned")
    if caller.sp > callee.sp:
        return
    if innermost and caller.sp == callee.sp and caller.pc != callee.pc:
        return
    raise UnwindFailure(
        "limit", f"caller sp {caller.sp:#x} does not rise above callee sp {callee.sp:#x}"
    )


def walk(unwinder: Unwinder, frame: Frame, stack: StackReader, done: Callable[[Frame], bool],
         limit: int = DEFAULT_FRAME_LIMIT) -> list[Frame]:
    """Frames from `frame` outwards until `done(frame)` holds (that frame included).

    Raises UnwindFailure with `frames` (the frames recovered so far) attached.
    """
    frames = [frame]
    while not done(frames[-1]):
        if len(frames) > limit:
            failure = UnwindFailure("limit", f"more than {limit} frames")
            failure.frames = frames
            raise failure
        try:
            frames.append(unwinder.step(frames[-1], stack, innermost=len(frames) == 1))
        except UnwindFailure as failure:
            failure.frames = frames
            raise
    return frames
