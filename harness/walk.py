"""Walking a stack by repeating one unwinder step, with the loop guards every
strategy shares (Chrome's unwinder applies the same ones)."""

from __future__ import annotations

from typing import Callable, Protocol

from harness.errors import UnwindFailure
from harness.frame import Frame, Stack

DEFAULT_FRAME_LIMIT = 256


class Unwinder(Protocol):
    name: str

    def step(self, frame: Frame, stack: Stack, innermost: bool) -> Frame:
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


def walk(unwinder: Unwinder, frame: Frame, stack: Stack, done: Callable[[Frame], bool],
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
