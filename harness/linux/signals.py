"""Signals as ARM Linux delivers them (arch/arm/kernel/signal.c): each
signal's action (rt_sigaction, the process's), and each thread's blocked
mask, pending signals and alternate stack; the frame a handler runs on.

A signal sent by the process to itself (kill, tgkill, tkill: raise and
abort) is pending on the thread that takes it until that thread next
returns from a system call (the sender's call, or the call whose wait
the signal ended), and is then delivered, as a kernel
delivers on its way back to user mode: its handler
runs on a frame that holds the interrupted context (`rt_sigframe` with
SA_SIGINFO, `sigframe` without), returning through `sa_restorer` (glibc's)
or the kernel's own trampoline (TRAMPOLINES, in the vectors page), whose
`sigreturn` restores that context. A signal whose action is the default
ends the process, or is dropped where the default is to ignore it; a stop
signal, with no job control to resume it, ends the run as a fault.
A signal the process ignores is dropped as it is sent and ends no wait
(harness.linux.kernel's signal_thread; a POSIX timer does not queue it).
A wait it ends makes its call return a restart code, which the delivery
turns into what Linux gives the program (`_restart`): EINTR, or the call
run again (SA_RESTART, or no handler to run); rt_sigtimedwait returns
EINTR itself (harness.linux.calls_sigwait).
A faulting instruction raises its signal at once (`fault`: SIGSEGV and
SIGBUS from an access, SIGILL and SIGTRAP from the instruction), as Linux
forces it. A POSIX timer's signal (harness.linux.posix_timers) carries
the timer in its pending entry: its siginfo is made when it is taken off
the list, where Linux also arms a periodic timer again.
"""

from __future__ import annotations

import errno
import struct
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from harness.emulation.machine import BadAddress, Context
from harness.linux.call_table import GuestError, SystemCallFault
from harness.linux.loader import KUSER_PAGE, TRAMPOLINE_OFFSET

SA_SIGINFO, SA_ONSTACK, SA_RESTART = 0x4, 0x08000000, 0x10000000
SA_NODEFER, SA_RESETHAND, SA_RESTORER = 0x40000000, 0x80000000, 0x04000000
SIG_DFL, SIG_IGN = 0, 1
SIGKILL, SIGSEGV, SIGSTOP = 9, 11, 19
IGNORED_BY_DEFAULT = frozenset({17, 18, 23, 28})  # SIGCHLD, SIGCONT, SIGURG, SIGWINCH
STOPPING = frozenset({19, 20, 21, 22})  # SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU
UNBLOCKABLE = 1 << (SIGKILL - 1) | 1 << (SIGSTOP - 1)
SI_USER, SI_TKILL = 0, -6
SIGILL, SIGTRAP, SIGBUS = 4, 5, 7
# A faulting instruction's signal and si_code, by what faulted (the emulator names it).
FAULTS = {"unmapped": (SIGSEGV, 1), "protected": (SIGSEGV, 2),  # SEGV_MAPERR, SEGV_ACCERR
          "unaligned": (SIGBUS, 1), "undefined": (SIGILL, 1), "breakpoint": (SIGTRAP, 1)}  # BUS_ADRALN, ILL_ILLOPC, TRAP_BRKPT
SS_ONSTACK, SS_DISABLE = 1, 2
THUMB = 0x20  # cpsr's T bit
# What an interrupted call returns (include/linux/errno.h: the kernel's own; harness.linux.threads.Wait)
ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND, ERESTART_RESTARTBLOCK = 512, 513, 514, 516
RESTART_SYSCALL = 0  # the call that goes on with a call's restart block
MINSIGSTKSZ = 2048

# The kernel's return trampolines for a handler without sa_restorer (in the
# vectors page: harness.linux.loader.kuser_page), sigreturn's and then
# rt_sigreturn's, each in ARM and 8 bytes on in Thumb.
TRAMPOLINES = {False: KUSER_PAGE + TRAMPOLINE_OFFSET, True: KUSER_PAGE + TRAMPOLINE_OFFSET + 0x10}  # rt or not

# The frame (arch/arm/include/asm/ucontext.h): siginfo (128 bytes, rt only),
# then the ucontext: flags, link, stack_t, sigcontext (trap_no, error_code,
# oldmask, r0-r15, cpsr, fault_address), the 8-byte mask, padding to 232,
# and uc_regspace: a VFP record (magic, size, d0-d31, fpscr, fpexc, fpinst,
# fpinst2) and a zero word ending it; then retcode (4 words, unused: the
# trampolines are in the vectors page).
SIGINFO_SIZE = 128
UCONTEXT_SIZE = 232 + 512
FRAME_SIZE = {True: SIGINFO_SIZE + UCONTEXT_SIZE + 16, False: UCONTEXT_SIZE + 16}
SIGCONTEXT = struct.Struct("<3I16I2I")  # at 20 in the ucontext
MCONTEXT_AT, MASK_AT, REGSPACE_AT = 20, 104, 232
VFP_MAGIC, VFP_SIZE = 0x56465001, 288
VFP = struct.Struct("<II32QI4xIII4x")
IT_BITS = 0x0600FC00
# NZCVQ, GE, E, T and the IT state: what sigreturn takes from the frame (the mode stays USR)
STATUS_USER_BITS = 0xF80F0200 | 0x20 | IT_BITS


class Action(NamedTuple):
    """struct sigaction as ARM's rt_sigaction passes it (20 bytes)."""

    handler: int
    flags: int
    restorer: int
    mask: int

    LAYOUT = struct.Struct("<IIIQ")

    @classmethod
    def of(cls, data: bytes) -> "Action":
        return cls(*cls.LAYOUT.unpack(data))

    def packed(self) -> bytes:
        return self.LAYOUT.pack(*self)


DEFAULT = Action(SIG_DFL, 0, 0, 0)


class Pending(NamedTuple):
    """A signal pending on a thread."""

    signal: int
    code: int  # si_code
    timer: Any = None  # the POSIX timer whose signal it is (harness.linux.posix_timers.PosixTimer)


@dataclass
class Signals:
    """One process's signal state."""

    actions: dict[int, Action] = field(default_factory=dict)
    blocked: int = 0  # bit (signal - 1)
    pending: list[Pending] = field(default_factory=list)  # in the order sent
    altstack: tuple[int, int, int] = (0, SS_DISABLE, 0)  # ss_sp, ss_flags, ss_size
    saved_mask: int | None = None  # the mask to come back to after a wait that runs under another (wait_mask)

    def action(self, signal: int) -> Action:
        return self.actions.get(signal, DEFAULT)

    def ignores(self, signal: int) -> bool:
        """Whether `signal` sent now would be dropped (sig_ignored: a blocked
        signal never is, its action may change before it is unblocked)."""
        return not self.blocked >> (signal - 1) & 1 and ignored(self.action(signal), signal)

    def send(self, signal: int, code: int, timer=None) -> None:
        """`signal` sent to the process; a standard signal already pending is
        not queued twice, but a timer's has its own entry (Linux's
        preallocated one for the timer)."""
        if timer is None and signal < 32 and any(pending.signal == signal for pending in self.pending):
            return
        self.pending.append(Pending(signal, code, timer))

    def restore_mask(self) -> None:
        """The call that ran under another mask is over: the thread's own again."""
        if self.saved_mask is not None:
            self.blocked, self.saved_mask = self.saved_mask, None

    def deliverable(self) -> bool:
        """Is a signal pending that is not blocked (one that ends a wait)?"""
        return any(not self.blocked >> (pending.signal - 1) & 1 for pending in self.pending)

    def take(self, signals: int) -> Pending | None:
        """The first pending signal of the set `signals` (bit signal - 1), taken off the list."""
        for index, pending in enumerate(self.pending):
            if signals >> (pending.signal - 1) & 1:
                return self.pending.pop(index)
        return None

    def next_deliverable(self) -> Pending | None:
        """The first pending signal not blocked, taken off the list."""
        return self.take(~self.blocked)


def siginfo(kernel, taken: Pending) -> bytes:
    """The siginfo of a signal taken off its list: a timer's (si_timerid,
    si_overrun, si_value: taking it is where its timer counts its overruns
    and is armed again), else the sender's (si_pid, si_uid)."""
    if taken.timer is not None:
        timer_id, overrun, value = taken.timer.dequeued(kernel)
        return struct.pack("<iiiiiI", taken.signal, 0, taken.code, timer_id, overrun, value)
    return struct.pack("<iiiiI", taken.signal, 0, taken.code, kernel.pid, 0)


def discard(threads, signal: int) -> None:
    """`signal` is ignored now: its pending entries go, on every thread (a
    timer's may be queued again, its periodic rearm is lost, as in Linux's
    flush_sigqueue_mask)."""
    for thread in threads:
        for pending in [pending for pending in thread.signals.pending if pending.signal == signal]:
            thread.signals.pending.remove(pending)
            if pending.timer is not None:
                pending.timer.queued = False


def ignored(action: Action, signal: int) -> bool:
    """Does `action` drop `signal` (SIG_IGN, or the default of one ignored by default)?"""
    return action.handler == SIG_IGN or (action.handler == SIG_DFL and signal in IGNORED_BY_DEFAULT)


def deliver_pending(kernel) -> Context | None:
    """Deliver the first pending signal that is not blocked and not
    ignored (those are dropped), as a kernel on its way back to user mode
    (do_signal): the context it interrupts (for the shadow stack: the
    handler's caller) where a handler now runs, else None. A call a signal
    interrupted is restarted or fails first (`_restart`)."""
    thread = kernel.threads.current
    interrupted, thread.interrupted = thread.interrupted, False
    while (taken := kernel.signals.next_deliverable()) is not None:
        signal, info = taken.signal, siginfo(kernel, taken)  # as get_signal: a timer's rearmed
        action = kernel.signals.action(signal)
        if ignored(action, signal):
            continue
        if action.handler == SIG_DFL:
            if signal in STOPPING:
                raise SystemCallFault(f"signal {signal} would stop the process, and nothing could continue it")
            kernel.end(-signal)
            return None
        if interrupted:
            _restart(kernel, thread, action.flags)
        return _run_handler(kernel, signal, action, info)
    if interrupted:
        _restart(kernel, thread, None)
    kernel.signals.restore_mask()
    return None


def wait_mask(kernel, address: int, size: int) -> None:
    """The signal mask a wait runs under, where given (ppoll, pselect6,
    epoll_pwait: set_user_sigmask): the thread's own comes back as the call
    returns or, where a signal ends the wait, as it is delivered (a
    handler's frame keeps the thread's own for its sigreturn)."""
    if not address:
        return
    if size != 8:
        raise GuestError(errno.EINVAL)
    mask = struct.unpack("<Q", kernel.machine.read(address, 8))[0]
    state = kernel.signals
    state.saved_mask = state.blocked
    state.blocked = mask & ~UNBLOCKABLE


def _restart(kernel, thread, flags: int | None) -> None:
    """A call a signal interrupted, its r0 the kernel's restart code, on
    its way back to user mode (arch/arm/kernel/signal.c do_signal): where a
    handler runs (its `flags`), the call fails with EINTR, unless it asked
    for ERESTARTSYS and the handler has SA_RESTART, or ERESTARTNOINTR (a
    PI futex's lock: harness.linux.pi_futex); otherwise the call runs
    again: the pc back on its svc (2 bytes in Thumb, 4 in ARM), r0 as the
    call had it, and for ERESTART_RESTARTBLOCK without a handler r7 the
    number of restart_syscall, which goes on where the call left off. The
    handler's frame keeps that context, so its sigreturn returns to the svc."""
    context = kernel.machine.context()
    code = -(context.r[0] - (1 << 32) if context.r[0] & 0x80000000 else context.r[0])
    if code not in (ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND, ERESTART_RESTARTBLOCK):
        return  # the call ended otherwise (a sleep with no time left, a partial write, EINTR of epoll_wait)
    registers = list(context.r)
    if flags is not None and code != ERESTARTNOINTR and (code != ERESTARTSYS or not flags & SA_RESTART):
        registers[0] = -errno.EINTR & 0xFFFFFFFF
    else:
        registers[0] = thread.orig_r0
        registers[15] -= 2 if context.cpsr & THUMB else 4
        if flags is None and code == ERESTART_RESTARTBLOCK:
            registers[7] = RESTART_SYSCALL
    kernel.machine.resume(replace(context, r=tuple(registers)))


def fault(kernel, signal: int, code: int, address: int) -> Context | None:
    """A fault of the running thread's instruction at `address`'s access
    (SIGSEGV, SIGBUS) or of the instruction itself (SIGILL, SIGTRAP), as
    Linux forces it (force_sig_fault): a handler runs at once, siginfo's
    si_addr `address`; where the signal is blocked or ignored, the default
    action is taken instead, which ends the process. The context the
    handler interrupts, else None."""
    signals = kernel.signals
    action = signals.action(signal)
    if signals.blocked >> (signal - 1) & 1 or action.handler == SIG_IGN:
        signals.actions.pop(signal, None)
        signals.blocked &= ~(1 << (signal - 1))
        action = DEFAULT
    if action.handler == SIG_DFL:
        kernel.end(-signal)
        return None
    return _run_handler(kernel, signal, action, struct.pack("<iiiI", signal, 0, code, address), address)


def _run_handler(kernel, signal: int, action: Action, info: bytes, address: int = 0) -> Context | None:
    """Run `action`'s handler for `signal`: its frame (with siginfo `info`
    where the handler takes SA_SIGINFO), its registers. `address`: a
    fault's (sigcontext's fault_address)."""
    machine, signals = kernel.machine, kernel.signals
    interrupted = machine.context()
    rt = bool(action.flags & SA_SIGINFO)
    sp = interrupted.r[13]
    ss_sp, ss_flags, ss_size = signals.altstack
    on_altstack = ss_sp < sp <= ss_sp + ss_size
    if action.flags & SA_ONSTACK and not ss_flags & SS_DISABLE and not on_altstack:
        sp = ss_sp + ss_size
    frame = (sp - FRAME_SIZE[rt]) & ~7
    ucontext = frame + SIGINFO_SIZE if rt else frame
    image = bytearray(FRAME_SIZE[rt])
    if rt:
        image[: len(info)] = info
    at = ucontext - frame
    stack_flags = SS_ONSTACK if on_altstack else ss_flags
    struct.pack_into("<IIIiI", image, at, 0, 0, ss_sp, stack_flags, ss_size)
    kept = signals.blocked if signals.saved_mask is None else signals.saved_mask  # sigmask_to_save
    SIGCONTEXT.pack_into(image, at + MCONTEXT_AT, 0, 0, kept & 0xFFFFFFFF, *interrupted.r,
                         interrupted.cpsr, address)
    struct.pack_into("<Q", image, at + MASK_AT, kept)
    VFP.pack_into(image, at + REGSPACE_AT, VFP_MAGIC, VFP_SIZE, *interrupted.d, interrupted.fpscr, 0x40000000, 0, 0)
    try:
        machine.write(frame, bytes(image))
    except BadAddress:  # no room for the frame: Linux kills the process with SIGSEGV (force_sigsegv)
        kernel.end(-SIGSEGV)
        return None
    thumb = action.handler & 1
    returns_to = action.restorer if action.flags & SA_RESTORER else TRAMPOLINES[rt] + (8 if thumb else 0) | thumb
    registers = list(interrupted.r)
    registers[0:3] = [signal, frame if rt else 0, ucontext if rt else 0]
    registers[13], registers[14], registers[15] = frame, returns_to, action.handler & ~1
    cpsr = interrupted.cpsr & ~(IT_BITS | 0x20) | (0x20 if thumb else 0)
    machine.resume(Context(tuple(registers), cpsr, interrupted.d, interrupted.fpscr))
    signals.blocked |= action.mask | (0 if action.flags & SA_NODEFER else 1 << (signal - 1))
    signals.blocked &= ~UNBLOCKABLE
    signals.saved_mask = None  # the frame has it
    if action.flags & SA_RESETHAND:
        signals.actions.pop(signal, None)
    return interrupted


def sigreturn(kernel, rt: bool) -> int:
    """Restore the context the frame at sp holds (the handler's return, through
    its trampoline); r0 as restored. A frame that is not one (misaligned,
    unreadable) gets what Linux gives it: SIGSEGV, which ends the process."""
    machine = kernel.machine
    frame = machine.context().r[13]
    ucontext = frame + SIGINFO_SIZE if rt else frame
    try:
        if frame & 7:
            raise BadAddress(f"a signal frame at {frame:#x} is not 8-byte aligned")
        saved = SIGCONTEXT.unpack(machine.read(ucontext + MCONTEXT_AT, SIGCONTEXT.size))
        mask = struct.unpack("<Q", machine.read(ucontext + MASK_AT, 8))[0]
        vfp = VFP.unpack(machine.read(ucontext + REGSPACE_AT, VFP.size))
    except BadAddress:
        kernel.end(-SIGSEGV)
        return 0
    registers, cpsr = saved[3:19], saved[19]
    current = machine.context()
    d, fpscr = (vfp[2:34], vfp[34]) if vfp[:2] == (VFP_MAGIC, VFP_SIZE) else (current.d, current.fpscr)
    cpsr = current.cpsr & ~STATUS_USER_BITS | cpsr & STATUS_USER_BITS
    machine.resume(Context(tuple(registers), cpsr, tuple(d), fpscr))
    kernel.signals.blocked = mask & ~UNBLOCKABLE
    kernel.threads.current.restart_block = None  # restart_syscall now fails with EINTR, as after Linux's sigreturn
    return registers[0]
