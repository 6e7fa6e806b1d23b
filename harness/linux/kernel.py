"""One emulated Linux process: its open files, address space, break,
captured output, clock and exit status, and the dispatch of its system
calls (the handlers are in calls_files, calls_memory and calls_process).

Everything the program can observe is fixed by its inputs: the clock
starts at FIXED_TIME and advances with the instructions run (now_ns),
random bytes come from a hash of a fixed seed and the count of calls, pids and ids
are constants. The same program and inputs give the same run.
"""

from __future__ import annotations

import errno
import hashlib
import stat
import weakref
from functools import partial
from typing import Callable

from harness.emulation.machine import BadAddress, Machine, Switch
from harness.linux import (  # noqa: F401  (they register the handlers)
    calls_events,
    calls_fcntl,
    calls_files,
    calls_fs,
    calls_io,
    calls_madvise,
    calls_memory,
    calls_messages,
    calls_pipes,
    calls_prctl,
    calls_process,
    calls_sigwait,
    calls_sockets,
    calls_tasks,
    calls_threads,
    calls_timers,
    calls_xattr,
    timers,
)
from harness.linux.call_names import NAMES
from harness.linux.call_table import CALLS, SystemCallFault
from harness.linux.calls_prctl import Settings
from harness.linux.calls_process import PID
from harness.linux.files import MAX_FDS, WORKDIR, GuestError, GuestFiles, Node, OpenFile, as_bytes, inode_of
from harness.linux.maps import Vmas
from harness.linux.memory import AddressSpace
from harness.linux.posix_timers import CpuTimes
from harness.linux.shared_maps import SharedMaps
from harness.linux.signals import Signals
from harness.linux.special_files import DEV_MODE, Image, Null, SpecialFiles
from harness.linux.threads import Alarm, Blocked, Thread, Threads
from harness.linux.user_memory import UserMemory

FIXED_TIME = 1_700_000_000  # seconds since the epoch the clock starts at (2023-11-14)
NS_PER_INSTRUCTION = 1
SI_KERNEL = 0x80  # si_code of a signal the kernel sends (an interval timer's)
OUTPUT_CAP = 64 << 20  # bytes a program may write to stdout or stderr


def _stream(mode: int, name: str, data: bytes = b"") -> Node:
    return Node(mode, bytearray(data), inode=inode_of(name))


class LinuxKernel:
    """The state of one process, and `system_call` to run one call."""

    def __init__(self, machine: Machine, files: GuestFiles, space: AddressSpace, brk: int,
                 stdin: bytes | None, executable: str, image: Image = Image()):
        self.vmas = Vmas()  # the mappings as the program asked for them (/proc/self/maps)
        self.machine = UserMemory(machine, self.vmas)  # system calls reach memory as the protections let them
        self.files = files
        self.space = space
        self.brk_start = self.brk = brk
        self.executable = executable  # the guest path /proc/self/exe names
        self.image = image  # what exec left that /proc shows
        for vma in image.vmas:
            self.vmas.set(vma)
        # The task's name (comm): its file's name, 15 bytes at most, until prctl(PR_SET_NAME)
        self.comm = as_bytes(executable.rsplit("/", 1)[-1])[:15].decode("utf-8", "surrogateescape")
        self.settings = Settings()  # what it set about itself (prctl, personality)
        self.cwd = WORKDIR
        # A proxy: the files would otherwise hold the kernel that holds them,
        # a cycle that outlives the run while the collector is paused.
        files.special = SpecialFiles(weakref.proxy(self)).lookup
        if stdin is None:  # no input given: stdin is /dev/null, as under a daemon or `< /dev/null`
            stdin_file = OpenFile(Node(DEV_MODE, inode=inode_of("/dev/null"), device=Null()), "/dev/null")
        else:
            stdin_file = OpenFile(_stream(stat.S_IFREG | 0o644, "/dev/stdin", stdin), "/dev/stdin")
        self.stdout = _stream(stat.S_IFIFO | 0o600, "/dev/stdout")
        self.stderr = _stream(stat.S_IFIFO | 0o600, "/dev/stderr")
        self.fds: dict[int, OpenFile] = {
            0: stdin_file,
            1: OpenFile(self.stdout, "/dev/stdout", readable=False, writable=True, flags=1),
            2: OpenFile(self.stderr, "/dev/stderr", readable=False, writable=True, flags=1),
        }
        self.exit_status: int | None = None  # set by exit, exit_group or a fatal signal
        self.slept_ns = 0  # how far nanosleep and the like moved the clock on
        self._random_blocks = 0
        self.threads = Threads(Thread(PID, 0, Signals()))  # stack top 0: the initial stack
        self.timers = timers.Timers()
        self.cpu_times = CpuTimes()
        self.pid = PID
        self.calls: dict[str, int] = {}  # name -> times called, for the report
        # (start, end, guest path, file offset) of every file mapping: where ld.so put the libraries
        self.file_mappings: list[tuple[int, int, str, int]] = []
        self.shared_maps = SharedMaps()  # the MAP_SHARED ones: a fault where they would differ from the file
        # each distinct file mapped (exec's, the program's own mmaps) and its size, and their sum:
        # what the default memory limit allows for (harness.emulation.guards.memory_ceiling)
        self.mapped_files: dict[str, int] = {}
        self.mapped_file_bytes = 0

    def note_mapped(self, path: str, size: int) -> None:
        if path not in self.mapped_files:
            self.mapped_files[path] = size
            self.mapped_file_bytes += size

    def system_call(self, number: int, args: tuple[int, ...], pc: int) -> int:
        """Run call `number` with r0-r5 = args; the value for r0. Raises
        SystemCallFault for a call the harness does not emulate."""
        handler = CALLS.get(number)
        if handler is None:
            name = NAMES.get(number)  # a call Linux has that the harness does not emulate, named
            which = f"{name} ({number}, {number:#x})" if name else f"{number} ({number:#x})"
            raise SystemCallFault(f"unknown system call {which} at pc {pc:#x}")
        self.calls[handler.name] = self.calls.get(handler.name, 0) + 1
        self.threads.current.orig_r0 = args[0]
        arguments = args[: handler.arity]
        return self._attempt(lambda: handler.run(self, *arguments)) & 0xFFFFFFFF

    def _attempt(self, run: Callable[[], int]) -> int:
        """`run` a call, or a waiting call's going on: its result (a negative
        errno for a GuestError). Where it must wait on files (Blocked), the
        thread waits, to go on with `Wait.again` (else `run` again) once
        they are ready or at the wait's deadline, under the signal mask the
        call asked for (signals.wait_mask), the thread's own back once the
        call is over or a signal's delivery ends it."""
        try:
            result = run()
        except Blocked as blocked:
            wait = blocked.wait
            again = wait.again or run
            wait.again = lambda: self._attempt(again)
            self.threads.block(wait)
            return 0
        except GuestError as error:
            result = -error.code
        except BadAddress:
            result = -errno.EFAULT
        if not self.threads.current.interrupted:  # the call is over: a mask it ran under goes (wait_mask)
            self.signals.restore_mask()
        return result

    def reschedule(self) -> Switch | None:
        """After a system call: the thread that runs next, where it is
        another (harness.linux.threads)."""
        threads = self.threads
        if len(threads.all) == 1 and threads.current.wait is None:  # most processes, at most calls
            threads.yielded = False
            return None
        return self._switched(threads.reschedule(self.machine, self.machine.instructions(), self.now_ns,
                                                 self._sleep, Alarm(partial(self.timers.real_due, self), self._ring)))

    def _sleep(self, nanoseconds: int) -> None:
        self.slept_ns += nanoseconds

    def _switched(self, switch: Switch | None) -> Switch | None:
        """The thread that left the processor is charged its instructions (its CPU time)."""
        if switch is not None:
            self.cpu_times.switched(switch.left, self.machine.instructions())
        return switch

    def _ring(self) -> None:
        """Every thread waits and the alarm's time came: the timers expire.
        Where that woke no thread and no wait has a deadline, the clock goes
        on to the next POSIX timer's due time (a signal another thread blocks
        wakes none, a later timer's may), once for each at most: a timer
        whose signal waits is not due again."""
        self.expire_timers()
        threads = self.threads
        for _ in range(len(self.timers.posix.by_id)):
            if any(thread.wait is None and not thread.exited for thread in threads.all) \
                    or any(thread.wait.deadline_ns is not None for thread in threads.waiting):
                return
            due = self.timers.posix.real_due(self)
            if due is None:
                return
            self._sleep(max(0, due - self.now_ns()))
            self.expire_timers()

    def deadline(self) -> int | None:
        """The instruction count at which a timer expires or, with another
        thread ready, the running thread's time slice ends."""
        counts = [self.timers.next_instruction(self), self.threads.slice_end()]
        return min((count for count in counts if count is not None), default=None)

    def preempt(self) -> Switch | None:
        """The time slice is over where another thread is ready: it runs."""
        threads = self.threads
        if threads.slice_end() is None or self.machine.instructions() < threads.slice_end():
            return None
        return self._switched(threads.reschedule(self.machine, self.machine.instructions(), self.now_ns,
                                                 self._sleep))

    def expire_timers(self) -> bool:
        """The timers whose time has come send their signals (harness.linux.timers)."""
        return self.timers.expire(self, lambda signal: self.signal_process(signal, SI_KERNEL))

    def signal_process(self, signal: int, code: int, timer=None) -> None:
        """`signal` sent to the process: the thread that takes it is the
        running one where it does not block it, else the first that does
        not or that waits for it in rt_sigtimedwait (else the running one).
        It is dropped as it is sent where the process ignores it and the
        thread group's leader does not block it (sig_ignored, asked of the
        task the pid names). `timer`: the POSIX timer whose signal it is."""
        threads = self.threads
        if threads.all[0].signals.ignores(signal):
            return
        takers = [threads.current] + [thread for thread in threads.live() if thread is not threads.current]
        bit = 1 << (signal - 1)
        taker = next((thread for thread in takers
                      if not thread.signals.blocked & bit or calls_sigwait.waits_for(thread, signal)), threads.current)
        self._queue(taker, signal, code, timer)

    def signal_thread(self, thread: Thread, signal: int, code: int, timer=None) -> None:
        """`signal` sent to `thread` (tgkill, SIGPIPE, a SIGEV_THREAD_ID
        timer's): dropped as it is sent where the process ignores it and the
        thread does not block it (sig_ignored): it ends no wait."""
        if not thread.signals.ignores(signal):
            self._queue(thread, signal, code, timer)

    def _queue(self, thread: Thread, signal: int, code: int, timer) -> None:
        """`signal` pending on `thread`: taken at once where it waits for it
        in rt_sigtimedwait, else its wait ends where it does not block it
        (threads.interrupt: the call returns its restart code)."""
        thread.signals.send(signal, code, timer)
        if calls_sigwait.takes(self, thread, signal):
            return
        if not thread.signals.blocked >> (signal - 1) & 1:
            self.threads.interrupt(thread)

    # ---- shared by the handlers

    @property
    def signals(self) -> Signals:
        """The running thread's signal state (the actions are the process's)."""
        return self.threads.current.signals

    def file(self, fd: int) -> OpenFile:
        found = self.fds.get(fd)
        if found is None:
            raise GuestError(errno.EBADF)
        return found

    def new_fd(self, opened: OpenFile, lowest: int = 0) -> int:
        fd = lowest
        while fd in self.fds:
            fd += 1
        if fd >= MAX_FDS:
            raise GuestError(errno.EMFILE)
        self.fds[fd] = opened
        return fd

    def close_fd(self, fd: int) -> None:
        """close(fd): EBADF where it is not open."""
        self.dropped(self.fds.pop(fd) if fd in self.fds else self.file(fd))

    def dropped(self, opened: OpenFile) -> None:
        """`opened` lost a descriptor or left a message: where no descriptor
        holds it any more, its device is told (a socket may be released)."""
        device = opened.node.device
        if device is not None and not any(held is opened for held in self.fds.values()):
            device.release(self)

    def output(self, node: Node, data: bytes) -> None:
        if len(node.data) + len(data) > OUTPUT_CAP:
            raise SystemCallFault(f"the program wrote more than {OUTPUT_CAP >> 20} MiB to stdout or stderr")
        node.data += data

    def cpu_ns(self) -> int:
        """The process's CPU time: its instructions (no time in the kernel counts)."""
        return self.machine.instructions() * NS_PER_INSTRUCTION

    def thread_cpu_ns(self, thread: Thread) -> int:
        """`thread`'s CPU time: the instructions it ran."""
        return self.cpu_times.of(thread, self.threads.current, self.machine.instructions()) * NS_PER_INSTRUCTION

    def now_ns(self) -> int:
        """The clock: FIXED_TIME, plus a nanosecond an instruction the process
        has run (a 1 GHz core retiring one a cycle: the same every run, and
        moving in a loop that makes no system call, as on a device), plus
        what it slept."""
        return FIXED_TIME * 1_000_000_000 + self.machine.instructions() * NS_PER_INSTRUCTION + self.slept_ns

    @property
    def ticks(self) -> int:
        """The process's CPU time in clock ticks (USER_HZ, 100 a second): all
        of its time but what it slept."""
        return self.machine.instructions() * NS_PER_INSTRUCTION // 10_000_000

    def random_bytes(self, count: int) -> bytes:
        """The next `count` bytes of the run's random stream: each call's from
        one extendable-output hash of a fixed seed and the call's number (a
        hash per 32 bytes took 49 ms a mebibyte)."""
        self._random_blocks += 1
        return hashlib.shake_256(b"unwind-harness %d" % self._random_blocks).digest(count)

    def end(self, status: int) -> None:
        """The process ends with `status` (negative: killed by that signal)."""
        self.exit_status = status
        self.machine.stop()
