"""Engines kept between bare-metal runs (harness.emulation.engine_pool): one
given back reads as a new one and runs as one; engines a fault stopped, a
process's, and those still read from are not given back."""

from __future__ import annotations

import pytest
from unicorn import UcError
from unicorn import arm_const as arm

from generators.corpus import generate_program
from harness.emulation import engine_pool
from harness.emulation.emulator import Emulator
from harness.emulation.guards import EmulationFault
from harness.report.summary import summarize, to_json
from harness.unwind.registry import build_unwinders
from harness.verify.stops import DEFAULT_BUDGET, verify_program

REGISTER_IDS = {name: getattr(arm, name) for name in dir(arm)
                if name.startswith("UC_ARM_REG_") and name not in ("UC_ARM_REG_CP_REG", "UC_ARM_REG_ENDING")}


def registers(uc) -> dict[str, int]:
    """Every register the engine reads by id (the core, VFP and system ones)."""
    values = {}
    for name, number in REGISTER_IDS.items():
        try:
            values[name] = uc.reg_read(number)
        except (UcError, TypeError, ValueError):  # not one this model has
            pass
    return values


@pytest.fixture(autouse=True)
def no_engine_kept():
    engine_pool._kept.clear()
    yield
    engine_pool._kept.clear()


def vfp_program():
    return next(p for p in (generate_program(0, n) for n in range(40)) if p.uses_vfp)


def test_an_engine_given_back_reads_as_a_new_one():
    program = vfp_program()
    emulator = Emulator(program.segments)
    assert emulator.call(program.entry, None, DEFAULT_BUDGET, program.args) == program.expected_result
    engine, where = emulator._engine, emulator.placement
    uc = engine.uc  # dirtied past what the program did: every kind of register, and the stack
    for number in (arm.UC_ARM_REG_R4, arm.UC_ARM_REG_R11, arm.UC_ARM_REG_D9, arm.UC_ARM_REG_D31,
                   arm.UC_ARM_REG_C13_C0_3):
        uc.reg_write(number, 0x12345678)
    uc.reg_write(arm.UC_ARM_REG_FPSCR, 0x03C00000)  # round towards zero, flush to zero
    uc.mem_write(where.stack_top - 64, b"\xa5" * 64)
    new = engine_pool.made(where)
    assert registers(uc) != registers(new.uc)
    del emulator
    assert engine_pool._kept == [engine]
    assert registers(uc) == registers(new.uc)
    assert list(uc.mem_regions()) == list(new.uc.mem_regions()) == [
        (where.stack_bottom, where.stack_top - 1, 7)]  # nothing but the stack
    assert uc.mem_read(where.stack_top - 64, 64) == bytes(64)
    assert Emulator(program.segments)._engine is engine  # the next emulator takes it


def test_a_run_on_a_kept_engine_is_a_run_on_a_new_one():
    first, second = generate_program(0, 3), vfp_program()

    def summary(program):
        return to_json(summarize(verify_program(program, build_unwinders(program))))

    verify_program(first, [])
    assert engine_pool._kept  # the first program's engines, given back
    on_kept = summary(second)
    engine_pool._kept.clear()
    assert summary(second) == on_kept


def test_an_engine_a_fault_stopped_is_not_given_back():
    program = generate_program(0, 3)
    emulator = Emulator(program.segments)
    with pytest.raises(EmulationFault, match="more than 5 instructions"):  # emulation alone names the budget
        emulator.call(program.entry, None, 5, program.args)
    del emulator
    assert engine_pool._kept == []


def test_a_live_stack_keeps_its_engine():
    program = generate_program(0, 3)
    emulator = Emulator(program.segments)
    emulator.call(program.entry, None, DEFAULT_BUDGET, program.args)
    sp = emulator.placement.stack_top - 16
    emulator._engine.uc.mem_write(sp, b"\x11\x22\x33\x44")
    stack = emulator.stack(sp)
    del emulator
    assert engine_pool._kept == []
    assert stack.read_u32(sp) == 0x44332211  # still its program's memory
    del stack
    assert len(engine_pool._kept) == 1


class _System:
    """Just enough of a LinuxSystem for an emulator to be set up."""

    def attach(self, machine, where):
        return where.stack_top


def test_a_process_engine_is_never_kept():
    program = generate_program(0, 3)
    emulator = Emulator(program.segments, _System())
    assert emulator.system is not None
    del emulator
    assert engine_pool._kept == []
