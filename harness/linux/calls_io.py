"""System calls that move a file's bytes: read, write and their
positioned and vectored forms, and seeks (harness.linux.table). Regular
files hold their bytes in files.Contents; a pipe (or stdout, stderr) is a
buffer of at most PIPE_CAPACITY bytes; a device answers by itself.

One call moves MAX_TRANSFER bytes at most, all its buffers together (a
short count, as Linux past MAX_RW_COUNT): a guest asking for gigabytes
gets no host allocation of that size.
"""

from __future__ import annotations

import errno
import stat
import struct

from harness.linux.calls_files import O_NONBLOCK
from harness.linux.contents import MAX_FILE_SIZE
from harness.linux.files import GuestError, Node
from harness.linux.loader import KUSER_PAGE
from harness.linux.table import handles, signed
from harness.linux.threads import file_wait

MAX_TRANSFER = 16 << 20  # bytes one read or write call moves at most
PIPE_CAPACITY = 1 << 16  # bytes a pipe holds (Linux's default)
USER_TOP = KUSER_PAGE  # where user memory ends: above it, the vectors page and the kernel's


def has_writer(kernel, pipe: Node) -> bool:
    return any(opened.node is pipe and opened.writable for opened in kernel.fds.values())


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
        if not node.data and count and node not in (kernel.stdout, kernel.stderr) and has_writer(kernel, node):
            if opened.flags & O_NONBLOCK:
                raise GuestError(errno.EAGAIN)
            raise file_wait(kernel, "read from an empty pipe")
        data = bytes(node.data[:count])
        del node.data[: len(data)]
    else:
        start = opened.position if offset is None else offset
        data = node.data.read(start, count)
        if offset is None:
            opened.position += len(data)
    kernel.machine.write(buffer, data)
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
        room = PIPE_CAPACITY - len(node.data)
        if data and not room:
            if opened.flags & O_NONBLOCK:
                raise GuestError(errno.EAGAIN)
            raise file_wait(kernel, f"write to a full pipe ({PIPE_CAPACITY} bytes buffered)")
        node.data += data[:room]
        return min(len(data), room)
    start = len(node.data) if opened.append else opened.position if offset is None else offset
    written = node.data.write(start, data)
    if offset is None:
        opened.position = start + written
    return written


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


def _vector(kernel, vector: int, count: int) -> list[tuple[int, int]]:
    if count > 1024:
        raise GuestError(errno.EINVAL)
    raw = kernel.machine.read(vector, 8 * count)
    buffers = [struct.unpack_from("<II", raw, 8 * i) for i in range(count)]
    if any(length >> 31 for _, length in buffers):  # negative as a ssize_t
        raise GuestError(errno.EINVAL)
    return buffers


def _each_buffer(kernel, fd: int, vector: int, count: int, move) -> int:
    """readv/writev: `move(opened, base, length)` over the buffers in turn,
    MAX_TRANSFER bytes at most in all, up to the first short one."""
    opened, total = kernel.file(fd), 0
    for base, length in _vector(kernel, vector, count):
        length = min(length, MAX_TRANSFER - total)
        moved = move(kernel, opened, base, length) if length else 0
        total += moved
        if moved < length or total >= MAX_TRANSFER:
            break
    return total


@handles(145, "readv")
def sys_readv(kernel, fd, vector, count):
    return _each_buffer(kernel, fd, vector, count, _read_into)


@handles(146, "writev")
def sys_writev(kernel, fd, vector, count):
    return _each_buffer(kernel, fd, vector, count, _write_from)


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
