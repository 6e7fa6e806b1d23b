"""The engine as a process's system calls see it
(harness.linux.machine.Machine): its memory, mappings, TLS register and
user registers, and a way to end the run."""

from __future__ import annotations

import ctypes
from typing import Callable

from unicorn import UC_PROT_ALL, Uc, UcError
from unicorn import arm_const as arm
from unicorn.unicorn_py3.unicorn import uclib  # direct calls: the wrappers cost ~90 us a stop

from harness.linux.machine import BadAddress, Context
from harness.verify import abi

CORE_REGS = [getattr(arm, f"UC_ARM_REG_{name.upper()}") for name in abi.SLOTS[:16]]  # r0-r15
D_REGS = [getattr(arm, f"UC_ARM_REG_D{n}") for n in range(32)]


def read_memory(uc: Uc, address: int, size: int) -> bytes:
    """`size` bytes at `address` (UcError where not all mapped), into a
    bytearray: the binding's buffer is of a new array type of that size."""
    if size <= 0:
        return b""
    buffer = bytearray(size)
    status = uclib.uc_mem_read(uc._uch, address, ctypes.byref(ctypes.c_char.from_buffer(buffer)), size)
    if status:
        raise UcError(status)
    return bytes(buffer)


class ProcessMachine:
    """What a system-call layer may do to the engine (harness.linux.machine.Machine)."""

    def __init__(self, uc: Uc):
        self._uc = uc
        self.instructions: Callable[[], int] = lambda: 0  # the run's count, from its hook (Emulator.follow)

    def read(self, address: int, size: int) -> bytes:
        try:
            return read_memory(self._uc, address, size)
        except UcError:
            raise BadAddress(f"{size} bytes at {address:#x} are not mapped") from None

    def write(self, address: int, data: bytes) -> None:
        try:
            self._uc.mem_write(address, data)
        except UcError:
            raise BadAddress(f"{len(data)} bytes at {address:#x} are not mapped") from None

    def map(self, address: int, size: int) -> None:
        self._uc.mem_map(address, size, UC_PROT_ALL)

    def unmap(self, address: int, size: int) -> None:
        self._uc.mem_unmap(address, size)

    def set_tls(self, value: int) -> None:
        self._uc.reg_write(arm.UC_ARM_REG_C13_C0_3, value)

    def stop(self) -> None:
        self._uc.emu_stop()

    def context(self) -> Context:
        uc = self._uc
        return Context(tuple(uc.reg_read(register) for register in CORE_REGS), uc.reg_read(arm.UC_ARM_REG_CPSR),
                       tuple(uc.reg_read(register) for register in D_REGS), uc.reg_read(arm.UC_ARM_REG_FPSCR))

    def resume(self, context: Context) -> None:
        uc = self._uc
        uc.reg_write(arm.UC_ARM_REG_CPSR, context.cpsr)
        for register, value in zip(CORE_REGS[:15], context.r):
            uc.reg_write(register, value)
        for register, value in zip(D_REGS, context.d):
            uc.reg_write(register, value)
        uc.reg_write(arm.UC_ARM_REG_FPSCR, context.fpscr)
        uc.reg_write(arm.UC_ARM_REG_PC, context.r[15] | (1 if context.cpsr & 0x20 else 0))  # the engine's state follows
