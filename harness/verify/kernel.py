"""The compiled verification kernel (harness/verify/csrc), seen from Python.

The Tracer is the per-instruction hook of a verified run: it follows the
shadow stack (as harness.groundtruth defines it) and, at every stop, lets
the Verifier walk every unwinder by its rules (harness.rule) over the
emulator's stack memory and compare each caller frame with the shadow
stack. The Verifier counts the walks that match every frame (per stop
class, read back with `passes`) and answers for the others: a failing rule
(frame, 0, rule id), a mismatch (frame, MISMATCH, register, value,
expected), or DEFER: the verifier then runs the unwinder's own Python step
for that stop, so the kernel only ever repeats what `step` would say, faster.
"""

from __future__ import annotations

from typing import Sequence

from harness.registers import CALLEE_SAVED
from harness.unwind.rule import EVERYWHERE, NOWHERE, Rule
from harness.unwind.walk import ALL_CALLEE_SAVED, Restores, Unwinder

try:
    from harness.verify._kernel import Tracer, Verifier
except ImportError:  # not built: the verifier runs in Python alone
    Tracer = Verifier = None

AVAILABLE = Verifier is not None
DEFER = False  # the kernel's answer where the unwinder's own step must run
MISMATCH, GUARD_FAILS = 1, 2  # kinds of failing answers (0: a failing rule)


def _restores(unwinder: Unwinder) -> tuple[int, bool]:
    restores: Restores = getattr(unwinder, "restores", ALL_CALLEE_SAVED)
    assert set(restores.core) <= set(CALLEE_SAVED)
    return sum(1 << reg for reg in restores.core), restores.vfp


class StopKernel:
    """Rules per (unwinder, innermost, range of pcs), made on first use and kept."""

    def __init__(self, unwinders: Sequence[Unwinder], memory, base: int, high: int):
        self.unwinders = list(unwinders)
        self.high = high
        self.rules: list[Rule] = []  # by the id the kernel reports a failing rule with
        self._rule_at = [getattr(u, "rule_at", None) for u in self.unwinders]
        self.verifier = Verifier(memory, base, high, [_restores(u) for u in self.unwinders], self._provide)
        """What the Tracer walks with at every stop."""
        self.check = self.verifier.check
        """check(regs, pc, cpsr, vfp or None, low, packed shadow stack, stop class)
        -> ((unwinder index, answer), ...) for the walks that did not match
        (one stop, walked from Python)"""
        self.passes = self.verifier.passes
        """passes() -> [(stop class, unwinder index, walks that matched)]"""

    def _provide(self, index: int, pc: int, innermost: int) -> tuple[int, bytes | None, int, int]:
        rule_at = self._rule_at[index]
        if rule_at is None:
            return -1, None, NOWHERE, EVERYWHERE  # no rules: always its own step
        rule, low, high = rule_at(pc, innermost == 1)
        if rule is None:
            return -1, None, low, high
        self.rules.append(rule)
        return len(self.rules) - 1, rule.packed, low, high

    def guard_failure(self, rule_id: int, base: int, sp: int, low: int) -> tuple[str, None, str]:
        """(kind, no register, reason) where the guards of a rule with a
        `guard_failure` failed, for a frame at sp and a stack from low."""
        kind, reason = self.rules[rule_id].guard_failure(base, sp, low, self.high)
        return kind, None, reason

    def failure(self, rule_id: int) -> tuple[str, None, str]:
        """(kind, no register, reason) of the failure rule the kernel met."""
        kind, reason = self.rules[rule_id].failure
        return kind, None, reason
