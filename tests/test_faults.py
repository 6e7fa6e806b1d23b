"""A program that faults ends its own run with the pc and the cause; the
stops before the fault are verified, the rest of the corpus still runs, and
the report says what was not verified."""

from __future__ import annotations

import json

import pytest

from generators.assembler import assemble
from harness import runner
from harness.classify import FunctionInfo
from harness.cli import main
from harness.program import CfiRow, FunctionCfi, Program
from harness.registers import LR, SP
from harness.unwind.registry import build_unwinders
from harness.verify.stops import DEFAULT_LIMITS, Verify, verify_program

BASE = 0x100000
PROLOGUE = ["push {r4, lr}", "movs r4, #1"]  # a frame, so the unwinders have work before the fault
FAULTS = {
    "runaway loop": (["adds r0, #1", "b #0x100004"], "more than 500 instructions", BASE + 4),
    "undefined instruction": ([".short 0xde00"], "UC_ERR_INSN_INVALID", BASE + 4),
    "read of unmapped memory": (["movs r1, #0x40", "lsls r1, r1, #24", "ldr r0, [r1]"],
                                "UC_ERR_READ_UNMAPPED", BASE + 8),
    "write to unmapped memory": (["movs r1, #0x40", "lsls r1, r1, #24", "str r0, [r1]"],
                                 "UC_ERR_WRITE_UNMAPPED", BASE + 8),
    "jump to unmapped memory": (["movs r1, #0x41", "lsls r1, r1, #24", "bx r1"], "UC_ERR_FETCH_UNMAPPED", None),
}


def faulty(kind: str) -> Program:
    body, _, _ = FAULTS[kind]
    code = assemble(PROLOGUE + body + ["pop {r4, pc}"], BASE)
    end = BASE + len(code)
    rows = (CfiRow(BASE), CfiRow(BASE + 2, SP, 8, ((4, -8), (LR, -4))))
    cfi = (FunctionCfi("main", BASE, end, rows),)
    info = (FunctionInfo("main", BASE, end, BASE + 2, (), frozenset({"no_frame_pointer"})),)
    return Program(f"faulty-{kind.replace(' ', '-')}", ((BASE, code),), BASE, BASE, info,
                   {"tables": cfi, "reference": cfi}, expected_result=0)


@pytest.mark.parametrize("kind", FAULTS)
def test_fault_names_pc_and_cause_and_keeps_the_stops_before(kind, compiled):
    _, cause, pc = FAULTS[kind]
    program = faulty(kind)
    result = verify_program(program, build_unwinders(program, ["v2", "dwarf"]),
                            how=Verify(limits=DEFAULT_LIMITS._replace(instructions=500), compiled=compiled))
    assert result.fault is not None and not result.self_check_ok
    assert cause in result.fault
    if pc is not None:
        assert f"at pc {pc:#x}" in result.fault
    assert result.stops >= 2  # the prologue's stops were verified
    passed = sum(n for (_, _, _, kind_), n in result.counts.items() if kind_ is None)
    assert passed == result.stops * 2  # and every one of them passed, for both unwinders


def test_run_goes_on_after_a_faulting_program_and_reports_it(tmp_path, monkeypatch, capsys):
    generate = runner.generate_program

    def with_a_fault(seed: int, number: int) -> Program:
        return faulty("undefined instruction") if number == 1 else generate(seed, number)

    monkeypatch.setattr(runner, "generate_program", with_a_fault)
    assert main(["run", "--programs", "3", "--seed", "2", "--no-elf", "--jobs", "1",
                 "--unwinder", "v2", "--reports", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "not verified: faulty-undefined-instruction: emulation fault at pc 0x100004" in err
    assert "Traceback" not in err
    data = json.loads((tmp_path / "latest.json").read_text())
    checks = {p["name"]: p["self_check"] for p in data["programs"]}
    assert checks["generated-2-0"] == checks["generated-2-2"] == "ok"
    assert checks["faulty-undefined-instruction"].startswith("emulation fault at pc 0x100004")
    markdown = (tmp_path / "latest.md").read_text()
    assert "## Not verified" in markdown
    assert "faulty-undefined-instruction: emulation fault at pc 0x100004" in markdown
