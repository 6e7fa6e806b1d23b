"""Sampled runs (harness.verify.sampling, csrc/trace.c): the strides, the
shards, and the shadow stack kept from block entries, held to the one kept
before every instruction (the reference) at every stop of generated,
compiled and Linux programs."""

from __future__ import annotations

import itertools
import weakref
from functools import partial

import pytest

from generators.assembler import assemble
from generators.corpus import generate_program
from harness.classify import FunctionInfo
from harness.elf_program import program_from_elf
from harness.emulation import engine_pool
from harness.emulation.emulator import Emulator
from harness.linux_verify.corpus import linux_entries, linux_run
from harness.linux_verify.modules import discover
from harness.linux_verify.verify import verify_process
from harness.manifest import ELF_CORPUS, elf_builds
from harness.program import Program
from harness.runner import LINUX_LIMITS
from harness.unwind.registry import build_unwinders
from harness.verify import kernel
from harness.verify.failures import ProgramResult
from harness.verify.python_hook import RunParts
from harness.verify.sampling import chooser, sampled_stops, strides
from harness.verify.stops import DEFAULT_LIMITS, Verify, _run_compiled, verify_program
from harness.verify.verification import Verification

BASE = 0x100000
needs_kernel = pytest.mark.skipif(not kernel.AVAILABLE, reason="block hooks are the compiled kernel's")


@pytest.mark.parametrize("every", [2, 10, 1000])
def test_strides_lie_in_1_to_2n_minus_1_and_average_n(every):
    drawn = list(itertools.islice(strides(every), 50_000))
    assert min(drawn) == 1 and max(drawn) == 2 * every - 1
    assert abs(sum(drawn) / len(drawn) - every) < 0.02 * every


def test_every_one_is_every_stop_and_shards_split_the_samples():
    assert list(itertools.islice(sampled_stops(1), 5)) == [0, 1, 2, 3, 4]
    samples = set(itertools.takewhile(lambda n: n < 100_000, sampled_stops(7)))
    shards = [{n for n in range(100_000) if verified(n)} for verified in (chooser(7, (i, 3)) for i in range(3))]
    assert set().union(*shards) == samples and sum(map(len, shards)) == len(samples)
    assert all(abs(len(shard) - len(samples) / 3) <= 1 for shard in shards)  # the i-th sample is shard i % 3's


def observed_run(run, hooks: str, how: Verify = Verify()) -> tuple:
    """A run's results and every stop it showed its observer (verified as
    `how` says, by `hooks`)."""
    seen = []
    result = run(how=how._replace(hooks=hooks),
                 observe=lambda stop: seen.append((stop.pc, stop.frame.r, stop.frame.d, stop.expected)))
    return result, seen


def assert_same_runs(run, how: Verify = Verify()) -> None:
    blocks, by_blocks = observed_run(run, "block", how)
    instructions, by_instructions = observed_run(run, "instruction", how)
    assert blocks.stops == instructions.stops > 0 and blocks.fault is None and blocks.self_check_ok
    assert by_blocks == by_instructions  # pc, registers and the whole shadow stack at every stop
    assert blocks.counts == instructions.counts and blocks.failures == instructions.failures
    assert blocks.methods == instructions.methods


@needs_kernel
@pytest.mark.parametrize("seed, index", [(0, 0), (0, 3), (7, 1), (11, 2), (5, 7)])
def test_block_hooks_keep_the_shadow_stack_at_every_stop_of_generated_programs(seed, index):
    program = generate_program(seed, index)
    assert_same_runs(partial(verify_program, program, build_unwinders(program)))


@needs_kernel
@pytest.mark.parametrize("index", range(3))
def test_block_hooks_find_the_same_frames_that_resume(index):
    """The first run of ground truth alone (stops._resuming_frames) follows
    block entries: the frames that resume are those of a hook before every
    instruction."""
    program = [generate_program(0, 4), elf_program("gcc-O2-fp.elf"), elf_program("clang-Os-nofp.elf")][index]
    found = []
    for by_blocks in (False, True):
        result = ProgramResult(program.name)
        found.append(_run_compiled(RunParts(program, [], Emulator(program.segments),
                                            Verification(program, [], True, result), result, DEFAULT_LIMITS, 1,
                                            (0, 1), by_blocks))[0])
    assert found[0] == found[1] and any(found[0])


def elf_program(file: str):
    build = next(b for b in elf_builds() if b["file"] == file)
    return program_from_elf(str(ELF_CORPUS / file), build["entry"], build["expected_checksum"])


@needs_kernel
@pytest.mark.parametrize("build", elf_builds(), ids=lambda build: build["file"])
def test_block_hooks_keep_the_shadow_stack_at_every_stop_of_compiled_programs(build):
    program = program_from_elf(str(ELF_CORPUS / build["file"]), build["entry"], build["expected_checksum"])
    assert_same_runs(partial(verify_program, program, build_unwinders(program, ["v2", "exidx", "chain"])))


@needs_kernel
@pytest.mark.parametrize("every", [3, 1000])
def test_sampled_stops_are_those_of_a_run_that_stops_at_every_instruction(every):
    """A sampled run's verdicts at its stops are those of a full run there."""
    program = program_from_elf(str(ELF_CORPUS / "clang-O2-fp.elf"), "entry")
    unwinders = ["v2", "exidx", "framepointer", "chain"]
    full, seen = observed_run(partial(verify_program, program, build_unwinders(program, unwinders)), "instruction")
    sampled, picked = observed_run(partial(verify_program, program, build_unwinders(program, unwinders)), "auto",
                                   Verify(every=every))
    numbers = list(itertools.islice(sampled_stops(every), sampled.stops))
    assert picked == [seen[n] for n in numbers]
    assert {f for f in sampled.failures} == {f for f in full.failures if f.stop in set(numbers)}


@needs_kernel
@pytest.mark.parametrize("entry", linux_entries("slice"), ids=lambda entry: entry["name"])
def test_block_hooks_keep_the_shadow_stack_in_linux_processes(entry):
    """From block entries, as from every instruction; but a fault the
    program takes, which block entries do not place: such a run ends there,
    named, and the process is verified from every instruction."""
    names = ["v2", "chain"]
    how = Verify(every=97, limits=LINUX_LIMITS)
    run = partial(verify_process, linux_run(entry), names, partial(build_unwinders, names=names))
    if not discover(linux_run(entry), LINUX_LIMITS).exact_faults:
        assert_same_runs(run, how)
        return
    blocks, _ = observed_run(run, "block", how)
    assert "inside a block run without the per-instruction hook" in blocks.fault
    verified = run(how)
    assert verified.fault is None and verified.self_check_ok and verified.stops > 0


@needs_kernel
@pytest.mark.parametrize("every", [1, 3])
def test_a_program_that_rewrites_its_code_runs_the_new_code(every):
    """The traced run hooks memory over the program's code (so that the
    engine skips its TLB scan when it translates there): a store into code
    translated already still drops that translation. `target` returns 1,
    then main rewrites it to return 2: 1 + 2."""
    lines = ["push {r4, lr}", "movs r4, #0", "movs r3, #2",
             "loop: bl target", "add r4, r0", "adr r1, target", "movw r2, #0x2002", "strh r2, [r1]",  # movs r0, #2
             "subs r3, #1", "bne loop", "mov r0, r4", "pop {r4, pc}", ".align 2", "target: movs r0, #1", "bx lr"]
    code = assemble(lines, BASE)
    info = (FunctionInfo("main", BASE, BASE + len(code), BASE + 2, (), frozenset({"no_frame_pointer"})),)
    program = Program("rewrites", ((BASE, code),), BASE, BASE, info, expected_result=3)
    assert program.code_spans() == ((BASE, BASE + len(code)),)
    result = verify_program(program, build_unwinders(program, ["framepointer"]), how=Verify(every=every))
    assert (result.fault, result.result) == (None, 3)


@needs_kernel
def test_an_engine_is_freed_once_its_run_is_over_though_its_result_lives():
    """A run's result keeps its tracer (the failure log is read from it),
    but not the emulator: the tracer's Python callback, which holds it, is
    dropped when the run ends, and the run's engine hooks are removed, so
    that a process verifying many programs does not hold their translated
    code (a few hundred MB in the test suite): the emulator goes, and its
    engine is given back, reset (harness.emulation.engine_pool)."""
    program = generate_program(0, 1)
    emulator = Emulator(program.segments)
    result = ProgramResult(program.name)
    unwinders = build_unwinders(program, ["v2", "framepointer"])
    _run_compiled(RunParts(program, unwinders, emulator, Verification(program, unwinders, True, result), result,
                           DEFAULT_LIMITS, 7, (0, 1), True))
    gone, engine = weakref.ref(emulator), emulator._engine
    del emulator
    assert result.stops and result.failure_log.first(1) and gone() is None
    assert engine_pool._kept[-1] is engine
