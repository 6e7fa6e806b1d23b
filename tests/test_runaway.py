"""A runaway program ends as a fault with its pc, in bounded time and memory,
in both hooks and whatever `--every`: an instruction that branches to
itself at once, a loop at the instruction limit, endless recursion at the
depth limit, anything at the clock or memory limit; and a run that fails at
every stop logs only so many failures one by one, while its counts stay
exact (harness.abi.Limits, FAILURE_LOG_CAP)."""

from __future__ import annotations

import resource
import shutil
import time
import tracemalloc
from pathlib import Path

import pytest

from generators.assembler import assemble
from harness import abi
from harness.classify import FunctionInfo
from harness.cli import main
from harness.emulation import guards
from harness.formats.elf import open_elf, symbol_address
from harness.program import CfiRow, FunctionCfi, Program
from harness.registers import LR, SP
from harness.unwind.registry import build_unwinders
from harness.verify.sampling import sampled_stops
from harness.verify.stops import DEFAULT_LIMITS, Verify, verify_program

BASE = 0x100000
PROLOGUE = ["push {r4, lr}", "movs r4, #1"]  # a frame, so the unwinders have work before the loop
LOOP = BASE + 4  # the first instruction after the prologue
COUNTDOWN = ["movw r0, #0x4b40", "movt r0, #0x4c", "subs r0, #1", "bne #0x10000a"]  # 5 million turns, then out
CALLS = Path(__file__).resolve().parent.parent / "corpus" / "fixtures" / "calls-clang-nofp.elf"


def program(name: str, body: list[str], saved: int = 4) -> Program:
    """main: push {r`saved`, lr}, then `body`, then the matching pop."""
    code = assemble([f"push {{r{saved}, lr}}", *body, f"pop {{r{saved}, pc}}"], BASE)
    end = BASE + len(code)
    rows = (CfiRow(BASE), CfiRow(BASE + 2, SP, 8, ((saved, -8), (LR, -4))))
    cfi = (FunctionCfi("main", BASE, end, rows),)
    info = (FunctionInfo("main", BASE, end, BASE + 2, (), frozenset({"no_frame_pointer"})),)
    return Program(name, ((BASE, code),), BASE, BASE, info, {"tables": cfi, "reference": cfi}, expected_result=0)


def run(prog: Program, compiled: bool, names=("v2", "dwarf"), **options):
    """(result, seconds) of verifying `prog`."""
    started = time.perf_counter()
    result = verify_program(prog, build_unwinders(prog, list(names)), Verify(compiled=compiled, **options))
    return result, time.perf_counter() - started


def passed(result) -> int:
    return sum(n for key, n in result.counts.items() if key[3] is None)


@pytest.mark.parametrize("every", [1, 1000])
def test_a_branch_to_itself_faults_at_once_at_its_pc(every, compiled):
    """`b .` changes no register: the second stop at it is the same state
    as the first, so the loop is endless; no budget is waited for."""
    result, seconds = run(program("self-loop", ["movs r4, #1", "b #0x100004"]), compiled, every=every)
    assert result.fault == (f"emulation fault at pc {LOOP:#x}: "
                            "branches to itself without changing any register: an endless loop")
    assert seconds < 5
    # push, movs and the first `b .` are stops; the second `b .` is the fault
    # (a sampled run's first sample lies further on: harness.verify.sampling)
    assert result.stops == (3 if every == 1 else 0) and (every == 1 or next(sampled_stops(every)) > 3)
    assert passed(result) == 2 * result.stops


def test_a_loop_that_changes_a_register_runs_to_the_instruction_limit(compiled):
    result, _ = run(program("two-instruction-loop", ["movs r4, #1", "adds r0, #1", "b #0x100004"]), compiled,
                    limits=abi.Limits(instructions=1000))
    # instructions 3, 5, ... are the adds: the 1001st is the first not run
    assert result.fault == f"emulation fault at pc {LOOP:#x}: more than 1000 instructions (runaway loop?)"
    assert result.stops == 1000 and passed(result) == 2000


def test_an_instruction_limit_names_itself(compiled):
    result, _ = run(program("two-instruction-loop", ["movs r4, #1", "adds r0, #1", "b #0x100004"]), compiled,
                    limits=DEFAULT_LIMITS._replace(instructions=300))
    assert result.fault.endswith("more than 300 instructions (runaway loop?)")


def endless_recursion() -> Program:
    return program("endless-recursion", ["bl #0x100000"], saved=7)  # push {r7, lr}; bl self


def test_endless_recursion_faults_at_the_depth_limit(compiled):
    """Every stop walks the whole shadow stack: the default limit keeps the
    compiled hook within seconds, a small one the Python hook."""
    limits = DEFAULT_LIMITS if compiled else abi.Limits(depth=100)
    tracemalloc.start()
    try:
        result, seconds = run(endless_recursion(), compiled, names=("v2",), limits=limits)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.fault == (f"emulation fault at pc {BASE:#x}: "
                            f"more than {limits.depth} nested calls: endless recursion?")
    assert result.stops == 2 * limits.depth  # push and bl at each level; the call past the limit is not a stop
    assert passed(result) == result.stops
    assert seconds < 30
    assert peak < 64 << 20


def test_the_two_hooks_stop_deep_recursion_alike():
    limits = abi.Limits(depth=60)
    fast, _ = run(endless_recursion(), True, limits=limits)
    slow, _ = run(endless_recursion(), False, limits=limits)
    assert (fast.fault, fast.stops, fast.counts) == (slow.fault, slow.stops, slow.counts)


def test_the_clock_ends_a_long_but_finite_loop(compiled):
    """Five million turns would end (in seconds in C, an hour in Python):
    a twentieth of a second does not let them."""
    result, seconds = run(program("countdown", COUNTDOWN), compiled, limits=abi.Limits(seconds=0.05))
    assert result.fault is not None
    assert "more than 0.05 seconds of emulation (the time limit" in result.fault
    assert any(f"at pc {pc:#x}:" in result.fault for pc in (BASE + 10, BASE + 12))  # in the loop
    assert seconds < 5
    assert 0 < result.stops < 10_000_000


def test_memory_past_the_limit_ends_the_run(compiled):
    """The process already holds more than a mebibyte: the first check fires."""
    result, seconds = run(program("countdown", COUNTDOWN), compiled, limits=abi.Limits(memory_bytes=1 << 20))
    assert result.fault is not None
    assert "the process's resident size passed 768 KiB (the memory limit, 1 MiB, less what" in result.fault
    assert 0 < result.stops < abi.CHECK_EVERY and seconds < 10


def test_the_memory_limit_is_on_the_size_now_not_the_peak(compiled):
    """A pool worker that once held much (here 256 MiB, given back) runs
    its next program under a limit below that peak: the limit is on the
    resident size now (a worker of the full Linux corpus peaked past 1 GiB
    and faulted every program after)."""
    held = bytearray(256 << 20)
    held[::4096] = b"\x01" * len(range(0, len(held), 4096))  # make every page resident
    del held
    limit = guards.resident_bytes() + (64 << 20)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * guards.MAXRSS_UNIT > limit
    turns = ["movw r0, #50000", "subs r0, #1", "bne #0x100006"]  # past CHECK_EVERY instructions
    result, _ = run(program("countdown", turns), compiled, limits=abi.Limits(memory_bytes=limit))
    assert result.fault is None and result.stops > abi.CHECK_EVERY


def test_the_failure_log_stops_at_its_cap_and_counts_stay_exact(monkeypatch):
    """exidx without tables fails at every stop (its walks run in Python in
    both hooks), frame-pointer walking at most (in C, in the compiled hook):
    the log keeps the first `cap` failing answers of both, merged in stop
    order, says it was cut, and the tallies and counts are the full run's."""
    prog = program("countdown", ["movs r0, #100", "subs r0, #1", "bne #0x100004"])
    names = ("exidx", "framepointer", "v2")
    full = {compiled: run(prog, compiled, names)[0] for compiled in (True, False)}
    monkeypatch.setattr(abi, "FAILURE_LOG_CAP", 50)
    capped = {compiled: run(prog, compiled, names)[0] for compiled in (True, False)}
    failing = sum(full[True].failure_tally.values())
    assert failing > 300
    assert not full[True].failure_log.truncated and len(full[True].failure_log) == failing
    for compiled in (True, False):
        log = capped[compiled].failure_log
        assert log.truncated and len(log) == 50
        assert list(log) == list(full[compiled].failure_log)[:50]
        assert capped[compiled].counts == full[compiled].counts
        assert capped[compiled].failure_tally == full[compiled].failure_tally
        assert capped[compiled].stops == full[compiled].stops
    assert capped[True].failures == capped[False].failures
    assert {f.unwinder for f in capped[True].failures} == {"exidx", "framepointer"}


def test_the_compiled_cap_is_a_boundary_value():
    assert "FAILURE_LOG_CAP = 1000000" in abi.header()
    assert all(f"GUARD_{name} = {value}" in abi.header() for value, name in enumerate(abi.GUARDS))


# ------------------------------------------------------------ the command line


def looping_elf(tmp_path: Path) -> Path:
    """calls-clang-nofp.elf, its entry's first instruction patched to `b .`."""
    path = tmp_path / "loops.elf"
    shutil.copy(CALLS, path)
    image = open_elf(str(path))
    entry = symbol_address(image, "entry")
    for segment in image.elf.iter_segments():
        start = segment["p_vaddr"]
        if segment["p_type"] == "PT_LOAD" and start <= entry < start + segment["p_filesz"]:
            offset = segment["p_offset"] + entry - start
    data = bytearray(path.read_bytes())
    data[offset:offset + 2] = bytes.fromhex("fee7")  # b .
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("options", [[], ["--every", "1000"]], ids=["every-stop", "every-1000"])
def test_verify_elf_of_an_entry_that_loops_forever_fails_at_once(tmp_path, capsys, options):
    elf = looping_elf(tmp_path)
    entry = symbol_address(open_elf(str(elf)), "entry")
    started = time.perf_counter()
    assert main(["verify-elf", str(elf), "--entry", "entry", "--jobs", "2", *options]) == 1
    assert time.perf_counter() - started < 30
    faults = [line for line in capsys.readouterr().err.splitlines() if "emulation fault" in line]
    assert faults == [f"unwind-harness: {elf}: emulation fault at pc {entry:#x}: "
                      "branches to itself without changing any register: an endless loop"]


def test_the_limits_reach_verify_elf_and_run(tmp_path, capsys):
    assert main(["verify-elf", str(CALLS), "--entry", "entry", "--jobs", "1", "--max-instructions", "100"]) == 1
    assert "more than 100 instructions (runaway loop?)" in capsys.readouterr().err
    assert main(["run", "--programs", "1", "--no-elf", "--jobs", "1", "--unwinder", "v2", "--max-depth", "2",
                 "--reports", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "not verified: generated-0-0: emulation fault at pc" in err
    assert "more than 2 nested calls: endless recursion?" in err


@pytest.mark.parametrize("option, value", [("--max-instructions", "0"), ("--max-seconds", "-1"),
                                           ("--max-seconds", "inf"), ("--max-memory-mb", "x"),
                                           ("--max-depth", "0")])
def test_a_limit_must_be_positive(option, value, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["run", option, value])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and option in err
