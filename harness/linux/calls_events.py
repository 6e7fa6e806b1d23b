"""Waiting for events (harness.linux.call_table): eventfd, epoll, and the
event source a sandboxed kernel refuses (inotify). Whatever is
ready is ready by the rules poll follows (harness.linux.calls_pipes.readiness).
A read of an eventfd at 0 or a write that would pass its counter's
limit, and an epoll_wait with nothing ready, wait (harness.linux.threads.Blocked)
until another thread makes them ready or, for epoll_wait, until its
timeout ends on the emulated clock (then 0). A signal ends the wait:
eventfd's read and write with ERESTARTSYS (restarted under SA_RESTART),
epoll_wait with EINTR whatever the handler asks, as Linux's ep_poll.
"""

from __future__ import annotations

import errno
import stat
import struct

from harness.linux.call_table import SystemCallFault, handles, signed
from harness.linux.calls_io import fds_named
from harness.linux.calls_pipes import POLLHUP, TIMESPEC64, Timeout, read_timeout, readiness
from harness.linux.files import Device, GuestError, Node, OpenFile, inode_of
from harness.linux.signals import wait_mask
from harness.linux.threads import Blocked, Wait

O_RDWR, O_NONBLOCK, O_CLOEXEC = 2, 0o4000, 0o2000000  # ARM's values
EFD_SEMAPHORE = 1
COUNTER_MAX = (1 << 64) - 2  # the most an eventfd's counter holds
EPOLL_CTL_ADD, EPOLL_CTL_DEL, EPOLL_CTL_MOD = 1, 2, 3
EPOLLERR = 0x8
EPOLLEXCLUSIVE, EPOLLONESHOT, EPOLLET = 1 << 28, 1 << 30, 1 << 31
EPOLL_EVENT = struct.Struct("<I4xQ")  # struct epoll_event of ARM EABI: not packed, 16 bytes
ANON_MODE = 0o600  # an anonymous inode's mode: no file type


def _anonymous(kernel, kind: str, device: Device, flags: int) -> int:
    """A descriptor of an anonymous inode (anon_inode:[kind]), read and written through `device`."""
    node = Node(ANON_MODE, inode=inode_of("anon_inode"), device=device)
    return kernel.new_fd(OpenFile(node, f"anon_inode:[{kind}]", readable=True, writable=True,
                                  flags=O_RDWR | flags & O_NONBLOCK))


# ---- eventfd


class EventCounter(Device):
    """An eventfd: a 64-bit counter. A read takes it whole (one, with
    EFD_SEMAPHORE), a write adds to it; a read of 0 or a write that would
    pass COUNTER_MAX waits until another thread's write or read makes it
    possible (the call then runs again), or fails with EAGAIN under O_NONBLOCK."""

    def __init__(self, value: int, semaphore: bool):
        self.value, self.semaphore = value, semaphore
        self.opened: OpenFile | None = None  # the description, for O_NONBLOCK as F_SETFL leaves it

    def _wait(self, kernel, what: str, ready) -> None:
        if self.opened.flags & O_NONBLOCK:
            raise GuestError(errno.EAGAIN)
        raise Blocked(Wait(files=f"{what} ({fds_named(kernel, [self.opened])})", ready=ready))

    def read(self, kernel, count: int) -> bytes:
        if count < 8:
            raise GuestError(errno.EINVAL)
        if not self.value:
            self._wait(kernel, "read of an eventfd whose counter is 0", lambda: self.value > 0)
        taken = 1 if self.semaphore else self.value
        self.value -= taken
        return struct.pack("<Q", taken)

    def write(self, kernel, data: bytes) -> int:
        if len(data) < 8:
            raise GuestError(errno.EINVAL)
        added = struct.unpack_from("<Q", data)[0]
        if added > COUNTER_MAX:
            raise GuestError(errno.EINVAL)
        if self.value + added > COUNTER_MAX:
            self._wait(kernel, "write to an eventfd whose counter is full", lambda: self.value + added <= COUNTER_MAX)
        self.value += added
        return 8

    def ready(self) -> tuple[bool, bool]:
        return self.value > 0, self.value < COUNTER_MAX


def _eventfd(kernel, value: int, flags: int) -> int:
    if flags & ~(EFD_SEMAPHORE | O_NONBLOCK | O_CLOEXEC):
        raise GuestError(errno.EINVAL)
    counter = EventCounter(value, bool(flags & EFD_SEMAPHORE))
    fd = _anonymous(kernel, "eventfd", counter, flags)
    counter.opened = kernel.fds[fd]
    return fd


@handles(351, "eventfd")
def sys_eventfd(kernel, value):
    return _eventfd(kernel, value, 0)


@handles(356, "eventfd2")
def sys_eventfd2(kernel, value, flags):
    return _eventfd(kernel, value, flags)


# ---- epoll


class Interest:
    """One file in an epoll set: the events asked for and the data given back."""

    def __init__(self, opened: OpenFile, events: int, data: int):
        self.opened, self.events, self.data = opened, events, data


class Epoll(Device):
    """An epoll instance: the files it watches (fd -> Interest), in the
    order they were added (the order epoll_wait reports them in: Linux's
    ready list, for a set whose files are all ready from the start)."""

    def __init__(self):
        self.interests: dict[int, Interest] = {}


def _epoll(kernel, fd: int) -> Epoll:
    device = kernel.file(fd).node.device
    if not isinstance(device, Epoll):
        raise GuestError(errno.EINVAL)
    return device


@handles(250, "epoll_create")
def sys_epoll_create(kernel, size):
    if signed(size) <= 0:
        raise GuestError(errno.EINVAL)
    return _anonymous(kernel, "eventpoll", Epoll(), 0)


@handles(357, "epoll_create1")
def sys_epoll_create1(kernel, flags):
    if flags & ~O_CLOEXEC:
        raise GuestError(errno.EINVAL)
    return _anonymous(kernel, "eventpoll", Epoll(), 0)


@handles(251, "epoll_ctl")
def sys_epoll_ctl(kernel, epfd, operation, fd, event):
    """Checked in Linux's order: the event (EFAULT), both descriptors
    (EBADF), a file that cannot be waited for (EPERM: a regular file, a
    directory), the set itself (EINVAL), then the operation."""
    events = data = 0
    if operation != EPOLL_CTL_DEL:
        events, data = EPOLL_EVENT.unpack(kernel.machine.read(event, EPOLL_EVENT.size))
    opened, target = kernel.file(epfd), kernel.file(fd)
    node = target.node
    if node.device is None and not stat.S_ISFIFO(node.mode):
        raise GuestError(errno.EPERM)
    epoll = opened.node.device
    if target is opened or not isinstance(epoll, Epoll):
        raise GuestError(errno.EINVAL)
    if isinstance(node.device, Epoll):
        raise SystemCallFault("epoll_ctl of an epoll set inside another: nested sets are not emulated")
    if operation == EPOLL_CTL_MOD and events & EPOLLEXCLUSIVE:
        raise GuestError(errno.EINVAL)
    if events & EPOLLET:
        raise SystemCallFault("epoll_ctl with EPOLLET: edge-triggered events are not emulated")
    if operation not in (EPOLL_CTL_ADD, EPOLL_CTL_DEL, EPOLL_CTL_MOD):
        raise GuestError(errno.EINVAL)
    if (operation == EPOLL_CTL_ADD) == (fd in epoll.interests):
        raise GuestError(errno.EEXIST if operation == EPOLL_CTL_ADD else errno.ENOENT)
    if operation == EPOLL_CTL_DEL:
        del epoll.interests[fd]
    else:
        epoll.interests[fd] = Interest(target, events | EPOLLERR | POLLHUP, data)
    return 0


def _epoll_wait(kernel, epfd: int, address: int, most: int, timeout: Timeout) -> int:
    """What is ready of the set, up to `most` entries written at `address`."""
    epoll = _epoll(kernel, epfd)
    if signed(most) <= 0 or most > 0x7FFFFFFF // EPOLL_EVENT.size:
        raise GuestError(errno.EINVAL)
    kernel.machine.read(address, EPOLL_EVENT.size)  # EFAULT before anything is taken
    return _epoll_found(kernel, epoll, address, most, timeout)


def _ready_interests(kernel, epoll: Epoll) -> list[tuple[int, Interest]]:
    """(events ready, interest) of the set's files still open, in its order."""
    open_files = list(kernel.fds.values())
    found = []
    for interest in epoll.interests.values():
        if any(opened is interest.opened for opened in open_files):
            ready = readiness(kernel, interest.opened, interest.events) & interest.events
            if ready:
                found.append((ready, interest))
    return found


def _epoll_found(kernel, epoll: Epoll, address: int, most: int, timeout: Timeout) -> int:
    """The ready files written at `address`; with none, a wait (its call goes on here)."""
    open_files = list(kernel.fds.values())
    for fd, interest in list(epoll.interests.items()):
        if not any(opened is interest.opened for opened in open_files):
            del epoll.interests[fd]  # its file was closed: Linux drops it from the set
    found = _ready_interests(kernel, epoll)[:most]
    for index, (ready, interest) in enumerate(found):
        kernel.machine.write(address + EPOLL_EVENT.size * index, EPOLL_EVENT.pack(ready, interest.data))
        if interest.events & EPOLLONESHOT:
            interest.events = 0  # reported once: silent until EPOLL_CTL_MOD
    if not found and not timeout.over(kernel):
        watched = fds_named(kernel, [interest.opened for interest in epoll.interests.values()])
        raise Blocked(Wait(files=f"epoll_wait on {watched if epoll.interests else 'an empty set'} with nothing ready",
                           deadline_ns=timeout.deadline, ready=lambda: bool(_ready_interests(kernel, epoll)),
                           again=lambda: _epoll_found(kernel, epoll, address, most, timeout),
                           interrupted=lambda: -errno.EINTR))
    return len(found)


def _milliseconds(kernel, timeout: int) -> Timeout:
    milliseconds = signed(timeout)
    return Timeout(None if milliseconds < 0 else kernel.now_ns() + milliseconds * 1_000_000)


@handles(252, "epoll_wait")
def sys_epoll_wait(kernel, epfd, events, most, timeout):
    return _epoll_wait(kernel, epfd, events, most, _milliseconds(kernel, timeout))


@handles(346, "epoll_pwait")
def sys_epoll_pwait(kernel, epfd, events, most, timeout, mask, size):
    """epoll_wait under the signal mask at `mask` (signals.wait_mask)."""
    wait_mask(kernel, mask, size)
    return _epoll_wait(kernel, epfd, events, most, _milliseconds(kernel, timeout))


@handles(441, "epoll_pwait2")
def sys_epoll_pwait2(kernel, epfd, events, most, timeout, mask, size):
    ends = read_timeout(kernel, timeout, TIMESPEC64)
    wait_mask(kernel, mask, size)
    return _epoll_wait(kernel, epfd, events, most, ends)


# ---- file watches, which a sandbox refuses


def _inotify(flags: int) -> int:
    """No file watches: the sandbox allows none (fs.inotify.max_user_instances
    = 0), and Linux then says EMFILE; programs fall back to polling files."""
    if flags & ~(O_NONBLOCK | O_CLOEXEC):
        raise GuestError(errno.EINVAL)
    raise GuestError(errno.EMFILE)


@handles(316, "inotify_init")
def sys_inotify_init(kernel):
    return _inotify(0)


@handles(360, "inotify_init1")
def sys_inotify_init1(kernel, flags):
    return _inotify(flags)
