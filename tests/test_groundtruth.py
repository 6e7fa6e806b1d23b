"""The shadow call stack, checked against literal values on a hand-written
program whose call tree is known: calls, a call skipped under IT, a tail call,
returns."""

from generators.assembler import assemble
from harness.classify import FunctionInfo
from harness.emulation.emulator import SENTINEL, STACK_TOP
from harness.program import Program
from harness.thumb.encoding import call_length
from harness.unwind.registry import build_unwinders
from harness.verify.stops import Verify, verify_program

BASE = 0x100000
MAIN = [  # @ 0x100000
    "push {r4, lr}",  # 0x100000
    "movs r4, #7",  # 0x100002
    "bl 0x10000c",  # 0x100004: call f, returns to 0x100008
    "adds r0, #1",  # 0x100008
    "pop {r4, pc}",  # 0x10000a
]
SOURCE = MAIN + [
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


def program(source: list[str], spans: tuple[tuple[str, int, int], ...]) -> Program:
    """`source` at BASE, its functions (name, start, end offset); main returns 4."""
    code = assemble(source, BASE)
    assert len(code) == spans[-1][2]
    functions = tuple(FunctionInfo(name, BASE + start, BASE + end, BASE + start, (), frozenset())
                      for name, start, end in spans)
    return Program("hand-written", ((BASE, code),), BASE, BASE, functions, expected_result=4)


def frames_at_each_stop(compiled: bool, source=SOURCE, spans=(("main", 0, 0xC), ("f", 0xC, 0x24), ("g", 0x24, 0x28))):
    seen = []
    result = verify_program(program(source, spans), [], how=Verify(compiled=compiled), observe=lambda stop: seen.append(
        (stop.pc, [(f.pc, f.sp, f.callee_saved[:2]) for f in reversed(stop.expected)])))
    assert result.self_check_ok and result.result == 4
    return seen


SENTINEL_FRAME = (SENTINEL, STACK_TOP, (0, 0))
MAIN_CALLS_F = (0x100008, STACK_TOP - 8, (7, 0))
F_CALLS_G = (0x10001C, STACK_TOP - 16, (7, 9))
UNTIL_F_RUNS = [  # main's first three instructions, then f's first three (MAIN, then either f)
    (0x100000, [SENTINEL_FRAME]),
    (0x100002, [SENTINEL_FRAME]),
    (0x100004, [SENTINEL_FRAME]),
    (0x10000C, [SENTINEL_FRAME, MAIN_CALLS_F]),
    (0x10000E, [SENTINEL_FRAME, MAIN_CALLS_F]),
    (0x100010, [SENTINEL_FRAME, MAIN_CALLS_F]),
]


def test_every_stop_has_the_expected_shadow_stack(compiled):
    assert frames_at_each_stop(compiled) == UNTIL_F_RUNS + [
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


# A call as a function's last instruction, to the function right after it
# (GCC and clang end a call to a noreturn function so): the callee starts at
# the call's return address, yet the call was made.
NORETURN_SOURCE = MAIN + [
    # f @ 0x10000c
    "push {r4, lr}",  # 0x10000c
    "movs r4, #9",  # 0x10000e
    "bl 0x100014",  # 0x100010: call h, whose first instruction is the return address
    # h @ 0x100014
    "movs r0, #3",  # 0x100014
    "pop {r4, pc}",  # 0x100016: f's frame, back to main (h never returns to f)
]


def test_a_call_to_the_function_at_its_return_address_pushes_a_frame(compiled):
    seen = frames_at_each_stop(compiled, NORETURN_SOURCE, (("main", 0, 0xC), ("f", 0xC, 0x14), ("h", 0x14, 0x18)))
    f_calls_h = (0x100014, STACK_TOP - 16, (9, 0))
    assert seen == UNTIL_F_RUNS + [
        (0x100014, [SENTINEL_FRAME, MAIN_CALLS_F, f_calls_h]),  # h runs for f, called from f's last instruction
        (0x100016, [SENTINEL_FRAME, MAIN_CALLS_F, f_calls_h]),
        (0x100008, [SENTINEL_FRAME]),  # h popped f's frame: both are gone
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


def test_a_call_executes_when_its_condition_holds():
    """Unicorn hooks an ARM instruction whose condition fails: its call is
    not taken and pushes no frame (harness.thumb.encoding.executes)."""
    from harness.thumb.encoding import executes, with_it_state

    z_set, z_clear = 1 << 30, 0
    assert executes(0xE, z_clear) and executes(0xF, z_clear)  # always; ARM's unconditional BLX
    assert not executes(0x1, z_set) and executes(0x1, z_clear)  # blxne r3
    assert executes(0x0, z_set) and not executes(0x0, z_clear)  # bleq
    in_it_eq = with_it_state(0, 0b0000_1000)  # ITSTATE: firstcond eq, the block's last instruction
    assert executes(0xE, in_it_eq | z_set) and not executes(0xE, in_it_eq | z_clear)  # Thumb: IT decides


def test_a_frame_that_never_resumes_is_marked_from_an_earlier_run(compiled):
    """h never returns to f: it pops f's frame and returns to main, so the
    frame f made calling h never resumes (f's registers are never read
    again) while main's resumes. The verified (or observed) run knows it
    from the run of ground truth alone before it: the frame is compared on
    pc and sp only."""
    program_ = program(NORETURN_SOURCE, (("main", 0, 0xC), ("f", 0xC, 0x14), ("h", 0x14, 0x18)))
    seen = {}
    result = verify_program(program_, build_unwinders(program_, ["framepointer"]),
                            how=Verify(compiled=compiled), observe=lambda stop: seen.setdefault(stop.pc, [f.resumes for f in stop.expected]))
    assert result.self_check_ok
    assert seen[0x100014] == [False, True, True]  # innermost first: f (for h), main (for f), the sentinel
    assert seen[0x10000E] == [True, True]
    alone = {}  # no unwinder, an observer only (encode --compare judges so): the frames it sees are marked too
    verify_program(program_, [],
                   how=Verify(compiled=compiled), observe=lambda stop: alone.setdefault(stop.pc, [f.resumes for f in stop.expected]))
    assert alone[0x100014] == [False, True, True]


def test_the_shadow_stack_records_the_frames_that_resume():
    from harness.verify.groundtruth import ShadowFrame, ShadowStack, has_bit

    regs = lambda sp: (0,) * 13 + (sp,)  # noqa: E731 (r0-r12, sp)
    shadow = ShadowStack(ShadowFrame(0xDEAD, 0x8000, (0,) * 8, None))
    shadow.observe(0x1000, 0x7F00)
    shadow.before(0x1000, 4, regs(0x7F00), None)  # serial 1: returns
    shadow.observe(0x2000, 0x7F00)
    shadow.before(0x2010, 4, regs(0x7E00), None)  # serial 2: longjmp'd past
    shadow.observe(0x3000, 0x7E00)
    shadow.before_return(0x3010, 2)
    shadow.observe(0x1004, 0x7F00)  # back in the first caller, past the second frame
    assert [has_bit(bytes(shadow.resumed), serial) for serial in (1, 2)] == [True, False]
    marked = ShadowStack(ShadowFrame(0xDEAD, 0x8000, (0,) * 8, None), resumes=bytes(shadow.resumed))
    marked.observe(0x1000, 0x7F00)
    marked.before(0x1000, 4, regs(0x7F00), None)
    marked.observe(0x2000, 0x7F00)
    marked.before(0x2010, 4, regs(0x7E00), None)
    marked.observe(0x3000, 0x7E00)
    assert [frame.resumes for frame in marked.frames] == [True, True, False]
