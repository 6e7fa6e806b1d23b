"""Outer walks kept from one stop to the next (csrc/memo.c): in a run that
stops at every instruction, a walk takes its frames after the innermost
one's from the last stop's walk where nothing they depend on changed. The
verdicts must be exactly those of walks that step every frame."""

from __future__ import annotations

from functools import partial

import pytest
from test_kernel import elf_program
from test_linux_process import build, sysroot

from generators.assembler import assemble
from generators.corpus import generate_program
from harness.classify import FunctionInfo
from harness.linux.process import LinuxRun
from harness.linux.verify import verify_process
from harness.program import Program
from harness.unwind import UNWINDER_NAMES, build_unwinders
from harness.verify import kernel
from harness.verify.kernel import StopKernel
from harness.verify.stops import verify_program

pytestmark = pytest.mark.skipif(not kernel.AVAILABLE, reason="the memo is the compiled kernel's")
BASE = 0x100000


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
    assert verifiers[0].outer_walks_reused > kept.stops and verifiers[1].outer_walks_reused == 0


@pytest.mark.parametrize("file", ["gcc-O2-nofp.elf", "clang-O0-fp.elf", "clang-Os-nofp.elf"])
def test_compiled_programs_conclude_the_same_with_outer_walks_kept(monkeypatch, verifiers, file):
    program = elf_program(file)
    kept, stepped = both_ways(monkeypatch, lambda: verify_program(program, build_unwinders(program)))
    assert verdicts(kept) == verdicts(stepped)
    assert verifiers[0].outer_walks_reused > 5 * kept.stops  # deep stacks: most walks reuse


def test_a_process_concludes_the_same_with_outer_walks_kept(monkeypatch, verifiers):
    """A dynamically linked C++ program that throws through five frames:
    libraries, landing pads, every unwinder."""
    run = LinuxRun(build("throw.cc", "-Wl,-z,now"), (), sysroot())
    names = [name for name in UNWINDER_NAMES if name != "v2-gcc"]  # as verify-elf: gcc describes no epilogue
    own = partial(build_unwinders, names=names)
    kept, stepped = both_ways(monkeypatch, lambda: verify_process(run, names, own))
    assert kept.fault is None and kept.stops > 50_000
    assert verdicts(kept) == verdicts(stepped)
    assert sum(v.outer_walks_reused for v in verifiers[: len(verifiers) // 2]) > kept.stops


def test_a_sampled_run_keeps_no_outer_walk(verifiers):
    """Samples lie far apart: the memo would compare a changed stack for nothing."""
    program = generate_program(0, 3)
    verify_program(program, build_unwinders(program), every=7)
    assert verifiers and all(v.outer_walks_reused == 0 for v in verifiers)


def test_a_store_into_a_callers_frame_is_seen_by_the_next_walk(monkeypatch, verifiers):
    """`inner` overwrites the lr `middle` saved with 0, runs two nops and
    puts it back. The frame-pointer walk from inner (whose record gives
    middle) is right, then wrong at frame 1 at the three stops while the
    word is 0 (before each nop and the store back: the caller's pc is 0),
    then right again; yet the frame inner's step gives (middle's registers)
    is the same at each of those stops: only the stack above changed."""
    lines = ["main: push {r7, lr}", "mov r7, sp", "bl middle", "movs r0, #5", "pop {r7, pc}",
             "middle: push {r7, lr}", "mov r7, sp", "sub sp, #8", "mov r0, r7", "bl inner", "add sp, #8",
             "pop {r7, pc}",
             "inner: push {r7, lr}", "mov r7, sp", "ldr r1, [r0, #4]", "movs r2, #0", "str r2, [r0, #4]", "nop",
             "nop", "str r1, [r0, #4]", "pop {r7, pc}"]
    code = assemble(lines, BASE)
    info = (FunctionInfo("main", BASE, BASE + len(code), BASE, (), frozenset({"frame_pointer"})),)
    program = Program("clobber", ((BASE, code),), BASE, BASE, info, expected_result=5)
    kept, stepped = both_ways(monkeypatch, lambda: verify_program(program, build_unwinders(program, ["framepointer"])))
    assert (kept.fault, kept.result) == (None, 5)
    assert verdicts(kept) == verdicts(stepped)
    wrong = [(entry[3].frame, entry[3].kind, entry[4][0]) for entry in kept.failure_log if entry[3].frame == 1]
    assert wrong == [(1, "wrong_pc", 0)] * 3
    assert verifiers[0].outer_walks_reused > 0
