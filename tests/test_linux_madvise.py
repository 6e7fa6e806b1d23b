"""madvise (harness.linux.calls_madvise) as Linux answers it, mapping by
mapping; private mappings of files (harness.linux.private_maps) and what
mremap keeps of a mapping.

qemu-user 7.2 answers 0 to every advice but MADV_DONTNEED (its
target_madvise), so the errors below are Linux's own, as a program run
natively on a Linux host gets them (mm/madvise.c)."""

from __future__ import annotations

import pytest
from linux_calls import SCRATCH, call, open_path
from test_linux_process import runs_as_under_qemu

from harness.linux.call_table import SystemCallFault

O_RDWR, O_CREAT = 2, 0o100
ENOMEM, EACCES, EINVAL = 12, 13, 22
PAGE = 0x1000
PROT_READ, PROT_RW = 1, 3
MAP_SHARED, MAP_PRIVATE, MAP_ANONYMOUS, MAP_FIXED = 1, 2, 0x20, 0x10
NO_FD = 0xFFFFFFFF
MADV_DONTNEED, MADV_FREE, MADV_REMOVE, MADV_HUGEPAGE, MADV_WIPEONFORK, MADV_POPULATE_WRITE = 4, 8, 9, 14, 18, 23


def _anonymous(kernel, flags: int = MAP_PRIVATE, size: int = 2 * PAGE, protection: int = PROT_RW,
               at: int = 0) -> int:
    return call(kernel, "mmap2", at, size, protection, flags | MAP_ANONYMOUS | (MAP_FIXED if at else 0), NO_FD, 0)


def _file(kernel, data: bytes, path: str = "/tmp/data") -> int:
    fd = open_path(kernel, path, O_RDWR | O_CREAT)
    kernel.machine.write(SCRATCH, data)
    assert call(kernel, "pwrite64", fd, SCRATCH, len(data), 0, 0, 0) == len(data)
    return fd


def _madvise(kernel, address: int, length: int, advice: int) -> int:
    return call(kernel, "madvise", address, length, advice)


EXPECTED = (b'private anonymous: madvise 0, then reads ""\n'
            b'shared anonymous: madvise 0, then reads "before"\n'
            b'shared /dev/shm file: madvise 0, then reads "before"\nshared /dev/shm file: the file reads "before"\n'
            b'shared memfd: madvise 0, then reads "before"\nshared memfd: the file reads "before"\n'
            b'private file: madvise 0, then reads "aaaaaaaa" and past its end 0 0 0 0\n')


def test_madvise_dontneed_drops_pages_as_under_qemu(compiled):
    runs_as_under_qemu("madvise.c", EXPECTED, compiled)


def test_a_private_file_mapping_reads_the_file_again(kernel):
    fd = _file(kernel, b"a" * 6000)
    start = call(kernel, "mmap2", 0, 2 * PAGE, PROT_READ, MAP_PRIVATE, fd, 0)
    assert call(kernel, "mprotect", start, 2 * PAGE, PROT_RW) == 0
    kernel.machine.write(start + 2, b"mine")
    kernel.machine.write(start + 7000, b"tail")
    assert _madvise(kernel, start + PAGE, PAGE, MADV_DONTNEED) == 0  # the second page alone
    assert kernel.machine.read(start, 8) == b"aamine" + b"aa"
    assert kernel.machine.read(start + 5998, 4) == b"aa\0\0" and kernel.machine.read(start + 7000, 4) == bytes(4)
    assert _madvise(kernel, start, PAGE, MADV_DONTNEED) == 0
    assert kernel.machine.read(start, 8) == b"a" * 8
    host = call(kernel, "mmap2", 0, PAGE, PROT_RW, MAP_PRIVATE, open_path(kernel, "/lib/libc.so.6"), 0)
    kernel.machine.write(host, b"XY")
    assert _madvise(kernel, host, PAGE, MADV_DONTNEED) == 0
    assert kernel.machine.read(host, 6) == b"LIBC\0\0"


def test_a_file_changed_under_a_private_mapping_ends_the_run_named(kernel):
    fd = _file(kernel, b"b" * PAGE)
    call(kernel, "mmap2", 0, PAGE, PROT_READ, MAP_PRIVATE, fd, 0)
    kernel.machine.write(SCRATCH, b"new")
    with pytest.raises(SystemCallFault, match="a write of /tmp/data while MAP_PRIVATE mapped"):
        call(kernel, "pwrite64", fd, SCRATCH, 3, 0, 8, 0)
    assert call(kernel, "pwrite64", fd, SCRATCH, 3, 0, PAGE, 0) == 3  # past the mapped bytes: nothing shows
    with pytest.raises(SystemCallFault, match="a truncation to 100 bytes of /tmp/data"):
        call(kernel, "ftruncate", fd, 100)
    with pytest.raises(SystemCallFault, match="MAP_PRIVATE and writable MAP_SHARED mappings of /tmp/data"):
        call(kernel, "mmap2", 0, PAGE, PROT_READ, MAP_SHARED, fd, 0)
    start = call(kernel, "mmap2", 0, 2 * PAGE, PROT_READ, MAP_PRIVATE, fd, PAGE // PAGE)
    with pytest.raises(SystemCallFault, match="/tmp/data mapped MAP_PRIVATE at .* past its end"):
        _madvise(kernel, start, 2 * PAGE, MADV_DONTNEED)


def test_madvise_answers_as_linux_does_for_each_kind_of_mapping(kernel):
    anonymous = _anonymous(kernel)
    shared = _anonymous(kernel, MAP_SHARED)
    kernel.machine.write(anonymous + 5, b"x")
    kernel.machine.write(shared + 5, b"y")
    assert _madvise(kernel, anonymous, PAGE, 77) == -EINVAL
    assert _madvise(kernel, anonymous + 1, PAGE, MADV_DONTNEED) == -EINVAL
    assert _madvise(kernel, anonymous, PAGE, MADV_HUGEPAGE) == -EINVAL  # no transparent huge pages on armmp
    assert _madvise(kernel, anonymous, 0, MADV_DONTNEED) == 0
    assert _madvise(kernel, anonymous, PAGE, MADV_FREE) == 0  # no memory pressure: the bytes stay
    assert kernel.machine.read(anonymous + 5, 1) == b"x"
    assert _madvise(kernel, shared, PAGE, MADV_FREE) == -EINVAL  # not anonymous memory: shmem
    assert _madvise(kernel, shared, PAGE, MADV_WIPEONFORK) == -EINVAL
    assert _madvise(kernel, anonymous, PAGE, MADV_REMOVE) == -EINVAL  # no file to punch
    assert _madvise(kernel, shared, PAGE, MADV_REMOVE) == 0 and kernel.machine.read(shared + 5, 1) == b"\0"
    private = call(kernel, "mmap2", 0, PAGE, PROT_READ, MAP_PRIVATE, _file(kernel, b"c" * 10), 0)
    assert _madvise(kernel, private, PAGE, MADV_FREE) == -EINVAL
    assert _madvise(kernel, private, PAGE, MADV_REMOVE) == -EACCES
    assert _madvise(kernel, private, PAGE, MADV_POPULATE_WRITE) == -EINVAL  # not writable
    assert call(kernel, "munmap", anonymous + PAGE, PAGE) == 0
    assert _madvise(kernel, anonymous, 2 * PAGE, MADV_DONTNEED) == -ENOMEM  # a hole: the mapped page dropped all the same
    assert kernel.machine.read(anonymous + 5, 1) == b"\0"


def test_madvise_remove_punches_a_hole_in_a_shared_files_pages(kernel):
    fd = open_path(kernel, "/dev/shm/region", O_RDWR | O_CREAT)
    assert call(kernel, "ftruncate", fd, 2 * PAGE) == 0
    start = call(kernel, "mmap2", 0, 2 * PAGE, PROT_RW, MAP_SHARED, fd, 0)
    kernel.machine.write(start + 5, b"q")
    kernel.machine.write(start + PAGE + 5, b"r")
    assert _madvise(kernel, start, 2 * PAGE, MADV_DONTNEED) == 0  # the page cache keeps them
    assert kernel.machine.read(start + 5, 1) == b"q"
    assert _madvise(kernel, start, PAGE, MADV_REMOVE) == 0
    assert call(kernel, "pread64", fd, SCRATCH, 1, 0, 5, 0) == 1 and kernel.machine.read(SCRATCH, 1) == b"\0"
    assert kernel.machine.read(start + 5, 1) == b"\0" and kernel.machine.read(start + PAGE + 5, 1) == b"r"


def test_mremap_keeps_what_a_mapping_is(kernel):
    """A private file mapping grown reads the file's next pages; moved, it
    keeps its protection and its file (madvise reads the file again)."""
    fd = _file(kernel, b"1" * PAGE + b"2" * PAGE + b"3" * PAGE)
    start = call(kernel, "mmap2", 0, PAGE, PROT_READ, MAP_PRIVATE, fd, 0)
    assert call(kernel, "mremap", start, 0, PAGE, 1, 0) == -EINVAL  # old size 0: duplicates shared pages alone
    assert call(kernel, "mremap", start, PAGE, 2 * PAGE, 0, 0) == start
    assert kernel.machine.read(start + PAGE, 2) == b"22"
    assert kernel.machine.protections[start + PAGE] == PROT_READ
    blocker = _anonymous(kernel, size=PAGE, at=start + 2 * PAGE)
    assert blocker == start + 2 * PAGE
    moved = call(kernel, "mremap", start, 2 * PAGE, 3 * PAGE, 1, 0)
    assert moved not in (start, blocker)
    assert kernel.machine.read(moved + 2 * PAGE, 2) == b"33"
    assert all(kernel.machine.protections[moved + page] == PROT_READ for page in (0, PAGE, 2 * PAGE))
    kernel.machine.raw.write(moved, b"XX")
    assert _madvise(kernel, moved, PAGE, MADV_DONTNEED) == 0 and kernel.machine.read(moved, 2) == b"11"
    assert _anonymous(kernel, size=PAGE, at=start) == start  # where it was: anonymous now, dropped to zeros
    kernel.machine.write(start, b"z")
    assert _madvise(kernel, start, PAGE, MADV_DONTNEED) == 0 and kernel.machine.read(start, 1) == b"\0"
