"""The emulated Linux process's system calls, on a plain machine (pages in a
dict): what each call does to memory and to the process, that files are
read only inside the sysroot and the working directory (every escape
refused with ENOENT, the host file never opened), and that writes never
reach the host."""

from __future__ import annotations

import errno
import stat
import struct

import pytest
from linux_calls import PAGE, SCRATCH, PageMachine, call, open_path, put_string

from harness.linux.call_table import CALLS, SystemCallFault
from harness.linux.calls_files import STAT64
from harness.linux.files import WORKDIR, GuestError, GuestFiles
from harness.linux.kernel import FIXED_TIME, LinuxKernel
from harness.linux.memory import AddressSpace
from harness.linux.signals import deliver_pending

# ------------------------------------------------------------- paths


@pytest.mark.parametrize("path, contents", [
    ("/lib/libc.so.6", b"LIBC"),         # absolute: in the sysroot
    ("/lib/abs-link", b"LIBC"),          # an absolute symlink means the sysroot's path
    ("/lib/../lib/libc.so.6", b"LIBC"),  # .. inside the root
    ("input.txt", b"hello\nworld\n"),    # relative: in the working directory
    (f"{WORKDIR}/input.txt", b"hello\nworld\n"),
])
def test_paths_inside_the_roots_open(kernel, path, contents):
    fd = open_path(kernel, path)
    assert fd >= 3
    assert call(kernel, "read", fd, SCRATCH + 0x800, 100) == len(contents)
    assert kernel.machine.read(SCRATCH + 0x800, len(contents)) == contents


@pytest.mark.parametrize("path", [
    "/../outside/secret",      # .. above the sysroot
    "../outside/secret",       # .. above the working directory
    "sub/../../outside/secret",
    "/lib/out-link",           # a symlink to a host path outside
    "up-link",                 # a relative symlink climbing out of the working directory
    "/etc/passwd",             # absolute: looked up in the sysroot only, never on the host
])
def test_paths_escaping_the_roots_are_refused(kernel, roots, monkeypatch, path):
    import harness.linux.files as files

    opened = []
    real_read = files.read_input
    monkeypatch.setattr(files, "read_input", lambda p, kind: opened.append(str(p)) or real_read(p, kind))
    assert open_path(kernel, path) == -errno.ENOENT
    assert opened == []  # refused before any host file is read
    assert open_path(kernel, "/lib/libc.so.6") >= 3 and len(opened) == 1  # (the spy sees reads)


def test_symlink_loops_end_with_eloop(tmp_path):
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    with pytest.raises(GuestError) as caught:
        GuestFiles(None, str(tmp_path)).resolve("a")
    assert caught.value.code == errno.ELOOP


def test_no_sysroot_means_no_absolute_paths(tmp_path):
    with pytest.raises(GuestError) as caught:
        GuestFiles(None, str(tmp_path)).resolve("/lib/libc.so.6")
    assert caught.value.code == errno.ENOENT


def test_writes_stay_in_memory(kernel, roots):
    _, work, _ = roots
    fd = open_path(kernel, "input.txt", 0o1 | 0o1000)  # O_WRONLY | O_TRUNC
    kernel.machine.write(SCRATCH + 0x800, b"changed")
    assert call(kernel, "write", fd, SCRATCH + 0x800, 7) == 7
    assert (work / "input.txt").read_bytes() == b"hello\nworld\n"  # the host file as it was
    again = open_path(kernel, "input.txt")
    assert call(kernel, "read", again, SCRATCH + 0x900, 100) == 7  # the program sees what it wrote
    created = open_path(kernel, "new.txt", 0o1 | 0o100)  # O_WRONLY | O_CREAT
    assert created >= 3 and not (work / "new.txt").exists()
    assert call(kernel, "unlinkat", (-100) & 0xFFFFFFFF, put_string(kernel, "new.txt"), 0) == 0
    assert open_path(kernel, "new.txt") == -errno.ENOENT


# ------------------------------------------------------------- files


def test_stdin_stdout_stderr(kernel):
    assert call(kernel, "read", 0, SCRATCH + 0x800, 5) == 5
    assert kernel.machine.read(SCRATCH + 0x800, 5) == b"typed"
    kernel.machine.write(SCRATCH, b"out!err")
    vector = struct.pack("<IIII", SCRATCH, 2, SCRATCH + 2, 2)
    kernel.machine.write(SCRATCH + 0x100, vector)
    assert call(kernel, "writev", 1, SCRATCH + 0x100, 2) == 4
    assert call(kernel, "write", 2, SCRATCH + 4, 3) == 3
    assert bytes(kernel.stdout.data) == b"out!" and bytes(kernel.stderr.data) == b"err"
    assert call(kernel, "ioctl", 1, 0x5401, SCRATCH) == -errno.ENOTTY  # no terminal: full buffering
    assert call(kernel, "write", 9, SCRATCH, 1) == -errno.EBADF


def test_fstat64_layout(kernel):
    fd = open_path(kernel, "input.txt")
    assert call(kernel, "fstat64", fd, SCRATCH + 0x400) == 0
    fields = STAT64.unpack(kernel.machine.read(SCRATCH + 0x400, STAT64.size))
    assert STAT64.size == 104  # struct stat64 of ARM EABI
    mode, size, mtime = fields[2], fields[7], fields[12]
    assert stat.S_ISREG(mode) and size == 12 and mtime == 1_600_000_000


def test_statx_and_seek(kernel):
    assert call(kernel, "statx", (-100) & 0xFFFFFFFF, put_string(kernel, "input.txt"), 0, 0x7FF, SCRATCH + 0x400) == 0
    mode, size = struct.unpack_from("<H", kernel.machine.read(SCRATCH + 0x400 + 28, 2))[0], \
        struct.unpack("<Q", kernel.machine.read(SCRATCH + 0x400 + 40, 8))[0]
    assert stat.S_ISREG(mode) and size == 12
    mask, = struct.unpack("<I", kernel.machine.read(SCRATCH + 0x400, 4))
    assert mask == 0x7FF | 0x1000  # STATX_BASIC_STATS, and STATX_MNT_ID, which Linux 6.1 always gives
    assert struct.unpack("<IIQ", kernel.machine.read(SCRATCH + 0x400 + 0x88, 16)) == (0, 1, 1)  # dev 0:1, mount 1
    fd = open_path(kernel, "input.txt")
    assert call(kernel, "_llseek", fd, 0, 6, SCRATCH + 0x500, 0) == 0
    assert struct.unpack("<q", kernel.machine.read(SCRATCH + 0x500, 8))[0] == 6
    assert call(kernel, "read", fd, SCRATCH + 0x600, 5) == 5
    assert kernel.machine.read(SCRATCH + 0x600, 5) == b"world"
    assert call(kernel, "lseek", 1, 0, 0) == -errno.ESPIPE


def test_readlink_of_the_executable_and_a_bad_buffer(kernel):
    assert call(kernel, "readlink", put_string(kernel, "/proc/self/exe"), SCRATCH + 0x800, 100) == len("/bin/prog")
    assert kernel.machine.read(SCRATCH + 0x800, 9) == b"/bin/prog"
    assert call(kernel, "read", 0, 0x7000_0000, 4) == -errno.EFAULT  # unmapped buffer: EFAULT, no traceback


def test_getdents64_lists_a_directory(kernel):
    fd = call(kernel, "openat", (-100) & 0xFFFFFFFF, put_string(kernel, "/lib"), 0o40000)
    count = call(kernel, "getdents64", fd, SCRATCH + 0x800, 0x800)
    data, names, offset = kernel.machine.read(SCRATCH + 0x800, count), [], 0
    while offset < count:
        length = struct.unpack_from("<H", data, offset + 16)[0]
        names.append(data[offset + 19 : offset + length].split(b"\0")[0].decode())
        offset += length
    assert names == [".", "..", "abs-link", "libc.so.6", "out-link"]


# ------------------------------------------------------------- memory


def test_brk_grows_and_shrinks(kernel):
    assert call(kernel, "brk", 0) == 0x100000
    assert call(kernel, "brk", 0x103010) == 0x103010
    assert all(page in kernel.machine.pages for page in range(0x100000, 0x104000, PAGE))
    assert call(kernel, "brk", 0x101000) == 0x101000
    assert 0x102000 not in kernel.machine.pages


def test_mmap_places_below_the_ceiling_and_reads_files(kernel):
    anonymous = call(kernel, "mmap2", 0, 3 * PAGE, 3, 0x22, (-1) & 0xFFFFFFFF, 0)
    assert anonymous == 0x40000000 - 3 * PAGE
    fd = open_path(kernel, "/lib/libc.so.6")
    mapped = call(kernel, "mmap2", 0, PAGE, 5, 0x2, fd, 0)
    assert mapped == anonymous - PAGE and kernel.machine.read(mapped, 4) == b"LIBC"
    fixed = call(kernel, "mmap2", anonymous + PAGE, PAGE, 3, 0x32, (-1) & 0xFFFFFFFF, 0)  # MAP_FIXED over it
    assert fixed == anonymous + PAGE
    assert call(kernel, "munmap", anonymous, 3 * PAGE) == 0
    assert anonymous not in kernel.machine.pages
    assert call(kernel, "mprotect", anonymous, PAGE, 1) == -errno.ENOMEM  # no longer mapped


def test_mmap_never_takes_the_harness_pages(kernel):
    kernel.space.owned += ((0x30000000, 0x30001000),)
    kernel.space.take(0x30000000, 0x30001000)
    assert call(kernel, "mmap2", 0x30000000, PAGE, 3, 0x32, (-1) & 0xFFFFFFFF, 0) == -errno.EINVAL
    assert call(kernel, "mmap2", 0, 1 << 31, 3, 0x22, (-1) & 0xFFFFFFFF, 0) == -errno.ENOMEM


def test_mremap_moves_when_it_must(kernel):
    first = call(kernel, "mmap2", 0, PAGE, 3, 0x22, (-1) & 0xFFFFFFFF, 0)
    call(kernel, "mmap2", first + PAGE, PAGE, 3, 0x32, (-1) & 0xFFFFFFFF, 0)  # a neighbour above
    kernel.machine.write(first, b"keep")
    moved = call(kernel, "mremap", first, PAGE, 2 * PAGE, 1, 0)  # MREMAP_MAYMOVE
    assert moved != first and kernel.machine.read(moved, 4) == b"keep"
    assert call(kernel, "mremap", moved, 2 * PAGE, 4 * PAGE, 0, 0) in (moved, -errno.ENOMEM)


# ------------------------------------------------------------- the process


def test_exit_group_ends_the_run(kernel):
    call(kernel, "exit_group", 300)
    assert kernel.exit_status == 300 & 0xFF and kernel.machine.stopped


def test_abort_ends_with_the_signal(kernel):
    assert call(kernel, "tgkill", 4242, 4242, 6) == 0
    assert kernel.exit_status is None  # pending until the call returns to user mode
    assert deliver_pending(kernel) is None and kernel.exit_status == -6


def _now(kernel) -> tuple[int, int]:
    call(kernel, "clock_gettime64", 0, SCRATCH)
    return struct.unpack("<qI", kernel.machine.read(SCRATCH, 12))


def test_tls_clock_and_randomness_are_fixed(kernel):
    assert call(kernel, "set_tls", 0xABCD0) == 0 and kernel.machine.tls == 0xABCD0
    assert _now(kernel) == _now(kernel) == (FIXED_TIME, 0)  # reading the clock takes no time of its own
    call(kernel, "getrandom", SCRATCH, 16, 0)
    first = kernel.machine.read(SCRATCH, 16)
    again = LinuxKernel(PageMachine(), kernel.files, kernel.space, 0, None, "")
    assert again.random_bytes(16) == first  # the same on every run


def test_the_clock_moves_with_the_instructions_run_and_with_sleep(kernel):
    """A nanosecond an instruction, so that a busy loop that reads no clock
    sees time pass as on a device; nanosleep moves it by what it asks."""
    kernel.machine.executed = 2_500_000_123
    assert _now(kernel) == (FIXED_TIME + 2, 500_000_123)
    kernel.machine.write(SCRATCH + 0x100, struct.pack("<iI", 1, 600_000_000))
    assert call(kernel, "nanosleep", SCRATCH + 0x100, 0) == 0
    assert _now(kernel) == (FIXED_TIME + 4, 100_000_123)
    kernel.machine.write(SCRATCH + 0x100, struct.pack("<qI4x", FIXED_TIME + 10, 0))  # until an absolute time
    assert call(kernel, "clock_nanosleep_time64", 0, 1, SCRATCH + 0x100, 0) == 0
    assert _now(kernel) == (FIXED_TIME + 10, 0)
    kernel.machine.write(SCRATCH + 0x100, struct.pack("<iI", 0, 1_000_000_000))
    assert call(kernel, "nanosleep", SCRATCH + 0x100, 0) == -errno.EINVAL
    assert call(kernel, "times", 0) == 250  # CPU time in ticks of 10 ms: the instructions, not the sleeps


def test_uname_says_armv7l(kernel):
    call(kernel, "uname", SCRATCH)
    fields = [kernel.machine.read(SCRATCH + 65 * i, 65).split(b"\0")[0] for i in range(6)]
    assert fields[0] == b"Linux" and fields[4] == b"armv7l"


def test_an_unknown_system_call_is_a_fault_naming_it():
    machine = PageMachine()
    kernel = LinuxKernel(machine, GuestFiles(None, "."), AddressSpace([], 0x40000000), 0, None, "")
    with pytest.raises(SystemCallFault, match=r"unknown system call 999 \(0x3e7\) at pc 0x8000"):
        kernel.system_call(999, (0,) * 6, 0x8000)


def test_a_wait_no_thread_can_end_is_a_fault(kernel):
    kernel.machine.write(SCRATCH, struct.pack("<I", 5))
    assert call(kernel, "futex", SCRATCH, 0, 4) == -errno.EAGAIN  # the word changed: no wait
    with pytest.raises(SystemCallFault, match=f"a deadlock \\(thread 4242 on the futex at {SCRATCH:#x}\\)"):
        call(kernel, "futex", SCRATCH, 0, 5)


def test_numbers_match_the_toolchain_header():
    """The table's numbers are Linux's ARM EABI ones (asm/unistd-eabi.h of
    the cross toolchain, which `make toolchains` installs)."""
    header = "/usr/arm-linux-gnueabihf/include/asm/unistd-eabi.h"
    text = open(header).read()
    declared = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "#define" and parts[1].startswith("__NR_"):
            number = "".join(parts[2:]).strip("()").replace("__NR_SYSCALL_BASE+", "")
            declared[parts[1][5:]] = int(number)
    for number, handler in CALLS.items():
        if number < 0x0F0000:
            assert declared[handler.name] == number, handler.name


def test_a_pipe_carries_bytes_and_poll_sees_them(kernel):
    assert call(kernel, "pipe2", SCRATCH, 0) == 0
    read_end, write_end = struct.unpack("<ii", kernel.machine.read(SCRATCH, 8))
    polled = struct.pack("<ihh", read_end, 1, 0) + struct.pack("<ihh", write_end, 4, 0)
    kernel.machine.write(SCRATCH + 0x100, polled)
    assert call(kernel, "poll", SCRATCH + 0x100, 2, 0) == 1  # only the write end is ready
    kernel.machine.write(SCRATCH + 0x200, b"ping")
    assert call(kernel, "write", write_end, SCRATCH + 0x200, 4) == 4
    assert call(kernel, "poll", SCRATCH + 0x100, 2, 0) == 2
    assert call(kernel, "read", read_end, SCRATCH + 0x300, 16) == 4
    assert kernel.machine.read(SCRATCH + 0x300, 4) == b"ping"
    start = kernel.now_ns()
    kernel.machine.write(SCRATCH + 0x100, struct.pack("<ihh", read_end, 1, 0))
    assert call(kernel, "poll", SCRATCH + 0x100, 1, 20) == 0  # drained: nothing in 20 ms, on the emulated clock
    assert kernel.now_ns() == start + 20_000_000
    with pytest.raises(SystemCallFault, match="empty pipe \\(fd 3\\) with no other thread: it would wait forever"):
        call(kernel, "read", read_end, SCRATCH + 0x300, 16)  # a writer open, and no one to write


def test_a_pipe_without_writers_reads_as_ended_and_polls_forever_with_one_thread(kernel):
    assert call(kernel, "pipe2", SCRATCH, 0) == 0
    read_end, write_end = struct.unpack("<ii", kernel.machine.read(SCRATCH, 8))
    kernel.machine.write(SCRATCH + 0x100, struct.pack("<ihh", read_end, 1, 0))
    assert call(kernel, "close", write_end) == 0
    assert call(kernel, "read", read_end, SCRATCH + 0x300, 16) == 0  # no writer left: the end of the file
    assert call(kernel, "poll", SCRATCH + 0x100, 1, (-1) & 0xFFFFFFFF) == 1  # hung up: POLLHUP
    assert struct.unpack("<ihh", kernel.machine.read(SCRATCH + 0x100, 8))[2] == 0x10
    assert call(kernel, "pipe2", SCRATCH, 0) == 0
    read_end = struct.unpack("<ii", kernel.machine.read(SCRATCH, 8))[0]
    kernel.machine.write(SCRATCH + 0x100, struct.pack("<ihh", read_end, 1, 0))
    with pytest.raises(SystemCallFault, match="poll on fd 4 with nothing ready with no other thread"):
        call(kernel, "poll", SCRATCH + 0x100, 1, (-1) & 0xFFFFFFFF)


def test_network_sockets_are_refused(kernel):
    assert call(kernel, "socket", 2, 1, 0) == -errno.EAFNOSUPPORT


def test_ids_ignore_whatever_the_registers_hold(kernel):
    """Calls without arguments read no register (glibc leaves r0 as it was)."""
    assert call(kernel, "getuid32", 0xFFFFFFFF) == 0
    assert call(kernel, "getpid", 7) == call(kernel, "gettid", 0) == 4242
    assert call(kernel, "umask", 0o077) == 0o022


def test_mincore_says_every_mapped_page_is_resident(kernel):
    """Debian's diff asks mincore (call 219) before reading its inputs."""
    mapped = call(kernel, "mmap2", 0, 3 * PAGE, 3, 0x22, (-1) & 0xFFFFFFFF, 0)
    assert call(kernel, "mincore", mapped, 2 * PAGE + 1, SCRATCH) == 0
    assert kernel.machine.read(SCRATCH, 4) == b"\x01\x01\x01\x00"  # three pages, a byte each
    assert call(kernel, "mincore", mapped + 1, PAGE, SCRATCH) == -errno.EINVAL
    assert call(kernel, "munmap", mapped, 3 * PAGE) == 0
    assert call(kernel, "mincore", mapped, PAGE, SCRATCH) == -errno.ENOMEM
