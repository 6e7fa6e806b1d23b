"""System calls on the file system itself (harness.linux.call_table): its
figures (statfs), directories, renames, symlinks, sizes and room
(fallocate), modes, owners and the
calls that only ask for data to be safe (fsync). Files live in memory
(harness.linux.files): the file system is one tmpfs of FileStore's cap,
and the process is root.

What the harness does not record it does not pretend to: an owner other
than root (stat always says root), a file time set to anything but what
stat says (FILE_TIME), a directory moved: each ends the run as a fault
naming it.
"""

from __future__ import annotations

import errno
import stat
import struct

from harness.emulation.machine import read_c_string
from harness.linux import private_maps
from harness.linux.call_table import SystemCallFault, handles, signed
from harness.linux.calls_files import AT_EMPTY_PATH, AT_SYMLINK_NOFOLLOW, _at, _path
from harness.linux.contents import MAX_FILE_SIZE
from harness.linux.files import NAME_MAX, GuestError, Node, OpenFile, as_bytes

AT_REMOVEDIR = 0x200
RENAME_NOREPLACE = 1
TMPFS_MAGIC = 0x01021994
ST_VALID, ST_RELATIME = 0x20, 0x1000
INODES = 1 << 16  # the files the tmpfs holds at most, as statfs says (fixed)
# struct statfs64 of ARM EABI (packed, 4-aligned): type, bsize, blocks, bfree,
# bavail, files, ffree, fsid, namelen, frsize, flags, spare[4]: 84 bytes.
STATFS64 = struct.Struct("<IIQQQQQ2iIII16x")
UTIME_NOW, UTIME_OMIT = (1 << 30) - 1, (1 << 30) - 2
LOCK_SH, LOCK_EX, LOCK_NB, LOCK_UN = 1, 2, 4, 8
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 1, 2


# ---- statfs


def _statfs(kernel, size: int, buffer: int) -> int:
    """One tmpfs: its blocks are the FileStore's cap, free what it has left."""
    if size != STATFS64.size:
        raise GuestError(errno.EINVAL)
    store = kernel.files.store
    blocks, free = store.cap // 4096, max(0, store.cap - store.held) // 4096
    kernel.machine.write(buffer, STATFS64.pack(TMPFS_MAGIC, 4096, blocks, free, free, INODES, INODES, 0, 0,
                                               NAME_MAX, 4096, ST_VALID | ST_RELATIME))
    return 0


@handles(266, "statfs64")
def sys_statfs64(kernel, path, size, buffer):
    kernel.files.lookup(kernel.files.guest_path(_path(kernel, path), kernel.cwd))
    return _statfs(kernel, size, buffer)


@handles(267, "fstatfs64")
def sys_fstatfs64(kernel, fd, size, buffer):
    kernel.file(fd)
    return _statfs(kernel, size, buffer)


# ---- directories and names


@handles(39, "mkdir")
def sys_mkdir(kernel, path, mode):
    kernel.files.make_directory(kernel.files.guest_path(_path(kernel, path), kernel.cwd), mode)
    return 0


@handles(323, "mkdirat")
def sys_mkdirat(kernel, dirfd, path, mode):
    kernel.files.make_directory(_at(kernel, dirfd, path), mode)
    return 0


@handles(40, "rmdir")
def sys_rmdir(kernel, path):
    kernel.files.remove(kernel.files.guest_path(_path(kernel, path), kernel.cwd), directory=True)
    return 0


@handles(328, "unlinkat")
def sys_unlinkat(kernel, dirfd, path, flags):
    if flags & ~AT_REMOVEDIR:
        raise GuestError(errno.EINVAL)
    kernel.files.remove(_at(kernel, dirfd, path), directory=bool(flags & AT_REMOVEDIR))
    return 0


def _rename(kernel, old: str, new: str, flags: int) -> int:
    if flags & ~RENAME_NOREPLACE:  # RENAME_EXCHANGE, RENAME_WHITEOUT: Linux has them, the harness does not
        raise SystemCallFault(f"renameat2 with flags {flags:#x}: only RENAME_NOREPLACE is emulated")
    if flags & RENAME_NOREPLACE:
        kernel.files.refuse_existing(new, errno.EEXIST)
    kernel.files.rename(old, new)
    return 0


@handles(38, "rename")
def sys_rename(kernel, old, new):
    files = kernel.files
    return _rename(kernel, files.guest_path(_path(kernel, old), kernel.cwd),
                   files.guest_path(_path(kernel, new), kernel.cwd), 0)


@handles(329, "renameat")
def sys_renameat(kernel, old_dirfd, old, new_dirfd, new):
    return _rename(kernel, _at(kernel, old_dirfd, old), _at(kernel, new_dirfd, new), 0)


@handles(382, "renameat2")
def sys_renameat2(kernel, old_dirfd, old, new_dirfd, new, flags):
    return _rename(kernel, _at(kernel, old_dirfd, old), _at(kernel, new_dirfd, new), flags)


@handles(12, "chdir")
def sys_chdir(kernel, path):
    guest, node = kernel.files.lookup(kernel.files.guest_path(_path(kernel, path), kernel.cwd))
    return _change_directory(kernel, guest, node)


@handles(133, "fchdir")
def sys_fchdir(kernel, fd):
    opened = kernel.file(fd)
    return _change_directory(kernel, opened.path, opened.node)


def _change_directory(kernel, guest: str, node: Node) -> int:
    if not stat.S_ISDIR(node.mode):
        raise GuestError(errno.ENOTDIR)
    kernel.cwd = guest
    return 0


# ---- sizes


def _truncate(kernel, node: Node, length: int, opened: OpenFile | None = None) -> int:
    """ftruncate (`opened`) or truncate of `node` to `length` bytes, with
    Linux's errors: EINVAL for a negative length or a file that is not a
    regular file open for writing, EISDIR for a directory by path."""
    if length < 0 or opened is not None and (not opened.writable or not stat.S_ISREG(node.mode)):
        raise GuestError(errno.EINVAL)
    if stat.S_ISDIR(node.mode):
        raise GuestError(errno.EISDIR)
    if not stat.S_ISREG(node.mode):
        raise GuestError(errno.EINVAL)
    private_maps.truncated(kernel, node, length)
    node.data.truncate(length)
    return 0


def _by_path(kernel, path: int) -> Node:
    """The file `path` names, kept in memory so that what is done to it stays."""
    guest, node = kernel.files.lookup(kernel.files.guest_path(_path(kernel, path), kernel.cwd))
    if stat.S_ISREG(node.mode):
        kernel.files.keep(guest, node)
    return node


@handles(92, "truncate")
def sys_truncate(kernel, path, length):
    return _truncate(kernel, _by_path(kernel, path), signed(length))


@handles(93, "ftruncate")
def sys_ftruncate(kernel, fd, length):
    opened = kernel.file(fd)
    return _truncate(kernel, opened.node, signed(length), opened)


@handles(193, "truncate64")
def sys_truncate64(kernel, path, _pad, low, high):
    return _truncate(kernel, _by_path(kernel, path), signed(high) << 32 | low)


@handles(194, "ftruncate64")
def sys_ftruncate64(kernel, fd, _pad, low, high):
    opened = kernel.file(fd)
    return _truncate(kernel, opened.node, signed(high) << 32 | low, opened)


@handles(352, "fallocate")
def sys_fallocate(kernel, fd, mode, offset_low, offset_high, length_low, length_high):
    """Room for a range of a regular file (vfs_fallocate's checks, then
    tmpfs's modes): a file in memory holds whatever it is given, so only
    its size grows (not under FALLOC_FL_KEEP_SIZE); a punched hole reads
    as zeros. Other modes are not emulated: a fault names them."""
    offset, length = signed(offset_high) << 32 | offset_low, signed(length_high) << 32 | length_low
    opened = kernel.file(fd)
    if offset < 0 or length <= 0 or mode & FALLOC_FL_PUNCH_HOLE and not mode & FALLOC_FL_KEEP_SIZE:
        raise GuestError(errno.EINVAL if offset < 0 or length <= 0 else errno.EOPNOTSUPP)
    if mode & ~(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE):
        raise SystemCallFault(f"fallocate with mode {mode:#x}: only FALLOC_FL_KEEP_SIZE and PUNCH_HOLE are emulated")
    node = opened.node
    if not opened.writable:
        raise GuestError(errno.EBADF)
    if not stat.S_ISREG(node.mode):
        raise GuestError(errno.ESPIPE if stat.S_ISFIFO(node.mode) else errno.EISDIR if stat.S_ISDIR(node.mode)
                         else errno.ENODEV)
    if offset + length > MAX_FILE_SIZE:
        raise GuestError(errno.EFBIG)
    if mode & FALLOC_FL_PUNCH_HOLE:
        end = min(offset + length, len(node.data))
        if end > offset:
            private_maps.changed(kernel, node, offset, end, "fallocate(FALLOC_FL_PUNCH_HOLE)")
            node.data.write(offset, bytes(end - offset))
    elif not mode & FALLOC_FL_KEEP_SIZE and offset + length > len(node.data):
        node.data.truncate(offset + length)
    return 0


# ---- symbolic links


def _symlink(kernel, target: int, path: str) -> int:
    """A symlink the program makes, in memory (followed by files.GuestFiles.lookup)."""
    text = _path(kernel, target)
    if not text:
        raise GuestError(errno.ENOENT)
    kernel.files.refuse_existing(path, errno.EEXIST)
    _, node = kernel.files.create(path)
    node.mode, node.data = stat.S_IFLNK | 0o777, kernel.files.contents(as_bytes(text))
    return 0


@handles(83, "symlink")
def sys_symlink(kernel, target, path):
    return _symlink(kernel, target, kernel.files.guest_path(_path(kernel, path), kernel.cwd))


@handles(331, "symlinkat")
def sys_symlinkat(kernel, target, dirfd, path):
    return _symlink(kernel, target, _at(kernel, dirfd, path))


# ---- data made safe: nothing to do in memory


def _syncable(kernel, fd: int) -> int:
    """fsync and fdatasync: 0 for a file or directory; EINVAL for a pipe or
    a device, which have no fsync (as Linux)."""
    node = kernel.file(fd).node
    if not (stat.S_ISREG(node.mode) or stat.S_ISDIR(node.mode)):
        raise GuestError(errno.EINVAL)
    return 0


@handles(118, "fsync")
def sys_fsync(kernel, fd):
    return _syncable(kernel, fd)


@handles(148, "fdatasync")
def sys_fdatasync(kernel, fd):
    return _syncable(kernel, fd)


@handles(36, "sync")
def sys_sync(kernel):
    return 0


@handles(373, "syncfs")
def sys_syncfs(kernel, fd):
    kernel.file(fd)
    return 0


@handles(143, "flock")
def sys_flock(kernel, fd, operation):
    """One process: every lock is granted at once."""
    kernel.file(fd)
    if operation & ~LOCK_NB not in (LOCK_SH, LOCK_EX, LOCK_UN):
        raise GuestError(errno.EINVAL)
    return 0


# ---- modes, owners, times


def _chmod(kernel, guest: str, node: Node, mode: int) -> int:
    """The mode is kept on the file (stat shows it); a directory of the
    host's is looked up anew each time, so its mode could not be: a fault."""
    if stat.S_ISDIR(node.mode) and not kernel.files.made(guest):
        raise SystemCallFault(f"chmod of the directory {guest}: its mode would not be kept")
    node.mode = stat.S_IFMT(node.mode) | mode & 0o7777
    if stat.S_ISREG(node.mode):
        kernel.files.keep(guest, node)
    return 0


@handles(15, "chmod")
def sys_chmod(kernel, path, mode):
    guest, node = kernel.files.lookup(kernel.files.guest_path(_path(kernel, path), kernel.cwd))
    return _chmod(kernel, guest, node, mode)


@handles(333, "fchmodat")
def sys_fchmodat(kernel, dirfd, path, mode):
    guest, node = kernel.files.lookup(_at(kernel, dirfd, path))
    return _chmod(kernel, guest, node, mode)


@handles(94, "fchmod")
def sys_fchmod(kernel, fd, mode):
    opened = kernel.file(fd)
    return _chmod(kernel, opened.path, opened.node, mode)


def _chown(owner: int, group: int) -> int:
    """Root may give a file to anyone; stat shows every file as root's, so
    only root (0) or no change (-1) is answered."""
    for value in (owner, group):
        if value not in (0, 0xFFFFFFFF):
            raise SystemCallFault(f"chown to {owner}:{group}: files belong to root (0) here, owners are not kept")
    return 0


@handles(212, "chown32")
def sys_chown32(kernel, path, owner, group):
    kernel.files.lookup(kernel.files.guest_path(_path(kernel, path), kernel.cwd))
    return _chown(owner, group)


@handles(198, "lchown32")
def sys_lchown32(kernel, path, owner, group):
    kernel.files.lookup(kernel.files.guest_path(_path(kernel, path), kernel.cwd), follow_last=False)
    return _chown(owner, group)


@handles(207, "fchown32")
def sys_fchown32(kernel, fd, owner, group):
    kernel.file(fd)
    return _chown(owner, group)


@handles(325, "fchownat")
def sys_fchownat(kernel, dirfd, path, owner, group, flags):
    if flags & AT_EMPTY_PATH and not read_c_string(kernel.machine, path):
        kernel.file(dirfd)
    else:
        kernel.files.lookup(_at(kernel, dirfd, path), follow_last=not flags & AT_SYMLINK_NOFOLLOW)
    return _chown(owner, group)


def _utimens(kernel, dirfd: int, path: int, times: int, flags: int, layout: struct.Struct) -> int:
    """utimensat: the file must exist; every file's times are FILE_TIME,
    so only a call that changes none (both UTIME_OMIT) is answered."""
    if flags & ~(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH):
        raise GuestError(errno.EINVAL)
    if path:
        if flags & AT_EMPTY_PATH and not read_c_string(kernel.machine, path):
            kernel.file(dirfd)
        else:
            kernel.files.lookup(_at(kernel, dirfd, path), follow_last=not flags & AT_SYMLINK_NOFOLLOW)
    else:
        kernel.file(dirfd)  # futimens
    nanoseconds = [layout.unpack(kernel.machine.read(times + layout.size * i, layout.size))[1] for i in range(2)] \
        if times else [UTIME_NOW, UTIME_NOW]
    if any(value not in (UTIME_NOW, UTIME_OMIT) and not 0 <= value < 1_000_000_000 for value in nanoseconds):
        raise GuestError(errno.EINVAL)
    if nanoseconds != [UTIME_OMIT, UTIME_OMIT]:
        raise SystemCallFault("utimensat: file times are not kept (every file's are the same fixed time)")
    return 0


@handles(348, "utimensat")
def sys_utimensat(kernel, dirfd, path, times, flags):
    return _utimens(kernel, dirfd, path, times, flags, struct.Struct("<ii"))


@handles(412, "utimensat_time64")
def sys_utimensat_time64(kernel, dirfd, path, times, flags):
    return _utimens(kernel, dirfd, path, times, flags, struct.Struct("<qi4x"))
