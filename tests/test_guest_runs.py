"""The guards of a process's runs (issue 52): the first run, which finds
the libraries, and the verified run are bounded alike by the clock,
memory and instructions, each ending as a fault naming its guard; and the
CPU is in user mode, where a privileged instruction is SIGILL. The
programs are tests/linux_src/guest_bounds.c, built static (no sysroot)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_linux_process import build

from harness.linux.modules import discover, process_program
from harness.linux.process import LinuxRun, LinuxSystem
from harness.linux.verify import verify_process
from harness.verify import abi
from harness.verify.emulator import EmulationFault
from harness.verify.guards import resident_bytes
from harness.verify.stops import verify_program

ROOT = Path(__file__).resolve().parent.parent
SECONDS = 2.0
SLACK = 3.0  # a run's set-up and teardown beyond the clock it is given (building its tables is not emulation)


def program() -> str:
    return build("guest_bounds.c", "-static")


def the_run(way: str, tmp_path) -> LinuxRun:
    return LinuxRun(program(), (way,), cwd=str(tmp_path))


def _verified_alone(run: LinuxRun, limits: abi.Limits):
    """The verified run by itself (its first run skipped: told nothing resumes)."""
    system = LinuxSystem(run)
    return verify_program(process_program(system), [], system=system, limits=limits, resumes=None)


@pytest.mark.parametrize("way", ["getpid", "random", "spin"])
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
    result = verify_process(the_run("getpid", tmp_path), ["framepointer"], lambda program: [],
                            limits=abi.Limits(seconds=SECONDS))
    assert f"more than {SECONDS:g} seconds" in result.fault
    assert result.stops == 0  # the first run passed the clock: nothing was verified after it
    assert time.monotonic() - started < SECONDS + SLACK


def test_memory_ends_both_runs_below_the_limit(tmp_path):
    limit = resident_bytes() + (300 << 20)
    limits = abi.Limits(memory_bytes=limit)
    with pytest.raises(EmulationFault, match="the memory limit") as raised:
        discover(the_run("touch", tmp_path), limits)
    assert raised.value.guard == abi.GUARD_MEMORY
    assert resident_bytes() < limit
    result = _verified_alone(the_run("touch", tmp_path), limits)
    assert "the memory limit" in result.fault


def test_the_peak_of_every_process_verify_elf_starts_stays_under_the_memory_limit(tmp_path):
    """Two workers, each making its own first run: the largest resident size
    of any of them (and of the parent) stays below --max-memory-mb."""
    script = ("import resource, subprocess, sys\n"
              "code = subprocess.run(sys.argv[1:], capture_output=True).returncode\n"
              "print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    report = tmp_path / "report.json"
    argv = [sys.executable, "-m", "harness", "verify-elf", program(), "--jobs", "2", "--every", "1000",
            "--max-memory-mb", "400", "--json", str(report), "--", "touch"]
    done = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, cwd=ROOT,
                          check=True)
    code, peak_kib = map(int, done.stdout.split())
    assert code == 1 and "the memory limit" in json.loads(report.read_text())["programs"][0]["self_check"]
    assert peak_kib * 1024 <= 400 << 20


def test_the_instruction_budget_ends_the_verified_run_after_a_first_run_that_met_it(tmp_path):
    """A fault other than the clock or memory lets the verification go on:
    the verified run meets it again, and its stops before it count."""
    limits = abi.Limits(instructions=20_000)
    first = discover(the_run("spin", tmp_path), limits)
    assert first.resumes is None and first.modules  # faulted, and still knows the program
    result = verify_process(the_run("spin", tmp_path), ["framepointer"], lambda program: [], limits=limits)
    assert "more than 20000 instructions" in result.fault and result.stops > 0


def test_a_privileged_instruction_is_sigill_in_user_mode(tmp_path):
    """A kernel sends SIGILL for an mrc of MIDR from user code (qemu-user
    lets it read; Linux on a device does not); the emulation names it."""
    result = verify_process(the_run("midr", tmp_path), ["framepointer"], lambda program: [])
    assert "SIGILL" in result.fault and "signals are not delivered" in result.fault
