"""The engine as a process's system calls see it
(harness.emulation.machine.Machine): its memory, mappings, TLS register and
user registers, and a way to end the run; what a process's run and the
hook that follows it tell each other (RunEvents), and what each engine
error is to a Linux process (FAULT_OF_ENGINE_ERROR), and the hints after
which the engine stops as if at an undefined instruction (hint_before)."""

from __future__ import annotations

import ctypes
from typing import Callable, NamedTuple

from unicorn import UC_PROT_ALL, Uc, UcError, unicorn_const
from unicorn import arm_const as arm

from harness import abi
from harness.emulation.binding import read_memory
from harness.emulation.machine import BadAddress, Context, Switch

CORE_REGS = [getattr(arm, f"UC_ARM_REG_{name.upper()}") for name in abi.SLOTS[:16]]  # r0-r15
D_REGS = [getattr(arm, f"UC_ARM_REG_D{n}") for n in range(32)]


class ProcessMachine:
    """What a system-call layer may do to the engine (harness.emulation.machine.Machine)."""

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

    def map_shared(self, address: int, size: int, buffer, offset: int) -> None:
        """Map [address, address + size) onto `buffer` (page-aligned, kept
        alive by its owner while mapped) from `offset`."""
        self._uc.mem_map_ptr(address, size, UC_PROT_ALL, ctypes.addressof(ctypes.c_char.from_buffer(buffer, offset)))

    def unmap(self, address: int, size: int) -> None:
        self._uc.mem_unmap(address, size)

    def protect(self, address: int, size: int, protection: int) -> None:
        self._uc.mem_protect(address, size, protection)

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


class RunEvents(NamedTuple):
    """What a process's run and the hook that follows it tell each other
    (Emulator.follow)."""

    instructions: Callable[[], int]  # the instructions run so far, as the hook counts them: the clock
    signal: Callable[[Context], None]  # a handler starts: the context it interrupts is its caller
    switch: Callable[[Switch], None]  # at a system call the processor goes to another thread
    fault: Callable[[int, bool], None]  # a fault at pc (data: of the instruction there; else of its fetch)
    precise: bool  # does the hook know where a fault happens? (not from block entries: ImpreciseFault)
    deadline: Callable[[int | None, Callable[[], bool]], None]  # stop before that instruction count, and call back
    memory: Callable[[int], None]  # the resident size the run may reach now (a file mapped raised it)


# What a Linux kernel makes of each engine error in user code: the fault
# (harness.linux.signals.FAULTS) whose signal it forces on the process.
FAULT_OF_ENGINE_ERROR = {
    unicorn_const.UC_ERR_READ_UNMAPPED: "unmapped", unicorn_const.UC_ERR_WRITE_UNMAPPED: "unmapped",
    unicorn_const.UC_ERR_FETCH_UNMAPPED: "unmapped", unicorn_const.UC_ERR_READ_PROT: "protected",
    unicorn_const.UC_ERR_WRITE_PROT: "protected", unicorn_const.UC_ERR_FETCH_PROT: "protected",
    unicorn_const.UC_ERR_READ_UNALIGNED: "unaligned", unicorn_const.UC_ERR_WRITE_UNALIGNED: "unaligned",
    unicorn_const.UC_ERR_FETCH_UNALIGNED: "unaligned", unicorn_const.UC_ERR_INSN_INVALID: "undefined",
}
FETCH_ERRORS = frozenset({unicorn_const.UC_ERR_FETCH_UNMAPPED, unicorn_const.UC_ERR_FETCH_PROT,
                          unicorn_const.UC_ERR_FETCH_UNALIGNED})
FAULT_OF_EXCEPTION = {1: "undefined", 7: "breakpoint"}  # QEMU's EXCP_UDEF, EXCP_BKPT


# YIELD and WFE, which a user program may run under Linux (a spin lock's
# wait: Chromium's base::SpinLock): each is a hint the processor may complete
# at once, and qemu-user resumes after it (EXCP_YIELD); the engine instead
# stops after it with UC_ERR_INSN_INVALID, its pc at the next instruction.
HINTS_THUMB16 = frozenset({0xBF10, 0xBF20})  # YIELD, WFE
HINTS_THUMB32 = frozenset({0xF3AF8001, 0xF3AF8002})  # YIELD.W, WFE.W
HINTS_ARM = frozenset({0x0320F001, 0x0320F002})  # YIELD, WFE (any condition)


def hint_before(before: bytes, thumb: bool) -> bool:
    """Do the 4 bytes `before` a pc end with a YIELD or WFE, in the state
    `thumb`? (A 16-bit Thumb hint is judged first: the halfword before the
    pc may also end a 32-bit instruction, which the caller resolves.)"""
    first, second = int.from_bytes(before[:2], "little"), int.from_bytes(before[2:], "little")
    if thumb:
        return second in HINTS_THUMB16 or (first << 16 | second) in HINTS_THUMB32
    word = int.from_bytes(before, "little")
    return word >> 28 != 0xF and word & 0x0FFFFFFF in HINTS_ARM
