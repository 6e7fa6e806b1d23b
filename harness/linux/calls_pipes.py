"""Pipes, poll and select (harness.linux.call_table). A pipe is a buffer the
program both fills and drains (harness.linux.calls_io reads and writes
it, PIPE_CAPACITY bytes at most). poll and select report what is ready
by `readiness`; with nothing ready they wait (harness.linux.threads.Blocked)
until a file is ready or their timeout ends on the emulated clock (a
timeout of 0: at once), then report as Linux: poll's revents (0 at the
timeout), select's sets (cleared at the timeout), and for ppoll, select
and pselect6 the time left written back to the timeout (`Timeout.left`).
A signal ends the wait: poll with ERESTART_RESTARTBLOCK (EINTR where a
handler runs, else it goes on to the same deadline), ppoll, select and
pselect6 with ERESTARTNOHAND (EINTR, else run again with the time left)."""

from __future__ import annotations

import errno
import stat
import struct
from dataclasses import dataclass, replace

from harness.emulation.machine import BadAddress
from harness.linux.call_table import handles, signed
from harness.linux.calls_io import PIPE_CAPACITY, has_writer, named_fds
from harness.linux.files import MAX_FDS, GuestError, Node, OpenFile
from harness.linux.signals import ERESTART_RESTARTBLOCK, ERESTARTNOHAND, wait_mask
from harness.linux.threads import Blocked, Wait

POLLIN, POLLOUT, POLLERR, POLLHUP, POLLNVAL = 0x1, 0x4, 0x8, 0x10, 0x20
O_NONBLOCK, O_CLOEXEC, O_DIRECT = 0o4000, 0o2000000, 0o200000  # ARM's values
MAX_POLLED = 1024
NSEC = 1_000_000_000
TIMEVAL, TIMESPEC, TIMESPEC64 = "timeval", "timespec", "timespec64"  # a timeout's layouts
READ = {TIMEVAL: "<ii", TIMESPEC: "<ii", TIMESPEC64: "<qi4x"}  # (seconds, µs or ns) as Linux reads them
WRITTEN = {TIMEVAL: "<ii", TIMESPEC: "<ii", TIMESPEC64: "<qq"}  # the time left, as written back


@handles(359, "pipe2")
def sys_pipe2(kernel, fds, flags):
    if flags & ~(O_NONBLOCK | O_CLOEXEC | O_DIRECT):
        raise GuestError(errno.EINVAL)
    kernel.machine.read(fds, 8)  # EFAULT before any descriptor is taken
    pipe = Node(stat.S_IFIFO | 0o600, inode=len(kernel.fds) + 1000)
    status = flags & O_NONBLOCK
    ends = (kernel.new_fd(OpenFile(pipe, "pipe:", readable=True, writable=False, flags=status)),)
    try:
        ends += (kernel.new_fd(OpenFile(pipe, "pipe:", readable=False, writable=True, flags=status | 1)),)
    except GuestError:
        del kernel.fds[ends[0]]
        raise
    kernel.machine.write(fds, struct.pack("<ii", *ends))
    return 0


def _ready(kernel, fd: int, events: int) -> int:
    opened = kernel.fds.get(fd)
    return POLLNVAL if opened is None else readiness(kernel, opened, events)


def readiness(kernel, opened: OpenFile, events: int) -> int:
    """What poll says of an open file asked for `events`: files, stdin and
    devices that do not say otherwise never block; a pipe is readable when
    it holds bytes, writable while it has room (stdout and stderr always);
    a pipe's read end whose writers are all closed is hung up (POLLHUP,
    reported whatever was asked, as a device's `hangup` events: a
    socket's)."""
    node, ready = opened.node, 0
    if node.device is not None:
        can_read, can_write = node.device.ready()
        ready = node.device.hangup() & (events | POLLHUP | POLLERR)
    elif stat.S_ISFIFO(node.mode) and node not in (kernel.stdout, kernel.stderr):
        can_read, can_write = bool(node.data), len(node.data) < PIPE_CAPACITY
    else:
        can_read = can_write = True
    if events & POLLIN and opened.readable and can_read:
        ready |= POLLIN
    if events & POLLOUT and opened.writable and can_write:
        ready |= POLLOUT
    if stat.S_ISFIFO(node.mode) and opened.readable and not node.data and not has_writer(kernel, node):
        ready |= POLLHUP
    return ready


@dataclass(frozen=True)
class Timeout:
    """A wait's end: its deadline on the emulated clock (None: none), and
    where the time left is written back (0: nowhere), in which layout."""

    deadline: int | None = None
    address: int = 0
    layout: str = TIMESPEC

    def over(self, kernel) -> bool:
        return self.deadline is not None and self.deadline <= kernel.now_ns()

    def left(self, kernel) -> bool:
        """Write back the time left (poll_select_finish); whether it could be."""
        if not self.address:
            return True
        seconds, nanoseconds = divmod(max(0, self.deadline - kernel.now_ns()), NSEC)
        try:
            kernel.machine.write(self.address, struct.pack(WRITTEN[self.layout], seconds,
                                                           nanoseconds // 1000 if self.layout == TIMEVAL else nanoseconds))
        except BadAddress:
            return False
        return True


def read_timeout(kernel, address: int, layout: str, written: bool = False) -> Timeout:
    """The timeout at `address` (0: none, a wait until ready), from now;
    EINVAL where Linux finds it invalid (a timeval's microseconds past a
    second carry into its seconds, as kern_select). Its time left is
    written back where `written`, unless it is zero."""
    if not address:
        return Timeout()
    seconds, fraction = struct.unpack(READ[layout], kernel.machine.read(address, struct.calcsize(READ[layout])))
    if layout == TIMEVAL:
        carried = abs(fraction) // 1_000_000 * (1 if fraction >= 0 else -1)  # C's division, toward zero
        seconds, fraction = seconds + carried, (fraction - carried * 1_000_000) * 1000
    if seconds < 0 or not 0 <= fraction < NSEC:
        raise GuestError(errno.EINVAL)
    span = seconds * NSEC + fraction
    return Timeout(kernel.now_ns() + span, address if written and span else 0, layout)


def _answers(kernel, entries: list[tuple[int, int]]) -> list[int]:
    return [0 if signed(fd & 0xFFFFFFFF) < 0 else _ready(kernel, fd, events) for fd, events in entries]


def _poll(kernel, address: int, count: int, timeout: Timeout, restart: int) -> int:
    if count > MAX_POLLED:
        raise GuestError(errno.EINVAL)
    entries = [struct.unpack_from("<ihh", kernel.machine.read(address + 8 * i, 8))[:2] for i in range(count)]
    return _polled(kernel, address, entries, timeout, restart)


def _polled(kernel, address: int, entries: list[tuple[int, int]], timeout: Timeout, restart: int) -> int:
    """poll over the entries read from `address`: the count of those
    ready, each one's revents written back; with none, a wait (its call
    goes on here once ready, or at the deadline)."""
    answers = _answers(kernel, entries)
    for index, ((fd, events), answer) in enumerate(zip(entries, answers)):
        kernel.machine.write(address + 8 * index, struct.pack("<ihh", fd, events, answer))
    ready = sum(1 for answer in answers if answer)
    thread = kernel.threads.current

    def interrupted() -> int:
        if restart == ERESTART_RESTARTBLOCK:  # poll: restart_syscall polls again to the same deadline
            thread.restart_block = lambda: _poll(kernel, address, len(entries), replace(timeout, address=0), restart)
            return -restart
        return -restart if timeout.left(kernel) else -errno.EINTR

    if not ready and thread.signals.deliverable():  # one its mask lets through is pending (do_poll)
        thread.interrupted = True
        return interrupted()
    if ready or timeout.over(kernel):
        timeout.left(kernel)
        return ready
    raise Blocked(Wait(files=f"poll on {named_fds([fd for fd, _ in entries])} with nothing ready",
                       deadline_ns=timeout.deadline,
                       ready=lambda: any(_answers(kernel, entries)),
                       again=lambda: _polled(kernel, address, entries, timeout, restart), interrupted=interrupted))


@handles(168, "poll")
def sys_poll(kernel, address, count, timeout):
    milliseconds = signed(timeout)
    deadline = None if milliseconds < 0 else kernel.now_ns() + milliseconds * 1_000_000
    return _poll(kernel, address, count, Timeout(deadline), ERESTART_RESTARTBLOCK)


@handles(414, "ppoll_time64")
def sys_ppoll_time64(kernel, address, count, timeout, mask, size):
    """poll with a timespec (the time left written back) and the signal mask it waits under."""
    ends = read_timeout(kernel, timeout, TIMESPEC64, written=True)
    wait_mask(kernel, mask, size)
    return _poll(kernel, address, count, ends, ERESTARTNOHAND)


# ---- select


def _select(kernel, count: int, sets: tuple[int, int, int], timeout: Timeout) -> int:
    """select over the three fd_sets (read, write, except) of `count` bits:
    EBADF for a descriptor not open, each set rewritten with the ready ones."""
    count = signed(count)
    if count < 0:
        raise GuestError(errno.EINVAL)
    count = min(count, MAX_FDS)
    size = (count + 31) // 32 * 4
    wanted = [int.from_bytes(kernel.machine.read(address, size), "little") if address and size else 0
              for address in sets]
    if any(any(bits >> fd & 1 for bits in wanted) and fd not in kernel.fds for fd in range(count)):
        raise GuestError(errno.EBADF)
    return _selected(kernel, count, sets, wanted, timeout)


def _ready_sets(kernel, count: int, wanted: list[int]) -> tuple[list[int], int]:
    """The ready descriptors of each set, and how many in all (a
    descriptor closed meanwhile is not ready)."""
    ready_sets, total = [0, 0, 0], 0
    for fd in range(count):
        opened = kernel.fds.get(fd)
        if opened is None or not any(bits >> fd & 1 for bits in wanted):
            continue
        answer = readiness(kernel, opened, POLLIN | POLLOUT)
        for which, mask in ((0, POLLIN | POLLHUP | POLLERR), (1, POLLOUT | POLLERR)):  # no file has POLLPRI
            if wanted[which] >> fd & 1 and answer & mask:
                ready_sets[which] |= 1 << fd
                total += 1
    return ready_sets, total


def _selected(kernel, count: int, sets: tuple[int, int, int], wanted: list[int], timeout: Timeout) -> int:
    """The sets written back with what is ready, and the time left; with
    nothing ready, a wait (its call goes on here)."""
    ready_sets, total = _ready_sets(kernel, count, wanted)
    thread = kernel.threads.current
    if not total and thread.signals.deliverable():  # one its mask lets through is pending (core_sys_select)
        thread.interrupted = True
        return -ERESTARTNOHAND if timeout.left(kernel) else -errno.EINTR
    if not total and not timeout.over(kernel):
        asked = [fd for fd in range(count) if any(bits >> fd & 1 for bits in wanted)]
        raise Blocked(Wait(files=f"select on {named_fds(asked)} with nothing ready", deadline_ns=timeout.deadline,
                           ready=lambda: _ready_sets(kernel, count, wanted)[1] > 0,
                           again=lambda: _selected(kernel, count, sets, wanted, timeout),
                           interrupted=lambda: -ERESTARTNOHAND if timeout.left(kernel) else -errno.EINTR))
    size = (count + 31) // 32 * 4
    for address, bits in zip(sets, ready_sets):
        if address and size:
            kernel.machine.write(address, bits.to_bytes(size, "little"))
    timeout.left(kernel)
    return total


@handles(142, "_newselect")
def sys_newselect(kernel, count, reads, writes, errors, timeout):
    return _select(kernel, count, (reads, writes, errors), read_timeout(kernel, timeout, TIMEVAL, written=True))


@handles(335, "pselect6")
def sys_pselect6(kernel, count, reads, writes, errors, timeout, mask):
    return _pselect(kernel, count, (reads, writes, errors), read_timeout(kernel, timeout, TIMESPEC, written=True),
                    mask)


@handles(413, "pselect6_time64")
def sys_pselect6_time64(kernel, count, reads, writes, errors, timeout, mask):
    return _pselect(kernel, count, (reads, writes, errors), read_timeout(kernel, timeout, TIMESPEC64, written=True),
                    mask)


def _pselect(kernel, count: int, sets: tuple[int, int, int], timeout: Timeout, packed: int) -> int:
    """select under the signal mask that `packed` points at with its size
    (struct { sigset_t *, size_t }: the sixth argument has no room for two)."""
    if packed:
        address, size = struct.unpack("<II", kernel.machine.read(packed, 8))
        wait_mask(kernel, address, size)
    return _select(kernel, count, sets, timeout)
