"""The guards of a process's runs (issue 52), called directly: the first
run, which finds the libraries, and the verified run are bounded alike by
the clock, memory and instructions, each ending as a fault naming its
guard; how a verification goes on past each. The programs are the hostile
guests (tests/hostile), whose runs under verify-elf, timed and measured,
are tests/test_hostile_guests.py."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from harness import abi
from harness.emulation import guards
from harness.emulation.emulator import Emulator
from harness.emulation.guards import EmulationFault, resident_bytes
from harness.linux.process import LinuxRun, LinuxSystem
from harness.linux_verify.modules import discover, process_program
from harness.linux_verify.verify import verify_process
from harness.verify.stops import Verify, verify_program

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("UNWIND_HARNESS_CACHE", Path.home() / ".cache" / "unwind-harness"))
SECONDS = 2.0
SLACK = 3.0  # a run's set-up and teardown beyond the clock it is given (building its tables is not emulation)


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    done = subprocess.run(["bash", str(ROOT / "tests" / "hostile" / "build.sh")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def the_run(name: str, tmp_path, *args: str) -> LinuxRun:
    return LinuxRun(str(CACHE / "hostile" / name), args, cwd=str(tmp_path))


def _verified_alone(run: LinuxRun, limits: abi.Limits):
    """The verified run by itself (its first run skipped: told nothing resumes)."""
    system = LinuxSystem(run)
    return verify_program(process_program(system), [], how=Verify(limits=limits), system=system, resumes=None)


@pytest.mark.parametrize("way", ["syscall_loop", "getrandom_loop", "spin_loop"])
def test_the_clock_ends_the_first_run_and_the_verified_run(way, tmp_path):
    limits = abi.Limits(seconds=SECONDS, instructions=1 << 40)  # the clock, not the budget, must end it
    started = time.monotonic()
    with pytest.raises(EmulationFault, match=f"more than {SECONDS:g} seconds") as raised:
        discover(the_run(way, tmp_path), limits)
    assert raised.value.guard == abi.GUARD_SECONDS and time.monotonic() - started < SECONDS + SLACK
    started = time.monotonic()
    result = _verified_alone(the_run(way, tmp_path), limits)
    assert f"more than {SECONDS:g} seconds" in result.fault and time.monotonic() - started < SECONDS + SLACK


def test_a_first_run_past_the_clock_ends_the_verification_at_once(tmp_path):
    started = time.monotonic()
    result = verify_process(the_run("syscall_loop", tmp_path), ["framepointer"], lambda program: [],
                            how=Verify(limits=abi.Limits(seconds=SECONDS)))
    assert f"more than {SECONDS:g} seconds" in result.fault
    assert result.stops == 0  # the first run passed the clock: nothing was verified after it
    assert time.monotonic() - started < SECONDS + SLACK


def test_memory_ends_both_runs_below_the_limit(tmp_path):
    limit = resident_bytes() + (300 << 20)
    limits = abi.Limits(memory_bytes=limit)
    with pytest.raises(EmulationFault, match="the memory limit") as raised:
        discover(the_run("touch_memory", tmp_path), limits)
    assert raised.value.guard == abi.GUARD_MEMORY
    assert resident_bytes() < limit
    result = _verified_alone(the_run("touch_memory", tmp_path), limits)
    assert "the memory limit" in result.fault


def test_the_instruction_budget_ends_the_verified_run_after_a_first_run_that_met_it(tmp_path):
    """A fault other than the clock or memory lets the verification go on:
    the verified run meets it again, and its stops before it count."""
    limits = abi.Limits(instructions=20_000)
    first = discover(the_run("spin_loop", tmp_path), limits)
    assert first.resumes is None and first.modules  # faulted, and still knows the program
    result = verify_process(the_run("spin_loop", tmp_path), ["framepointer"], lambda program: [],
                            how=Verify(limits=limits))
    assert "more than 20000 instructions" in result.fault and result.stops > 0


@pytest.mark.parametrize("limits, guard", [(abi.Limits(instructions=200_000), "instructions"),
                                           (abi.Limits(seconds=0.5, instructions=1 << 40), "seconds")])
def test_emulation_alone_stops_at_the_budget_and_the_clock(tmp_path, limits, guard):
    """The bench's bare runs (no hook at all) are bounded too, and say by what."""
    system = LinuxSystem(the_run("spin_loop", tmp_path))
    started = time.monotonic()
    with pytest.raises(EmulationFault, match=f"more than .*{guard}") as raised:
        Emulator(system.segments, system, system.placement).call(0, None, limits)
    assert raised.value.guard == getattr(abi, f"GUARD_{guard.upper()}")
    assert time.monotonic() - started < 0.5 + SLACK


@pytest.mark.parametrize("name, cause", [("deep_recursion", "nested calls: endless recursion"),
                                         ("branch_to_itself", "branches to itself"),
                                         ("spin_loop", "more than 100000 instructions")])
def test_the_depth_self_loop_and_budget_guards_hold_in_both_runs(tmp_path, name, cause):
    """Guards other than the clock and memory: the first run meets the
    guard (and tells no frames), the verified run meets it again, where
    its stops before count."""
    limits = abi.Limits(instructions=100_000, depth=1_000)
    first = discover(the_run(name, tmp_path), limits)
    assert first.resumes is None and first.modules
    result = verify_process(the_run(name, tmp_path), ["framepointer"], lambda program: [], how=Verify(limits=limits))
    assert cause in result.fault and result.stops > 0


def test_a_runaway_under_an_automatic_stride_ends_at_the_budget(tmp_path):
    """The first run counts the instructions up to its fault (the budget
    here), and the verified run, sampled at the stride that count gives,
    meets the fault again; the clock never ended it (scaled to that work)."""
    from harness.verify.sampling import AutoStride

    limits = abi.Limits(instructions=200_000)
    first = discover(the_run("spin_loop", tmp_path), limits)
    assert first.resumes is None and 200_000 <= first.instructions < 200_100  # counted to the fault's block
    auto = AutoStride(every_stop=1_000, samples=100)
    result = verify_process(the_run("spin_loop", tmp_path), ["framepointer"], lambda program: [],
                            how=Verify(every=auto, limits=limits))
    assert "more than 200000 instructions" in result.fault
    assert result.sampling["every"] == auto.every(first.instructions) in (2_000, 2_001)
    assert 50 < result.stops < 150  # about 100 samples


def test_by_default_what_a_program_allocates_counts_and_the_files_it_maps_do_not(tmp_path, monkeypatch):
    """With no limit given, a run may add abi.DEFAULT_MEMORY (here made
    128 MiB) to what the harness held as it began and twice the bytes of
    the files the program maps: touch_memory's 300 MiB of anonymous pages
    end the run, its 32 MiB do not, and the ceiling counts the executable
    it was started from (guards.memory_ceiling)."""
    monkeypatch.setattr(abi, "DEFAULT_MEMORY", 128 << 20)
    with pytest.raises(EmulationFault, match="the default memory limit: 128 MiB") as raised:
        discover(the_run("touch_memory", tmp_path, "300"), abi.Limits())
    assert raised.value.guard == abi.GUARD_MEMORY
    system = LinuxSystem(the_run("touch_memory", tmp_path, "32"))
    result = verify_program(process_program(system), [], how=Verify(), system=system, resumes=None)
    assert result.fault is None and system.outcome().stdout == b"touched=32 MiB\n"
    executable = os.path.getsize(CACHE / "hostile" / "touch_memory")
    assert system.mapped_file_bytes() == executable
    held = resident_bytes()
    assert guards.memory_ceiling(abi.Limits(), held, executable) == \
        held + guards.memory_threshold(128 << 20) + guards.FILE_COPIES * executable
    assert guards.memory_ceiling(abi.Limits(memory_bytes=1 << 30), held, executable) == guards.memory_threshold(1 << 30)


def test_a_program_inside_the_sysroot_is_told_its_path_there(tmp_path):
    """argv[0] and /proc/self/exe name a program that lies in the sysroot
    by its path there, as the guest sees it (Chromium looks for its ICU
    data beside /proc/self/exe: the host path named nothing in the guest's
    files, and it stopped at a failed CHECK); a program elsewhere by its
    path as given; argv0 given, by that."""
    inside = tmp_path / "root" / "usr" / "bin" / "touch_memory"
    inside.parent.mkdir(parents=True)
    inside.write_bytes((CACHE / "hostile" / "touch_memory").read_bytes())
    assert LinuxSystem(LinuxRun(str(inside), ("1",), str(tmp_path / "root"))).argv == ["/usr/bin/touch_memory", "1"]
    outside = str(CACHE / "hostile" / "touch_memory")
    assert LinuxSystem(LinuxRun(outside, (), str(tmp_path / "root"))).argv == [outside]
    assert LinuxSystem(LinuxRun(str(inside), (), str(tmp_path / "root"), argv0="prog")).argv == ["prog"]
