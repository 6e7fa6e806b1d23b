"""fcntl64 and memfd_create (harness.linux.call_table): descriptors, status
flags, record locks, a pipe's size, a memfd and its seals. One process, one thread: every lock is
granted and no other holds one. A command Linux 6.1 has that the harness
does not emulate (owners, signals, leases, notifications, hints) ends the
run as a fault naming it; a number Linux does not know is EINVAL, as
there."""

from __future__ import annotations

import errno
import stat
import struct

from harness.emulation.machine import BadAddress, read_c_string
from harness.linux.call_table import SystemCallFault, handles
from harness.linux.calls_files import O_APPEND, O_NONBLOCK
from harness.linux.calls_io import PIPE_CAPACITY
from harness.linux.files import MAX_FDS, NAME_MAX, Contents, GuestError, Node, OpenFile, inode_of

F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL = 0, 1, 2, 3, 4
F_GETLK, F_SETLK, F_SETLKW, F_GETLK64, F_SETLK64, F_SETLKW64 = 5, 6, 7, 12, 13, 14
F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW = 36, 37, 38
F_DUPFD_CLOEXEC, F_SETPIPE_SZ, F_GETPIPE_SZ, F_ADD_SEALS, F_GET_SEALS = 1030, 1031, 1032, 1033, 1034
F_RDLCK, F_WRLCK, F_UNLCK = 0, 1, 2
F_SEAL_SEAL, F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_WRITE, F_SEAL_FUTURE_WRITE = 1, 2, 4, 8, 16
MFD_CLOEXEC, MFD_ALLOW_SEALING, MFD_HUGETLB = 1, 2, 4
MFD_NAME_MAX = NAME_MAX - len("memfd:")
O_RDWR, O_LARGEFILE = 2, 0o400000  # ARM's values
# Commands Linux 6.1 has that are not emulated, by name (a fault names them).
NOT_EMULATED = {8: "F_SETOWN", 9: "F_GETOWN", 10: "F_SETSIG", 11: "F_GETSIG", 15: "F_SETOWN_EX",
                16: "F_GETOWN_EX", 1024: "F_SETLEASE", 1025: "F_GETLEASE", 1026: "F_NOTIFY",
                1035: "F_GET_RW_HINT", 1036: "F_SET_RW_HINT", 1037: "F_GET_FILE_RW_HINT",
                1038: "F_SET_FILE_RW_HINT"}
FLOCK = struct.Struct("<hhiii")  # struct flock: type, whence, start, len, pid
FLOCK64 = struct.Struct("<hh4xqqi4x")  # struct flock64 of ARM EABI (64-bit fields 8-aligned)
ALL_SEALS = F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_FUTURE_WRITE


@handles(221, "fcntl64")
def sys_fcntl64(kernel, fd, command, argument):
    opened = kernel.file(fd)
    if command in (F_DUPFD, F_DUPFD_CLOEXEC):
        if argument >= MAX_FDS:
            raise GuestError(errno.EINVAL)
        return kernel.new_fd(opened, argument)
    if command == F_GETFL:
        return opened.flags
    if command == F_SETFL:  # the status flags a program may change
        opened.flags = opened.flags & ~(O_APPEND | O_NONBLOCK) | argument & (O_APPEND | O_NONBLOCK)
        opened.append = bool(opened.flags & O_APPEND)
        return 0
    if command in (F_GETFD, F_SETFD):
        return 0
    if command in (F_GETLK, F_SETLK, F_SETLKW, F_GETLK64, F_SETLK64, F_SETLKW64, F_OFD_GETLK, F_OFD_SETLK,
                   F_OFD_SETLKW):
        return _lock(kernel, opened, command, argument)
    if command in (F_GETPIPE_SZ, F_SETPIPE_SZ):
        return _pipe_size(opened, command, argument)
    if command in (F_ADD_SEALS, F_GET_SEALS):
        return _seals(opened, command, argument)
    if command in NOT_EMULATED:
        raise SystemCallFault(f"fcntl64 {NOT_EMULATED[command]} ({command}) is not emulated")
    raise GuestError(errno.EINVAL)


def _lock(kernel, opened, command: int, address: int) -> int:
    """A record lock: checked as Linux checks it (the type, whence, the
    descriptor's access for the type, l_pid 0 for an open file
    description's lock), then granted; F_GETLK finds no conflicting lock
    and says F_UNLCK."""
    layout = FLOCK if command in (F_GETLK, F_SETLK, F_SETLKW) else FLOCK64
    kind, whence, start, length, pid = layout.unpack(kernel.machine.read(address, layout.size))
    if kind not in (F_RDLCK, F_WRLCK, F_UNLCK) or whence not in (0, 1, 2):
        raise GuestError(errno.EINVAL)
    if command in (F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW) and pid:
        raise GuestError(errno.EINVAL)
    if command in (F_GETLK, F_GETLK64, F_OFD_GETLK):
        if kind == F_UNLCK:
            raise GuestError(errno.EINVAL)
        kernel.machine.write(address, layout.pack(F_UNLCK, whence, start, length, pid))
        return 0
    if kind == F_RDLCK and not opened.readable or kind == F_WRLCK and not opened.writable:
        raise GuestError(errno.EBADF)
    return 0


def _pipe_size(opened, command: int, size: int) -> int:
    """A pipe holds PIPE_CAPACITY bytes: what F_GETPIPE_SZ says, and the
    only size F_SETPIPE_SZ can give (another is not emulated: a fault)."""
    if not stat.S_ISFIFO(opened.node.mode):
        raise GuestError(errno.EBADF)
    if command == F_SETPIPE_SZ:
        rounded = max(4096, 1 << max(0, size - 1).bit_length())  # round_pipe_size: a power of two pages
        if rounded != PIPE_CAPACITY:
            raise SystemCallFault(f"F_SETPIPE_SZ {size}: a pipe holds {PIPE_CAPACITY} bytes here, no other size")
    return PIPE_CAPACITY


def _seals(opened, command: int, seals: int) -> int:
    """A memfd's seals; other files have none to give (EINVAL)."""
    contents = opened.node.data
    if not isinstance(contents, Sealed):
        raise GuestError(errno.EINVAL)
    if command == F_GET_SEALS:
        return contents.seals
    if seals & ~ALL_SEALS:
        raise GuestError(errno.EINVAL)
    if not opened.writable:
        raise GuestError(errno.EPERM)
    if contents.seals & F_SEAL_SEAL:
        raise GuestError(errno.EPERM)
    contents.seals |= seals
    return 0


# ---- memfd


class Sealed(Contents):
    """A memfd's bytes, with the seals F_ADD_SEALS put on it (memfd_create
    without MFD_ALLOW_SEALING: sealed against more seals). A write or a
    resize a seal forbids fails with EPERM, as Linux."""

    def __init__(self, store, seals: int):
        super().__init__(b"", store)
        self.seals = seals

    def write(self, offset: int, data: bytes) -> int:
        if data and (self.seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)
                     or self.seals & F_SEAL_GROW and offset + len(data) > self.size):
            raise GuestError(errno.EPERM)
        return super().write(offset, data)

    def truncate(self, size: int) -> None:
        if size > self.size and self.seals & F_SEAL_GROW or size < self.size and self.seals & F_SEAL_SHRINK:
            raise GuestError(errno.EPERM)
        super().truncate(size)


@handles(385, "memfd_create")
def sys_memfd_create(kernel, name, flags):
    if flags & ~(MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB):
        raise GuestError(errno.EINVAL)
    if flags & MFD_HUGETLB:
        raise SystemCallFault("memfd_create with MFD_HUGETLB: huge pages are not emulated")
    try:
        label = read_c_string(kernel.machine, name, MFD_NAME_MAX + 1)
    except BadAddress:
        kernel.machine.read(name, 1)  # unmapped: EFAULT; too long a name:
        raise GuestError(errno.EINVAL) from None
    if len(label) > MFD_NAME_MAX:
        raise GuestError(errno.EINVAL)
    contents = Sealed(kernel.files.store, 0 if flags & MFD_ALLOW_SEALING else F_SEAL_SEAL)
    path = "/memfd:" + label.decode("utf-8", "surrogateescape") + " (deleted)"
    node = Node(stat.S_IFREG | 0o777, contents, inode=inode_of(f"{path} {kernel.calls['memfd_create']}"))
    return kernel.new_fd(OpenFile(node, path, readable=True, writable=True, flags=O_RDWR | O_LARGEFILE))

