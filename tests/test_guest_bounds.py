"""What a hostile guest can make the host hold or do (issue 52), call by
call on a plain machine (tests/test_linux_syscalls.py's PageMachine): each
cap answers with the errno a kernel gives at its limit and allocates
nothing of the size asked, and no argument makes the system-call layer
raise anything but a guest's error or a named fault. The guards of whole
runs (the clock, memory, the CPU's mode) are in tests/test_guest_runs.py."""

from __future__ import annotations

import errno
import random
import struct
import time

import pytest
from linux_calls import SCRATCH, PageMachine, call, open_path, put_string

from harness.linux import calls_io, files, memory
from harness.linux.call_table import CALLS, SystemCallFault
from harness.linux.contents import MAX_FILE_SIZE, PAGE
from harness.linux.files import GuestFiles
from harness.linux.kernel import LinuxKernel
from harness.linux.memory import AddressSpace

O_WRONLY_CREAT = 0o1 | 0o100
O_NONBLOCK = 0o4000
BUFFER = SCRATCH + 0x800


def _new_file(kernel, name: str = "new.bin") -> int:
    fd = open_path(kernel, name, O_WRONLY_CREAT)
    assert fd >= 3
    return fd


def _llseek(kernel, fd: int, offset: int) -> int:
    return call(kernel, "_llseek", fd, offset >> 32, offset & 0xFFFFFFFF, BUFFER, 0)


# ------------------------------------------------------------ files


def test_a_write_far_past_the_end_stores_one_page_and_reads_back_a_hole(kernel):
    fd = _new_file(kernel)
    assert _llseek(kernel, fd, 3 << 30) == 0
    kernel.machine.write(SCRATCH, b"x")
    assert call(kernel, "write", fd, SCRATCH, 1) == 1
    assert kernel.files.store.held == PAGE  # one page, not 3 GiB of zeros
    node = kernel.fds[fd].node
    assert len(node.data) == (3 << 30) + 1
    assert node.data.read((3 << 30) - 2, 8) == b"\0\0x"
    assert node.data.read(12345, 4) == bytes(4)


def test_writes_stop_at_the_largest_file_and_seeks_past_it_fail(kernel):
    """32-bit Linux's largest file is 2^44 - 4096 bytes: a seek may reach
    it, a write there gets EFBIG and one across it a short count."""
    fd = _new_file(kernel)
    kernel.machine.write(SCRATCH, b"yz")
    assert _llseek(kernel, fd, 1 << 62) == -errno.EINVAL  # past MAX_LFS_FILESIZE: Linux refuses the seek
    assert _llseek(kernel, fd, MAX_FILE_SIZE) == 0
    assert call(kernel, "write", fd, SCRATCH, 2) == -errno.EFBIG
    low, high = (MAX_FILE_SIZE - 1) & 0xFFFFFFFF, (MAX_FILE_SIZE - 1) >> 32
    assert call(kernel, "pwrite64", fd, SCRATCH, 2, 0, low, high) == 1
    assert call(kernel, "pwrite64", fd, SCRATCH, 1, 0, 0, 1 << 31) == -errno.EINVAL  # a negative offset
    assert call(kernel, "pread64", fd, SCRATCH, 16, 0, 0xFFFFFFF8, 0x7FFFFFFF) == -errno.EINVAL  # past 2^63 - 1
    assert kernel.files.store.held == PAGE


def test_the_files_together_hold_at_most_the_store_cap_then_enospc(kernel, monkeypatch):
    kernel.files.store.cap = 8 * PAGE
    first, second = _new_file(kernel, "a"), _new_file(kernel, "b")
    kernel.machine.write(SCRATCH, bytes(range(256)) * 16)
    for _ in range(4):
        assert call(kernel, "write", first, SCRATCH, PAGE) == PAGE
    for _ in range(4):
        assert call(kernel, "write", second, SCRATCH, PAGE) == PAGE
    assert call(kernel, "write", first, SCRATCH, 1) == -errno.ENOSPC
    assert call(kernel, "unlink", put_string(kernel, "b")) == 0
    assert call(kernel, "close", second) == 0  # the last reference: its pages are free again
    assert kernel.files.store.held == 4 * PAGE
    assert call(kernel, "write", first, SCRATCH, PAGE) == PAGE


def test_opening_for_writing_copies_nothing(kernel):
    """Every writable open of the same file shares one node (a hostile
    program opened a large file thousands of times)."""
    fds = [open_path(kernel, "input.txt", 0o2) for _ in range(50)]
    assert len({id(kernel.fds[fd].node) for fd in fds}) == 1
    assert kernel.files.store.held == 0
    kernel.machine.write(SCRATCH, b"J")
    assert call(kernel, "write", fds[0], SCRATCH, 1) == 1
    assert call(kernel, "read", fds[1], BUFFER, 5) == 5
    assert kernel.machine.read(BUFFER, 5) == b"Jello"


def test_one_call_moves_at_most_max_transfer_bytes_all_its_buffers_together(kernel, monkeypatch):
    monkeypatch.setattr(calls_io, "MAX_TRANSFER", 3000)
    fd = _new_file(kernel)
    vector = b"".join(struct.pack("<II", SCRATCH, 2000) for _ in range(3))
    kernel.machine.write(BUFFER, vector)
    assert call(kernel, "writev", fd, BUFFER, 3) == 3000  # a short count, as Linux past MAX_RW_COUNT
    assert call(kernel, "write", fd, SCRATCH, 3500) == 3000  # cut before the buffer is read
    assert len(kernel.fds[fd].node.data) == 6000
    assert call(kernel, "write", fd, SCRATCH, 0xFFFFFFFF) == -errno.EFAULT  # past user memory: Linux's access_ok


def test_a_pipe_holds_64_kib(kernel):
    assert call(kernel, "pipe2", SCRATCH, O_NONBLOCK) == 0
    read_end, write_end = struct.unpack("<ii", kernel.machine.read(SCRATCH, 8))
    total = 0
    while (wrote := call(kernel, "write", write_end, SCRATCH, 4 * PAGE)) > 0:
        total += wrote
    assert (total, wrote) == (calls_io.PIPE_CAPACITY, -errno.EAGAIN)
    assert call(kernel, "pipe2", SCRATCH + 8, 0) == 0
    _, blocking = struct.unpack("<ii", kernel.machine.read(SCRATCH + 8, 8))
    for _ in range(calls_io.PIPE_CAPACITY // (4 * PAGE)):
        assert call(kernel, "write", blocking, SCRATCH, 4 * PAGE) == 4 * PAGE
    with pytest.raises(SystemCallFault, match="full pipe"):
        call(kernel, "write", blocking, SCRATCH, 1)


def test_descriptors_stop_at_1024(kernel):
    opened = 0
    while (fd := open_path(kernel, "input.txt")) >= 0:
        opened += 1
    assert (opened, fd) == (files.MAX_FDS - 3, -errno.EMFILE)
    assert call(kernel, "dup2", 0, 100_000) == -errno.EBADF
    assert call(kernel, "fcntl64", 0, 0, 5000) == -errno.EINVAL


def test_names_past_linux_limits_are_refused(kernel):
    assert open_path(kernel, "a" * 256) == -errno.ENAMETOOLONG
    kernel.machine.write(SCRATCH, b"b" * (3 * PAGE) + b"c" * PAGE)  # no NUL in the four mapped pages
    assert call(kernel, "openat", (-100) & 0xFFFFFFFF, SCRATCH, 0) == -errno.ENAMETOOLONG
    assert call(kernel, "openat", (-100) & 0xFFFFFFFF, 0x10, 0) == -errno.EFAULT


def test_a_name_that_is_not_utf8_is_a_name_like_any_other(kernel, roots):
    before = sorted(path.name for path in roots[1].iterdir())
    name = b"\xff\xfe-name"
    kernel.machine.write(SCRATCH, name + b"\0")
    fd = call(kernel, "openat", (-100) & 0xFFFFFFFF, SCRATCH, O_WRONLY_CREAT)
    assert fd >= 3
    assert call(kernel, "openat", (-100) & 0xFFFFFFFF, SCRATCH, 0) >= 3  # the same bytes find it again
    assert call(kernel, "stat64", SCRATCH, BUFFER) == 0
    assert call(kernel, "unlink", SCRATCH) == 0
    assert sorted(path.name for path in roots[1].iterdir()) == before  # nothing on the host


# ------------------------------------------------------------ memory


def test_mappings_stop_at_max_mappings_with_enomem(kernel, monkeypatch):
    monkeypatch.setattr(memory, "MAX_MAPPINGS", 20)
    from harness.linux import calls_memory
    monkeypatch.setattr(calls_memory, "MAX_MAPPINGS", 20)
    starts = []
    while (start := call(kernel, "mmap2", 0, PAGE, 3, 0x22, (-1) & 0xFFFFFFFF, 0)) > 0:
        starts.append(start)
    assert (len(starts), start) == (20, -errno.ENOMEM)
    assert call(kernel, "munmap", starts[5], PAGE) == 0  # one less
    assert call(kernel, "mmap2", 0, PAGE, 3, 0x22, (-1) & 0xFFFFFFFF, 0) > 0


def test_unmapping_the_middle_of_a_mapping_counts_two():
    space = memory.AddressSpace([], ceiling=0x40000000)
    space.take(0x10000, 0x20000)
    space.add_region(0x10000, 0x20000)
    space.release(0x14000, 0x15000)
    assert space.regions == 2
    space.release(0x10000, 0x20000)
    assert space.regions == 0


# ------------------------------------------------------------ every call, hostile arguments

HOSTILE = (0, 1, 0x10, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFF9C, 0xFFFF1000, SCRATCH, SCRATCH + 0x3FFF,
           1 << 20, 1024, 4096)
EXITS = {"exit", "exit_group"}


@pytest.mark.parametrize("number", sorted(CALLS))
def test_no_argument_makes_a_call_raise_anything_but_a_guest_error_or_a_named_fault(kernel, number):
    """Each emulated call, with every register set to each hostile value in
    turn and with 300 seeded mixes of them: a result or a SystemCallFault,
    never another exception (which the emulator would report as the
    system-call layer failing)."""
    handler = CALLS[number]
    if handler.name in EXITS:
        return  # ends the process: covered by tests/test_linux_syscalls.py
    picks = random.Random(number)
    cases = [(value,) * 6 for value in HOSTILE]
    cases += [tuple(picks.choice(HOSTILE) for _ in range(6)) for _ in range(300)]
    kernel.machine.write(SCRATCH, b"\xff" * PAGE)  # garbage where pointers point
    for arguments in cases:
        try:
            result = kernel.system_call(number, arguments, pc=0x1234)
        except SystemCallFault:
            continue
        assert 0 <= result <= 0xFFFFFFFF, (handler.name, arguments, result)
        if kernel.exit_status is not None:
            break
    assert kernel.files.store.held <= kernel.files.store.cap


def test_random_bytes_are_fast_and_repeat(kernel, roots):
    """getrandom(1 MiB) in a loop was 49 ms a call (a hash per 32 bytes)."""
    started = time.perf_counter()
    first = kernel.random_bytes(1 << 20)
    assert time.perf_counter() - started < 0.02
    assert len(first) == 1 << 20 and len(set(first[:4096])) > 200
    assert kernel.random_bytes(16) != first[:16]  # the stream goes on
    twin = LinuxKernel(PageMachine(), GuestFiles(None, str(roots[1])), AddressSpace([], ceiling=1 << 30), 0x100000,
                       None, "/bin/prog")
    assert twin.random_bytes(1 << 20) == first  # and is the same every run
