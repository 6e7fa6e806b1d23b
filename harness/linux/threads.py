"""The threads of one process, and the one scheduler that runs them all on
the one engine, deterministically.

A thread runs until it blocks (a futex wait, a sleep, a wait on files,
a wait for a signal in rt_sigtimedwait), exits, yields, or has had QUANTUM
instructions since it got the processor while another is ready: the hook
that follows the run stops before the instruction at which its time slice
ends (the kernel's deadline), as a timer interrupt would. The next ready
thread in creation order after it then runs: the whole user context (core
and VFP registers, TLS) of the thread leaving is kept, the next one's
restored. Every decision depends on the instructions run and the calls
made, both the same in every run of the program, so a run repeats byte
for byte. When no thread is ready, the clock jumps to the earliest
deadline of one that waits, or of the process's alarm or a POSIX timer
whose signal wakes a thread (`Alarm`); with none, every thread waits on
another: the run ends as a deadlock, each wait named.

A wait on files (a pipe, an eventfd, poll, select, epoll) keeps what would
make them ready (`Wait.ready`), asked at every reschedule: once it holds,
or at the wait's deadline, the thread is ready again, and when it next gets
the processor its call goes on (`Wait.again`, run as that thread, in the
kernel): it finds its files ready and completes, finds them taken by a
thread that ran first and waits again, or returns what its timeout
returns. A signal ends a wait as Linux's does: the call returns one of the
kernel's restart codes (`Wait.restart`), which the delivery turns into
EINTR or into the call run again (harness.linux.signals.deliver_pending);
rt_sigtimedwait returns EINTR itself, as do_sigtimedwait does
(harness.linux.calls_sigwait.SignalWait).
"""

from __future__ import annotations

import errno
from dataclasses import dataclass, field, replace
from typing import Callable, NamedTuple

from harness.emulation.machine import Context, Machine, Switch
from harness.linux.call_table import SystemCallFault
from harness.linux.signals import ERESTARTSYS, Signals

QUANTUM = 1 << 20  # instructions (about a millisecond on the emulated clock: a time slice)
MAX_THREADS = 1024  # live at once, then clone fails with EAGAIN (as past RLIMIT_NPROC)
FUTEX_BITSET_ANY = 0xFFFFFFFF


@dataclass
class Wait:
    """Why a thread does not run: a futex word (with the bits a wake must
    share), files (`files` names them, `ready` says when they are), a
    sleep (neither), or signals (calls_sigwait.SignalWait); until
    `deadline_ns` on the emulated clock (None: until woken). A signal ends
    it: its call returns -`restart`, or what `interrupted` returns (a sleep
    writes the time left first)."""

    futex: int | None = None
    bitset: int = FUTEX_BITSET_ANY
    deadline_ns: int | None = None
    restart: int = ERESTARTSYS
    files: str = ""
    ready: Callable[[], bool] | None = None
    again: Callable[[], int] | None = None  # the call going on once ready or at its deadline: its result
    interrupted: Callable[[], int] | None = None
    pi: bool = False  # a wait to lock a priority-inheritance futex (harness.linux.pi_futex): no FUTEX_WAKE ends it

    def timed_out(self) -> int:
        """The call's result where its deadline comes first: a sleep's 0, a
        futex wait's ETIMEDOUT (a call on files goes on instead: `again`)."""
        return 0 if self.futex is None else -errno.ETIMEDOUT

    def named(self) -> str:
        """The wait, as a deadlock's fault names it."""
        return f"on the futex at {self.futex:#x}" if self.futex is not None else f"on {self.files}"


class Blocked(Exception):
    """Raised by a call that must wait on files: the kernel blocks the
    thread on `wait`; without `wait.again`, the call runs again as it was
    made once the files are ready (harness.linux.kernel)."""

    def __init__(self, wait: Wait):
        super().__init__(wait.files)
        self.wait = wait


@dataclass(eq=False)
class Thread:
    tid: int
    stack_top: int  # the top of its own stack (a clone's child stack); 0: the process's initial stack
    signals: Signals  # its mask, pending signals and alternate stack; the actions are the process's
    context: Context | None = None  # its registers while another runs
    tls: int = 0  # TPIDRURO
    clear_child_tid: int = 0  # zeroed and woken at its exit (CLONE_CHILD_CLEARTID, set_tid_address)
    wait: Wait | None = None
    exited: bool = False
    orig_r0: int = 0  # r0 as its last call was made (ARM_ORIG_r0): what a restart gives the call again
    interrupted: bool = False  # a signal ended its wait: the delivery restarts its call or makes it fail
    again: Callable[[], int] | None = None  # its call, to go on when it next runs (Wait.again)
    restart_block: Callable[[], int] | None = None  # what restart_syscall goes on with (a sleep's rest)
    nice: int = 0  # its nice value (setpriority), a creator's passed on to the threads it makes


class Alarm(NamedTuple):
    """The timers that can end a wait of the whole process (ITIMER_REAL, POSIX timers on the emulated clock)."""

    due: Callable[[], int | None]  # its due time on the emulated clock (None: not armed)
    ring: Callable[[], object]  # it expires: its signal is sent


@dataclass
class Threads:
    """The process's threads, in creation order, and which one runs."""

    current: Thread
    all: list[Thread] = field(default_factory=list)
    waiting: list[Thread] = field(default_factory=list)  # blocked threads, in the order they began to wait
    scheduled_at: int = 0  # the instruction count when the current thread got the processor
    yielded: bool = False

    def __post_init__(self):
        self.all.append(self.current)

    def live(self) -> list[Thread]:
        return [thread for thread in self.all if not thread.exited]

    def find(self, tid: int) -> Thread | None:
        return next((thread for thread in self.all if thread.tid == tid and not thread.exited), None)

    def spawn(self, context: Context, stack_top: int, tls: int, clear_child_tid: int) -> Thread:
        """A new thread, ready, that starts from `context` with the
        creator's signal mask and actions."""
        parent = self.current.signals
        thread = Thread(self.all[-1].tid + 1, stack_top, Signals(actions=parent.actions, blocked=parent.blocked),
                        context, tls, clear_child_tid)
        thread.nice = self.current.nice
        self.all.append(thread)
        return thread

    def slice_end(self) -> int | None:
        """The instruction count at which the running thread's time slice
        ends, where another thread is ready to take the processor."""
        others = any(thread is not self.current and not thread.exited and thread.wait is None for thread in self.all)
        return self.scheduled_at + QUANTUM if others else None

    def block(self, wait: Wait) -> None:
        """The current thread waits (its call's result is set when it wakes)."""
        self.current.wait = wait
        self.waiting.append(self.current)

    def wake(self, thread: Thread, result: int) -> None:
        """A waiting thread is ready again; its call returns `result`."""
        thread.wait = None
        self.waiting.remove(thread)
        _set_r0(thread, result)

    def wake_futex(self, address: int, count: int, bitset: int = FUTEX_BITSET_ANY) -> int:
        """Wake up to `count` threads waiting on the word at `address` whose
        bitset shares a bit with `bitset`, first come first woken; how many."""
        woken = 0
        for thread in list(self.waiting):
            if woken >= count:
                break
            if thread.wait.futex == address and thread.wait.bitset & bitset and not thread.wait.pi:
                self.wake(thread, 0)
                woken += 1
        return woken

    def requeue(self, address: int, target: int, count: int) -> int:
        """Move up to `count` threads waiting on `address` to wait on `target`; how many."""
        moved = 0
        for thread in self.waiting:
            if moved < count and thread.wait.futex == address and not thread.wait.pi:
                thread.wait.futex = target
                moved += 1
        return moved

    def interrupt(self, thread: Thread) -> None:
        """A signal for a waiting thread: its wait ends with its restart
        code (or what the wait's `interrupted` returns), which the signal's
        delivery, when the thread next runs, makes EINTR or a restart."""
        wait = thread.wait
        if wait is None:
            return
        self.wake(thread, wait.interrupted() if wait.interrupted is not None else -wait.restart)
        thread.interrupted = True

    def reschedule(self, machine: Machine, instructions: int, clock: Callable[[], int], sleep,
                   alarm: Alarm | None = None) -> Switch | None:
        """After a system call of the current thread: the thread to run next,
        switched to where it is another (None: the current one goes on).
        `clock()` is the emulated time; `sleep(ns)` moves it on while no
        thread is ready, to a wait's end or to `alarm`'s."""
        current = self.current
        if current.wait is not None:
            current.context = machine.context()  # kept at once: a wake sets its r0
            if current.signals.deliverable():  # a signal came during the call: the wait ends at once
                self.interrupt(current)
        self._end_waits(clock())
        must = current.exited or current.wait is not None
        if not must and not self.yielded and instructions - self.scheduled_at < QUANTUM:
            return None
        self.yielded = False
        self.scheduled_at = instructions
        chosen = self._choose(clock, sleep, alarm)
        if chosen is current:
            if current.context is not None:  # it waited, and its wait ended first: on, with its result
                machine.resume(current.context)
                current.context = None
            return None
        if not current.exited and current.context is None:
            current.context = machine.context()
        machine.resume(chosen.context)
        machine.set_tls(chosen.tls)
        chosen.context = None
        self.current = chosen
        return Switch(current.tid, chosen.tid, chosen.stack_top)

    def _choose(self, clock: Callable[[], int], sleep, alarm: Alarm | None) -> Thread:
        """The thread to run: the next ready one, or the one whose wait ends
        first; one whose call goes on (Wait.again) and waits again is passed over."""
        while True:
            chosen = self._next_ready() or self._earliest_deadline(clock, sleep, alarm)
            if chosen.again is None or self._go_on(chosen):
                return chosen

    def _go_on(self, thread: Thread) -> bool:
        """`thread`'s call goes on, run as that thread: whether it completed
        (its result in r0), else it waits again (interrupted at once where a
        signal for it came meanwhile)."""
        again, thread.again = thread.again, None
        running, self.current = self.current, thread
        try:
            result = again()
        finally:
            self.current = running
        if thread.wait is None:
            _set_r0(thread, result)
            return True
        if thread.signals.deliverable():
            self.interrupt(thread)
        return False

    def _next_ready(self) -> Thread | None:
        """The first ready thread after the current one, in creation order
        (the current one last)."""
        at = self.all.index(self.current)
        for thread in self.all[at + 1:] + self.all[: at + 1]:
            if not thread.exited and thread.wait is None:
                return thread
        return None

    def _end_waits(self, now_ns: int) -> None:
        """Waits whose deadline has come, or whose files are ready, end."""
        for thread in list(self.waiting):
            wait = thread.wait
            if (wait.deadline_ns is not None and wait.deadline_ns <= now_ns) or (wait.ready is not None
                                                                                 and wait.ready()):
                self._end(thread)

    def _end(self, thread: Thread) -> None:
        """`thread`'s wait is over without a wake: a sleep returns 0, a
        futex wait ETIMEDOUT, a signal wait EAGAIN (Wait.timed_out), a call
        on files goes on when the thread runs."""
        wait = thread.wait
        if wait.again is None:
            self.wake(thread, wait.timed_out())
            return
        thread.wait = None
        self.waiting.remove(thread)
        thread.again = wait.again

    def _earliest_deadline(self, clock: Callable[[], int], sleep, alarm: Alarm | None) -> Thread:
        """No thread is ready: the clock jumps to the first deadline, a
        wait's, whose thread wakes, or the alarm's, whose signal wakes the
        thread that takes it; with neither (or an alarm no thread takes),
        the run cannot go on."""
        while True:
            timed = [thread for thread in self.waiting if thread.wait.deadline_ns is not None]
            first = min(timed, key=lambda thread: thread.wait.deadline_ns, default=None)  # first waiter of a tie
            due = alarm.due() if alarm is not None else None
            if due is None or (first is not None and first.wait.deadline_ns <= due):
                break
            sleep(max(0, due - clock()))
            alarm.ring()
            woken = self._next_ready()
            if woken is not None:
                return woken
            if first is None:
                raise SystemCallFault("every thread waits, and the timer's signal wakes none: a deadlock")
        if first is None:
            raise self._deadlock()
        sleep(max(0, first.wait.deadline_ns - clock()))
        self._end(first)
        return first

    def _deadlock(self) -> SystemCallFault:
        """Every thread waits and none has a deadline: the fault names each wait."""
        live = self.live()
        if len(live) == 1 and live[0].wait.files:
            return SystemCallFault(f"{live[0].wait.files} with no other thread: it would wait forever")
        waits = ", ".join(f"thread {thread.tid} {thread.wait.named()}" for thread in self.waiting)
        return SystemCallFault(f"every thread waits and none has a deadline: a deadlock ({waits or 'none'})")


def _set_r0(thread: Thread, result: int) -> None:
    registers = list(thread.context.r)
    registers[0] = result & 0xFFFFFFFF
    thread.context = replace(thread.context, r=tuple(registers))
