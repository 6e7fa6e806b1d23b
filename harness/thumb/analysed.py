"""What the frame analysis of one function (harness.thumb.frame_analysis,
or its compiled twin, harness.thumb.native) is given and gives: the
records both share."""

from __future__ import annotations

from typing import Iterable, NamedTuple

from harness.program import FunctionCfi

UNREACHED = "no path reaches this code"
NOT_SINGLE = "no single frame state is known here"


class Analysed(NamedTuple):
    """A function's rows, where its calls and tail calls go (and the Thumb
    code addresses it forms pc-relative: functions too), and whether any
    path returns (or leaves by a tail call)."""

    function: FunctionCfi
    callees: frozenset[int]  # entered in Thumb state
    returns: bool
    unreached: tuple[tuple[int, int], ...] = ()  # code no path reaches: [low, high)
    arm_callees: frozenset[int] = frozenset()  # entered in ARM state (`blx` from Thumb, `bl` or `b` from ARM)
    # the branch targets the analysis asked `noreturn` about: with the same
    # answers for these, another `noreturn` gives the same analysis
    asked: frozenset[int] = frozenset()
    # conditional branches out of the function with the frame torn down:
    # shared code of hand-written routines (libgcc's division by zero), not
    # the starts of functions (compilers make no conditional tail calls)
    branched: frozenset[int] = frozenset()
    # the words its literal pools hold and its movw/movt pairs make (`ldr rX, =f`): in code
    # linked where it runs, addresses
    loaded: frozenset[int] = frozenset()
    falls_through: bool = False  # a path runs on past its end (into whatever follows)
    # the targets of its direct calls whose return address begins code that
    # pushes lr, before its end (start_shapes.pushes_lr): after a call that
    # never returns, the next function (without a symbol, nothing else says so)
    returned_into: frozenset[int] = frozenset()


class ProgramFacts(NamedTuple):
    """What the program around a function tells its analysis, each gathered
    by discovery from the whole program and handed on together."""

    labels: Iterable[int] = ()  # addresses the program's data holds (formats.data_pointers.code_pointers): jump targets
    noreturn: frozenset[int] = frozenset()  # functions that never return: a call to one ends its path
    data_spans: tuple[tuple[int, int], ...] = ()  # [low, high) its mapping symbols mark as data: a path ends there


def labels_in(labels: Iterable[int], start: int, end: int) -> tuple[int, ...]:
    return tuple(sorted(label for label in set(labels) if start <= label < end)) if labels else ()
