"""The system calls, devices and /proc files a program brings in expects
(issue 47), on the plain machine of tests/linux_calls.py: each
answers as Linux 6.1 does for one process alone in a sandbox without
network, and each the harness cannot answer faithfully ends the run as a
fault naming it."""

from __future__ import annotations

import errno
import re
import struct

import pytest
from linux_calls import SCRATCH, PageMachine, call, open_path, put_string

from harness.linux.call_names import NAMES
from harness.linux.call_table import ARM_PRIVATE, CALLS, SystemCallFault
from harness.linux.kernel import LinuxKernel

AT_FDCWD = (-100) & 0xFFFFFFFF
HEADER = "/usr/arm-linux-gnueabihf/include/asm/unistd-eabi.h"


# ------------------------------------------------------------- names


def test_the_name_table_is_the_toolchain_header():
    """Every call asm/unistd-eabi.h (Linux 6.1's ARM EABI table) defines,
    by number and name, and ARM's private calls; no other."""
    declared = {int(number): name for name, number in
                re.findall(r"#define __NR_(\w+) \(__NR_SYSCALL_BASE \+ (\d+)\)", open(HEADER).read())}
    assert len(declared) > 390
    assert {number: name for number, name in NAMES.items() if number < ARM_PRIVATE} == declared
    assert NAMES[ARM_PRIVATE + 2] == "cacheflush" and NAMES[ARM_PRIVATE + 5] == "set_tls"
    assert all(NAMES[number] == handler.name for number, handler in CALLS.items())


def test_an_unknown_call_is_named_when_linux_has_it(kernel):
    with pytest.raises(SystemCallFault, match=r"^unknown system call kexec_load \(347, 0x15b\) at pc 0x8000$"):
        kernel.system_call(347, (0,) * 6, 0x8000)
    with pytest.raises(SystemCallFault, match=r"^unknown system call 987 \(0x3db\) at pc 0x8000$"):
        kernel.system_call(987, (0,) * 6, 0x8000)


def test_stat_access_and_lstat_of_a_relative_path(kernel):
    """stat64, lstat64 and access pass AT_FDCWD on as -100: it was taken
    for a descriptor (EBADF), sign-converted twice."""
    path = put_string(kernel, "input.txt")
    assert call(kernel, "stat64", path, SCRATCH + 0x400) == 0
    assert call(kernel, "lstat64", path, SCRATCH + 0x400) == 0
    assert call(kernel, "access", path, 4) == 0
    assert call(kernel, "access", put_string(kernel, "missing"), 4) == -errno.ENOENT


# ------------------------------------------------------------- devices and links

BUFFER = SCRATCH + 0x800


def read_all(kernel, fd: int, size: int = 0x400) -> bytes:
    count = call(kernel, "read", fd, BUFFER, size)
    assert count >= 0, count
    return kernel.machine.read(BUFFER, count)


def readlink(kernel, path: str) -> bytes:
    count = call(kernel, "readlink", put_string(kernel, path), BUFFER, 0x200)
    assert count >= 0, (path, count)
    return kernel.machine.read(BUFFER, count)


def test_dev_null_zero_full(kernel):
    null, zero, full = (open_path(kernel, f"/dev/{name}", 2) for name in ("null", "zero", "full"))
    assert read_all(kernel, null) == b"" and call(kernel, "write", null, SCRATCH, 100) == 100
    assert read_all(kernel, zero, 5) == bytes(5) and call(kernel, "write", zero, SCRATCH, 7) == 7
    assert read_all(kernel, full, 3) == bytes(3) and call(kernel, "write", full, SCRATCH, 1) == -errno.ENOSPC
    assert call(kernel, "fstat64", null, SCRATCH + 0x400) == 0
    mode, rdev = struct.unpack_from("<I", kernel.machine.read(SCRATCH + 0x400 + 16, 4))[0], \
        struct.unpack_from("<Q", kernel.machine.read(SCRATCH + 0x400 + 32, 8))[0]
    assert mode == 0o20666 and rdev == 0x103  # a character device, 1:3


def test_urandom_is_the_runs_random_stream(kernel, roots):
    first = read_all(kernel, open_path(kernel, "/dev/urandom"), 16)
    again = LinuxKernel(PageMachine(), kernel.files, kernel.space, 0, None, "/bin/prog")
    assert first == again.random_bytes(16)  # the same bytes every run, as getrandom's
    assert read_all(kernel, open_path(kernel, "/dev/random"), 16) != first  # the stream goes on


def test_dev_tty_is_refused_without_a_terminal(kernel):
    assert open_path(kernel, "/dev/tty", 2) == -errno.ENXIO
    assert call(kernel, "stat64", put_string(kernel, "/dev/tty"), SCRATCH + 0x400) == 0  # it exists


def test_names_neither_dev_nor_proc_has(kernel):
    for path in ("/dev/sda", "/proc/self/mounts", "/proc/1/maps", "/proc/self/fd/77", "/dev/fd/77"):
        assert open_path(kernel, path) == -errno.ENOENT, path


def test_dev_stdin_and_fd_links_reach_the_open_files(kernel):
    assert readlink(kernel, "/dev/stdin") == b"/proc/self/fd/0"
    assert readlink(kernel, "/dev/fd") == b"/proc/self/fd"
    assert read_all(kernel, open_path(kernel, "/dev/stdin")) == b"typed in"
    fd = open_path(kernel, "input.txt")
    assert readlink(kernel, f"/proc/self/fd/{fd}") == b"/work/input.txt"
    assert read_all(kernel, open_path(kernel, f"/dev/fd/{fd}")) == b"hello\nworld\n"  # opened anew, from 0
    assert call(kernel, "pipe2", SCRATCH, 0) == 0
    read_end = struct.unpack("<i", kernel.machine.read(SCRATCH, 4))[0]
    inode = kernel.fds[read_end].node.inode
    assert readlink(kernel, f"/proc/self/fd/{read_end}") == b"pipe:[%d]" % inode
    listing = open_path(kernel, "/proc/self/fd", 0o40000)
    assert sorted(int(name) for name in directory_names(kernel, listing)[2:]) == sorted(kernel.fds)


def directory_names(kernel, fd: int) -> list[str]:
    count = call(kernel, "getdents64", fd, BUFFER, 0x800)
    data, names, offset = kernel.machine.read(BUFFER, count), [], 0
    while offset < count:
        length = struct.unpack_from("<H", data, offset + 16)[0]
        names.append(data[offset + 19 : offset + length].split(b"\0")[0].decode())
        offset += length
    return names


def test_proc_self_exe_is_a_link_to_the_program(kernel):
    assert readlink(kernel, "/proc/self/exe") == b"/bin/prog"
    assert readlink(kernel, "/proc/self") == b"4242"
    assert open_path(kernel, "/proc/self/exe") == -errno.ENOENT  # /bin/prog is not in this sysroot


def test_proc_files_are_empty_to_stat_and_refuse_writes(kernel):
    fd = open_path(kernel, "/proc/self/comm", 2)
    assert read_all(kernel, fd) == b"prog\n"
    assert call(kernel, "fstat64", fd, SCRATCH + 0x400) == 0
    assert struct.unpack_from("<Q", kernel.machine.read(SCRATCH + 0x400 + 48, 8))[0] == 0  # st_size, as procfs
    with pytest.raises(SystemCallFault, match="/proc/4242/comm"):  # procfs would rename the task
        call(kernel, "write", fd, SCRATCH, 3)
    status = open_path(kernel, "/proc/self/status", 1)
    assert call(kernel, "write", status, SCRATCH, 3) == -errno.EINVAL  # no write for it
    assert read_all(kernel, open_path(kernel, "/proc/sys/kernel/ngroups_max")) == b"65536\n"


# ------------------------------------------------------------- /proc/self/maps, stat, status

STACK = (0x7E000000, 0x7E010000)


@pytest.fixture
def process(roots):
    """A kernel whose exec left a stack and the vectors page (Image), as
    LinuxSystem.attach makes one."""
    from harness.linux.files import GuestFiles
    from harness.linux.maps import VECTORS, Vma
    from harness.linux.memory import AddressSpace
    from harness.linux.special_files import exec_image

    sysroot, work, _ = roots
    machine = PageMachine()
    machine.map(SCRATCH, 4 * PAGE)
    machine.map(STACK[0], STACK[1] - STACK[0])
    sp = STACK[1] - 0x100  # argc 1, argv "prog", no environment, AT_NULL
    machine.write(sp, struct.pack("<IIIIII", 1, STACK[1] - 0x10, 0, 0, 0, 0))
    machine.write(STACK[1] - 0x10, b"prog\0")
    space = AddressSpace([(SCRATCH, SCRATCH + 4 * PAGE)], ceiling=0x40000000, owned=[STACK])
    image = exec_image(machine, sp, vmas=(Vma(*STACK, "rw-", name="[stack]"), Vma(*VECTORS, name="[vectors]")),
                       live=(STACK, VECTORS[:2]))
    return LinuxKernel(machine, GuestFiles(str(sysroot), str(work)), space, brk=0x100000, stdin=None,
                       executable="/work/prog", image=image)


PAGE = 0x1000


def named(fields: str, name: str) -> str:
    """A line of a named mapping: the fields padded to 48 columns (25 +
    sizeof(void *) * 6 - 1 on 32-bit Linux), a space, the name."""
    return fields.ljust(48) + " " + name


def test_maps_follows_the_address_space(process):
    kernel = process
    anonymous = call(kernel, "mmap2", 0, 2 * PAGE, 3, 0x22, (-1) & 0xFFFFFFFF, 0)
    fd = open_path(kernel, "/lib/libc.so.6")
    mapped = call(kernel, "mmap2", 0, 2 * PAGE, 5, 0x2, fd, 0)
    assert call(kernel, "mprotect", mapped + PAGE, PAGE, 1) == 0
    assert call(kernel, "brk", 0x102000) == 0x102000
    text = read_all(kernel, open_path(kernel, "/proc/self/maps"), 0x800).decode()
    inode = kernel.fds[fd].node.inode
    assert text.splitlines() == [
        "00020000-00024000 rw-p 00000000 00:00 0 ",  # the buffers the test maps (anonymous, no name)
        named("00100000-00102000 rw-p 00000000 00:00 0 ", "[heap]"),
        f"{mapped:08x}-{mapped + PAGE:08x} r-xp 00000000 00:01 {inode}  /lib/libc.so.6",
        f"{mapped + PAGE:08x}-{anonymous:08x} r--p 00001000 00:01 {inode}  /lib/libc.so.6",
        f"{anonymous:08x}-{anonymous + 2 * PAGE:08x} rw-p 00000000 00:00 0 ",
        named("7e000000-7e010000 rw-p 00000000 00:00 0 ", "[stack]"),
        named("ffff0000-ffff1000 r-xp 00000000 00:00 0 ", "[vectors]"),
    ]
    assert call(kernel, "munmap", anonymous, 2 * PAGE) == 0
    assert f"\n{anonymous:08x}-" not in read_all(kernel, open_path(kernel, "/proc/self/maps"), 0x800).decode()


def test_stat_and_status_agree_with_maps(process):
    kernel = process
    assert call(kernel, "prctl", 15, put_string(kernel, "renamed-to-a-long-name")) == 0  # PR_SET_NAME
    fields = read_all(kernel, open_path(kernel, "/proc/self/stat")).decode().split()
    maps = read_all(kernel, open_path(kernel, "/proc/self/maps"), 0x800).decode().splitlines()
    size = sum(int(end, 16) - int(start, 16) for start, end in (line.split()[0].split("-") for line in maps))
    assert fields[:4] == ["4242", "(renamed-to-a-lo)", "R", "1"] and len(fields) == 52
    assert int(fields[22]) == size and int(fields[27]) == STACK[1] - 0x100  # vsize, startstack
    status = dict(line.split(":\t", 1) for line in read_all(kernel, open_path(kernel, "/proc/self/status"), 0x800)
                  .decode().splitlines())
    assert status["Name"] == "renamed-to-a-lo" and status["Pid"] == "4242" and status["Threads"] == "1"
    assert int(status["VmSize"].split()[0]) == size >> 10 and status["VmStk"].split()[0] == "64"
    assert read_all(kernel, open_path(kernel, "/proc/self/cmdline")) == b"prog\0"
    assert call(kernel, "prctl", 16, SCRATCH + 0x300) == 0  # PR_GET_NAME
    assert kernel.machine.read(SCRATCH + 0x300, 16) == b"renamed-to-a-lo\0"


# ------------------------------------------------------------- the file system


def test_statfs_is_one_tmpfs(kernel):
    path = put_string(kernel, "input.txt")
    assert call(kernel, "statfs64", path, 84, SCRATCH + 0x400) == 0
    kind, block, blocks, free = struct.unpack("<IIQQ", kernel.machine.read(SCRATCH + 0x400, 24))
    assert (kind, block, blocks) == (0x01021994, 4096, (256 << 20) // 4096) and free == blocks
    assert call(kernel, "statfs64", path, 88, SCRATCH + 0x400) == -errno.EINVAL  # not sizeof(struct statfs64)
    assert call(kernel, "fstatfs64", 0, 84, SCRATCH + 0x400) == 0
    assert call(kernel, "statfs64", put_string(kernel, "missing"), 84, SCRATCH + 0x400) == -errno.ENOENT


def test_directories_renames_and_removals(kernel):
    assert call(kernel, "mkdir", put_string(kernel, "made"), 0o755) == 0
    assert call(kernel, "mkdir", put_string(kernel, "made"), 0o755) == -errno.EEXIST
    fd = open_path(kernel, "made/file", 0o101)  # O_WRONLY | O_CREAT
    kernel.machine.write(BUFFER, b"data")
    assert call(kernel, "write", fd, BUFFER, 4) == 4
    assert directory_names(kernel, open_path(kernel, "made", 0o40000)) == [".", "..", "file"]
    put_string(kernel, "made/file", SCRATCH + 0x100)
    put_string(kernel, "moved", SCRATCH + 0x200)
    assert call(kernel, "rename", SCRATCH + 0x100, SCRATCH + 0x200) == 0
    assert read_all(kernel, open_path(kernel, "moved")) == b"data"
    assert open_path(kernel, "made/file") == -errno.ENOENT
    put_string(kernel, "input.txt", SCRATCH + 0x100)
    assert call(kernel, "renameat2", AT_FDCWD, SCRATCH + 0x200, AT_FDCWD, SCRATCH + 0x100, 1) == -errno.EEXIST
    assert call(kernel, "unlinkat", AT_FDCWD, put_string(kernel, "made"), 0) == -errno.EISDIR
    assert call(kernel, "rmdir", put_string(kernel, "made")) == 0
    assert "made" not in directory_names(kernel, open_path(kernel, ".", 0o40000))
    assert call(kernel, "rmdir", put_string(kernel, "sub")) == 0  # the host's, empty: gone for the program
    with pytest.raises(SystemCallFault, match="moving a directory"):
        call(kernel, "rename", put_string(kernel, "/lib"), put_string(kernel, "/lib2", SCRATCH + 0x100))


def test_truncate_sync_and_locks(kernel):
    fd = open_path(kernel, "input.txt", 2)
    assert call(kernel, "ftruncate64", fd, 0, 5, 0) == 0
    assert call(kernel, "fstat64", fd, SCRATCH + 0x400) == 0
    assert struct.unpack_from("<Q", kernel.machine.read(SCRATCH + 0x400 + 48, 8))[0] == 5
    assert call(kernel, "ftruncate64", open_path(kernel, "input.txt"), 0, 1, 0) == -errno.EINVAL  # read-only
    assert call(kernel, "truncate64", put_string(kernel, "input.txt"), 0, 2, 0) == 0
    assert read_all(kernel, open_path(kernel, "input.txt")) == b"he"
    assert call(kernel, "truncate64", put_string(kernel, "sub"), 0, 0, 0) == -errno.EISDIR
    assert call(kernel, "fsync", fd) == call(kernel, "fdatasync", fd) == call(kernel, "sync") == 0
    assert call(kernel, "fsync", 1) == -errno.EINVAL  # stdout is a pipe: no fsync
    assert call(kernel, "flock", fd, 2 | 4) == 0 and call(kernel, "flock", fd, 3) == -errno.EINVAL
    kernel.machine.write(BUFFER, struct.pack("<hh4xqqi4x", 1, 0, 0, 0, 0))  # a write lock on the whole file
    assert call(kernel, "fcntl64", fd, 13, BUFFER) == 0  # F_SETLK64: granted
    assert call(kernel, "fcntl64", fd, 12, BUFFER) == 0  # F_GETLK64: no other holder
    assert struct.unpack_from("<h", kernel.machine.read(BUFFER, 2))[0] == 2  # F_UNLCK
    kernel.machine.write(BUFFER, struct.pack("<hh4xqqi4x", 1, 0, 0, 0, 0))
    assert call(kernel, "fcntl64", open_path(kernel, "input.txt"), 13, BUFFER) == -errno.EBADF  # not writable
    kernel.machine.write(BUFFER, struct.pack("<hh4xqqi4x", 1, 0, 0, 0, 7))
    assert call(kernel, "fcntl64", fd, 37, BUFFER) == -errno.EINVAL  # F_OFD_SETLK: l_pid must be 0
    assert call(kernel, "fcntl64", fd, 99, 0) == -errno.EINVAL
    with pytest.raises(SystemCallFault, match="F_SETOWN"):
        call(kernel, "fcntl64", fd, 8, 4242)


def test_modes_are_kept_owners_and_times_are_not_pretended(kernel):
    path = put_string(kernel, "input.txt")
    assert call(kernel, "chmod", path, 0o600) == 0
    assert call(kernel, "stat64", path, SCRATCH + 0x400) == 0
    assert struct.unpack_from("<I", kernel.machine.read(SCRATCH + 0x400 + 16, 4))[0] == 0o100600
    assert call(kernel, "fchown32", 0, 0, (-1) & 0xFFFFFFFF) == 0  # root's already
    with pytest.raises(SystemCallFault, match="chown to 1000"):
        call(kernel, "chown32", path, 1000, 1000)
    kernel.machine.write(BUFFER, struct.pack("<qi4xqi4x", 0, (1 << 30) - 2, 0, (1 << 30) - 2))  # UTIME_OMIT twice
    assert call(kernel, "utimensat_time64", AT_FDCWD, path, BUFFER, 0) == 0
    with pytest.raises(SystemCallFault, match="file times"):
        call(kernel, "utimensat_time64", AT_FDCWD, path, 0, 0)  # now: stat would not show it
    assert call(kernel, "lgetxattr", path, put_string(kernel, "security.selinux", SCRATCH + 0x100), BUFFER,
                64) == -errno.ENODATA
    assert call(kernel, "llistxattr", path, BUFFER, 64) == 0


def test_chdir_moves_relative_paths(kernel):
    assert call(kernel, "chdir", put_string(kernel, "sub")) == 0
    assert call(kernel, "getcwd", BUFFER, 64) == len("/work/sub") + 1
    assert open_path(kernel, "../input.txt") >= 3
    assert call(kernel, "fchdir", open_path(kernel, "/lib", 0o40000)) == 0
    assert read_all(kernel, open_path(kernel, "libc.so.6")) == b"LIBC"
    assert call(kernel, "chdir", put_string(kernel, "/lib/libc.so.6")) == -errno.ENOTDIR


def test_memfd_is_a_file_in_memory_with_seals(kernel):
    fd = call(kernel, "memfd_create", put_string(kernel, "buffer"), 2)  # MFD_ALLOW_SEALING
    kernel.machine.write(BUFFER, b"abc")
    assert call(kernel, "write", fd, BUFFER, 3) == 3
    assert call(kernel, "lseek", fd, 0, 0) == 0 and read_all(kernel, fd) == b"abc"
    assert readlink(kernel, f"/proc/self/fd/{fd}") == b"/memfd:buffer (deleted)"
    assert call(kernel, "fcntl64", fd, 3, 0) == 0x20002  # O_RDWR | O_LARGEFILE
    assert call(kernel, "fcntl64", fd, 1034, 0) == 0  # F_GET_SEALS
    assert call(kernel, "fcntl64", fd, 1033, 4 | 8) == 0  # F_SEAL_GROW | F_SEAL_WRITE
    assert call(kernel, "write", fd, BUFFER, 3) == -errno.EPERM
    assert call(kernel, "ftruncate", fd, 10) == -errno.EPERM
    unsealable = call(kernel, "memfd_create", put_string(kernel, "plain"), 0)
    assert call(kernel, "fcntl64", unsealable, 1034, 0) == 1  # F_SEAL_SEAL
    assert call(kernel, "fcntl64", unsealable, 1033, 8) == -errno.EPERM
    assert call(kernel, "fcntl64", open_path(kernel, "input.txt"), 1034, 0) == -errno.EINVAL  # not a memfd
    assert call(kernel, "memfd_create", put_string(kernel, "x" * 249), 0) >= 3
    assert call(kernel, "memfd_create", put_string(kernel, "x" * 250), 0) == -errno.EINVAL  # past NAME_MAX


# ------------------------------------------------------------- events


def test_eventfd_counts(kernel):
    fd = call(kernel, "eventfd2", 2, 0o4000)  # EFD_NONBLOCK
    assert readlink(kernel, f"/proc/self/fd/{fd}") == b"anon_inode:[eventfd]"
    assert call(kernel, "read", fd, BUFFER, 4) == -errno.EINVAL  # fewer than 8 bytes
    assert call(kernel, "read", fd, BUFFER, 8) == 8 and kernel.machine.read(BUFFER, 8) == struct.pack("<Q", 2)
    assert call(kernel, "read", fd, BUFFER, 8) == -errno.EAGAIN
    kernel.machine.write(BUFFER, struct.pack("<Q", 5))
    assert call(kernel, "write", fd, BUFFER, 8) == 8
    kernel.machine.write(BUFFER, struct.pack("<Q", (1 << 64) - 1))
    assert call(kernel, "write", fd, BUFFER, 8) == -errno.EINVAL
    semaphore = call(kernel, "eventfd2", 2, 1)  # EFD_SEMAPHORE, blocking
    assert call(kernel, "read", semaphore, BUFFER, 8) == 8 and kernel.machine.read(BUFFER, 8) == struct.pack("<Q", 1)
    assert call(kernel, "read", semaphore, BUFFER, 8) == 8
    assert call(kernel, "eventfd2", 0, 0x100) == -errno.EINVAL
    with pytest.raises(SystemCallFault, match="eventfd whose counter is 0 \\(fd 4\\) with no other thread: it would wait forever"):
        call(kernel, "read", semaphore, BUFFER, 8)


def test_epoll_reports_what_poll_would(kernel):
    epfd = call(kernel, "epoll_create1", 0)
    event = call(kernel, "eventfd2", 0, 0)
    kernel.machine.write(SCRATCH + 0x100, struct.pack("<I4xQ", 1, 0xABCDEF0123))  # EPOLLIN, data
    assert call(kernel, "epoll_ctl", epfd, 1, event, SCRATCH + 0x100) == 0
    assert call(kernel, "epoll_ctl", epfd, 1, event, SCRATCH + 0x100) == -errno.EEXIST
    assert call(kernel, "epoll_ctl", epfd, 1, open_path(kernel, "input.txt"), SCRATCH + 0x100) == -errno.EPERM
    assert call(kernel, "epoll_wait", epfd, BUFFER, 4, 0) == 0  # counter 0: not readable
    start = kernel.now_ns()
    assert call(kernel, "epoll_pwait", epfd, BUFFER, 4, 10, 0, 8) == 0  # a finite wait ends with nothing
    assert kernel.now_ns() == start + 10_000_000  # 10 ms later on the emulated clock
    kernel.machine.write(SCRATCH + 0x200, struct.pack("<Q", 1))
    assert call(kernel, "write", event, SCRATCH + 0x200, 8) == 8
    assert call(kernel, "epoll_wait", epfd, BUFFER, 4, (-1) & 0xFFFFFFFF) == 1
    assert kernel.machine.read(BUFFER, 16) == struct.pack("<I4xQ", 1, 0xABCDEF0123)
    assert call(kernel, "close", event) == 0  # closed: no longer in the set
    assert call(kernel, "epoll_wait", epfd, BUFFER, 4, 0) == 0
    with pytest.raises(SystemCallFault, match="EPOLLET"):
        kernel.machine.write(SCRATCH + 0x100, struct.pack("<I4xQ", 1 | 1 << 31, 0))
        call(kernel, "epoll_ctl", epfd, 1, call(kernel, "eventfd2", 0, 0), SCRATCH + 0x100)
    with pytest.raises(SystemCallFault, match="epoll_wait on an empty set with nothing ready with no other thread"):
        call(kernel, "epoll_wait", epfd, BUFFER, 4, (-1) & 0xFFFFFFFF)


def test_select_as_poll(kernel):
    assert call(kernel, "pipe2", SCRATCH, 0) == 0
    read_end, write_end = struct.unpack("<ii", kernel.machine.read(SCRATCH, 8))
    reads, writes = SCRATCH + 0x100, SCRATCH + 0x180
    kernel.machine.write(reads, struct.pack("<I", 1 << read_end))
    kernel.machine.write(writes, struct.pack("<I", 1 << write_end))
    kernel.machine.write(SCRATCH + 0x200, struct.pack("<qi4x", 1, 0))
    assert call(kernel, "pselect6_time64", 32, reads, writes, 0, SCRATCH + 0x200, 0) == 1
    assert kernel.machine.read(reads, 4) == bytes(4)
    assert struct.unpack("<I", kernel.machine.read(writes, 4))[0] == 1 << write_end
    kernel.machine.write(reads, struct.pack("<I", 1 << 30))
    assert call(kernel, "_newselect", 32, reads, 0, 0, 0) == -errno.EBADF
    kernel.machine.write(reads, struct.pack("<I", 1 << read_end))
    with pytest.raises(SystemCallFault, match="select on fd 3 with nothing ready with no other thread"):
        call(kernel, "_newselect", 32, reads, 0, 0, 0)


def test_refused_sources_of_events(kernel):
    assert call(kernel, "socket", 2, 0x80001, 0) == -errno.EAFNOSUPPORT  # AF_INET: no network built in
    assert call(kernel, "socket", 10, 2, 0) == -errno.EAFNOSUPPORT  # AF_INET6
    assert call(kernel, "socket", 16, 3, 0) == -errno.EAFNOSUPPORT  # AF_NETLINK: nor netlink
    assert call(kernel, "socket", 2, 0x40, 0) == -errno.EINVAL  # not a type flag
    assert call(kernel, "socketpair", 2, 1, 0, SCRATCH) == -errno.EAFNOSUPPORT
    assert call(kernel, "inotify_init1", 0) == -errno.EMFILE
    assert call(kernel, "inotify_init1", 1) == -errno.EINVAL


# ------------------------------------------------------------- the process


def test_no_other_process(kernel):
    assert call(kernel, "fork") == -errno.EAGAIN and call(kernel, "vfork") == -errno.EAGAIN
    kernel.machine.write(SCRATCH + 0x100, struct.pack("<II", SCRATCH, 0))
    assert call(kernel, "execve", put_string(kernel, "/lib/libc.so.6"), SCRATCH + 0x100, 0) == -errno.EACCES
    assert call(kernel, "execve", put_string(kernel, "/bin/none"), SCRATCH + 0x100, 0) == -errno.ENOENT
    assert call(kernel, "wait4", (-1) & 0xFFFFFFFF, 0, 0, 0) == -errno.ECHILD
    assert call(kernel, "getrusage", 0, BUFFER) == 0 and kernel.machine.read(BUFFER + 8, 64) == bytes(64)
    assert call(kernel, "getrusage", 5, BUFFER) == -errno.EINVAL


def test_scheduling_groups_and_capabilities(kernel):
    assert call(kernel, "sched_getscheduler", 0) == 0 and call(kernel, "sched_getscheduler", 7) == -errno.ESRCH
    assert call(kernel, "sched_getparam", 4242, BUFFER) == 0
    assert call(kernel, "sched_get_priority_max", 1) == 99 and call(kernel, "sched_get_priority_min", 2) == 1
    assert call(kernel, "sched_get_priority_max", 0) == 0 and call(kernel, "sched_get_priority_max", 4) == -errno.EINVAL
    kernel.machine.write(BUFFER, struct.pack("<I", 1))
    assert call(kernel, "sched_setaffinity", 0, 4, BUFFER) == 0
    kernel.machine.write(BUFFER, struct.pack("<I", 2))
    assert call(kernel, "sched_setaffinity", 0, 4, BUFFER) == -errno.EINVAL  # no CPU it has
    assert call(kernel, "getpgrp") == 4242 and call(kernel, "getsid", 0) == 1
    assert call(kernel, "setpgid", 0, 0) == 0 and call(kernel, "setpgid", 0, 99) == -errno.EPERM
    assert call(kernel, "setsid") == -errno.EPERM  # it leads a process group
    assert call(kernel, "getgroups32", 0, 0) == 0
    kernel.machine.write(BUFFER, struct.pack("<Ii", 0x20080522, 0))
    assert call(kernel, "capget", BUFFER, BUFFER + 8) == 0
    assert struct.unpack("<6I", kernel.machine.read(BUFFER + 8, 24)) == (0xFFFFFFFF, 0xFFFFFFFF, 0, 0x1FF, 0x1FF, 0)
    kernel.machine.write(BUFFER, struct.pack("<Ii", 1, 0))
    assert call(kernel, "capget", BUFFER, BUFFER + 8) == -errno.EINVAL
    assert struct.unpack("<I", kernel.machine.read(BUFFER, 4))[0] == 0x20080522  # the version Linux prefers


def test_prctl_and_personality(kernel):
    assert call(kernel, "prctl", 3) == 1  # PR_GET_DUMPABLE
    assert call(kernel, "prctl", 4, 0) == 0 and call(kernel, "prctl", 3) == 0
    assert call(kernel, "prctl", 4, 2) == -errno.EINVAL
    assert call(kernel, "prctl", 1, 9) == 0 and call(kernel, "prctl", 2, BUFFER) == 0  # PDEATHSIG
    assert struct.unpack("<i", kernel.machine.read(BUFFER, 4))[0] == 9
    assert call(kernel, "prctl", 38, 1, 0, 0, 0) == 0 and call(kernel, "prctl", 39) == 1  # NO_NEW_PRIVS
    assert call(kernel, "prctl", 0x53564D41, 0, SCRATCH, PAGE, 0) == -errno.EINVAL  # PR_SET_VMA: not in 6.1
    assert call(kernel, "prctl", 9999) == -errno.EINVAL
    with pytest.raises(SystemCallFault, match="PR_SET_SECCOMP"):
        call(kernel, "prctl", 22, 2, 0)
    assert call(kernel, "personality", 0xFFFFFFFF) == 0
    assert call(kernel, "personality", 0x0040000) == 0 and call(kernel, "personality", 0xFFFFFFFF) == 0x0040000


def test_an_acl_that_is_the_mode_sets_the_mode(kernel):
    """sed -i copies its input's ACL to the file it writes: a minimal one
    (owner, group, other) is the mode, anything else would be kept."""
    path = put_string(kernel, "input.txt")
    name = put_string(kernel, "system.posix_acl_access", SCRATCH + 0x100)
    kernel.machine.write(BUFFER, struct.pack("<I", 2) + struct.pack("<HHIHHIHHI", 1, 6, 0, 4, 4, 0, 0x20, 0, 0))
    assert call(kernel, "setxattr", path, name, BUFFER, 28, 0) == 0
    assert call(kernel, "stat64", path, SCRATCH + 0x400) == 0
    assert struct.unpack_from("<I", kernel.machine.read(SCRATCH + 0x400 + 16, 4))[0] == 0o100640
    with pytest.raises(SystemCallFault, match="user.note: extended attributes are not kept"):
        call(kernel, "setxattr", path, put_string(kernel, "user.note", SCRATCH + 0x100), BUFFER, 4, 0)


# ------------------------------------------------------------- a program


def test_a_program_reads_proc_and_dev_as_under_qemu():
    """Started by a relative name, the program still finds /proc/self/exe
    absolute, its own stack on the [stack] line, and an eventfd readable
    through epoll once written to."""
    from test_linux_process import build, qemu

    from harness.linux.process import LinuxRun, LinuxSystem
    from harness.linux_verify.verify import process_program
    from harness.verify.stops import verify_program

    program = build("special.c", "-static")
    system = LinuxSystem(LinuxRun(program, (), None, ".", None, argv0="special"))
    result = verify_program(process_program(system), [], system=system)
    assert result.fault is None
    outcome = system.outcome()
    assert (outcome.exit_status, outcome.stdout) == qemu(program)
    assert outcome.stdout == (b"exe absolute: 1\nlocal on [stack]: 1\n/dev/null: read 0, write 1\n"
                              b"/dev/zero: read 8, first 0\nready before: 0\nready after: 1, data 77, counter 5\n")


def test_clone3_falls_back_and_a_process_is_refused_as_fork_is(kernel):
    """glibc's pthread_create tries clone3 and, refused as a container
    refuses it, clone (tests/test_linux_threads.py); a process (glibc's
    fork) is refused as fork is, and one sharing memory without being a
    thread (vfork's kind) ends the run, named."""
    assert call(kernel, "clone3", SCRATCH, 88) == -errno.ENOSYS
    assert call(kernel, "clone", 0x01200011, 0, 0, 0, 0) == -errno.EAGAIN  # SIGCHLD | CLONE_CHILD_*TID: a fork
    with pytest.raises(SystemCallFault, match="without CLONE_THREAD"):
        call(kernel, "clone", 0x4111, SCRATCH, 0, 0, 0)  # CLONE_VM | CLONE_VFORK | SIGCHLD: posix_spawn's
