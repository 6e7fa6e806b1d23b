"""Outer walks kept from one stop to the next (csrc/memo.c): in a run that
stops at every instruction, a walk takes its frames after the innermost
one's from the last stop's walk where nothing they depend on changed. The
verdicts must be exactly those of walks that step every frame."""

from __future__ import annotations

import random
from functools import partial

import pytest
from capstone import CS_ARCH_ARM, CS_MODE_THUMB, Cs
from test_kernel import elf_program
from test_linux_process import build, sysroot

from generators.assembler import assemble
from generators.corpus import generate_program
from harness.classify import FunctionInfo
from harness.linux.process import LinuxRun
from harness.linux_verify.verify import verify_process
from harness.program import CfiRow, FunctionCfi, Program
from harness.unwind.registry import UNWINDER_NAMES, build_unwinders
from harness.verify import kernel
from harness.verify.kernel import StopKernel
from harness.verify.stops import Verify, verify_program

pytestmark = pytest.mark.skipif(not kernel.AVAILABLE, reason="the memo is the compiled kernel's")
BASE = 0x100000
R4_LR = ((4, -8), (14, -4))  # what `push {r4, lr}` saves: (register, offset from the CFA)
R7_LR = ((7, -8), (14, -4))


@pytest.fixture
def verifiers(monkeypatch):
    """The Verifier of every StopKernel made while the test runs."""
    made = []
    real = StopKernel.__init__

    def init(self, *args, **kwargs):
        real(self, *args, **kwargs)
        made.append(self.verifier)
    monkeypatch.setattr(StopKernel, "__init__", init)
    return made


def reused(verifier) -> int:
    """Walks that took part of their frames, or all, from the last stop's."""
    return verifier.outer_walks_reused + verifier.whole_walks_reused


def verdicts(result) -> tuple:
    """Everything a run concludes: counts, failures by cause, every logged
    failure in order, and the chain's frames per method."""
    return result.counts, result.failure_tally, list(result.failure_log), result.methods


def both_ways(monkeypatch, run):
    """`run()` with outer walks kept, then with every frame stepped."""
    kept = run()
    monkeypatch.setattr(StopKernel, "keeps_outer_walks", False)
    stepped = run()
    monkeypatch.setattr(StopKernel, "keeps_outer_walks", True)
    return kept, stepped


@pytest.mark.parametrize("seed, index", [(0, 0), (0, 3), (7, 1), (11, 2), (3, 5), (5, 4)])
def test_generated_programs_conclude_the_same_with_outer_walks_kept(monkeypatch, verifiers, seed, index):
    program = generate_program(seed, index)
    kept, stepped = both_ways(monkeypatch, lambda: verify_program(program, build_unwinders(program)))
    assert verdicts(kept) == verdicts(stepped) and kept.stops > 500
    assert reused(verifiers[0]) > kept.stops and reused(verifiers[1]) == 0


@pytest.mark.parametrize("file", ["gcc-O2-nofp.elf", "clang-O0-fp.elf", "clang-Os-nofp.elf"])
def test_compiled_programs_conclude_the_same_with_outer_walks_kept(monkeypatch, verifiers, file):
    program = elf_program(file)
    kept, stepped = both_ways(monkeypatch, lambda: verify_program(program, build_unwinders(program)))
    assert verdicts(kept) == verdicts(stepped)
    assert reused(verifiers[0]) > 5 * kept.stops  # deep stacks: most walks reuse


def test_a_process_concludes_the_same_with_outer_walks_kept(monkeypatch, verifiers):
    """A dynamically linked C++ program that throws through five frames:
    libraries, landing pads, every unwinder."""
    run = LinuxRun(build("throw.cc", "-Wl,-z,now"), (), sysroot())
    names = [name for name in UNWINDER_NAMES if name != "v2-gcc"]  # as verify-elf: gcc describes no epilogue
    own = partial(build_unwinders, names=names)
    kept, stepped = both_ways(monkeypatch, lambda: verify_process(run, names, own))
    assert kept.fault is None and kept.stops > 50_000
    assert verdicts(kept) == verdicts(stepped)
    assert sum(reused(v) for v in verifiers[: len(verifiers) // 2]) > kept.stops


def test_a_sampled_run_keeps_no_outer_walk(verifiers):
    """Samples lie far apart: the memo would compare a changed stack for nothing."""
    program = generate_program(0, 3)
    verify_program(program, build_unwinders(program), how=Verify(every=7))
    assert verifiers and all(reused(v) == 0 for v in verifiers)


STORES = {  # each writes 0 over the saved lr at [r0, #4], or its upper bytes, keeping the saved r7 at [r0]
    "str": ["str r2, [r0, #4]"], "str.w": ["str.w r2, [r0, #4]"], "strh": ["strh r2, [r0, #6]"],
    "strb.w": ["strb.w r2, [r0, #6]"], "str register": ["movs r3, #4", "str r2, [r0, r3]"],
    "stmia": ["adds r3, r0, #4", "stmia r3!, {r2}"], "strd": ["ldr r3, [r0]", "strd r3, r2, [r0]"],
}


@pytest.mark.parametrize("store", STORES)
def test_a_store_into_a_callers_frame_is_seen_by_the_next_walk(monkeypatch, verifiers, store):
    """`inner` overwrites the lr `middle` saved (with 0, or its upper bytes:
    STORES), runs two nops and puts it back. The frame-pointer walk from
    inner (whose record gives middle) is right, then wrong at frame 1 at the
    three stops while the word is changed (before each nop and the store
    back), then right again; yet the frame inner's step gives (middle's
    registers) is the same at each of those stops: only the stack above
    changed. The kernel compares no kept bytes after an instruction that
    cannot write memory: each form of store must count as one."""
    lines = ["main: push {r7, lr}", "mov r7, sp", "bl middle", "movs r0, #5", "pop {r7, pc}",
             "middle: push {r7, lr}", "mov r7, sp", "sub sp, #8", "mov r0, r7", "bl inner", "add sp, #8",
             "pop {r7, pc}",
             "inner: push {r7, lr}", "mov r7, sp", "ldr r1, [r0, #4]", "movs r2, #0", *STORES[store], "nop",
             "nop", "str r1, [r0, #4]", "pop {r7, pc}"]
    code = assemble(lines, BASE)
    info = (FunctionInfo("main", BASE, BASE + len(code), BASE, (), frozenset({"frame_pointer"})),)
    program = Program("clobber", ((BASE, code),), BASE, BASE, info, expected_result=5)
    kept, stepped = both_ways(monkeypatch, lambda: verify_program(program, build_unwinders(program, ["framepointer"])))
    assert (kept.fault, kept.result) == (None, 5)
    assert verdicts(kept) == verdicts(stepped)
    wrong = [(entry[3].frame, entry[3].kind) for entry in kept.failure_log if entry[3].frame == 1]
    assert wrong == [(1, "wrong_pc")] * 3
    assert reused(verifiers[0]) > 0


def test_a_store_into_the_innermost_frames_record_is_seen_by_the_next_walk(monkeypatch, verifiers):
    """`inner` overwrites the lr it saved itself with 0, runs two nops and
    puts it back, through r1 and r2 (scratch: they pass to no caller). The
    innermost step reads that word: wrong at frame 0 at the three stops
    while it is 0, right again after; yet every register but the pc and the
    scratch ones is the same at each: only the stack changed, and a walk
    taken whole from the stop before would miss it."""
    lines = ["main: push {r7, lr}", "mov r7, sp", "bl inner", "movs r0, #5", "pop {r7, pc}",
             "inner: push {r4, lr}", "ldr r1, [sp, #4]", "movs r2, #0", "str r2, [sp, #4]", "nop", "nop",
             "str r1, [sp, #4]", "pop {r4, pc}"]
    program = _pushing_eight("clobber-own", {"main": R7_LR, "inner": R4_LR}, lines)
    kept, stepped = both_ways(monkeypatch, lambda: verify_program(program, build_unwinders(program, ["dwarf"])))
    assert (kept.fault, kept.result) == (None, 5)
    assert verdicts(kept) == verdicts(stepped)
    wrong = [(entry[3].frame, entry[3].kind) for entry in kept.failure_log]
    assert wrong == [(0, "wrong_pc")] * 3
    assert verifiers[0].whole_walks_reused > 0


def test_a_scratch_register_a_rule_reads_is_part_of_what_a_walk_depends_on(monkeypatch, verifiers):
    """`inner` sets its CFA rule to r3 (as `mov r3, sp` makes it, scratch:
    r3 passes to no caller), then moves r3 up and back. The step from inner
    is wrong at the one stop where r3 is 8 above sp, though nothing a step
    reads otherwise changed: a walk taken whole from the stop before would
    miss it."""
    lines = ["main: push {r7, lr}", "bl inner", "movs r0, #5", "pop {r7, pc}",
             "inner: mov r3, sp", "nop", "adds r3, #8", "subs r3, #8", "nop", "bx lr"]
    code = assemble(lines, BASE)
    inner, end = BASE + code.index(bytes.fromhex("6b46")), BASE + len(code)  # mov r3, sp
    info = (FunctionInfo("main", BASE, inner, BASE, (), frozenset()),
            FunctionInfo("inner", inner, end, inner, (), frozenset()))
    rows = (FunctionCfi("main", BASE, inner, (CfiRow(BASE), CfiRow(BASE + 2, cfa_offset=8, saved=((7, -8), (14, -4))))),
            FunctionCfi("inner", inner, end, (CfiRow(inner), CfiRow(inner + 2, cfa_reg=3))))
    program = Program("cfa-in-r3", ((BASE, code),), BASE, BASE, info, {"tables": rows, "reference": rows},
                      expected_result=5)
    kept, stepped = both_ways(monkeypatch, lambda: verify_program(program, build_unwinders(program, ["dwarf"])))
    assert (kept.fault, kept.result) == (None, 5)
    assert verdicts(kept) == verdicts(stepped)
    assert [(entry[3].frame, entry[3].kind) for entry in kept.failure_log] == [(0, "wrong_sp")]
    assert verifiers[0].whole_walks_reused > 0


def _leaf_under_main(name: str, body: list[str], rows_of_inner) -> Program:
    """main calls `inner` (`body`, its code), which returns 5; CFI rows for
    both, inner's made by rows_of_inner(inner's address)."""
    lines = ["main: push {r7, lr}", "bl inner", "movs r0, #5", "pop {r7, pc}", "inner: " + body[0], *body[1:]]
    code = assemble(lines, BASE)
    inner = BASE + len(assemble([*lines[:4], "inner: nop"], BASE)) - 2  # main's code, then inner's
    end = BASE + len(code)
    info = (FunctionInfo("main", BASE, inner, BASE, (), frozenset()),
            FunctionInfo("inner", inner, end, inner, (), frozenset()))
    rows = (FunctionCfi("main", BASE, inner, (CfiRow(BASE), CfiRow(BASE + 2, cfa_offset=8, saved=R7_LR))),
            FunctionCfi("inner", inner, end, rows_of_inner(inner)))
    return Program(name, ((BASE, code),), BASE, BASE, info, {"tables": rows, "reference": rows}, expected_result=5)


def test_a_walk_is_taken_whole_where_only_registers_its_rule_loads_changed(monkeypatch, verifiers):
    """`inner` saves r4 and lr, then writes r4 three times: the step from
    inner loads r4 from the stack, so the value in r4 is none of what it
    depends on, and every stop after the first of inner's body takes the
    walk whole."""
    program = _leaf_under_main("r4-written", ["push {r4, lr}", "movs r4, #1", "movs r4, #2", "movs r4, #3",
                                              "pop {r4, pc}"],
                               lambda inner: (CfiRow(inner), CfiRow(inner + 2, cfa_offset=8, saved=R4_LR)))
    kept, stepped = both_ways(monkeypatch, lambda: verify_program(program, build_unwinders(program, ["dwarf"])))
    assert (kept.fault, kept.result, kept.failure_tally) == (None, 5, {})
    assert verdicts(kept) == verdicts(stepped)
    assert verifiers[0].whole_walks_reused >= 3  # at each movs r4 but the first, and at the pop


def test_a_register_passed_to_the_caller_and_compared_there_is_part_of_what_a_walk_depends_on(monkeypatch, verifiers):
    """`inner` keeps no frame and writes r5, which it never saved (breaking
    the ABI): its step passes r5 on to main's frame unchanged, where the
    walk compares it. The stops from the write on find r5 wrong, though
    nothing the step itself reads changed; the walks before it are taken
    whole from one nop to the next."""
    program = _leaf_under_main("r5-clobbered", ["nop", "nop", "movs r5, #1", "nop", "nop", "bx lr"],
                               lambda inner: (CfiRow(inner),))
    kept, stepped = both_ways(monkeypatch, lambda: verify_program(program, build_unwinders(program, ["dwarf"])))
    assert (kept.fault, kept.result) == (None, 5)
    assert verdicts(kept) == verdicts(stepped)
    assert [(entry[3].kind, entry[3].register) for entry in kept.failure_log] == [("wrong_register", "r5")] * 5
    assert verifiers[0].whole_walks_reused > 0


def test_a_register_passed_to_the_caller_and_read_by_its_step_is_part_of_what_a_walk_depends_on(monkeypatch,
                                                                                                  verifiers):
    """main keeps its frame in r6 (its CFA, as its v2 entry says: vsp = r6);
    the chain compares no register but pc and sp, so r6 matters to a walk
    only through main's step. `inner` keeps no frame, and moves r6 up
    (breaking the ABI): from there main's v2 step reads the wrong words and
    the chain takes main's caller from a later method. A walk taken whole
    from before the move would count v2's."""
    lines = ["main: push {r6, lr}", "mov r6, sp", "bl inner", "movs r0, #5", "pop {r6, pc}",
             "inner: nop", "nop", "adds r6, #8", "nop", "nop", "bx lr"]
    code = assemble(lines, BASE)
    inner, end = BASE + len(assemble([*lines[:5], "inner: nop"], BASE)) - 2, BASE + len(code)
    info = (FunctionInfo("main", BASE, inner, BASE, (), frozenset()),
            FunctionInfo("inner", inner, end, inner, (), frozenset()))
    saved = ((6, -8), (14, -4))
    rows = (FunctionCfi("main", BASE, inner, (CfiRow(BASE), CfiRow(BASE + 2, cfa_offset=8, saved=saved),
                                              CfiRow(BASE + 4, cfa_reg=6, cfa_offset=8, saved=saved))),
            FunctionCfi("inner", inner, end, (CfiRow(inner),)))
    program = Program("cfa-in-r6", ((BASE, code),), BASE, BASE, info, {"tables": rows, "reference": rows},
                      expected_result=5)
    kept, stepped = both_ways(monkeypatch, lambda: verify_program(program, build_unwinders(program, ["chain"])))
    assert (kept.fault, kept.result) == (None, 5)
    assert verdicts(kept) == verdicts(stepped)
    assert kept.methods[("chain", "scan", True)] >= 3  # main's caller, at each stop from the move to the return
    assert verifiers[0].whole_walks_reused > 0


def test_a_frameless_walk_is_taken_whole_at_any_pc_but_the_one_its_caller_is_found_at(monkeypatch, verifiers):
    """`inner` keeps no frame: its caller is at lr and at its own sp, and
    check_caller compares the caller's pc with the frame's. The walk is
    taken whole from one nop to the next (another pc, the same answer);
    then `inner` points lr two instructions ahead and steps there, where
    the frame's pc is the caller's and check_caller refuses it: that walk
    is not the one before it taken whole."""
    program = _leaf_under_main("lr-ahead", ["mov r12, lr", "nop", "nop", "nop", "mov r3, pc", "adds r3, #4",
                                            "mov lr, r3", "nop", "nop", "bx r12"],
                               lambda inner: (CfiRow(inner),))
    kept, stepped = both_ways(monkeypatch, lambda: verify_program(program, build_unwinders(program, ["dwarf"])))
    assert (kept.fault, kept.result) == (None, 5)
    assert verdicts(kept) == verdicts(stepped)
    assert {cause.kind for _, cause in kept.failure_tally} == {"wrong_pc", "limit"}  # lr ahead, then lr here
    assert verifiers[0].whole_walks_reused >= 3  # at the second and third nop, and at the nop lr points past


def test_an_outer_walk_holds_while_the_innermost_sp_moves(monkeypatch, verifiers):
    """`inner` moves sp down twice and back up in its body: the stack's low
    end moves at each, yet its caller's records, which the walk from frame
    1 on reads, lie above every position of it: the outer walk is taken
    from the stop before at each stop after a move."""
    program = _leaf_under_main("sp-moving", ["push {r4, lr}", "sub sp, #8", "nop", "sub sp, #8", "nop", "add sp, #16",
                                             "nop", "pop {r4, pc}"],
                               lambda inner: (CfiRow(inner), CfiRow(inner + 2, cfa_offset=8, saved=R4_LR),
                                              CfiRow(inner + 4, cfa_offset=16, saved=R4_LR),
                                              CfiRow(inner + 8, cfa_offset=24, saved=R4_LR),
                                              CfiRow(inner + 12, cfa_offset=8, saved=R4_LR)))
    kept, stepped = both_ways(monkeypatch, lambda: verify_program(program, build_unwinders(program, ["dwarf"])))
    assert (kept.fault, kept.result, kept.failure_tally) == (None, 5, {})
    assert verdicts(kept) == verdicts(stepped)
    assert verifiers[0].outer_walks_reused >= 3  # after each sub sp and the add sp


def _pushing_eight(name: str, saved: dict[str, tuple], lines: list[str]) -> Program:
    """A program of the functions `saved` names (main first, each a label of
    `lines`), each of which begins by pushing 8 bytes, saving what its CFI
    says: saved[function]; main returns 5."""
    functions = list(saved)
    code = assemble(lines, BASE)
    where = assemble([*lines, ".align 2", *(f".word {function}" for function in functions)], BASE)[-4 * len(functions):]
    starts = [int.from_bytes(where[at : at + 4], "little") for at in range(0, len(where), 4)]
    spans = list(zip(functions, starts, [*starts[1:], BASE + len(code)]))
    info = tuple(FunctionInfo(function, low, high, low, (), frozenset()) for function, low, high in spans)
    rows = tuple(FunctionCfi(function, low, high, (CfiRow(low), CfiRow(low + 2, cfa_offset=8, saved=saved[function])))
                 for function, low, high in spans)
    return Program(name, ((BASE, code),), BASE, BASE, info, {"tables": rows, "reference": rows}, expected_result=5)


def test_a_return_address_passed_to_a_caller_that_takes_its_pc_from_lr_is_part_of_what_an_outer_walk_depends_on(
        monkeypatch, verifiers):
    """main calls middle, which calls inner. vmkunwind takes inner's pc
    from its stack slot and passes lr on; middle's table says it saved r4
    alone, so middle's step takes its pc from that lr, which is inner's
    return address at first: wrong. Then inner loads middle's saved lr into
    lr, and middle's step is right: only lr changed in middle's frame, and
    an outer walk kept from before would still find it wrong."""
    lines = ["main: push {r7, lr}", "bl middle", "movs r0, #5", "pop {r7, pc}",
             "middle: push {r4, lr}", "bl inner", "pop {r4, pc}",
             "inner: push {r4, lr}", "nop", "ldr r4, [sp, #12]", "mov lr, r4", "nop", "nop", "pop {r4, pc}"]
    program = _pushing_eight("lr-passed-on", {"main": R7_LR, "middle": ((4, -8),), "inner": R4_LR}, lines)
    kept, stepped = both_ways(monkeypatch, lambda: verify_program(program, build_unwinders(program, ["vmkunwind"])))
    assert (kept.fault, kept.result) == (None, 5)
    assert verdicts(kept) == verdicts(stepped)
    assert [(entry[3].frame, entry[3].kind) for entry in kept.failure_log] == [(1, "wrong_pc")] * 4  # until mov lr
    assert verifiers[0].outer_walks_reused > 0


def test_the_walks_after_a_call_and_a_return_take_the_frames_walked_before_it(monkeypatch, verifiers):
    """main calls middle, which calls leaf three times. At the first stop
    in leaf, the walk from middle's return address on is middle's walk
    from before the call, but one frame deeper; at the first stop back in
    middle, its callers' part is the one walked before the call: each is
    taken from an earlier stop (the memo keeps parts by the shadow frames
    they compare), six more than a memo that forgets at every call and
    return would take."""
    lines = ["main: push {r4, lr}", "bl middle", "movs r0, #5", "pop {r4, pc}",
             "middle: push {r4, lr}", "bl leaf", "bl leaf", "bl leaf", "pop {r4, pc}",
             "leaf: push {r4, lr}", "nop", "pop {r4, pc}"]
    program = _pushing_eight("calls", dict.fromkeys(["main", "middle", "leaf"], R4_LR), lines)
    kept, stepped = both_ways(monkeypatch, lambda: verify_program(program, build_unwinders(program, ["dwarf"])))
    assert (kept.fault, kept.result, kept.failure_tally) == (None, 5, {})
    assert verdicts(kept) == verdicts(stepped)
    assert verifiers[0].outer_walks_reused >= 10  # 4 between calls, and the 6 after each call and return


def test_the_instructions_the_memo_calls_storeless_write_no_memory():
    """After an instruction that cannot write memory, the memo takes kept
    parts without comparing their bytes (trace.c's thumb_may_store): every
    Thumb instruction the disassembler reads as a store or a trap must be
    called one (each 16-bit encoding; each first half-word of a 32-bit one
    with 16 seeded second half-words), and the common storeless classes
    must not be, or the memo would compare for nothing."""
    from harness.verify._kernel import may_store
    disassembler = Cs(CS_ARCH_ARM, CS_MODE_THUMB)
    writes = ("st", "push", "vst", "vpush", "srs", "svc", "bkpt", "udf", "trap", "smc", "hvc")
    storeless = {"ldr", "ldrb", "ldrh", "ldrd", "ldm", "ldmdb", "pop", "vldr", "vpop", "add", "adds", "sub", "subs",
                 "mov", "movs", "movw", "movt", "cmp", "cmn", "tst", "b", "bl", "blx", "bx", "cbz", "cbnz", "it", "nop",
                 "mul", "muls", "sdiv", "lsl", "lsls", "and", "ands", "orr", "orrs", "eor", "eors"}
    rng = random.Random(0)
    missed, called_stores, seen = [], [], set()
    for first in range(0x10000):
        for second in [rng.randrange(0x10000) for _ in range(16)] if first >= 0xE800 else [0]:
            code = first.to_bytes(2, "little") + second.to_bytes(2, "little")
            for insn in disassembler.disasm(code, 0x1000, 1):
                mnemonic = insn.mnemonic.split(".")[0]
                seen.add(mnemonic)
                if mnemonic.startswith(writes) and not may_store(first, second):
                    missed.append(f"{first:04x} {second:04x} {insn.mnemonic} {insn.op_str}")
                if mnemonic in storeless and may_store(first, second):
                    called_stores.append(f"{first:04x} {second:04x} {insn.mnemonic} {insn.op_str}")
    assert not missed and not called_stores
    assert {"str", "strd", "stm", "push", "vstr", "vpush", "strex", "svc"} <= seen and storeless <= seen


def test_a_recursion_deeper_than_the_memos_levels_concludes_the_same(monkeypatch, verifiers):
    """`rec` calls itself 70 deep: the memo keeps parts of walks by level in a
    ring of csrc/kernel.h's MEMO_LEVELS (32), so levels 32 apart share a slot
    and the deeper calls and returns overwrite the parts of the shallower
    ones; every unwinder still concludes as it does stepping every frame."""
    lines = ["main: push {r4, lr}", "movs r0, #70", "bl rec", "movs r0, #5", "pop {r4, pc}",
             "rec: push {r4, lr}", "movs r4, r0", "subs r0, #1", "beq done", "bl rec", "done: adds r0, r4, #0",
             "pop {r4, pc}"]
    program = _pushing_eight("deep", dict.fromkeys(["main", "rec"], R4_LR), lines)
    kept, stepped = both_ways(monkeypatch, lambda: verify_program(program, build_unwinders(program)))
    assert (kept.fault, kept.result) == (None, 5) and kept.stops > 400
    assert verdicts(kept) == verdicts(stepped) and kept.failure_tally
    assert reused(verifiers[0]) > kept.stops
