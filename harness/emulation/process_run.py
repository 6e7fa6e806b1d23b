"""What a process's run does between the engine and its system: system
calls, a thread switch, a fault the program takes, a timer that expires,
each told to the hook that follows the run (RunEvents). The Emulator
(harness.emulation.emulator) runs the engine with these as its process hooks.
"""

from __future__ import annotations

from unicorn import Uc, UcError
from unicorn.unicorn_const import UC_ERR_INSN_INVALID
from unicorn import arm_const as arm

from harness.emulation.guards import EmulationFault, ImpreciseFault, exhausted, guard_cause
from harness.emulation.binding import read_memory
from harness.emulation.process_machine import (FAULT_OF_ENGINE_ERROR, FAULT_OF_EXCEPTION, FETCH_ERRORS, RunEvents,
                                               hint_before)
from harness.errors import HarnessError

EXCP_SWI = 2  # Unicorn's interrupt number for SVC
SVC_ARGUMENTS = [getattr(arm, f"UC_ARM_REG_R{n}") for n in range(6)]


class ProcessRun:
    """The Emulator's part for a process (`system`): its hooks and what
    they tell the run's hook. Needs the Emulator's `_uc`, `system`,
    `placement`, `_machine`, `_limits`, `_started` and `memory_ceiling`."""

    def _begin_process(self) -> None:
        self._events: RunEvents | None = None  # what the run's hook is told (`follow`)
        self._fault: EmulationFault | None = None  # raised in a hook, reported after the run
        self._fault_address = 0  # the address of the last access that faulted (`_invalid`)
        self._deadline: int | None = None  # the instruction count at which a timer expires (`_arm`)
        self._ceiling_told: int | None = None  # the memory ceiling the hook was last told (RunEvents.memory)
        self._hinted: tuple[int, int | None] | None = None  # (pc, count) where a run last went on after a hint

    def _interrupt(self, uc: Uc, number: int, user_data) -> None:
        """A system call (SVC) of the program, answered by the system; any
        other exception, or a call it refuses, ends the run as a fault."""
        pc = uc.reg_read(arm.UC_ARM_REG_PC)
        try:
            if number != EXCP_SWI:
                kind = FAULT_OF_EXCEPTION.get(number)
                if kind is None:
                    raise EmulationFault(pc, f"processor exception {number}: not one a user program raises "
                                             "under Linux: the run ends here")
                self._take_fault(kind, pc, pc, data=True)
                return
            thumb = uc.reg_read(arm.UC_ARM_REG_CPSR) & 0x20
            call_pc = pc - (2 if thumb else 4)
            arguments = tuple(uc.reg_read(register) for register in SVC_ARGUMENTS)
            result = self.system.system_call(uc.reg_read(arm.UC_ARM_REG_R7), arguments, call_pc)
            if self.system.exit_status is None:
                uc.reg_write(arm.UC_ARM_REG_R0, result)
                switch = self.system.reschedule()
                if switch is not None:
                    self._switched(switch)
                self.system.expire_timers()
                interrupted = self.system.deliver_pending()  # on the way back to user mode
                if interrupted is not None and self._events is not None:
                    self._events.signal(interrupted)
                self._arm(call_pc)
            # One call can take long or grow the process (a read of 16 MiB): the
            # clock and memory are checked after each, whatever the hook; a
            # file mapped raises the default ceiling, which the hook is told.
            ceiling = self.memory_ceiling()
            if self._events is not None and ceiling != self._ceiling_told:
                self._events.memory(ceiling)
                self._ceiling_told = ceiling
            guard = exhausted(self._limits, self._started, ceiling)
            if guard:
                raise EmulationFault(call_pc, guard_cause(guard, self._limits, ceiling), guard)
        except HarnessError as error:
            self._fault = error if isinstance(error, EmulationFault) else EmulationFault(pc, str(error))
            uc.emu_stop()
        except Exception as error:  # a bug here must still end the run as a fault, not vanish in the engine
            self._fault = EmulationFault(pc, f"system call layer failed: {type(error).__name__}: {error}")
            uc.emu_stop()

    def follow(self, events: RunEvents) -> None:
        """What the run's hook and the process tell each other (RunEvents),
        for the run under way: the run lets go of them as it ends (their
        closures may reach this emulator, a cycle the paused collector
        would leave)."""
        if self._machine is not None:
            self._machine.instructions = events.instructions
        self._events = events

    def _take_fault(self, kind: str, pc: int, address: int, data: bool) -> bool:
        """A process's instruction at pc faulted (`data`: the instruction
        itself, or its access at `address`; else the fetch at pc): the hook
        follows the shadow stack to the fault, the kernel forces the signal
        (harness.linux.signals.fault), and a handler starts, or the process
        ends. Whether the run goes on (at the handler)."""
        if self._events is not None:
            self._events.fault(pc, data)
        interrupted = self.system.fault(kind, address)
        if interrupted is None:
            return False
        if self._events is not None:
            self._events.signal(interrupted)
        return True

    def _resumes_after(self, status: int) -> int | None:
        """After an engine error of a process's run: where the run goes on
        (bit 0: Thumb) when the fault's handler runs; None where it does
        not (the process ended, or the error is not a fault a program can
        take: the run ends as its fault)."""
        kind = FAULT_OF_ENGINE_ERROR.get(status)
        if self.system is None or self._fault is not None or kind is None:
            return None
        uc = self._uc
        if status == UC_ERR_INSN_INVALID:
            after = self._after_hint()
            if after is not None:
                return after
        pc = uc.reg_read(arm.UC_ARM_REG_PC)
        data = status not in FETCH_ERRORS
        if data and kind != "undefined" and not (self._events and self._events.precise):  # (an exception's pc is)
            raise ImpreciseFault(pc, f"the program takes a fault ({kind} access at {self._fault_address:#x}) "
                                     "inside a block run without the per-instruction hook")
        access = data and kind != "undefined"  # a data access's address; else the instruction's
        if not self._take_fault(kind, pc, self._fault_address if access else pc, data):
            return None
        self._fault_address = 0
        return uc.reg_read(arm.UC_ARM_REG_PC) | (uc.reg_read(arm.UC_ARM_REG_CPSR) >> 5 & 1)

    def _after_hint(self) -> int | None:
        """Where the run goes on (bit 0: Thumb) when the engine stopped after
        a YIELD or WFE (process_machine.hint_before): at the next
        instruction, as on a device. None where the instruction at the pc is
        undefined itself: the engine stops there again, in the same thread,
        after fewer than the two instructions a loop back over the hint runs."""
        uc = self._uc
        pc, thumb = uc.reg_read(arm.UC_ARM_REG_PC), uc.reg_read(arm.UC_ARM_REG_CPSR) >> 5 & 1
        count = self._events.instructions() if self._events is not None else None
        last, self._hinted = self._hinted, None
        if last is not None and last[0] == pc:
            if count is None or last[1] is None:
                raise EmulationFault(pc, "the engine stopped twice at this pc after a YIELD or WFE, in a run "
                                         "without the hook that counts instructions: a loop over the hint, or "
                                         "an undefined instruction after it, cannot be told apart")
            if count - last[1] < 2:
                return None
        try:
            before = read_memory(uc, pc - 4, 4)
        except UcError:
            return None
        if not hint_before(before, bool(thumb)):
            return None
        self._hinted = (pc, count)
        return pc | thumb

    def _arm(self, pc: int) -> None:
        """Tell the hook the instruction count at which the next timer
        expires or the running thread's time slice ends (the system's
        deadline), where the hook stops before that instruction."""
        deadline = self.system.deadline()
        if deadline is not None and self._events is None:
            raise ImpreciseFault(pc, "the program arms a timer or runs threads, whose deadlines only a hook places")
        self._deadline = deadline
        if self._events is not None:
            self._events.deadline(deadline, self._expire)

    def _expire(self) -> bool:
        """The hook stopped at the deadline, before the instruction at pc:
        the timers whose time has come send their signals, another thread
        takes the processor where the time slice is over, and a pending
        signal's handler runs, each interrupting the instruction at pc;
        whether the run goes on elsewhere (a handler, another thread, or the
        process's end)."""
        uc = self._uc
        pc = uc.reg_read(arm.UC_ARM_REG_PC)
        self._events.fault(pc, False)  # what ran before pc is followed; nothing at pc ran
        self.system.expire_timers()
        switch = self.system.preempt()
        if switch is not None:
            self._switched(switch)
        interrupted = self.system.deliver_pending()
        if interrupted is not None:
            self._events.signal(interrupted)
        self._arm(pc)
        return switch is not None or interrupted is not None or self.system.exit_status is not None

    def expired(self) -> bool:
        """The Python hook, before an instruction outside an IT block (as
        trace.c's stop_at): where the deadline is reached, `_expire`;
        whether the engine goes on elsewhere (the instruction runs later)."""
        if self._deadline is None or self._events.instructions() < self._deadline:
            return False
        try:
            return self._expire()
        except HarnessError as error:
            raise error if isinstance(error, EmulationFault) else EmulationFault(self._machine.context().r[15],
                                                                               str(error)) from None

    def _switched(self, switch) -> None:
        self._hinted = None  # another thread's stop at the same pc is its own
        self._stack_top = switch.stack_top or self.placement.stack_top
        if self._events is not None:
            self._events.switch(switch)

    def _invalid(self, uc: Uc, access: int, address: int, size: int, value: int, user_data) -> bool:
        self._fault_address = address  # a fault's si_addr (the engine's error says no more than its kind)
        return False  # not handled: the engine stops with the error
