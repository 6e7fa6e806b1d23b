"""One unwinder step at one pc, written down as data, for the compiled
verification kernel (harness/_kernel.c).

Each unwinder's `step` stays the definition. Its `rule_at(pc, innermost)`
describes the same step as fixed offsets from one base register: what the
step does for every register and stack state, *except* where the rule's
guards fail, and there the kernel defers to `step`. `None` means "always
defer" (an EHABI run only `execute` can follow, an epilogue that moves sp by
a register). tests/test_kernel.py holds the kernel to `step` on random
frames and stacks for the rules of real programs.

The kernel applies a rule as follows (`base` is r[base] + offset):
1. a failure rule fails the step with its (kind, reason);
2. guards: `bounds` (both base + lowest and base + highest inside the
   stack), `aligned` (base % 4 == 0), `above_sp` (base >= sp). If one fails,
   a `leaf_unless_record` rule takes the leaf step (pc = lr) and any other
   rule defers; a `leaf_unless_record` rule whose guards pass also takes the
   leaf step unless the word at base is 0 or above base (a saved frame
   pointer, not code); an `outside_it` rule defers inside an IT block;
3. each load reads the stack at base + offset (a read outside it defers);
4. pc = (lr if `pc_from_lr` else the loaded pc) & ~1, sp = base + end;
5. the caller must pass harness.walk.check_caller, or the kernel defers.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, TypeVar

from harness.errors import UnwindFailure
from harness.frame import SP

# Flag bits shared with _kernel.c.
BOUNDS, PC_FROM_LR, ALIGNED, ABOVE_SP, LEAF_UNLESS_RECORD, OUTSIDE_IT, FAILS = (1 << i for i in range(7))
_HEADER = struct.Struct("<8i")  # flags, base, offset, end, lowest, highest, loads, vfp loads
_PAIR = struct.Struct("<2i")


@dataclass(frozen=True)
class Rule:
    base: int = SP
    offset: int = 0
    loads: tuple[tuple[int, int], ...] = ()  # (core register, offset from base)
    vfp_loads: tuple[tuple[int, int], ...] = ()  # (d register number 0-31, offset from base)
    end: int = 0  # the caller's sp is base + end
    bounds: tuple[int, int] | None = None  # (lowest, highest) offsets that must lie in the stack
    pc_from_lr: bool = True
    aligned: bool = False
    above_sp: bool = False
    leaf_unless_record: bool = False
    outside_it: bool = False
    failure: tuple[str, str] | None = None  # (UnwindFailure kind, reason)

    @cached_property
    def packed(self) -> bytes:
        flags = sum(bit for bit, on in (
            (BOUNDS, self.bounds is not None), (PC_FROM_LR, self.pc_from_lr),
            (ALIGNED, self.aligned), (ABOVE_SP, self.above_sp),
            (LEAF_UNLESS_RECORD, self.leaf_unless_record), (OUTSIDE_IT, self.outside_it),
            (FAILS, self.failure is not None)) if on)
        lowest, highest = self.bounds or (0, 0)
        header = _HEADER.pack(flags, self.base, self.offset, self.end, lowest, highest,
                              len(self.loads), len(self.vfp_loads))
        return header + b"".join(_PAIR.pack(*pair) for pair in self.loads + self.vfp_loads)


def failing(kind: str, reason: str) -> Rule:
    return Rule(failure=(kind, reason))


Found = TypeVar("Found")


def rule_from(find: Callable[[], Found], build: Callable[[Found], Rule | None]) -> Rule | None:
    """`build` over what `find` looks up for a pc (the same lookup `step`
    makes), or the failure rule for the UnwindFailure it raises."""
    try:
        found = find()
    except UnwindFailure as failure:
        return failing(failure.kind, failure.reason)
    return build(found)


LEAF = Rule()  # pc = lr, every other register unchanged (a function's entry)
