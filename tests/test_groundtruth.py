"""The shadow call stack, checked against literal values on a hand-written
program whose call tree is known: calls, a call skipped under IT, a tail call,
returns."""

from generators.assembler import assemble
from harness.classify import FunctionInfo
from harness.program import Program
from harness.thumb.encoding import call_length
from harness.verify.emulator import SENTINEL, STACK_TOP
from harness.verify.stops import verify_program

BASE = 0x100000
SOURCE = [
    # main @ 0x100000
    "push {r4, lr}",  # 0x100000
    "movs r4, #7",  # 0x100002
    "bl 0x10000c",  # 0x100004: call f, returns to 0x100008
    "adds r0, #1",  # 0x100008
    "pop {r4, pc}",  # 0x10000a
    # f @ 0x10000c
    "push {r5, lr}",  # 0x10000c
    "movs r5, #9",  # 0x10000e
    "cmp r5, #0",  # 0x100010
    "it eq",  # 0x100012
    "bleq 0x100024",  # 0x100014: skipped, so no frame
    "bl 0x100024",  # 0x100018: call g, returns to 0x10001c
    "pop.w {r5, lr}",  # 0x10001c
    "b.w 0x100024",  # 0x100020: tail call to g, pushes nothing
    # g @ 0x100024
    "movs r0, #3",  # 0x100024
    "bx lr",  # 0x100026
]


def program() -> Program:
    code = assemble(SOURCE, BASE)
    assert len(code) == 0x28
    functions = tuple(
        FunctionInfo(name, start, end, start, (), frozenset())
        for name, start, end in (("main", BASE, BASE + 0xC), ("f", BASE + 0xC, BASE + 0x24),
                                 ("g", BASE + 0x24, BASE + 0x28))
    )
    return Program("hand-written", ((BASE, code),), BASE, BASE, functions, expected_result=4)


def frames_at_each_stop(compiled: bool):
    seen = []
    result = verify_program(program(), [], compiled=compiled, observe=lambda stop: seen.append(
        (stop.pc, [(f.pc, f.sp, f.callee_saved[:2]) for f in reversed(stop.expected)])))
    assert result.self_check_ok and result.result == 4
    return seen


SENTINEL_FRAME = (SENTINEL, STACK_TOP, (0, 0))
MAIN_CALLS_F = (0x100008, STACK_TOP - 8, (7, 0))
F_CALLS_G = (0x10001C, STACK_TOP - 16, (7, 9))


def test_every_stop_has_the_expected_shadow_stack(compiled):
    assert frames_at_each_stop(compiled) == [
        (0x100000, [SENTINEL_FRAME]),
        (0x100002, [SENTINEL_FRAME]),
        (0x100004, [SENTINEL_FRAME]),
        (0x10000C, [SENTINEL_FRAME, MAIN_CALLS_F]),
        (0x10000E, [SENTINEL_FRAME, MAIN_CALLS_F]),
        (0x100010, [SENTINEL_FRAME, MAIN_CALLS_F]),
        (0x100012, [SENTINEL_FRAME, MAIN_CALLS_F]),
        (0x100014, [SENTINEL_FRAME, MAIN_CALLS_F]),
        (0x100018, [SENTINEL_FRAME, MAIN_CALLS_F]),  # the skipped bleq pushed nothing
        (0x100024, [SENTINEL_FRAME, MAIN_CALLS_F, F_CALLS_G]),
        (0x100026, [SENTINEL_FRAME, MAIN_CALLS_F, F_CALLS_G]),
        (0x10001C, [SENTINEL_FRAME, MAIN_CALLS_F]),  # g returned to f
        (0x100020, [SENTINEL_FRAME, MAIN_CALLS_F]),
        (0x100024, [SENTINEL_FRAME, MAIN_CALLS_F]),  # tail call: g returns for f
        (0x100026, [SENTINEL_FRAME, MAIN_CALLS_F]),
        (0x100008, [SENTINEL_FRAME]),
        (0x10000A, [SENTINEL_FRAME]),
    ]


def test_call_length_decodes_only_calls():
    code = assemble(["bl 0x100100", "blx r3", "b.w 0x100100", "blx 0x100100", "bx lr",
                     "sub.w sp, sp, #4096", "push {r4, lr}"], BASE)
    lengths, offset = [], 0
    while offset < len(code):
        lengths.append(call_length(code[offset:offset + 4]))
        offset += 4 if code[offset + 1] >> 3 in (0x1D, 0x1E, 0x1F) else 2
    assert lengths == [4, 2, 0, 4, 0, 0, 0]


def test_an_exception_is_in_flight_from_its_raise_entry_to_its_landing_pad():
    """ShadowStack.in_flight (the cxx_exception trait): set at the first
    instruction of a raise entry, reached through a PLT stub; kept in the
    callees it makes; cleared where the frame on top at the raise is
    dropped: a landing pad in the thrower's caller, restored by a pop {pc}."""
    from harness.verify.groundtruth import ShadowFrame, ShadowStack

    regs = lambda sp: (0,) * 13 + (sp,)  # noqa: E731 (r0-r12, sp)
    shadow = ShadowStack(ShadowFrame(0xDEAD, 0x8000, (0,) * 8, None), frozenset({0x2000}))
    shadow.observe(0x1000, 0x7F00)
    shadow.before(0x1000, 4, regs(0x7F00), None)  # main: bl __cxa_throw@plt
    shadow.observe(0x3000, 0x7F00)  # the PLT stub
    assert not shadow.in_flight and len(shadow.frames) == 2
    shadow.observe(0x2000, 0x7F00)  # __cxa_throw
    assert shadow.in_flight
    shadow.before(0x2010, 4, regs(0x7E00), None)  # ... bl _Unwind_RaiseException
    shadow.observe(0x4000, 0x7E00)
    assert shadow.in_flight and len(shadow.frames) == 3
    shadow.before_return(0x4100, 4)  # libgcc's restore: ldm ..., {..., pc}
    shadow.observe(0x1100, 0x7F00)  # main's landing pad, with main's sp
    assert not shadow.in_flight and len(shadow.frames) == 1
    shadow.observe(0x2000, 0x7F00)  # a raise entry reached again (a tail call): in flight again
    assert shadow.in_flight
    assert not ShadowStack(ShadowFrame(0xDEAD, 0x8000, (0,) * 8, None)).in_flight  # no raise entries: never
