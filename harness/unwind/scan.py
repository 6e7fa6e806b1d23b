"""Stack scanning (seed 001: LUL's and Breakpad's last resort), and the
chain of methods a profiler ships.

`scan`: read the words from sp up, at most WINDOW_WORDS of them, and take
the first that is a return address (the instruction before it is a call:
harness.formats.call_sites) as the caller's pc; the caller's sp is just
above that word, where it lies when lr was the last register a prologue
pushed. Nothing else is restored (checked on pc and sp). It needs no
tables, so it unwinds through code nothing describes, and it invents
frames: a stale return address left in a frame's locals, or one of a
caller further out when the return address is still in lr (a leaf), is
taken as readily as the right one.

`chain`: per frame, each method in turn (v2, then exidx, then frame
pointers, then scanning), the next one tried only where the one before has
no entry or its answer fails (a guard, or check_caller); checked on pc and
sp, as the weakest link.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import partial

from harness.errors import UnwindFailure
from harness.unwind.frame import Frame, StackReader
from harness.unwind.rule import EVERYWHERE, NOWHERE, ReturnAddresses, Rule, RuleRange, step_by_rule
from harness.unwind.rule_map import RuleMap, everywhere
from harness.unwind.walk import PC_SP_ONLY, Unwinder

WINDOW_WORDS = 64  # how far up a scan reads: 256 bytes


class ScanUnwinder(Unwinder):
    restores = PC_SP_ONLY

    def __init__(self, return_addresses: Iterable[int], name: str = "scan", window: int = WINDOW_WORDS):
        self.return_addresses = frozenset(return_addresses)
        self.window = window
        self.name = name
        self._range: RuleRange | None = None

    def entered_from(self, return_address: int) -> None:
        """Accept the address a bare-metal entry returns to (the harness's
        sentinel: no call in the program precedes it), as a profiler knows
        where its threads start."""
        self.return_addresses |= {return_address}
        self._range = None

    @property
    def rule_maps(self) -> tuple[RuleMap, RuleMap]:
        """The same scan everywhere, in the kernel's form."""
        rule = self.rule_at(0, False).rule
        return everywhere(rule, rule)

    def rule_at(self, pc: int, innermost: bool) -> RuleRange:
        """rule_maps', made once (the step looks it up at every frame)."""
        if self._range is None:
            self._range = RuleRange(Rule(scan_window=4 * self.window, scan_sites=ReturnAddresses(self.return_addresses),
                                         guard_failure=partial(nothing_found, self.window), guard_kind="no_info"),
                                    NOWHERE, EVERYWHERE)
        return self._range

    step = step_by_rule  # its rule's (harness.unwind.rule.apply), which never defers


def nothing_found(window: int, base: int, sp: int, low: int, high: int) -> tuple[str, str]:
    """A scan's failure (a rule's guard_failure, with the window bound: not
    the unwinder's bound method, which would keep it alive with the rule)."""
    return "no_info", f"no return address in the {window} words from sp {sp:#x} up"


class ChainUnwinder(Unwinder):
    restores = PC_SP_ONLY

    def __init__(self, methods: Sequence[Unwinder], name: str = "chain"):
        self.methods = tuple(methods)
        self.name = name

    @property
    def methods_named(self) -> tuple[str, ...]:
        return tuple(method.name for method in self.methods)

    def entered_from(self, return_address: int) -> None:
        for method in self.methods:
            if method.entered_from is not None:
                method.entered_from(return_address)

    # Its own step: its failure names every method (a chain rule's ChainFailure cannot), and its methods may have none.
    def step(self, frame: Frame, stack: StackReader, innermost: bool) -> Frame:
        return self.step_by(frame, stack, innermost)[0]

    def step_by(self, frame: Frame, stack: StackReader, innermost: bool) -> tuple[Frame, str]:
        """The caller, and the name of the method that gave it."""
        why, kind = [], "no_info"
        for method in self.methods:
            try:
                return method.step(frame, stack, innermost), method.name
            except UnwindFailure as failure:
                why.append(f"{method.name}: {failure.reason}")
                kind = failure.kind
        raise UnwindFailure(kind, "; ".join(why))

    def rule_at(self, pc: int, innermost: bool) -> RuleRange:
        """Every method's rule in turn (harness.unwind.rule: a chain rule,
        the kernel naming each frame's method by its place), over the pcs
        where each method keeps its rule; those after one without a rule
        (which defers) are not needed. None where every method fails
        outright: `step` words the chain's failure."""
        low, high = NOWHERE, EVERYWHERE
        alternatives: list[Rule | None] = []
        for method in self.methods:
            rule_at = method.rule_at
            if rule_at is None:  # its own step decides, at this pc alone
                alternatives.append(None)
                low, high = max(low, pc), min(high, pc + 1)
                break
            rule, method_low, method_high = rule_at(pc, innermost)
            low, high = max(low, method_low), min(high, method_high)
            alternatives.append(rule)
            if rule is None:
                break
        return RuleRange(chain_rule(alternatives), low, high)


def chain_rule(alternatives: Sequence[Rule | None]) -> Rule | None:
    """Methods' rules in turn, up to one without a rule (it defers); None
    where every method fails outright: `step` words the chain's failure."""
    if all(rule is not None and rule.failure is not None for rule in alternatives):
        return None
    return Rule(alternatives=tuple(alternatives))
