"""The threads of one process, and the one scheduler that runs them all on
the one engine, deterministically.

A thread runs until it blocks (a futex wait, a sleep), exits, yields, or
has had QUANTUM instructions since it got the processor while another is
ready: the hook that follows the run stops before the instruction at
which its time slice ends (the kernel's deadline), as a timer interrupt
would. The next ready thread in creation order after it then runs: the
whole user context (core and VFP registers, TLS) of the thread leaving is
kept, the next one's restored. Every decision depends on the instructions
run and the calls made, both the same in every run of the program, so a
run repeats byte for byte. When no thread is ready, the clock jumps to
the earliest deadline of one that waits (or of the process's alarm); with
none, every thread waits on another: the run ends as a deadlock, named.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass, field, replace
from typing import Callable, NamedTuple

from harness.linux.machine import Context, Machine
from harness.linux.signals import Signals
from harness.linux.table import SystemCallFault

QUANTUM = 1 << 20  # instructions (about a millisecond on the emulated clock: a time slice)
MAX_THREADS = 1024  # live at once, then clone fails with EAGAIN (as past RLIMIT_NPROC)
FUTEX_BITSET_ANY = 0xFFFFFFFF


@dataclass
class Wait:
    """Why a thread does not run: a futex word (with the bits a wake must
    share), or a sleep (futex None); until `deadline_ns` on the emulated
    clock (None: until woken)."""

    futex: int | None
    bitset: int = FUTEX_BITSET_ANY
    deadline_ns: int | None = None

    def timed_out(self) -> int:
        """The call's result where its deadline comes first: a sleep's 0, a futex wait's ETIMEDOUT."""
        return 0 if self.futex is None else -errno.ETIMEDOUT


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


def file_wait(kernel, what: str) -> SystemCallFault:
    """The fault for a call that would block on a file (a pipe, an eventfd,
    poll): only futex waits and sleeps block a thread here."""
    if len(kernel.threads.live()) == 1:
        return SystemCallFault(f"{what} with no other thread: it would wait forever")
    return SystemCallFault(f"{what}: it would wait for another thread, and a wait on files is not emulated "
                           "(only futex waits and sleeps block a thread)")


class Alarm(NamedTuple):
    """A timer that can end a wait of the whole process (ITIMER_REAL)."""

    due: Callable[[], int | None]  # its due time on the emulated clock (None: not armed)
    ring: Callable[[], object]  # it expires: its signal is sent


class Switch(NamedTuple):
    """The thread the processor went to at a system call, for the hook that
    follows the run (its shadow stack, its stack's bounds)."""

    left: int  # the tid of the thread that stopped running
    tid: int
    stack_top: int  # the top of the stack of the thread that runs now (0: the process's initial stack)


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
        registers = list(thread.context.r)
        registers[0] = result & 0xFFFFFFFF
        thread.context = replace(thread.context, r=tuple(registers))

    def wake_futex(self, address: int, count: int, bitset: int = FUTEX_BITSET_ANY) -> int:
        """Wake up to `count` threads waiting on the word at `address` whose
        bitset shares a bit with `bitset`, first come first woken; how many."""
        woken = 0
        for thread in list(self.waiting):
            if woken >= count:
                break
            if thread.wait.futex == address and thread.wait.bitset & bitset:
                self.wake(thread, 0)
                woken += 1
        return woken

    def requeue(self, address: int, target: int, count: int) -> int:
        """Move up to `count` threads waiting on `address` to wait on `target`; how many."""
        moved = 0
        for thread in self.waiting:
            if moved < count and thread.wait.futex == address:
                thread.wait.futex = target
                moved += 1
        return moved

    def interrupt(self, thread: Thread) -> None:
        """A signal for a waiting thread: its wait ends with EINTR, so that the handler runs."""
        if thread.wait is not None:
            self.wake(thread, -errno.EINTR)

    def reschedule(self, machine: Machine, instructions: int, now_ns: int, sleep,
                   alarm: Alarm | None = None) -> Switch | None:
        """After a system call of the current thread: the thread to run next,
        switched to where it is another (None: the current one goes on).
        `sleep(ns)` moves the clock on while no thread is ready, to a wait's
        end or to `alarm`'s."""
        current = self.current
        if current.wait is not None:
            current.context = machine.context()  # kept at once: a wake sets its r0
        self._time_out(now_ns)
        must = current.exited or current.wait is not None
        if not must and not self.yielded and instructions - self.scheduled_at < QUANTUM:
            return None
        self.yielded = False
        chosen = self._next_ready()
        if chosen is None and must:
            chosen = self._earliest_deadline(now_ns, sleep, alarm)
        self.scheduled_at = instructions
        if chosen is None:
            return None
        if chosen is current:
            if current.context is not None:  # it waited, and its deadline came first: on, with its result
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

    def _next_ready(self) -> Thread | None:
        """The first ready thread after the current one, in creation order
        (the current one last)."""
        at = self.all.index(self.current)
        for thread in self.all[at + 1:] + self.all[: at + 1]:
            if not thread.exited and thread.wait is None:
                return thread
        return None

    def _time_out(self, now_ns: int) -> None:
        for thread in list(self.waiting):
            deadline = thread.wait.deadline_ns
            if deadline is not None and deadline <= now_ns:
                self.wake(thread, thread.wait.timed_out())

    def _earliest_deadline(self, now_ns: int, sleep, alarm: Alarm | None) -> Thread:
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
            sleep(max(0, due - now_ns))
            now_ns = max(now_ns, due)
            alarm.ring()
            woken = self._next_ready()
            if woken is not None:
                return woken
            if first is None:
                raise SystemCallFault("every thread waits, and the timer's signal wakes none: a deadlock")
        if first is None:
            waits = ", ".join(f"thread {thread.tid} on the futex at {thread.wait.futex:#x}"
                              for thread in self.waiting if thread.wait.futex is not None)
            raise SystemCallFault(f"every thread waits and none has a deadline: a deadlock ({waits or 'none'})")
        sleep(max(0, first.wait.deadline_ns - now_ns))
        self.wake(first, first.wait.timed_out())
        return first
