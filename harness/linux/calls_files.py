"""System calls on files and file descriptors (harness.linux.call_table).

Paths go through harness.linux.files (the sysroot and the working
directory, nothing else); contents live in memory.
"""

from __future__ import annotations

import errno
import stat
import struct

from harness.emulation.machine import BadAddress, read_c_string
from harness.linux import private_maps
from harness.linux.call_table import handles, signed
from harness.linux.files import MAX_FDS, GuestError, Node, OpenFile, as_bytes

AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW = 0x100
AT_EMPTY_PATH = 0x1000
AT_SYMLINK_FOLLOW = 0x400
O_ACCMODE, O_WRONLY, O_RDWR = 3, 1, 2
O_CREAT, O_EXCL, O_TRUNC, O_APPEND = 0o100, 0o200, 0o1000, 0o2000
O_NONBLOCK = 0o4000  # a status flag F_SETFL may change (read and write honour it: calls_io)
O_DIRECTORY, O_NOFOLLOW = 0o40000, 0o100000  # ARM's values
PATH_MAX = 4096  # bytes in a path with its NUL (ENAMETOOLONG past it)
FILE_TIME = 1_600_000_000  # every file's times, so that no host time reaches the program
BLOCK_SIZE = 4096
# struct stat64 of ARM EABI (asm/stat.h): dev, pad, ino32, mode, nlink, uid,
# gid, rdev, pad (and 4 bytes aligning size), size, blksize, (4 aligning) blocks,
# three (sec, nsec) times, ino64: 104 bytes.
STAT64 = struct.Struct("<Q4xIIIIIQ8xqI4xQIIIIIIQ")
STATX_BASIC, STATX_MNT_ID = 0x7FF, 0x1000
# Every file is on the one filesystem st_dev names (0:1): its mount's id,
# which statx gives since Linux 5.8 whatever the mask asks (libudev takes
# /dev's from statx, and would otherwise go on to name_to_handle_at).
MOUNT_ID = 1


def _path(kernel, address: int) -> str:
    """The path at `address`, as text that keeps any bytes (files.as_bytes)."""
    try:
        return read_c_string(kernel.machine, address, PATH_MAX).decode("utf-8", "surrogateescape")
    except BadAddress:
        kernel.machine.read(address, 1)  # unmapped: EFAULT; mapped, with no NUL in PATH_MAX bytes:
        raise GuestError(errno.ENAMETOOLONG) from None


def _at(kernel, dirfd: int, address: int) -> str:
    """The guest path `address` names, relative to directory `dirfd`; an
    empty one names nothing (ENOENT, whatever `dirfd` is: AT_EMPTY_PATH's
    callers look at the descriptor first)."""
    path = _path(kernel, address)
    if not path:
        raise GuestError(errno.ENOENT)
    dirfd = signed(dirfd)
    if path.startswith("/") or dirfd == AT_FDCWD:
        return kernel.files.guest_path(path, kernel.cwd)
    directory = kernel.file(dirfd)
    if not stat.S_ISDIR(directory.node.mode):
        raise GuestError(errno.ENOTDIR)
    return kernel.files.guest_path(path, directory.path)


def _open(kernel, path: str, flags: int) -> int:
    access = flags & O_ACCMODE
    try:
        guest, node = kernel.files.lookup(path, follow_last=not flags & O_NOFOLLOW)
        if flags & O_CREAT and flags & O_EXCL:
            raise GuestError(errno.EEXIST)
    except GuestError as error:
        if error.code != errno.ENOENT or not flags & O_CREAT:
            raise
        guest, node = kernel.files.create(path)
    if stat.S_ISLNK(node.mode):
        raise GuestError(errno.ELOOP)
    if node.device is not None:
        node.device.open(kernel)
    if flags & O_DIRECTORY and not stat.S_ISDIR(node.mode):
        raise GuestError(errno.ENOTDIR)
    if stat.S_ISDIR(node.mode) and access != 0:
        raise GuestError(errno.EISDIR)
    if access in (O_WRONLY, O_RDWR) and stat.S_ISREG(node.mode):
        if flags & O_TRUNC:
            private_maps.truncated(kernel, node, 0)
            node.data.truncate(0)
        kernel.files.keep(guest, node)  # written in memory, over the host's bytes, which stay as they were
    opened = OpenFile(node, guest, readable=access != O_WRONLY, writable=access != 0,
                      append=bool(flags & O_APPEND), flags=flags)
    return kernel.new_fd(opened)


@handles(5, "open")
def sys_open(kernel, path, flags, mode):
    return _open(kernel, kernel.files.guest_path(_path(kernel, path), kernel.cwd), flags)


@handles(322, "openat")
def sys_openat(kernel, dirfd, path, flags, mode):
    return _open(kernel, _at(kernel, dirfd, path), flags)


@handles(6, "close")
def sys_close(kernel, fd):
    kernel.close_fd(fd)
    return 0


def _rdev(node: Node) -> tuple[int, int]:
    """A device's (major, minor); (0, 0) for other files."""
    return node.device.rdev if node.device is not None else (0, 0)


def stat64_bytes(node: Node) -> bytes:
    size = len(node.data)
    times = (FILE_TIME, 0) * 3
    major, minor = _rdev(node)
    rdev = (minor & 0xFF) | major << 8 | (minor & ~0xFF) << 12  # huge_encode_dev, as stat64 gives it
    return STAT64.pack(1, node.inode, node.mode, node.links, 0, 0, rdev, size, BLOCK_SIZE, (size + 511) // 512,
                       *times, node.inode)


def statx_bytes(node: Node) -> bytes:
    size = len(node.data)
    head = struct.pack("<IIQIIIHxxQQQQ", STATX_BASIC | STATX_MNT_ID, BLOCK_SIZE, 0, node.links, 0, 0, node.mode,
                       node.inode, size, (size + 511) // 512, 0)
    times = struct.pack("<qIi", FILE_TIME, 0, 0) * 4
    return (head + times + struct.pack("<IIIIQ", *_rdev(node), 0, 1, MOUNT_ID)).ljust(0x100, b"\0")


def _node_at(kernel, dirfd: int, path: int, flags: int) -> Node:
    if flags & AT_EMPTY_PATH and not read_c_string(kernel.machine, path):
        return kernel.file(dirfd).node
    return kernel.files.lookup(_at(kernel, dirfd, path), follow_last=not flags & AT_SYMLINK_NOFOLLOW)[1]


@handles(197, "fstat64")
def sys_fstat64(kernel, fd, buffer):
    kernel.machine.write(buffer, stat64_bytes(kernel.file(fd).node))
    return 0


@handles(195, "stat64")
def sys_stat64(kernel, path, buffer):
    kernel.machine.write(buffer, stat64_bytes(_node_at(kernel, AT_FDCWD, path, 0)))
    return 0


@handles(196, "lstat64")
def sys_lstat64(kernel, path, buffer):
    kernel.machine.write(buffer, stat64_bytes(_node_at(kernel, AT_FDCWD, path, AT_SYMLINK_NOFOLLOW)))
    return 0


@handles(327, "fstatat64")
def sys_fstatat64(kernel, dirfd, path, buffer, flags):
    kernel.machine.write(buffer, stat64_bytes(_node_at(kernel, dirfd, path, flags)))
    return 0


@handles(397, "statx")
def sys_statx(kernel, dirfd, path, flags, mask, buffer):
    kernel.machine.write(buffer, statx_bytes(_node_at(kernel, dirfd, path, flags)))
    return 0


def _readlink(kernel, guest: str, buffer: int, size: int) -> int:
    node = kernel.files.lookup(guest, follow_last=False)[1]  # /proc/self/exe too (harness.linux.special_files)
    if not stat.S_ISLNK(node.mode):
        raise GuestError(errno.EINVAL)
    target = bytes(node.data)
    kernel.machine.write(buffer, target[:size])
    return min(len(target), size)


@handles(85, "readlink")
def sys_readlink(kernel, path, buffer, size):
    return _readlink(kernel, kernel.files.guest_path(_path(kernel, path), kernel.cwd), buffer, size)


@handles(332, "readlinkat")
def sys_readlinkat(kernel, dirfd, path, buffer, size):
    return _readlink(kernel, _at(kernel, dirfd, path), buffer, size)


@handles(33, "access")
def sys_access(kernel, path, mode):
    _node_at(kernel, AT_FDCWD, path, 0)
    return 0


@handles(334, "faccessat")
def sys_faccessat(kernel, dirfd, path, mode):
    _node_at(kernel, dirfd, path, 0)
    return 0


@handles(439, "faccessat2")
def sys_faccessat2(kernel, dirfd, path, mode, flags):
    _node_at(kernel, dirfd, path, flags)
    return 0


@handles(183, "getcwd")
def sys_getcwd(kernel, buffer, size):
    path = kernel.cwd.encode() + b"\0"
    if size < len(path):
        raise GuestError(errno.ERANGE)
    kernel.machine.write(buffer, path)
    return len(path)


@handles(54, "ioctl")
def sys_ioctl(kernel, fd, request, argument):
    kernel.file(fd)
    raise GuestError(errno.ENOTTY)  # no terminal: stdio buffers fully, as under a pipe


@handles(41, "dup")
def sys_dup(kernel, fd):
    return kernel.new_fd(kernel.file(fd))


@handles(63, "dup2")
def sys_dup2(kernel, fd, target):
    opened = kernel.file(fd)
    if target >= MAX_FDS:
        raise GuestError(errno.EBADF)  # as Linux past RLIMIT_NOFILE
    replaced = kernel.fds.get(target)
    kernel.fds[target] = opened
    if replaced is not None and replaced is not opened:
        kernel.dropped(replaced)
    return target


@handles(358, "dup3")
def sys_dup3(kernel, fd, target, flags):
    if fd == target:
        raise GuestError(errno.EINVAL)
    return sys_dup2(kernel, fd, target)


@handles(10, "unlink")
def sys_unlink(kernel, path):
    kernel.files.remove(kernel.files.guest_path(_path(kernel, path), kernel.cwd))
    return 0


@handles(9, "link")
def sys_link(kernel, old, new):
    files = kernel.files
    files.link(files.guest_path(_path(kernel, old), kernel.cwd), files.guest_path(_path(kernel, new), kernel.cwd))
    return 0


@handles(330, "linkat")
def sys_linkat(kernel, old_dirfd, old, new_dirfd, new, flags):
    """linkat: the symlink itself unless AT_SYMLINK_FOLLOW; with
    AT_EMPTY_PATH and an empty path, the file open at `old_dirfd` (the
    process is root: it has CAP_DAC_READ_SEARCH), AT_FDCWD's the directory."""
    if flags & ~(AT_SYMLINK_FOLLOW | AT_EMPTY_PATH):
        raise GuestError(errno.EINVAL)
    if flags & AT_EMPTY_PATH and not read_c_string(kernel.machine, old):
        if signed(old_dirfd) == AT_FDCWD:
            source = kernel.files.lookup(kernel.cwd)
        else:
            opened = kernel.file(old_dirfd)
            source = opened.path, opened.node
    else:
        source = _at(kernel, old_dirfd, old)
    kernel.files.link(source, _at(kernel, new_dirfd, new), follow=bool(flags & AT_SYMLINK_FOLLOW))
    return 0


@handles(217, "getdents64")
def sys_getdents64(kernel, fd, buffer, size):
    opened = kernel.file(fd)
    if not stat.S_ISDIR(opened.node.mode):
        raise GuestError(errno.ENOTDIR)
    out = bytearray()
    names = (".", "..") + opened.node.entries
    while opened.position < len(names):
        name = as_bytes(names[opened.position]) + b"\0"
        length = (19 + len(name) + 7) & ~7
        if len(out) + length > size:
            break
        record = struct.pack("<QqHB", opened.position + 1, opened.position + 1, length, 0) + name
        out += record.ljust(length, b"\0")
        opened.position += 1
    if not out and opened.position < len(names):
        raise GuestError(errno.EINVAL)
    kernel.machine.write(buffer, bytes(out))
    return len(out)


@handles(270, "arm_fadvise64_64")
def sys_arm_fadvise64_64(kernel, fd, advice, offset_low, offset_high, length_low, length_high):
    kernel.file(fd)
    return 0  # advice about reading ahead: nothing to do in memory
