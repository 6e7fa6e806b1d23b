"""Pipes and poll (harness.linux.table). A pipe is a buffer the program
both fills and drains (harness.linux.calls_files reads and writes it,
PIPE_CAPACITY bytes at most); a poll that finds nothing ready would block,
which only futex waits and sleeps do here, so it ends the run as a fault
instead (harness.linux.threads.file_wait)."""

from __future__ import annotations

import errno
import stat
import struct

from harness.linux.calls_io import PIPE_CAPACITY, has_writer
from harness.linux.files import GuestError, Node, OpenFile
from harness.linux.table import handles, signed
from harness.linux.threads import file_wait

POLLIN, POLLOUT, POLLHUP, POLLNVAL = 0x1, 0x4, 0x10, 0x20
O_NONBLOCK, O_CLOEXEC, O_DIRECT = 0o4000, 0o2000000, 0o200000  # ARM's values
MAX_POLLED = 1024


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
    reported whatever was asked)."""
    node, ready = opened.node, 0
    if node.device is not None:
        can_read, can_write = node.device.ready()
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


def _poll(kernel, address: int, count: int, waits: bool) -> int:
    if count > MAX_POLLED:
        raise GuestError(errno.EINVAL)
    entries = [struct.unpack_from("<ihh", kernel.machine.read(address + 8 * i, 8)) for i in range(count)]
    answers = [0 if signed(fd & 0xFFFFFFFF) < 0 else _ready(kernel, fd, events) for fd, events, _ in entries]
    for index, ((fd, events, _), answer) in enumerate(zip(entries, answers)):
        kernel.machine.write(address + 8 * index, struct.pack("<ihh", fd, events, answer))
    ready = sum(1 for answer in answers if answer)
    if not ready and waits:
        raise file_wait(kernel, f"poll on {count} descriptors with nothing ready")
    return ready


@handles(168, "poll")
def sys_poll(kernel, address, count, timeout):
    return _poll(kernel, address, count, waits=signed(timeout) != 0)


@handles(414, "ppoll_time64")
def sys_ppoll_time64(kernel, address, count, timeout, mask, size):
    waits = not timeout or any(kernel.machine.read(timeout, 16))  # no timeout, or a nonzero one
    return _poll(kernel, address, count, waits)
