"""System calls that move a file's bytes: read, write and their
positioned and vectored forms, and seeks (harness.linux.call_table). Regular
files hold their bytes in files.Contents; a pipe (or stdout, stderr) is a
buffer of at most PIPE_CAPACITY bytes; a device answers by itself.

A read of an empty pipe that has a writer, and a write to a pipe without
room, wait (harness.linux.threads.Blocked) until another thread makes
them possible, as Linux's pipe_read and pipe_write; a signal ends the
wait with ERESTARTSYS (restarted under SA_RESTART), or, where a write
moved some bytes already, with their count.

One call moves MAX_TRANSFER bytes at most, all its buffers together (a
short count, as Linux past MAX_RW_COUNT): a guest asking for gigabytes
gets no host allocation of that size.
"""

from __future__ import annotations

import errno
import stat
import struct

from harness.linux import private_maps
from harness.linux.call_table import handles, signed
from harness.linux.calls_files import O_NONBLOCK
from harness.linux.contents import MAX_FILE_SIZE
from harness.linux.files import GuestError, Node
from harness.linux.loader import KUSER_PAGE
from harness.linux.threads import Blocked, Wait

MAX_TRANSFER = 16 << 20  # bytes one read or write call moves at most
PIPE_CAPACITY = 1 << 16  # bytes a pipe holds (Linux's default)
PIPE_BUF = 4096  # a write of at most this many bytes to a pipe is all or nothing (atomic)
USER_TOP = KUSER_PAGE  # where user memory ends: above it, the vectors page and the kernel's
SIGPIPE = 13


def has_writer(kernel, pipe: Node) -> bool:
    return any(opened.node is pipe and opened.writable for opened in kernel.fds.values())


def has_reader(kernel, pipe: Node) -> bool:
    return any(opened.node is pipe and opened.readable for opened in kernel.fds.values())


def named_fds(fds: list[int]) -> str:
    """Descriptors as a wait's name says them ("fd 3", "fds 3, 4"; the first 8)."""
    shown = ", ".join(str(fd) for fd in fds[:8]) + (f" and {len(fds) - 8} more" if len(fds) > 8 else "")
    return f"fd {shown}" if len(fds) == 1 else f"fds {shown or 'none'}"


def fds_named(kernel, files) -> str:
    """The descriptors of the open files `files` (descriptions), named."""
    return named_fds([fd for fd, opened in kernel.fds.items() if any(opened is file for file in files)])


def _pipe(kernel, node: Node) -> bool:
    """Is `node` a pipe the program made (stdout and stderr are FIFOs nothing reads back)?"""
    return stat.S_ISFIFO(node.mode) and node is not kernel.stdout and node is not kernel.stderr


def _user_range(buffer: int, count: int) -> None:
    """EFAULT for a buffer that runs past user memory (Linux's access_ok,
    on the count asked, before any cut)."""
    if buffer + count > USER_TOP:
        raise GuestError(errno.EFAULT)


def _read_into(kernel, opened, buffer: int, count: int, offset: int | None = None) -> int:
    """read(2) of at most `count` bytes (and MAX_TRANSFER) into `buffer`; at
    `offset` without moving the position (pread64) when given."""
    if not opened.readable:
        raise GuestError(errno.EBADF)
    _user_range(buffer, count)
    node = opened.node
    count = min(count, MAX_TRANSFER)
    if stat.S_ISDIR(node.mode):
        raise GuestError(errno.EISDIR)
    if node.device is not None:
        data = node.device.read(kernel, count)
    elif stat.S_ISFIFO(node.mode):  # a pipe: reading drains it
        if offset is not None:
            raise GuestError(errno.ESPIPE)
        if not node.data and count and _pipe(kernel, node) and has_writer(kernel, node):
            if opened.flags & O_NONBLOCK:
                raise GuestError(errno.EAGAIN)
            raise Blocked(Wait(files=f"read from an empty pipe ({fds_named(kernel, [opened])})",
                               ready=lambda: bool(node.data) or not has_writer(kernel, node)))
        data = bytes(node.data[:count])
        kernel.machine.write(buffer, data)  # EFAULT (a read-only page): the pipe keeps its bytes, as Linux's
        del node.data[: len(data)]
        return len(data)
    else:
        kernel.shared_maps.check(node, writing=False)
        data = node.data.read(opened.position if offset is None else offset, count)
    kernel.machine.write(buffer, data)  # before the position moves: EFAULT leaves it
    if offset is None and node.device is None:
        opened.position += len(data)
    return len(data)


def _write_from(kernel, opened, buffer: int, count: int, offset: int | None = None) -> int:
    """write(2) of at most `count` bytes (and MAX_TRANSFER) from `buffer`; at
    `offset` without moving the position (pwrite64) when given."""
    if not opened.writable:
        raise GuestError(errno.EBADF)
    _user_range(buffer, count)
    node = opened.node
    data = kernel.machine.read(buffer, min(count, MAX_TRANSFER)) if count else b""
    if node is kernel.stdout or node is kernel.stderr:
        kernel.output(node, data)
        return len(data)
    if node.device is not None:
        return node.device.write(kernel, data)
    if stat.S_ISFIFO(node.mode):
        return _pipe_write(kernel, opened, data) if data else 0
    kernel.shared_maps.check(node, writing=True)
    start = len(node.data) if opened.append else opened.position if offset is None else offset
    private_maps.changed(kernel, node, start, start + len(data), "a write")
    written = node.data.write(start, data)
    if offset is None:
        opened.position = start + written
    return written


def _pipe_write(kernel, opened, data: bytes, done: int = 0) -> int:
    """`data` written to a pipe, `done` bytes of the call's written before
    (Linux's pipe_write): with no reader left, SIGPIPE and EPIPE; a write
    of PIPE_BUF bytes or fewer goes in whole or waits for room, a longer
    one puts in what fits and waits for room for the rest; O_NONBLOCK:
    EAGAIN where nothing was written. The call's count once all is in."""
    node = opened.node
    if not has_reader(kernel, node):
        kernel.signal_thread(kernel.threads.current, SIGPIPE, 0)  # SI_USER, as send_sig
        if done:
            return done
        raise GuestError(errno.EPIPE)
    room = PIPE_CAPACITY - len(node.data)
    atomic = not done and len(data) <= PIPE_BUF
    if room >= len(data) or (room and not atomic):
        node.data += data[:room]
        done += min(room, len(data))
        data = data[room:]
    if not data:
        return done
    if opened.flags & O_NONBLOCK:
        if done:
            return done
        raise GuestError(errno.EAGAIN)
    needed = len(data) if atomic else 1
    raise Blocked(Wait(files=f"write to a full pipe ({fds_named(kernel, [opened])}, {len(node.data)} bytes buffered)",
                       ready=lambda: PIPE_CAPACITY - len(node.data) >= needed or not has_reader(kernel, node),
                       again=lambda: _pipe_write(kernel, opened, data, done),
                       interrupted=(lambda: done) if done else None))


@handles(3, "read")
def sys_read(kernel, fd, buffer, count):
    return _read_into(kernel, kernel.file(fd), buffer, count)


@handles(4, "write")
def sys_write(kernel, fd, buffer, count):
    return _write_from(kernel, kernel.file(fd), buffer, count)


def _offset(low: int, high: int, count: int) -> int:
    """A 64-bit file offset from two registers: EINVAL when negative or when
    `count` bytes from it would pass the largest offset (rw_verify_area)."""
    offset = high << 32 | low
    if offset + count >= 1 << 63:
        raise GuestError(errno.EINVAL)
    return offset


@handles(180, "pread64")
def sys_pread64(kernel, fd, buffer, count, _pad, low, high):
    return _read_into(kernel, kernel.file(fd), buffer, count, _offset(low, high, count))


@handles(181, "pwrite64")
def sys_pwrite64(kernel, fd, buffer, count, _pad, low, high):
    return _write_from(kernel, kernel.file(fd), buffer, count, _offset(low, high, count))


def io_vector(kernel, vector: int, count: int) -> list[tuple[int, int]]:
    if count > 1024:
        raise GuestError(errno.EINVAL)
    raw = kernel.machine.read(vector, 8 * count)
    buffers = [struct.unpack_from("<II", raw, 8 * i) for i in range(count)]
    if any(length >> 31 for _, length in buffers):  # negative as a ssize_t
        raise GuestError(errno.EINVAL)
    return buffers


def _each_buffer(kernel, fd: int, vector: int, count: int, move) -> int:
    """readv/writev: `move(opened, base, length)` over the buffers in turn,
    MAX_TRANSFER bytes at most in all, up to the first short one (or one
    that would wait, once some bytes moved)."""
    opened, total = kernel.file(fd), 0
    for base, length in io_vector(kernel, vector, count):
        length = min(length, MAX_TRANSFER - total)
        try:
            moved = move(kernel, opened, base, length) if length else 0
        except Blocked:
            if not total:
                raise
            break
        total += moved
        if moved < length or total >= MAX_TRANSFER:
            break
    return total


@handles(145, "readv")
def sys_readv(kernel, fd, vector, count):
    return _each_buffer(kernel, fd, vector, count, _read_into)


@handles(146, "writev")
def sys_writev(kernel, fd, vector, count):
    """A pipe takes the buffers as one write (its room and atomicity count the whole)."""
    opened = kernel.file(fd)
    if not opened.writable or not _pipe(kernel, opened.node):
        return _each_buffer(kernel, fd, vector, count, _write_from)
    data = bytearray()
    for base, length in io_vector(kernel, vector, count):
        length = min(length, MAX_TRANSFER - len(data))
        _user_range(base, length)
        data += kernel.machine.read(base, length) if length else b""
    return _pipe_write(kernel, opened, bytes(data)) if data else 0


def _seek(opened, offset: int, whence: int) -> int:
    """The new position; as Linux, EINVAL outside [0, MAX_FILE_SIZE]."""
    if stat.S_ISFIFO(opened.node.mode):
        raise GuestError(errno.ESPIPE)
    if stat.S_ISCHR(opened.node.mode):
        return 0  # /dev/null and /dev/zero stay at 0 whatever is asked
    base = {0: 0, 1: opened.position, 2: len(opened.node.data)}.get(whence)
    if base is None or not 0 <= base + offset <= MAX_FILE_SIZE:
        raise GuestError(errno.EINVAL)
    opened.position = base + offset
    return opened.position


@handles(19, "lseek")
def sys_lseek(kernel, fd, offset, whence):
    position = _seek(kernel.file(fd), signed(offset), whence)
    if position >= 1 << 31:
        raise GuestError(errno.EOVERFLOW)
    return position


@handles(140, "_llseek")
def sys_llseek(kernel, fd, high, low, result, whence):
    offset = high << 32 | low
    position = _seek(kernel.file(fd), offset - (1 << 64) if offset >> 63 else offset, whence)
    kernel.machine.write(result, struct.pack("<q", position))
    return 0
