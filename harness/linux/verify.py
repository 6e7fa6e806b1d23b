"""Verifying an ARM Linux program as a process: `verify-elf PROGRAM` without
--entry (harness.commands), and the Linux corpus."""

from __future__ import annotations

from dataclasses import dataclass

from harness.elf_program import program_from_image
from harness.formats.elf import open_elf
from harness.linux.process import LinuxRun, LinuxSystem
from harness.program import Program
from harness.report.summary import summarize, to_json
from harness.verify.abi import Limits
from harness.verify.stops import verify_program


@dataclass(frozen=True)
class Expected:
    """What a correct emulation gives: the exit status and stdout digest
    recorded from qemu-user (None: not checked)."""

    exit_status: int | None = None
    stdout_sha256: str | None = None


def process_program(system: LinuxSystem) -> Program:
    """The executable's code and unwind tables, where the loader put them."""
    image = open_elf(system.run.program)
    return program_from_image(image, image.elf["e_entry"], load_base=system.executable.base)


def verify_process(run: LinuxRun, unwinders_of, every: int, shard: tuple[int, int], limits: Limits,
                   expected: Expected = Expected()):
    """Run `run` once as a process, verifying the unwinders
    unwinders_of(program) at its stops (every `every`-th, shard (I, N));
    the ProgramResult, its self-check against `expected`."""
    system = LinuxSystem(run)
    program = process_program(system)
    result = verify_program(program, unwinders_of(program), every=every, shard=shard, limits=limits,
                            system=system)
    result.expected = expected.exit_status
    result.expected_stdout_sha256 = expected.stdout_sha256
    return result


def verify_process_part(job: tuple) -> dict:
    """One stop shard of a verify-elf run of a process (a worker of `--jobs`)."""
    run, unwinders_of, every, shard, limits, expected = job
    result = verify_process(run, unwinders_of, every, (shard.index, shard.count), limits, expected)
    return {"index": shard.index, "kind": "stops", "summary": to_json(summarize(result))}
