"""The only module that runs Unicorn (harness.emulation.engine_pool makes its
engines, and keeps them between runs).

Loads a program's segments on an engine with its stack mapped, calls the
entry in Thumb state with lr = a sentinel address, and calls back before
every instruction. Faults (unmapped access, undefined instruction, a run
past one of its limits, harness.abi.Limits) end the run with an
`EmulationFault` naming the pc and the cause.
"""

from __future__ import annotations

import ctypes
import mmap
import time
from contextlib import contextmanager
from typing import Callable, Iterable

from unicorn import (
    UC_HOOK_BLOCK,
    UC_HOOK_CODE,
    UC_HOOK_INTR,
    UC_HOOK_MEM_FETCH_UNMAPPED,
    UC_HOOK_MEM_INVALID,
    UC_PROT_ALL,
    Uc,
    UcError,
    unicorn_const,
)
from unicorn import arm_const as arm

from harness import abi
from harness.emulation import engine_pool
from harness.emulation.binding import ENGINE_FUNCTIONS, BatchReader, delete_hook, engine_handle, read_memory
from harness.emulation.guards import EmulationFault, as_limits, exhausted, guard_cause, memory_ceiling, resident_bytes
from harness.emulation.livestack import LiveStack
from harness.emulation.placement import DEFAULT, PAGE, Placement, pages_of, place
from harness.emulation.process_machine import ProcessMachine
from harness.emulation.process_run import ProcessRun

# uc_ctl's control word for "drop the code translated from [begin, end)": UC_CTL_WRITE(type, 2 arguments).
REMOVE_CACHE = unicorn_const.UC_CTL_TB_REMOVE_CACHE | 2 << 26 | unicorn_const.UC_CTL_IO_WRITE << 30

SENTINEL, STACK_TOP = DEFAULT.sentinel, DEFAULT.stack_top  # where ordinary programs get them
SLOT_IDS = [getattr(arm, f"UC_ARM_REG_{name.upper()}") for name in abi.SLOTS]  # abi.SLOTS as engine ids
STATUS_REGS = SLOT_IDS[: abi.FIRST_VFP_SLOT]  # r0-r15, cpsr
# Instructions between the Python hook's checks of the clock and memory: a
# stop there walks the whole stack in Python, tens of milliseconds deep in a
# recursion, and a check costs a microsecond (trace.c: abi.CHECK_EVERY).
CHECK_EVERY = 1 << 6


USER_MODE = 0x10  # CPSR.M of a Linux process: privileged instructions are undefined there, as on a device







def _unmapped(uc: Uc, access: int, address: int, size: int, value: int, user_data) -> bool:
    return False  # not handled: the engine faults as it would with no hook


class Emulator(ProcessRun):
    def __init__(self, segments: Iterable[tuple[int, bytes]], system=None, placement: Placement | None = None):
        """`segments` mapped, the stack and sentinel placed where they are not
        (or at `placement`). With `system` (harness.linux.process.LinuxSystem),
        a process: the system maps what else it needs, chooses where the run
        starts, and answers the program's system calls; the run ends when it
        exits."""
        segments = [(address, bytes(data)) for address, data in segments]
        self.placement: Placement = placement or place(segments)
        """Where the stack and the return sentinel are (harness.emulation.placement)."""
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
        self.registers = BatchReader(uc, STATUS_REGS, ctypes.c_uint32)
        """r0-r15 and cpsr (17 values)."""
        self.registers_and_vfp = BatchReader(uc, SLOT_IDS, ctypes.c_uint64)
        """r0-r15, cpsr and d8-d15 (25 values) in one call: 32-bit registers
        fill the low half of their 64-bit slot, whose high half stays 0."""
        self._start_sp, self._start_lr = where.stack_top, where.sentinel | 1
        self._limits, self._started = abi.Limits(), 0.0  # the run under way's, for the system-call hook's guards
        self._held = 0  # the resident size as the run began (guards.memory_ceiling)
        self._machine: ProcessMachine | None = None  # a process's, as its system calls see the engine
        self._begin_process()
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

    @property
    def deadline(self) -> int | None:
        """The instruction count before which the hook stops next for the
        process (a timer, a time slice: ProcessRun._arm)."""
        return self._deadline

    def stack(self, sp: int) -> LiveStack:
        return LiveStack(self._mapped, sp, self._stack_top)  # which keeps this emulator, and its engine

    def _mapped(self, address: int, size: int) -> bytes | None:
        """`size` bytes at `address`, None where not all of them are mapped."""
        try:
            return read_memory(self._uc, address, size)
        except UcError:
            return None

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
        return abi.Engine(engine_handle(self._uc), *ENGINE_FUNCTIONS, UC_HOOK_CODE, UC_HOOK_BLOCK, REMOVE_CACHE,
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
            if stopped:  # the engine lost the stop request (a store into translated code): asked again
                uc_.emu_stop()
                return
            self.instructions += 1
            guard = abi.GUARD_INSTRUCTIONS if self.instructions > budget else abi.GUARD_NONE
            if not guard and not self.instructions % CHECK_EVERY:
                guard = exhausted(limits, started, self.memory_ceiling())
            try:
                if guard:
                    raise EmulationFault(address, guard_cause(guard, limits, self.memory_ceiling()), guard)
                on_stop(address)
            except EmulationFault as fault:
                stopped.append(fault)
                uc_.emu_stop()

        bare = on_stop is None
        with self._hooks(() if bare else ((UC_HOOK_CODE, hook, 1, 0),)):
            begin = self._entry(entry)
            while begin is not None:
                try:
                    uc.emu_start(begin, self.placement.sentinel, count=budget if bare else 0,
                                 timeout=int(limits.seconds * 1_000_000) if bare else 0)
                    begin = None
                except UcError as error:  # a fault: its handler runs (then on from there), or the run ends
                    begin = None if stopped else self._resumes_after(error.errno)
                    if begin is None and not self._ended():
                        raise self._engine_fault(error.errno) from None
        if stopped:
            raise stopped[0]
        if bare and not self._ended():  # the engine stopped itself: at the budget, or at the clock
            late = time.monotonic() - started >= limits.seconds
            return self._returned(abi.GUARD_SECONDS if late else abi.GUARD_INSTRUCTIONS,
                                  uc.reg_read(arm.UC_ARM_REG_PC), limits)
        return self._returned(abi.GUARD_NONE, 0, limits)

    def memory_ceiling(self) -> int:
        """The resident size the run under way may reach (guards.memory_ceiling)."""
        return memory_ceiling(self._limits, self._held, self.system.mapped_file_bytes() if self.system else 0)

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
        try:
            with self._hooks((UC_HOOK_MEM_FETCH_UNMAPPED, _unmapped, start, end - 1) for start, end in code):
                status, guard, pc = tracer.run(self._entry(entry), self.placement.sentinel,
                                               limits._replace(memory_bytes=self.memory_ceiling()), log_cap)
                while status and not guard:  # a fault: its handler runs (then on from there), or the run ends
                    begin = self._resumes_after(status)
                    if begin is None:
                        break
                    status, guard, pc = tracer.resume(begin, self.placement.sentinel)
        finally:
            tracer.finish()
        if status and not self._ended():
            raise self._engine_fault(status)
        return self._returned(guard, pc, limits)

    def _engine_fault(self, status: int) -> EmulationFault:
        """The fault for an engine error a process does not take as a signal
        (FAULT_OF_ENGINE_ERROR), or a bare-metal program's; a fault the
        system-call hook raised first stands."""
        if self._fault is not None:
            return self._fault
        pc, cause = self._uc.reg_read(arm.UC_ARM_REG_PC), str(UcError(status))
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
                handles.append(uc.hook_add(UC_HOOK_MEM_INVALID, self._invalid))
            for kind, callback, begin, end in hooks:
                handles.append(uc.hook_add(kind, callback, begin=begin, end=end))
            yield
        finally:
            for handle in handles:
                delete_hook(uc, handle)
            # What the run's hook handed over (`follow`) is the run's: its
            # closures may reach this emulator, a cycle that would outlive it.
            self._events = None
            if self._machine is not None:
                self._machine.instructions = lambda: 0

    def _entry(self, entry: int) -> int:
        """Where a run starts: a process's entry (the system's, in the state
        its bit 0 says); a bare-metal `entry`, always Thumb."""
        return self.system.entry if self.system is not None else entry | 1

    def _start(self, args: tuple[int, ...], limits: abi.Limits) -> Uc:
        uc = self._uc
        self._ends_well = False  # until the run returns (`_returned`)
        self._limits, self._started, self._held = limits, time.monotonic(), resident_bytes()
        self._ceiling_told = None  # this run's hook has been told no ceiling but the one it starts with
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
            raise EmulationFault(pc, guard_cause(guard, limits, self.memory_ceiling()), guard)
        pc = self._uc.reg_read(arm.UC_ARM_REG_PC)
        if self.system is not None:
            if self.system.exit_status is None:
                raise EmulationFault(pc, "the program stopped without exiting")
            return self.system.exit_status
        if pc != self.placement.sentinel:
            raise EmulationFault(pc, "stopped before returning to the sentinel")
        self._ends_well = True
        return self._uc.reg_read(arm.UC_ARM_REG_R0)
