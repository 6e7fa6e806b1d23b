"""Calls Chromium makes beside its sockets, as Linux answers them: /tmp
and /dev/shm as empty tmpfs directories of the guest's own, symlinks the
program makes (read back and followed), fallocate's sizes and holes, and
each thread's nice value (setpriority, getpriority, sched_getattr)."""

from __future__ import annotations

import errno
import stat
import struct

import pytest
from linux_calls import SCRATCH, call, open_path, put_string
from test_linux_threads import MAIN, _spawn

from harness.linux.call_table import SystemCallFault

O_RDONLY, O_WRONLY, O_RDWR, O_CREAT, O_EXCL = 0, 1, 2, 0o100, 0o200
STAT = SCRATCH + 0x2000
TARGET, LINK = SCRATCH + 0x800, SCRATCH + 0xC00


def _mode(kernel, path: str) -> int:
    assert call(kernel, "stat64", put_string(kernel, path, SCRATCH + 0x400), STAT) == 0
    return struct.unpack_from("<I", kernel.machine.read(STAT + 16, 4))[0]


def _size(kernel, fd: int) -> int:
    assert call(kernel, "fstat64", fd, STAT) == 0
    return struct.unpack_from("<q", kernel.machine.read(STAT + 48, 8))[0]


def test_tmp_and_dev_shm_are_empty_directories_the_program_fills(kernel):
    for directory in ("/tmp", "/dev/shm"):
        assert stat.S_ISDIR(_mode(kernel, directory)) and _mode(kernel, directory) & 0o7777 == 0o1777
        fd = open_path(kernel, f"{directory}/made", O_RDWR | O_CREAT | O_EXCL)
        assert fd >= 0 and stat.S_ISREG(_mode(kernel, f"{directory}/made"))
    assert call(kernel, "mkdir", put_string(kernel, "/tmp/org.chromium.x"), 0o700) == 0
    assert stat.S_ISDIR(_mode(kernel, "/tmp/org.chromium.x"))


def test_a_symlink_reads_back_and_is_followed(kernel):
    put_string(kernel, "input.txt", TARGET)
    assert call(kernel, "symlink", TARGET, put_string(kernel, "/work/link", LINK)) == 0
    assert call(kernel, "symlink", TARGET, LINK) == -errno.EEXIST
    assert call(kernel, "readlink", LINK, SCRATCH + 0x1000, 64) == 9
    assert kernel.machine.read(SCRATCH + 0x1000, 9) == b"input.txt"
    assert stat.S_ISREG(_mode(kernel, "/work/link"))  # stat follows it to the working directory's file
    fd = open_path(kernel, "/work/link")
    assert call(kernel, "read", fd, SCRATCH + 0x1000, 5) == 5 and kernel.machine.read(SCRATCH + 0x1000, 5) == b"hello"
    put_string(kernel, "/tmp/nowhere", TARGET)
    assert call(kernel, "symlinkat", TARGET, (-100) & 0xFFFFFFFF, put_string(kernel, "/tmp/dangling", LINK)) == 0
    assert call(kernel, "stat64", LINK, STAT) == -errno.ENOENT
    assert call(kernel, "lstat64", LINK, STAT) == 0
    put_string(kernel, "/tmp/loop", TARGET)
    assert call(kernel, "symlink", TARGET, put_string(kernel, "/tmp/loop", LINK)) == 0
    assert call(kernel, "stat64", LINK, STAT) == -errno.ELOOP
    assert call(kernel, "symlink", put_string(kernel, "", TARGET), put_string(kernel, "/tmp/empty", LINK)) \
        == -errno.ENOENT


def test_fallocate_grows_a_file_keeps_its_size_or_punches_a_hole(kernel):
    fd = open_path(kernel, "/tmp/f", O_RDWR | O_CREAT)
    kernel.machine.write(SCRATCH + 0x1000, b"abcdef")
    assert call(kernel, "write", fd, SCRATCH + 0x1000, 6) == 6
    assert call(kernel, "fallocate", fd, 0, 0, 0, 4096, 0) == 0 and _size(kernel, fd) == 4096
    assert call(kernel, "fallocate", fd, 1, 0, 0, 8192, 0) == 0 and _size(kernel, fd) == 4096  # KEEP_SIZE
    assert call(kernel, "fallocate", fd, 3, 1, 0, 2, 0) == 0  # PUNCH_HOLE | KEEP_SIZE: bytes 1-2 zero
    assert call(kernel, "pread64", fd, SCRATCH + 0x1000, 6, 0, 0, 0) == 6
    assert kernel.machine.read(SCRATCH + 0x1000, 6) == b"a\0\0def"
    assert call(kernel, "fallocate", fd, 2, 0, 0, 1, 0) == -errno.EOPNOTSUPP  # a hole must keep the size
    assert call(kernel, "fallocate", fd, 0, 0, 0, 0, 0) == -errno.EINVAL
    assert call(kernel, "fallocate", open_path(kernel, "/tmp/f"), 0, 0, 0, 1, 0) == -errno.EBADF  # read-only
    assert call(kernel, "fallocate", 0, 0, 0, 0, 1, 0) == -errno.EBADF
    with pytest.raises(SystemCallFault, match="fallocate with mode 0x10"):
        call(kernel, "fallocate", fd, 0x10, 0, 0, 1, 0)  # FALLOC_FL_ZERO_RANGE


def test_each_thread_has_its_nice_value(kernel):
    assert call(kernel, "getpriority", 0, 0) == 20  # nice 0, in the kernel's 40..1 form
    assert call(kernel, "setpriority", 0, 0, (-8) & 0xFFFFFFFF) == 0
    tid = _spawn(kernel)  # made with its creator's nice value
    assert call(kernel, "getpriority", 0, tid) == 28
    assert call(kernel, "setpriority", 0, tid, 40) == 0 and call(kernel, "getpriority", 0, tid) == 1  # 19 at most
    assert call(kernel, "getpriority", 0, MAIN) == 28 and call(kernel, "getpriority", 1, 0) == 28  # the group: best
    assert call(kernel, "setpriority", 0, 99999, 0) == -errno.ESRCH
    assert call(kernel, "setpriority", 7, 0, 0) == -errno.EINVAL
    assert call(kernel, "sched_getattr", tid, SCRATCH + 0x1000, 56, 0) == 0
    size, policy, _, nice, priority = struct.unpack_from("<IIQiI", kernel.machine.read(SCRATCH + 0x1000, 24))
    assert (size, policy, nice, priority) == (56, 0, 19, 0)
    assert call(kernel, "sched_getattr", 0, SCRATCH + 0x1000, 40, 0) == -errno.EINVAL  # smaller than version 0


def test_sched_setattr_sets_the_nice_value_and_landlock_is_missing(kernel):
    kernel.machine.write(SCRATCH + 0x1000, struct.pack("<IIQiIQQQ", 48, 0, 0, 5, 0, 0, 0, 0))
    assert call(kernel, "sched_setattr", 0, SCRATCH + 0x1000, 0) == 0 and call(kernel, "getpriority", 0, 0) == 15
    kernel.machine.write(SCRATCH + 0x1000, struct.pack("<IIQiIQQQ", 48, 1, 0, 0, 10, 0, 0, 0))
    with pytest.raises(SystemCallFault, match="sched_setattr policy 1"):
        call(kernel, "sched_setattr", 0, SCRATCH + 0x1000, 0)
    assert call(kernel, "landlock_create_ruleset", 0, 0, 1) == -errno.ENOSYS  # as a kernel built without it


def test_mkdir_gives_the_mode_asked_under_the_umask(kernel):
    assert call(kernel, "mkdir", put_string(kernel, "/tmp/private"), 0o700) == 0
    assert _mode(kernel, "/tmp/private") == stat.S_IFDIR | 0o700  # what Chromium's singleton checks
    assert call(kernel, "mkdirat", (-100) & 0xFFFFFFFF, put_string(kernel, "/tmp/open"), 0o777) == 0
    assert _mode(kernel, "/tmp/open") == stat.S_IFDIR | 0o755
