"""The only module that runs Unicorn (harness.verify.engine_pool makes its
engines, and keeps them between runs).

Loads a program's segments on an engine with its stack mapped, calls the
entry in Thumb state with lr = a sentinel address, and calls back before
every instruction. Faults (unmapped access, undefined instruction, a run
past one of its limits, harness.verify.abi.Limits) end the run with an
`EmulationFault` naming the pc and the cause.
"""

from __future__ import annotations

import ctypes
import mmap
import time
from contextlib import contextmanager
from functools import lru_cache
from typing import Callable, Iterable

from unicorn import (
    UC_HOOK_BLOCK,
    UC_HOOK_CODE,
    UC_HOOK_INTR,
    UC_HOOK_MEM_FETCH_UNMAPPED,
    UC_PROT_ALL,
    Uc,
    UcError,
    unicorn_const,
)
from unicorn import arm_const as arm
from unicorn.unicorn_py3.unicorn import uclib  # direct calls: the wrappers cost ~90 us a stop

from harness.errors import HarnessError
from harness.linux.machine import Context
from harness.linux.threads import Switch
from harness.verify import abi, engine_pool
from harness.verify.guards import as_limits, exhausted, guard_cause, memory_threshold
from harness.verify.livestack import LiveStack
from harness.verify.placement import DEFAULT, PAGE, Placement, pages_of, place
from harness.verify.process_machine import ProcessMachine, read_memory

# uc_ctl's control word for "drop the code translated from [begin, end)": UC_CTL_WRITE(type, 2 arguments).
REMOVE_CACHE = unicorn_const.UC_CTL_TB_REMOVE_CACHE | 2 << 26 | unicorn_const.UC_CTL_IO_WRITE << 30

SENTINEL, STACK_TOP = DEFAULT.sentinel, DEFAULT.stack_top  # where ordinary programs get them
SLOT_IDS = [getattr(arm, f"UC_ARM_REG_{name.upper()}") for name in abi.SLOTS]  # abi.SLOTS as engine ids
STATUS_REGS = SLOT_IDS[: abi.FIRST_VFP_SLOT]  # r0-r15, cpsr
# Instructions between the Python hook's checks of the clock and memory: a
# stop there walks the whole stack in Python, tens of milliseconds deep in a
# recursion, and a check costs a microsecond (trace.c: abi.CHECK_EVERY).
CHECK_EVERY = 1 << 6


class EmulationFault(HarnessError):
    """The emulated program stopped abnormally; `guard`: the guard
    (abi.GUARDS) that stopped it, GUARD_NONE for any other cause."""

    def __init__(self, pc: int, cause: str, guard: int = abi.GUARD_NONE):
        super().__init__(f"emulation fault at pc {pc:#x}: {cause}")
        self.pc = pc
        self.cause = cause
        self.guard = guard


# What a Linux kernel makes of each engine error in user code: the signal it
# sends. The emulation delivers no signal yet, so the run ends there, named.
SIGNAL_OF_ENGINE_ERROR = {
    unicorn_const.UC_ERR_READ_UNMAPPED: "SIGSEGV", unicorn_const.UC_ERR_WRITE_UNMAPPED: "SIGSEGV",
    unicorn_const.UC_ERR_FETCH_UNMAPPED: "SIGSEGV", unicorn_const.UC_ERR_READ_PROT: "SIGSEGV",
    unicorn_const.UC_ERR_WRITE_PROT: "SIGSEGV", unicorn_const.UC_ERR_FETCH_PROT: "SIGSEGV",
    unicorn_const.UC_ERR_READ_UNALIGNED: "SIGBUS", unicorn_const.UC_ERR_WRITE_UNALIGNED: "SIGBUS",
    unicorn_const.UC_ERR_FETCH_UNALIGNED: "SIGBUS", unicorn_const.UC_ERR_INSN_INVALID: "SIGILL",
}
SIGNAL_OF_EXCEPTION = {1: "SIGILL", 3: "SIGSEGV", 4: "SIGSEGV", 7: "SIGTRAP"}  # QEMU's EXCP_UDEF, aborts, BKPT
USER_MODE = 0x10  # CPSR.M of a Linux process: privileged instructions are undefined there, as on a device


# The addresses of the functions the compiled tracer calls (abi.Engine's), cast once a process.
_ENGINE_FUNCTIONS = tuple(ctypes.cast(f, ctypes.c_void_p).value for f in (
    uclib.uc_reg_read_batch, uclib.uc_mem_read, uclib.uc_emu_start, uclib.uc_emu_stop, uclib.uc_hook_add,
    uclib.uc_hook_del, uclib.uc_ctl))


class _BatchReader:
    """uc_reg_read_batch into preallocated buffers (unicorn 2.1's Python
    wrapper builds them anew on every call): the Python hook's reader."""

    def __init__(self, uc: Uc, regs: list[int], ctype):
        count = len(regs)
        self._uc = uc
        self._ids = _array_type(ctypes.c_int, count)(*regs)
        self._values = _array_type(ctype, count)()
        size = ctypes.sizeof(ctype)
        base = ctypes.addressof(self._values)
        self._pointers = _array_type(ctypes.c_void_p, count)(*(base + size * i for i in range(count)))
        self._count = count

    def __call__(self) -> list[int]:
        status = uclib.uc_reg_read_batch(self._uc._uch, self._ids, self._pointers, self._count)
        if status:
            raise UcError(status)
        return self._values[:]


@lru_cache(maxsize=None)  # ctypes drops an unused array type, which only the cycle collector frees
def _array_type(ctype, count: int):
    return ctype * count


EXCP_SWI = 2  # Unicorn's interrupt number for SVC
SVC_ARGUMENTS = [getattr(arm, f"UC_ARM_REG_R{n}") for n in range(6)]



def _unmapped(uc: Uc, access: int, address: int, size: int, value: int, user_data) -> bool:
    return False  # not handled: the engine faults as it would with no hook


class Emulator:
    def __init__(self, segments: Iterable[tuple[int, bytes]], system=None, placement: Placement | None = None):
        """`segments` mapped, the stack and sentinel placed where they are not
        (or at `placement`). With `system` (harness.linux.process.LinuxSystem),
        a process: the system maps what else it needs, chooses where the run
        starts, and answers the program's system calls; the run ends when it
        exits."""
        segments = [(address, bytes(data)) for address, data in segments]
        self.placement: Placement = placement or place(segments)
        """Where the stack and the return sentinel are (harness.verify.placement)."""
        self.system = system
        self._ends_well = True  # every run made ended well: a bare-metal program's engine may be given back
        where = self.placement
        # A bare-metal program's engine is one kept from an earlier run, reset (engine_pool).
        self._engine = engine_pool.taken(where) if system is None else engine_pool.made(where)
        uc = self._engine.uc
        for start, end in pages_of(segments):
            uc.mem_map(start, end - start, UC_PROT_ALL)
        for address, data in segments:
            uc.mem_write(address, data[: len(data.rstrip(b"\0"))])  # mapped memory is zeros: .bss costs nothing
        uc.mem_map(where.sentinel, PAGE, UC_PROT_ALL)
        self.instructions = 0
        self.registers = _BatchReader(uc, STATUS_REGS, ctypes.c_uint32)
        """r0-r15 and cpsr (17 values)."""
        self.registers_and_vfp = _BatchReader(uc, SLOT_IDS, ctypes.c_uint64)
        """r0-r15, cpsr and d8-d15 (25 values) in one call: 32-bit registers
        fill the low half of their 64-bit slot, whose high half stays 0."""
        self._fault: EmulationFault | None = None  # raised by the system-call hook, reported after the run
        self._start_sp, self._start_lr = where.stack_top, where.sentinel | 1
        self._limits, self._started = abi.Limits(), 0.0  # the run under way's, for the system-call hook's guards
        self._machine: ProcessMachine | None = None  # a process's, as its system calls see the engine
        self._on_signal: Callable[[Context], None] | None = None
        self._on_switch: Callable[[Switch], None] | None = None
        self._stack_top = where.stack_top  # the running thread's (a thread's stack is its own mapping)
        if system is not None:
            self._machine = ProcessMachine(uc)
            self._start_sp = system.attach(self._machine, where)
            self._start_lr = 0  # the outermost frame: no caller (Linux starts a process with lr = 0)
            uc.reg_write(arm.UC_ARM_REG_CPSR, uc.reg_read(arm.UC_ARM_REG_CPSR) & ~0x1F | USER_MODE)

    @property
    def _uc(self) -> Uc:
        return self._engine.uc

    def __del__(self) -> None:
        """The engine given back, to be kept (engine_pool), where that may be."""
        engine = self.__dict__.get("_engine")  # none where set-up failed before
        if engine is not None and self.system is None and self._ends_well:
            engine_pool.give_back(engine)

    def _interrupt(self, uc: Uc, number: int, user_data) -> None:
        """A system call (SVC) of the program, answered by the system; any
        other exception, or a call it refuses, ends the run as a fault."""
        pc = uc.reg_read(arm.UC_ARM_REG_PC)
        try:
            if number != EXCP_SWI:
                signal = SIGNAL_OF_EXCEPTION.get(number, "a signal")
                raise EmulationFault(pc, f"processor exception {number}: a kernel sends {signal}; signals are not "
                                         "delivered to the program: the run ends here")
            thumb = uc.reg_read(arm.UC_ARM_REG_CPSR) & 0x20
            call_pc = pc - (2 if thumb else 4)
            arguments = tuple(uc.reg_read(register) for register in SVC_ARGUMENTS)
            result = self.system.system_call(uc.reg_read(arm.UC_ARM_REG_R7), arguments, call_pc)
            if self.system.exit_status is None:
                uc.reg_write(arm.UC_ARM_REG_R0, result)
                switch = self.system.reschedule()
                if switch is not None:
                    self._stack_top = switch.stack_top or self.placement.stack_top
                    if self._on_switch is not None:
                        self._on_switch(switch)
                interrupted = self.system.deliver_pending()  # on the way back to user mode
                if interrupted is not None and self._on_signal is not None:
                    self._on_signal(interrupted)
            # One call can take long or grow the process (a read of 16 MiB): the
            # clock and memory are checked after each, whatever the hook.
            guard = exhausted(self._limits, self._started)
            if guard:
                raise EmulationFault(call_pc, guard_cause(guard, self._limits), guard)
        except HarnessError as error:
            self._fault = error if isinstance(error, EmulationFault) else EmulationFault(pc, str(error))
            uc.emu_stop()
        except Exception as error:  # a bug here must still end the run as a fault, not vanish in the engine
            self._fault = EmulationFault(pc, f"system call layer failed: {type(error).__name__}: {error}")
            uc.emu_stop()

    def follow(self, instructions: Callable[[], int], on_signal: Callable[[Context], None],
               on_switch: Callable[[Switch], None]) -> None:
        """What the run's hook tells a process: the instructions run so far,
        as it counts them (the clock: the same count in every run of the
        process); `on_signal`, told the context a signal handler interrupts
        as it starts (the hook's shadow stack takes it for the handler's
        caller); `on_switch`, told the thread the processor goes to at a
        system call (the hook keeps a shadow stack a thread). None may hold
        the emulator where they can help it: the process would then outlive
        the run, in a cycle the paused collector leaves (the run lets go of
        them as it ends)."""
        if self._machine is not None:
            self._machine.instructions = instructions
        self._on_signal, self._on_switch = on_signal, on_switch

    def stack(self, sp: int) -> LiveStack:
        return LiveStack(self.read, sp, self._stack_top)  # which keeps this emulator, and its engine

    @property
    def stack_memory(self) -> tuple[mmap.mmap, int, int]:
        """(the stack's bytes, the address of the first, the stack top)."""
        return self._engine.stack, self.placement.stack_bottom, self.placement.stack_top

    def read(self, address: int, size: int) -> bytes:
        return read_memory(self._uc, address, size)

    def code(self, address: int, size: int) -> bytes:
        """Up to `size` bytes of code at `address`: fewer where the mapping
        ends, none where nothing is mapped."""
        while size:
            try:
                return read_memory(self._uc, address, size)
            except UcError:
                size -= 2
        return b""

    def engine(self, uses_vfp: bool) -> abi.Engine:
        """The engine as the compiled tracer (harness/verify/csrc/trace.c)
        drives it; its registers: the slots up to cpsr, and d8-d15 when
        `uses_vfp`."""
        return abi.Engine(self._uc._uch.value, *_ENGINE_FUNCTIONS, UC_HOOK_CODE, UC_HOOK_BLOCK, REMOVE_CACHE,
                          tuple(SLOT_IDS if uses_vfp else STATUS_REGS))

    def call(self, entry: int, on_stop: Callable[[int], None] | None, limits: abi.Limits | int,
             args: tuple[int, ...] = ()) -> int:
        """Run `entry` (Thumb) until it returns to the sentinel; return r0.

        `on_stop(pc)` runs before every instruction (None: no hook at all,
        emulation alone). Raises EmulationFault when the program faults or
        passes `limits` (a number: the instruction budget): more
        instructions, and, checked every CHECK_EVERY of them, more seconds
        or memory (the guards that need the registers or the shadow stack
        are `on_stop`'s, which raises the EmulationFault itself). Once
        stopped, the hook calls `on_stop` no more. Emulation alone (the
        bench's bare runs) stops itself at the budget and at the clock
        (the engine's count and timeout), and checks memory at system calls.
        """
        limits = as_limits(limits)
        budget = limits.instructions
        uc = self._start(args, limits)
        stopped: list[EmulationFault] = []
        started = self._started

        def hook(uc_, address, size, user_data):
            if stopped:
                return
            self.instructions += 1
            guard = abi.GUARD_INSTRUCTIONS if self.instructions > budget else abi.GUARD_NONE
            if not guard and not self.instructions % CHECK_EVERY:
                guard = exhausted(limits, started)
            try:
                if guard:
                    raise EmulationFault(address, guard_cause(guard, limits), guard)
                on_stop(address)
            except EmulationFault as fault:
                stopped.append(fault)
                uc_.emu_stop()

        bare = on_stop is None
        try:
            with self._hooks(() if bare else ((UC_HOOK_CODE, hook, 1, 0),)):
                uc.emu_start(self._entry(entry), self.placement.sentinel, count=budget if bare else 0,
                             timeout=int(limits.seconds * 1_000_000) if bare else 0)
        except UcError as error:
            raise self._engine_fault(error.errno) from None
        if stopped:
            raise stopped[0]
        if bare and not self._ended():  # the engine stopped itself: at the budget, or at the clock
            late = time.monotonic() - started >= limits.seconds
            return self._returned(abi.GUARD_SECONDS if late else abi.GUARD_INSTRUCTIONS,
                                  uc.reg_read(arm.UC_ARM_REG_PC), limits)
        return self._returned(abi.GUARD_NONE, 0, limits)

    def _ended(self) -> bool:
        """Did the run end as a program ends: a process exited, a bare-metal
        entry returned to the sentinel (or a system call faulted)?"""
        if self._fault is not None:
            return True
        if self.system is not None:
            return self.system.exit_status is not None
        return self._uc.reg_read(arm.UC_ARM_REG_PC) == self.placement.sentinel

    def call_traced(self, entry: int, tracer, limits: abi.Limits | int, args: tuple[int, ...] = (),
                    log_cap: int = abi.FAILURE_LOG_CAP, code: Iterable[tuple[int, int]] = ()) -> int:
        """`call`, with the compiled tracer (built on `engine()`) as the hook,
        which checks every guard itself and logs at most `log_cap` failing
        answers one by one. `code`: the spans [start, end) the program's
        code lies in, where a sampled run translates blocks again and again."""
        limits = as_limits(limits)
        self._start(args, limits)
        # The engine scans its whole TLB each time it translates a block (to
        # catch writes to code), unless a memory hook covers the block: a
        # sampled run translates anew at every sample, and the scans were a
        # tenth of it. This hook never fires on mapped code, and writes to
        # code are still caught (a page with a memory hook never takes the
        # engine's fast path for writes).
        with self._hooks((UC_HOOK_MEM_FETCH_UNMAPPED, _unmapped, start, end - 1) for start, end in code):
            status, guard, pc = tracer.run(self._entry(entry), self.placement.sentinel,
                                           limits._replace(memory_bytes=memory_threshold(limits)), log_cap)
        if status:
            raise self._engine_fault(status)
        return self._returned(guard, pc, limits)

    def _engine_fault(self, status: int) -> EmulationFault:
        """The fault for an engine error: for a process, named by the signal a
        kernel would send (SIGNAL_OF_ENGINE_ERROR); a fault the system-call
        hook raised first stands."""
        if self._fault is not None:
            return self._fault
        pc, cause = self._uc.reg_read(arm.UC_ARM_REG_PC), str(UcError(status))
        signal = SIGNAL_OF_ENGINE_ERROR.get(status) if self.system is not None else None
        if signal is not None:
            cause = f"{signal} ({cause}); signals are not delivered to the program: the run ends here"
        return EmulationFault(pc, cause)

    @contextmanager
    def _hooks(self, hooks: Iterable[tuple[int, Callable, int, int]]):
        """The engine hooks of one run, (type, callback, begin, end), and a
        process's system-call hook, removed after it: the binding's hooks
        refer back to the engine, which would wait for the cycle collector."""
        uc, handles = self._uc, []
        try:
            if self.system is not None:
                handles.append(uc.hook_add(UC_HOOK_INTR, self._interrupt))
            for kind, callback, begin, end in hooks:
                handles.append(uc.hook_add(kind, callback, begin=begin, end=end))
            yield
        finally:
            for handle in handles:
                callback = getattr(uc, "_callbacks", {}).get(handle)  # a ctypes.cast, whose objects refer to it
                uc.hook_del(handle)
                if isinstance(getattr(callback, "_objects", None), dict):  # (a cycle): cleared, the engine can go
                    callback._objects.clear()
            # What the run's hook handed over (`follow`) is the run's: its
            # closures may reach this emulator, a cycle that would outlive it.
            self._on_signal = self._on_switch = None
            if self._machine is not None:
                self._machine.instructions = lambda: 0

    def _entry(self, entry: int) -> int:
        """Where a run starts: a process's entry (the system's, in the state
        its bit 0 says); a bare-metal `entry`, always Thumb."""
        return self.system.entry if self.system is not None else entry | 1

    def _start(self, args: tuple[int, ...], limits: abi.Limits) -> Uc:
        uc = self._uc
        self._ends_well = False  # until the run returns (`_returned`)
        self._limits, self._started = limits, time.monotonic()
        for index, value in enumerate(args):
            uc.reg_write(arm.UC_ARM_REG_R0 + index, value)
        uc.reg_write(arm.UC_ARM_REG_SP, self._start_sp)
        uc.reg_write(arm.UC_ARM_REG_LR, self._start_lr)
        return uc

    def _returned(self, guard: int, pc: int, limits: abi.Limits) -> int:
        """r0 of a run that ended without an engine error (a process's exit
        status), or the fault (a guard that stopped it at pc, or the
        system-call hook)."""
        if self._fault is not None:
            raise self._fault
        if guard != abi.GUARD_NONE:
            raise EmulationFault(pc, guard_cause(guard, limits), guard)
        pc = self._uc.reg_read(arm.UC_ARM_REG_PC)
        if self.system is not None:
            if self.system.exit_status is None:
                raise EmulationFault(pc, "the program stopped without exiting")
            return self.system.exit_status
        if pc != self.placement.sentinel:
            raise EmulationFault(pc, "stopped before returning to the sentinel")
        self._ends_well = True
        return self._uc.reg_read(arm.UC_ARM_REG_R0)
