"""Epilogue simulation (v2+epilogue) and encode-time synthesis (v2-synth)."""

import bisect
import random
import struct
from array import array

import pytest

from generators.assembler import assemble
from generators.corpus import DEFAULT_PROGRAMS, generate_program
from generators.functions import Call, Plan
from generators.layout import build_program
from harness.formats.chrome_v2.synthesize import synthesize_epilogues
from harness.thumb import epilogue
from harness.thumb.disasm import decode_one
from harness.thumb.encoding import condition_holds, it_state, may_start_epilogue
from harness.thumb.epilogue import Branch, Restore, classify, find_epilogues
from harness.unwind.frame import Frame, Stack
from harness.unwind.registry import build_unwinders
from harness.unwind.v2_epilogue import EpilogueSimulator
from harness.verify.stops import Verify, verify_program

BASE = 0x100000
LEAF = Plan("leaf", "leaf", saves_lr=False, return_form="bx_lr", constants=(5,))

# One plan per epilogue shape: every teardown form and every return form.
FORMS = {
    "pop_pc": dict(saved=(4, 5, 6)),
    "pop_pc_locals": dict(saved=(4, 8), locals=24),
    "addw": dict(saved=(4,), locals=1200),
    "movw_add_sp_r12": dict(saved=(4, 5), locals=70000),
    "vpop": dict(saved=(4, 5), vfp=3, locals=16),
    "pop_lr_bx": dict(saved=(4, 5), return_form="pop_lr_bx"),
    "ldr_pc": dict(saved=(4, 6), return_form="ldr_pc", locals=8),
    "ldr_restores": dict(saved=(4, 10), return_form="pop_lr_bx", restore_by_ldr=True),
    "varargs": dict(saved=(4,), varargs=True, return_form="pop_lr_bx", locals=8),
    "mov_sp_r7": dict(saved=(4, 7), frame_pointer=True, alloca=True),
    "sub_sp_r7": dict(saved=(4, 5, 7), frame_pointer=True, alloca=True, vfp=2, locals=16),
    "fp_locals": dict(saved=(4, 7, 8), frame_pointer=True, locals=24, return_form="pop_lr_bx"),
    "tail_call": dict(saved=(4, 5), return_form="pop_lr_bx", tail_call="leaf", locals=8),
    "conditional_and_early": dict(saved=(4, 5), conditional_return=True, early_return=True),
}


def form_program(name: str):
    fields = FORMS[name]
    rng = random.Random(name)
    plan = Plan("f", name, calls=(Call("leaf"),), **fields)
    count = 1 + len(plan.constant_registers) + 2 * plan.vfp
    plan = Plan("f", name, calls=(Call("leaf"),), constants=tuple(rng.getrandbits(32) for _ in range(count)), **fields)
    main = Plan("main", "entry", saved=(4,), calls=(Call("f"), Call("f")), constants=(1,))
    return build_program(name, [main, plan, LEAF], "main", arg=rng.getrandbits(32))


@pytest.mark.parametrize("name", sorted(FORMS))
def test_each_epilogue_form_is_simulated_from_each_offset(name):
    program = form_program(name)
    v2_plus, v2_synth = build_unwinders(program, ["v2+epilogue", "v2-synth"])
    simulated = []
    simulate = v2_plus.simulator.simulate

    def recording(frame, stack):
        caller = simulate(frame, stack)
        if caller is not None:
            simulated.append(frame.pc)
        return caller

    v2_plus.simulator.simulate = recording
    epilogue_stops = []
    f = next(i for i in program.functions if i.name == "f")
    result = verify_program(program, [v2_plus, v2_synth],
                            how=Verify(compiled=False), observe=lambda stop: epilogue_stops.append(stop.pc)
                            if f.start <= stop.pc < f.end and f.position(stop.pc) == "epilogue" else None)
    assert result.self_check_ok
    assert result.failures == []
    # Every instruction offset of every epilogue of f was a stop, and was simulated
    # (a conditional return whose condition failed is the one exception).
    offsets = {pc for start, end in f.epilogues for pc in range(start, end, 2)}
    assert offsets & set(epilogue_stops)
    taken = [pc for pc in epilogue_stops if pc in simulated]
    assert len(taken) >= len(epilogue_stops) - (2 if FORMS[name].get("conditional_return") else 0)
    assert taken


def test_a_plan_made_as_the_rest_of_an_earlier_one_is_the_plan_made_from_its_pc():
    """A plan from pc also leaves the plans from its later steps (they are
    its rest): each is what a simulator that never planned before finds
    there, a tail call's (planned from its own pc) included."""
    shared = 0
    for program in [generate_program(0, number) for number in range(6)] + [form_program("tail_call")]:
        simulator = build_unwinders(program, ["v2+epilogue"])[0].simulator
        fresh = lambda: EpilogueSimulator(program.code, simulator._same_function, program.segments)
        for function in program.functions:
            for start, end in function.epilogues:
                simulator.plan(start)
                for pc in range(start + 2, end, 2):
                    left = simulator._plans.get(pc)
                    if left is not None:
                        assert left == fresh().plan(pc), (program.name, hex(pc))
                        shared += 1
    assert shared > 50


def simulator_for(lines, flags=0, itstate=0):
    code = assemble(lines, BASE)
    same = lambda pc, target: BASE <= target < BASE + len(code)  # one function
    simulator = EpilogueSimulator(lambda address, size: code[address - BASE: address - BASE + size], same)
    cpsr = flags | ((itstate & 0x3) << 25) | ((itstate >> 2) << 10)
    regs = [0] * 16
    regs[13], regs[14], regs[15] = 0x8000, 0x20001, BASE
    stack = Stack(0x8000, struct.pack("<8I", 4, 5, 6, 0x30001, 0, 0, 0, 0))
    return simulator, Frame(r=tuple(regs), cpsr=cpsr), stack


def test_pure_epilogue_is_simulated():
    simulator, frame, stack = simulator_for(["pop {r4, r5}", "add sp, #4", "pop {pc}"])
    caller = simulator.simulate(frame, stack)
    assert (caller.pc, caller.sp, caller.r[4], caller.r[5]) == (0x30000, 0x8010, 4, 5)


@pytest.mark.parametrize("lines, reason", [
    (["pop {r4}", "mov r0, r1", "pop {pc}"], "'mov r0, r1' is not an epilogue instruction"),
    (["pop {r4}", "b 0x100008", "nop", "nop", "pop {pc}"], "a branch within the function"),
    (["mul r0, r1, r0", "pop {pc}"], "'mul r0, r1, r0' is not an epilogue instruction"),
    (["pop {r4}", "bne 0x100010", "pop {pc}"], "'bne #0x100010' is not an epilogue instruction"),
    (["pop {r4}", "ldr r5, [sp, #4]", "pop {pc}"], "'ldr r5, [sp, #4]' is not an epilogue instruction"),
])
def test_declines(lines, reason):
    simulator, frame, stack = simulator_for(lines)
    assert simulator.simulate(frame, stack) is None
    assert simulator.outcomes == {reason: 1}


def test_it_block_whose_condition_fails_declines():
    # Stopped at `popne {r4, pc}` (last of its IT block, ITSTATE = NE, 0b0001 1000);
    # Z is set, so NE fails.
    simulator, frame, stack = simulator_for(["pop {r4, pc}"], flags=1 << 30, itstate=0x18)
    assert simulator.simulate(frame, stack) is None
    assert simulator.outcomes == {"IT condition fails": 1}


def test_it_block_whose_condition_holds_is_simulated():
    simulator, frame, stack = simulator_for(["pop {r4, pc}"], flags=0, itstate=0x18)
    assert simulator.simulate(frame, stack).pc == 5 & ~1


def test_condition_codes():
    n, z, c, v = 1 << 31, 1 << 30, 1 << 29, 1 << 28
    assert condition_holds(0, z) and not condition_holds(0, 0)  # EQ
    assert condition_holds(1, 0) and not condition_holds(1, z)  # NE
    assert condition_holds(8, c) and not condition_holds(8, c | z)  # HI
    assert condition_holds(10, n | v) and not condition_holds(10, n)  # GE
    assert condition_holds(13, z) and not condition_holds(12, z)  # LE, GT
    assert it_state((0x18 >> 2) << 10) == 0x18


def test_synthesis_agrees_row_by_row_with_gcc_style_cfi():
    functions = 0
    for index in range(12):
        program = generate_program(0, index)
        for clang, gcc in zip(program.cfi["tables"], program.cfi["reference"]):
            assert synthesize_epilogues(clang, program.code).rows == gcc.rows, clang.name
            functions += 1
    assert functions > 200


def test_simulation_never_runs_outside_epilogues_on_the_default_corpus():
    mismatched = []
    for index in range(DEFAULT_PROGRAMS):
        program = generate_program(0, index)
        v2, v2_plus = build_unwinders(program, ["v2", "v2+epilogue"])
        simulate = v2_plus.simulator.simulate

        def recording(frame, stack):
            caller = simulate(frame, stack)
            if caller is not None and program.function_at(frame.pc).position(frame.pc) != "epilogue":
                mismatched.append((program.name, hex(frame.pc)))
            return caller

        v2_plus.simulator.simulate = recording
        result = verify_program(program, [v2, v2_plus])
        verdicts = {"v2": set(), "v2+epilogue": set()}
        for failure in result.failures:
            if failure.position != "epilogue":
                verdicts[failure.unwinder].add((failure.stop, failure.kind))
        assert verdicts["v2"] == verdicts["v2+epilogue"], program.name
    assert mismatched == []


# ------------------------------------------- the encoding filter before decoding


def plan_takes_first(code: bytes) -> bool:
    """Whether `plan` would go past the instruction `code` starts with."""
    insn = decode_one(code, 0x10000)
    if insn is None:
        return False
    return classify(insn) is not None and not (insn.conditional and insn.op != "b")


def test_the_encoding_filter_passes_every_16_bit_epilogue_instruction():
    taken = 0
    for half in range(0x10000):
        if half >> 11 in (0x1D, 0x1E, 0x1F):
            continue  # the first half of a 32-bit instruction
        code = half.to_bytes(2, "little") + b"\x00\xbf"
        if not may_start_epilogue(code):
            assert not plan_takes_first(code), f"{half:04x}"
        else:
            taken += plan_takes_first(code)
    assert taken > 500  # pops, add sp, b, ... all passed


def test_the_encoding_filter_passes_every_32_bit_epilogue_instruction_sampled():
    """Every first half-word of a 32-bit instruction, with second half-words
    that write sp, r7, r11 or another register, plus known teardowns."""
    rng = random.Random(5)
    samples = [bytes.fromhex(known) for known in (
        "bde8f08f", "5df804bb", "5df804fb", "bdec048b", "bdec028a", "fdeca07b", "0df5807d", "a7f1140d",
        "a7f2140d", "07f10807", "07f20807", "0bf1100b", "0deb040d", "4fea070d", "fff7febf", "9de8f000")]
    for first in range(0xE800, 0x10000):
        for rd in (7, 11, 13, rng.randrange(16)):
            second = rng.getrandbits(16) & 0xF0FF | rd << 8
            samples.append(first.to_bytes(2, "little") + second.to_bytes(2, "little"))
    taken = 0
    for code in samples:
        if not may_start_epilogue(code):
            assert not plan_takes_first(code), code.hex()
        else:
            taken += plan_takes_first(code)
    assert taken > 500


# clang's conditional tail call (cxxvirt-clang-Os-fp, std::_Vector_base::_M_allocate):
# the frame is torn down and the call taken only when the IT condition holds.
CONDITIONAL_TAIL_CALL = bytes.fromhex(
    "80b5"  # 0x1000 push {r7, lr}
    "6f46"  # 0x1002 mov r7, sp
    "b1f1005f"  # 0x1004 cmp.w r1, #0x20000000
    "3ebf"  # 0x1008 ittt cc
    "8800"  # 0x100a lslcc r0, r1, #2          (body work in the block)
    "bde88040"  # 0x100c ldmiacc.w sp!, {r7, lr}  (the teardown)
    "00f055b8"  # 0x1010 bcc.w 0x10be            (the tail call, out of the function)
    "80bd"  # 0x1014 pop {r7, pc}
)


def epilogue_spans(code: bytes, conditional: bool) -> list[tuple[int, int]]:
    return [(insns[0].address, insns[-1].address + insns[-1].size) for _, insns, _ in
            find_epilogues(code, 0x1000, 0x1000 + len(code), conditional=conditional)]


def test_an_epilogue_ending_an_it_block_is_found_for_positions_only():
    # No single row describes the conditional one (the frame is torn down or
    # not), so synthesis never asks for it; the position finder does.
    assert epilogue_spans(CONDITIONAL_TAIL_CALL, False) == [(0x1014, 0x1016)]
    assert epilogue_spans(CONDITIONAL_TAIL_CALL, True) == [(0x100C, 0x1014), (0x1014, 0x1016)]
    mixed = bytearray(CONDITIONAL_TAIL_CALL)
    mixed[8:10] = bytes.fromhex("36bf")  # itet cc: the teardown and the branch under opposite conditions
    assert epilogue_spans(bytes(mixed), True) == [(0x1014, 0x1016)]


def test_a_conditional_epilogue_may_run_over_two_it_blocks_of_one_condition():
    code = bytes.fromhex(
        "f0b5"  # 0x1000 push {r4-r7, lr}
        "81b0"  # 0x1002 sub sp, #4
        "8a42"  # 0x1004 cmp r2, r1
        "bfbf"  # 0x1006 itttt lt
        "2046"  # 0x1008 movlt r0, r4
        "1146"  # 0x100a movlt r1, r2
        "3a46"  # 0x100c movlt r2, r7
        "01b0"  # 0x100e addlt sp, #4               (the teardown starts)
        "bcbf"  # 0x1010 itt lt
        "bde8f040"  # 0x1012 ldmialt.w sp!, {r4-r7, lr}
        "00f065b8"  # 0x1016 blt.w (out of the function: a tail call)
        "01b0"  # 0x101a add sp, #4
        "f0bd"  # 0x101c pop {r4-r7, pc}
    )
    assert epilogue_spans(code, True) == [(0x100E, 0x101A), (0x101A, 0x101E)]
    other = bytearray(code)
    other[0x10:0x12] = bytes.fromhex("a4bf")  # itt ge: the second block under another condition
    assert epilogue_spans(bytes(other), True) == [(0x1012, 0x101A), (0x101A, 0x101E)]


def test_steps_are_kept_by_their_bytes_only_where_they_decode_alike_anywhere():
    """A plan's steps are remembered by instruction bytes across programs;
    a branch's target depends on where it is, so the same bytes at another
    address are decoded there."""
    simulator, _, _ = simulator_for(["b.w #0x100200", "b.w #0x100204", "pop {r4, pc}", "pop {r4, pc}"])
    first, second = simulator._step_at(BASE)[1], simulator._step_at(BASE + 4)[1]
    assert simulator._code_at(BASE, 4) == simulator._code_at(BASE + 4, 4)  # the same bytes
    assert (first, second) == (Branch(0x100200), Branch(0x100204))
    assert simulator._step_at(BASE + 8)[1] == simulator._step_at(BASE + 10)[1] == Restore((4, 15))


def test_steps_of_two_kinds_never_compare_equal():
    """Steps are tuples (hashed in C: plans are cached by them), each kind's
    last field its own constant: plans that differ only in a step's kind
    stay apart."""
    alike = [epilogue.RestoreVfp(8, 2), epilogue.AdjustFramePointer(8, 2), Restore((8,)), Branch(8),
             epilogue.Release(8), epilogue.ReturnToLr()]
    assert len({(step,) for step in alike}) == len(alike)
    assert epilogue.Release(amount=8) == epilogue.Release(8, None, None, 0) and Restore((4, 15)) == Restore((4, 15))



def _python_plan(code: bytes, base: int = 0x10000, functions=None):
    """EpilogueSimulator's plan of the epilogue `code` starts with, at
    `base` (the reference of epilogue.c); `functions` as the simulator's,
    which `same_function` bisects."""
    def code_at(address: int, size: int) -> bytes:
        if not base <= address <= base + len(code) - size:
            raise KeyError(address)
        return code[address - base:address - base + size]

    def same_function(pc: int, target: int) -> bool:
        if functions is None:
            return False
        starts, end = functions
        inside = [starts[0] <= address < end for address in (pc, target)]
        return all(inside) and bisect.bisect_right(starts, pc) == bisect.bisect_right(starts, target)
    return EpilogueSimulator(code_at, same_function).plan(base)


def _holds(made, code: bytes, base: int = 0x10000, functions=None) -> bool:
    """epilogue.c's (steps, packed rule) for `code` at `base` are Python's:
    its plan, and the rule rule_of makes of it, packed as the kernel reads
    it (False: it declines, as Python does for a branch within the function)."""
    from harness.unwind.v2_epilogue import rule_of
    from harness.verify.kernel import pack_rule
    plan = _python_plan(code, base, functions)
    if made is False:
        return plan == "a branch within the function"
    steps, packed = made
    rule = None if isinstance(plan, str) else rule_of(plan)
    return steps == plan and packed == (None if rule is None else pack_rule(rule))


def test_the_kernels_epilogue_steps_are_pythons_for_every_encoding_it_knows():
    """epilogue.c plans an epilogue only where each instruction is one it
    knows: for every 16-bit encoding, and every second half-word of the
    32-bit encodings it takes, followed by `bx lr`, its plan (where it makes
    one) is Python's over capstone, step for step, and so is the rule it
    packs; where it makes none, Python plans (the reference decides). A
    branch is a tail call where it leaves the function, else the plan
    declines; with no functions given, it is Python's."""
    from harness.verify._kernel import epilogue_plan
    base, functions = 0x10000, (array("q", (0x8000, 0x10000, 0x10040)), 0x18000)  # the plan's: [0x10000, 0x10040)
    bx_lr = struct.pack("<H", 0x4770) + b"\0\0"
    known = branches = declines = 0
    firsts = [0xE8BD, 0xF85D, 0xECBD, 0xECFD, 0xEA4F] + [
        prefix | i << 10 for prefix in (0xF10D, 0xF20D, 0xF1A7, 0xF2A7, 0xF1AB, 0xF2AB) for i in (0, 1)]
    encodings = [struct.pack("<H", half) for half in range(0x10000) if half >> 11 not in (0x1D, 0x1E, 0x1F)]
    encodings += [struct.pack("<HH", first, second) for first in firsts for second in range(0x10000)]
    rng = random.Random(5)
    encodings += [struct.pack("<HH", rng.randrange(0xF000, 0xF800), rng.randrange(0x10000) | 0x9000)
                  for _ in range(20_000)]  # b.w, and bl where bit 14 is set too (not an epilogue's)
    for code in encodings:
        made = epilogue_plan(code + bx_lr, base, functions)
        if made is not None:
            assert _holds(made, code + bx_lr, base, functions), code.hex()
            known += 1
            branches += made is not False and made[0][-1][-1] == "branch"
            declines += made is False
        if code[1] >> 3 == 0x1C or (len(code) == 4 and code[1] >> 3 == 0x1E and code[3] & 0xD0 == 0x90):
            assert epilogue_plan(code + bx_lr, base, None) is None  # a branch, and no functions to place it
    assert known > 40_000 and branches > 1000 and declines > 10
    for name in ("pop {r4, pc}", "add sp, #8", "vpop {d8-d9}", "addw sp, sp, #1028", "sub.w sp, r7, #8",
                 "mov sp, r7", "ldr r4, [sp], #4", "pop.w {r4-r11, pc}", "bx r3", "b.w 0x12000"):
        assert epilogue_plan(assemble([name], base) + bx_lr, base, functions) is not None, name
    assert epilogue_plan(assemble(["b.w 0x10020"], base) + bx_lr, base, functions) is False  # within


def test_the_kernels_epilogue_plans_are_pythons_at_every_pc_of_the_corpus():
    """At every pc of generated programs, the plan epilogue.c makes, where
    it makes one, is v2+epilogue's own (its tables placing tail calls), and
    so is its rule (with its base moved first, or none)."""
    from harness.unwind.v2_epilogue import rule_of
    from harness.verify._kernel import epilogue_plan
    from harness.verify.kernel import pack_rule
    made = moved = tail_calls = 0
    for number in range(DEFAULT_PROGRAMS):
        program = generate_program(0, number)
        simulator = next(u for u in build_unwinders(program) if u.name == "v2+epilogue").simulator
        for function in program.functions:
            for pc in range(function.start, function.end, 2):
                plan = epilogue_plan(program.code(pc, 1 << 20), pc, simulator.functions)
                if plan is None:
                    continue
                python = simulator.plan(pc)
                if plan is False:
                    assert python == "a branch within the function", (program.name, hex(pc))
                    continue
                rule = None if isinstance(python, str) else rule_of(python)
                assert plan == (python, None if rule is None else pack_rule(rule)), (program.name, hex(pc))
                made += 1
                moved += plan[0][0][-1] == "release" and plan[0][0][1:3] != (None, None)
                tail_calls += plan[0][-1][-1] == "branch"
    assert made > 100 and moved and tail_calls


def test_the_functions_a_tail_call_is_placed_by_are_the_tables_own():
    """v2+epilogue's functions (first pcs and end, which epilogue.c
    bisects) put two pcs in one function exactly where its tables' lookup
    does: pcs near every function's edges and at random in generated
    programs, against the edges of every function, and outside the pages."""
    rng = random.Random(7)
    for number in range(4):
        program = generate_program(0, number)
        simulator = next(u for u in build_unwinders(program) if u.name == "v2+epilogue").simulator
        starts, end = simulator.functions

        def bisected(pc: int, target: int) -> bool:
            return starts[0] <= pc < end and starts[0] <= target < end and \
                bisect.bisect_right(starts, pc) == bisect.bisect_right(starts, target)
        low, high = program.functions[0].start - 16, program.functions[-1].end + 16
        edges = sorted({edge + delta for f in program.functions for edge in (f.start, f.end) for delta in (-2, 0)}
                       | {low, high, end - 2, end})
        pcs = {edge + delta for edge in edges for delta in (-4, -2, 0, 2, 4)} | {rng.randrange(low, high) & ~1
                                                                              for _ in range(300)}
        for pc in sorted(pcs):
            for target in edges:
                assert bisected(pc, target) == simulator._same_function(pc, target), (hex(pc), hex(target))
