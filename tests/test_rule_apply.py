"""harness.unwind.rule.apply is what a rule means: the compiled kernel
(csrc/rules.c) gives its answer on random rules of every kind, over random
frames and stacks; and each real unwinder's step gives it wherever its
rule says anything (does not defer): by construction where the step is
apply(rule_at(pc)) (step_by_rule), by test where it is the unwinder's own."""

from __future__ import annotations

import gc
import random
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from test_kernel import stop_states, unwinders_of

from harness import abi
from harness.errors import BadRead, UnwindFailure
from harness.registers import LR, PC, SP
from harness.unwind.dwarf import DwarfUnwinder
from harness.unwind.frame import Frame, Stack
from harness.unwind.framepointer import FramePointerUnwinder
from harness.unwind.qut import QutUnwinder
from harness.unwind.registry import UNWINDER_NAMES
from harness.unwind.rule import (
    EVERYWHERE,
    KINDS,
    LEAF,
    NOWHERE,
    ChainFailure,
    Defers,
    PcWording,
    ReturnAddresses,
    Rule,
    RuleRange,
    apply,
    failing,
    kind_of,
    step_by_rule,
)
from harness.unwind.scan import ScanUnwinder
from harness.unwind.v1 import V1Unwinder
from harness.unwind.vmkunwind import VmkunwindUnwinder
from harness.unwind.walk import Unwinder, without_scratch
from harness.verify import kernel
from harness.verify.groundtruth import ShadowFrame, packed

BASE, SIZE = 0x7000_0000, 0x200  # the stack's memory
CODE = tuple(0x1_0000 + 2 * n + 1 for n in range(0, 400, 7))  # return addresses (Thumb bit set)
M32 = 0xFFFF_FFFF
# cpsr: outside IT blocks; inside, not at the last instruction (Z set or clear); at the last one of an
# `it eq`, Z set and clear
CPSRS = (0, 0x6000_0000, 0x0000_0400 | 0x0200_0000, 0x0600_0000, 0x4000_0C00, 0x4000_0800, 0x0000_0800)

pytestmark = pytest.mark.skipif(not kernel.AVAILABLE, reason="the compiled kernel is not built")


# ------------------------------------------------------------------ random states


class State:
    """A random stop: registers, d8-d15, cpsr, and the stack's words from BASE."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.data = b"".join(struct.pack("<I", self.word()) for _ in range(SIZE // 4))
        sp = BASE + rng.choice((4 * rng.randrange(SIZE // 8), 8 * rng.randrange(SIZE // 16),
                                2 + 4 * rng.randrange(SIZE // 8), SIZE - 4 * rng.randrange(4)))
        pick = rng.random()  # the stack's low end: mostly sp, else below it, or above (a frame's sp outside)
        self.low = sp if pick < 0.75 else BASE + rng.randrange(0, sp - BASE + 1, 4) if pick < 0.9 else \
            min(sp + 4 * rng.randrange(1, 8), BASE + SIZE)
        pc = rng.choice(CODE) & ~1
        lr = pc | 1 if rng.random() < 0.1 else rng.choice(CODE)
        self.regs = [self.word() for _ in range(13)] + [sp, lr, pc]
        self.vfp = tuple(rng.getrandbits(64) for _ in range(8))
        self.cpsr = rng.choice(CPSRS) if rng.random() < 0.3 else 0

    def word(self) -> int:
        rng, pick = self.rng, self.rng.random()
        if pick < 0.45:
            return BASE + rng.randrange(0, SIZE + 32) & ~rng.choice((3, 3, 3, 1))
        if pick < 0.75:
            return rng.choice(CODE)
        return rng.choice((0, rng.getrandbits(32), M32 - rng.randrange(0, SIZE)))

    @property
    def frame(self) -> Frame:
        return Frame(r=tuple(self.regs), d=(None,) * 8 + self.vfp + (None,) * 16, cpsr=self.cpsr)

    @property
    def stack(self) -> Stack:
        return Stack(self.low, self.data[self.low - BASE:], BASE + SIZE)


def _offset(rng: random.Random, low: int = -32, high: int = 96) -> int:
    return rng.randrange(low, high, 4) + (rng.choice((1, 2, 3)) if rng.random() < 0.05 else 0)


def _guard_failure(rng: random.Random) -> dict:
    pick = rng.random()
    if pick < 0.35:
        return {}
    kind = rng.choice(("bad_read", "no_info", "limit"))

    def failure(base, sp, low, high, kind=kind):
        return kind, f"guard at base {base:#x}, sp {sp:#x}, stack [{low:#x}, {high:#x})"

    return {"guard_failure": failure, "guard_kind": kind if pick < 0.8 else None}


def failure_rule(rng: random.Random) -> Rule:
    kind = rng.choice(("no_info", "bad_read", "unsupported", "corrupt_table", "limit"))
    reason = PcWording("nothing at {pc:#x}", rng.choice((0, 1))) if rng.random() < 0.5 else "refuse to unwind"
    return failing(kind, reason)


def plain_rule(rng: random.Random) -> Rule:
    regs = [r for r in range(16) if r != SP]
    loads = tuple((rng.choice(regs), _offset(rng)) for _ in range(rng.choice((0, 1, 2, 3, 5))))
    offsets = [offset for _, offset in loads] or [0]
    bounds = None if rng.random() < 0.3 else rng.choice(
        ((min(offsets), max(offsets) + 4), (_offset(rng, -16, 16), _offset(rng, 0, 128))))
    pre = rng.random() < 0.15
    pre_loads = tuple((rng.choice(regs), _offset(rng, 0, 32)) for _ in range(rng.randrange(1, 4))) if pre else ()
    return Rule(base=rng.choice((SP, SP, 7, 11, rng.randrange(13), LR)), offset=_offset(rng, -24, 48),
                index=rng.choice((None,) * 6 + (rng.randrange(16),)), loads=loads,
                vfp_loads=tuple((rng.choice((8, 9, 12, 15, rng.randrange(32))), _offset(rng))
                                for _ in range(rng.choice((0, 0, 0, 1, 2)))),
                end=_offset(rng, -16, 96), bounds=bounds, pc_from_lr=rng.random() < 0.6,
                aligned=rng.random() < 0.3, above_sp=rng.random() < 0.3, leaf_unless_record=rng.random() < 0.15,
                outside_it=rng.random() < 0.2, caller_aligned8=rng.random() < 0.2,
                pre_loads=pre_loads, pre_bounds=(0, _offset(rng, 0, 40)) if pre and rng.random() < 0.8 else None,
                **_guard_failure(rng))


SITES = [ReturnAddresses(CODE), ReturnAddresses(CODE[::3]), ReturnAddresses(())]


def scan_rule(rng: random.Random) -> Rule:
    return Rule(scan_window=4 * rng.randrange(1, 80), scan_sites=rng.choice(SITES), **_guard_failure(rng))


def chain_rule(rng: random.Random) -> Rule:
    """A chain of the other kinds; its plain rules not `outside_it`, where the kernel defers more
    (test_the_kernel_defers_where_apply_answers_only_where_said)."""
    makers = (failure_rule, plain_rule, plain_rule, scan_rule)
    alternatives = [rng.choice(makers)(rng)._replace(outside_it=False)
                    for _ in range(rng.randrange(1, abi.CHAIN_METHODS + 1))]
    if rng.random() < 0.1:
        alternatives[rng.randrange(len(alternatives))] = None  # no rule: the chain defers there
    return Rule(alternatives=tuple(alternatives))


MAKERS = {"chain": chain_rule, "scan": scan_rule, "failure": failure_rule, "plain": plain_rule}


# ------------------------------------------------------------------ the two answers


class OneRule(Unwinder):
    """An unwinder whose rule is `rule` at every pc (its step is the rule's)."""

    name = "one rule"

    def __init__(self, rule: Rule):
        self.rule = rule

    def rule_at(self, pc: int, innermost: bool) -> RuleRange:
        return RuleRange(self.rule, NOWHERE, EVERYWHERE)

    def step(self, frame, stack, innermost):
        return apply(self.rule, frame, stack, innermost)


def applied(rule: Rule, state: State):
    """apply's answer at the innermost frame: the caller Frame, the UnwindFailure, or the Defers."""
    try:
        return apply(rule, state.frame, state.stack, True)
    except Defers as defers:
        return defers
    except UnwindFailure as failure:
        return failure


def shadow_of(caller: Frame) -> ShadowFrame:
    return ShadowFrame(caller.pc & M32, caller.sp & M32, tuple(r & M32 for r in caller.r[4:12]), caller.d[8:16])


def kernel_answer(rule: Rule, state: State, expected: ShadowFrame):
    """The kernel's answer for one walk of one frame by `rule`, compared with
    `expected`: None where it matched, a record, or kernel.DEFER."""
    stop_kernel = kernel.StopKernel([OneRule(rule)], bytearray(state.data), BASE, BASE + SIZE)
    try:
        found = stop_kernel.check(state.regs[:15], state.regs[PC], state.cpsr, state.vfp, state.low,
                                  packed(expected), 0)
        if not found:
            return None
        (_, answer), = found
        if answer is kernel.DEFER or isinstance(answer, abi.Mismatch):
            return answer
        return stop_kernel.outcome(answer)[1::2]  # (kind, reason)
    finally:
        stop_kernel.release()


def disagreement(rule: Rule, state: State) -> str | None:
    """Where the kernel and apply differ on `rule` at `state`, how; else None."""
    want = applied(rule, state)
    if isinstance(want, Frame):
        got = kernel_answer(rule, state, shadow_of(want))
        wide = [reg for reg in (PC, SP, *range(4, 12)) if not 0 <= want.r[reg] <= M32]  # shadow frames are 32-bit
        if got is None and not wide:
            return None
        if isinstance(got, abi.Mismatch) and wide and got.register == wide[0] and got.got == want.r[wide[0]]:
            return None
        return f"apply gives the caller {want.r}, {want.d[8:16]}; the kernel answers {got}"
    got = kernel_answer(rule, state, ShadowFrame(0x1234, (state.regs[SP] + 8) & M32, (0,) * 8, None))
    if isinstance(want, Defers):
        return None if got is kernel.DEFER else f"apply defers ({want}); the kernel answers {got}"
    if isinstance(want, ChainFailure):  # the chain's step words it with its methods' names
        return None if got is kernel.DEFER else f"apply's chain fails ({want}); the kernel answers {got}"
    return None if got == (want.kind, want.reason) else f"apply fails ({want}); the kernel answers {got}"


# ------------------------------------------------------------------ apply against each unwinder's step


def step_disagreement(unwinder, frame: Frame, stack: Stack, innermost: bool) -> tuple[str | None, Frame | None]:
    """Where apply(rule_at(pc)) and the unwinder's step differ at `frame`,
    how (None where they agree, or the rule defers); and step's caller."""
    try:
        want = unwinder.step(frame, stack, innermost)
    except UnwindFailure as failure:
        want = failure
    try:
        got = apply(unwinder.rule_at(frame.pc, innermost).rule, frame, stack, innermost)
    except Defers:
        return None, want if isinstance(want, Frame) else None
    except ChainFailure as failure:  # the chain's step names each method
        got = UnwindFailure(failure.kind, "; ".join(f"{method.name}: {each.reason}"
                                                    for method, each in zip(unwinder.methods, failure.failures)))
    except UnwindFailure as failure:
        got = failure
    caller = want if isinstance(want, Frame) else None
    if isinstance(want, Frame) or isinstance(got, Frame):
        return (None if got == want else f"{unwinder.name} at {frame.pc:#x}: apply gives {got}, step {want}"), caller
    same = (got.kind, got.reason) == (want.kind, want.reason)
    return (None if same else f"{unwinder.name} at {frame.pc:#x}: apply fails {got}, step {want}"), caller


# ------------------------------------------------------------------ the tests

CASES = 5000  # random rules (each on its own random state) per kind


@pytest.mark.parametrize("kind", KINDS)
def test_the_kernel_applies_a_rule_as_apply_does(kind):
    """Random rules of one kind on random frames and stacks (registers and
    words that point into the stack, aligned or not, or at call sites; IT
    states): the kernel gives apply's caller (pc, sp, r4-r11, d8-d15),
    fails as it does (kind and reason), or defers where it does. Each
    outcome apply can give is met."""
    rng = random.Random(f"rule_apply {kind}")
    outcomes = set()
    for _ in range(CASES):
        rule, state = MAKERS[kind](rng), State(rng)
        assert kind_of(rule) == kind
        assert disagreement(rule, state) is None, (rule, state.regs, state.low, state.cpsr)
        outcomes.add(type(applied(rule, state)))
    assert outcomes == {"chain": {Frame, Defers, ChainFailure}, "scan": {Frame, Defers, UnwindFailure},
                        "failure": {UnwindFailure}, "plain": {Frame, Defers, UnwindFailure}}[kind]


def a_state(cpsr: int = 0) -> State:
    """A fixed stop: sp at BASE + 0x40, lr a call site, the stack's words their addresses."""
    state = State(random.Random(0))
    state.data = b"".join(struct.pack("<I", BASE + at) for at in range(0, SIZE, 4))
    state.regs = [0] * 13 + [BASE + 0x40, CODE[3], CODE[0] & ~1]
    state.low, state.cpsr = BASE + 0x40, cpsr
    return state


def test_each_kind_computes_its_formula():
    state = a_state()
    state.regs[7] = BASE + 0x48
    frame, stack, sp = state.frame, state.stack, BASE + 0x40
    # plain: base = r7 - 8; r4 = *(base), r7 = *(base + 4), pc = *(base + 8) & ~1, sp = base + 12
    caller = apply(Rule(base=7, offset=-8, loads=((4, 0), (7, 4), (PC, 8)), end=12, pc_from_lr=False),
                   frame, stack, True)
    assert (caller.r[4], caller.r[7], caller.pc, caller.sp) == (sp, sp + 4, sp + 8, sp + 12)
    # the word at r7 is no record (not above r7): a leaf, pc = lr
    assert apply(Rule(base=7, leaf_unless_record=True), frame, stack, True).r == frame.with_core(pc=CODE[3] - 1).r
    # scan: the first word from sp up that is a call site; sp just above it
    state.data = state.data[:0x48] + struct.pack("<I", CODE[5]) + state.data[0x4C:]
    caller = apply(Rule(scan_window=16, scan_sites=ReturnAddresses(CODE)), state.frame, state.stack, True)
    assert (caller.pc, caller.sp) == (CODE[5] - 1, sp + 12)
    with pytest.raises(Defers):  # not in the window's 2 words, and no guard_failure: the step must say
        apply(Rule(scan_window=8, scan_sites=ReturnAddresses(CODE)), state.frame, state.stack, True)
    # failure: worded at the lookup pc
    with pytest.raises(UnwindFailure, match=f"no row at {frame.pc - 1:#x}"):
        apply(failing("no_info", PcWording("no row at {pc:#x}", 1)), frame, stack, True)
    # chain: the first alternative that gives a caller; every one failing fails with the last's kind
    assert apply(Rule(alternatives=(failing("no_info", "a"), LEAF)), frame, stack, True).pc == CODE[3] - 1
    with pytest.raises(ChainFailure, match="limit: a; b") as failed:
        apply(Rule(alternatives=(failing("no_info", "a"), failing("limit", "b"))), frame, stack, True)
    assert [failure.reason for failure in failed.value.failures] == ["a", "b"]


def test_a_rule_outside_it_blocks_holds_at_the_last_instruction_of_one_where_its_condition_holds():
    leaf_outside = Rule(outside_it=True)
    for cpsr, holds in ((0, True), (0x0000_0400 | 0x0200_0000, False), (0x4000_0800, True), (0x0000_0800, False)):
        state = a_state(cpsr)  # not in a block; inside, not at its end; at the end of `it eq`, Z set and clear
        assert isinstance(applied(leaf_outside, state), Frame) == holds
        assert disagreement(leaf_outside, state) is None


def test_the_kernel_defers_where_apply_answers_only_where_said():
    """The kernel defers, where apply gives a caller, at a rule past its
    int32 fields, at a chain inside a chain, and (in a chain alone, which
    no unwinder makes) at an `outside_it` rule at the last instruction of
    an IT block where its condition holds: csrc/rules.c runs that
    instruction as outside its block for the walk's own rule only
    (rule_in_it_block), and a chain's alternatives see the block. (Where
    every alternative fails, it defers too: `step` words the chain's failure.)"""
    state, last_taken = a_state(), a_state(0x4000_0800)
    for rule, at in ((Rule(end=1 << 31), state), (Rule(alternatives=(Rule(alternatives=(LEAF,)),)), state),
                     (Rule(alternatives=(Rule(outside_it=True),)), last_taken)):
        caller = applied(rule, at)
        assert isinstance(caller, Frame) and kernel_answer(rule, at, shadow_of(caller)) is kernel.DEFER


BY_RULE = (FramePointerUnwinder, V1Unwinder, ScanUnwinder, VmkunwindUnwinder, DwarfUnwinder)  # QUT where it has a rule


class ByRule(OneRule):
    step = step_by_rule


def test_a_table_driven_step_is_its_rule_and_fails_at_a_load_as_the_read_does():
    """The unwinders whose rules state them step by rule (QUT too, where
    rule_of_ops gives one): a load outside the stack fails with the read's
    BadRead, not Defers, and leaves no reference cycle to the collector
    (nothing of a run may wait for it: harness.collector)."""
    assert all(unwinder.step is step_by_rule for unwinder in BY_RULE) and QutUnwinder.step is not step_by_rule
    state = a_state()

    def step() -> tuple[str, str]:
        try:
            ByRule(Rule(loads=((PC, 0x1000),), pc_from_lr=False)).step(state.frame, state.stack, True)
        except BadRead as failure:
            return failure.kind, failure.reason
        raise AssertionError("the load outside the stack was read")

    gc.collect()
    gc.disable()
    try:
        failed = step()
        left = gc.collect()
    finally:
        gc.enable()
    assert failed == ("bad_read", f"read of 4 bytes at {BASE + 0x1040:#x} outside the stack "
                                  f"[{BASE + 0x40:#x}, {BASE + SIZE:#x})") and left == 0
    with pytest.raises(Defers):  # one that defers otherwise (no rule here): the unwinder's own step must say
        ByRule(None).step(state.frame, state.stack, True)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stop_states())
def test_apply_of_an_unwinders_rule_is_its_step(state):
    """Every unwinder of the generated programs, on test_kernel's random
    stops, frame by frame along its own walk: wherever its rule_at(pc) does
    not defer, apply gives the step's caller (every register) or fails as
    it does (a chain's failure worded with its methods' names). Trivially
    true where the step is apply(rule_at(pc)) (BY_RULE, and QUT where it
    has a rule): it tests the unwinders that keep their own step (the v2
    family, exidx, v2-chrome, v2+epilogue, the chain's naming)."""
    which_program, name, regs, vfp, cpsr, data, depth, _ = state
    unwinder = unwinders_of(which_program)[1][UNWINDER_NAMES.index(name)]
    sp = regs[SP]
    stack = Stack(sp, data[sp - BASE:], BASE + len(data))
    frame = Frame(r=tuple(regs), d=(None,) * 8 + (vfp or (None,) * 8) + (None,) * 16, cpsr=cpsr)
    for index in range(depth + 1):
        found, caller = step_disagreement(unwinder, frame, stack, index == 0)
        assert found is None
        if caller is None:
            return
        frame = without_scratch(caller)
