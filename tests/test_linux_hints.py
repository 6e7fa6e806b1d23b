"""YIELD and WFE run at user level under Linux as on a device (a spin
lock's wait: Chromium's base::SpinLock), where the engine stops after each
as at an undefined instruction: the process goes on after the hint, in
both states and inside an IT block, and an undefined instruction right
after a hint still raises SIGILL at its own address (tests/linux_src/hints.c)."""

from __future__ import annotations

import pytest
from test_linux_process import build, qemu

from harness.emulation.process_machine import hint_before
from harness.linux.process import LinuxRun, LinuxSystem
from harness.linux_verify.modules import process_program
from harness.verify.stops import Verify, verify_program

EXPECTED = b"spin 0\nwide 7\nit 9 5\narm 3\nSIGILL at the udf: 1\n"


# Each per-instruction hook (the compiled tracer, its Python reference) and the compiled tracer's block hooks
@pytest.mark.parametrize("compiled, hooks", [(True, "instruction"), (False, "instruction"), (True, "block")])
def test_hints_run_on_and_an_undefined_instruction_after_one_still_faults(compiled, hooks):
    program = build("hints.c", "-static")
    assert qemu(program) == (0, EXPECTED)
    system = LinuxSystem(LinuxRun(program))
    result = verify_program(process_program(system), [], how=Verify(compiled=compiled, hooks=hooks), system=system)
    assert result.fault is None
    assert (system.outcome().exit_status, system.outcome().stdout) == (0, EXPECTED)


@pytest.mark.parametrize("before, thumb, hint", [
    (bytes.fromhex("0000" "10bf"), True, True),  # YIELD
    (bytes.fromhex("0000" "20bf"), True, True),  # WFE
    (bytes.fromhex("aff3" "0180"), True, True),  # YIELD.W
    (bytes.fromhex("aff3" "0280"), True, True),  # WFE.W
    (bytes.fromhex("0000" "00bf"), True, False),  # NOP: the engine does not stop after it
    (bytes.fromhex("0000" "30bf"), True, False),  # WFI
    ((0xE320F001).to_bytes(4, "little"), False, True),  # YIELD
    ((0x1320F002).to_bytes(4, "little"), False, True),  # WFENE
    ((0xF320F001).to_bytes(4, "little"), False, False),  # the unconditional space is not a hint
    ((0xE320F001).to_bytes(4, "little"), True, False),  # an ARM hint's bytes, read in Thumb state
])
def test_the_hints_after_which_the_engine_stops(before, thumb, hint):
    assert hint_before(before, thumb) is hint
