"""MAP_SHARED mappings of files (harness.linux.shared_maps): those of a
file the program made share one set of bytes with each other and with the
file's reads and writes, as Linux's page cache; a host file's are copies,
and where the program could see one differ from its file, or where pages a
mapping has are not emulated, the run ends as a fault naming it."""

from __future__ import annotations

import pytest
from linux_calls import SCRATCH, call, open_path
from test_linux_process import runs_as_under_qemu

from harness.linux.call_table import SystemCallFault

O_RDONLY, O_WRONLY, O_RDWR, O_CREAT = 0, 1, 2, 0o100
EACCES = 13
PAGE = 0x1000
PROT_READ, PROT_RW, MAP_SHARED, MAP_PRIVATE = 1, 3, 1, 2


def _mapped(kernel, fd: int, protection: int, flags: int, size: int = PAGE) -> int:
    start = call(kernel, "mmap2", 0, size, protection, flags, fd, 0)
    assert 0 < start < 0xFFFFF000
    return start


def _write(kernel, fd: int, data: bytes = b"data", offset: int = 0) -> int:
    kernel.machine.write(SCRATCH, data)
    return call(kernel, "pwrite64", fd, SCRATCH, len(data), 0, offset, 0)


def _read(kernel, fd: int, count: int = 4, offset: int = 0) -> bytes:
    done = call(kernel, "pread64", fd, SCRATCH, count, 0, offset, 0)
    return kernel.machine.read(SCRATCH, done)


def _made(kernel, path: str = "/dev/shm/region", size: int = 2 * PAGE) -> int:
    fd = open_path(kernel, path, O_RDWR | O_CREAT)
    assert call(kernel, "ftruncate", fd, size) == 0
    return fd


def test_two_shared_mappings_of_a_file_see_each_others_writes(kernel):
    fd = _made(kernel)
    writer = _mapped(kernel, fd, PROT_RW, MAP_SHARED, 2 * PAGE)
    reader = _mapped(kernel, open_path(kernel, "/dev/shm/region"), PROT_READ, MAP_SHARED, 2 * PAGE)
    assert writer != reader
    kernel.machine.write(writer + PAGE + 8, b"ipcz")
    assert kernel.machine.read(reader + PAGE + 8, 4) == b"ipcz"
    assert call(kernel, "munmap", writer, 2 * PAGE) == 0  # the other mapping keeps the bytes
    assert kernel.machine.read(reader + PAGE + 8, 4) == b"ipcz"
    assert call(kernel, "mprotect", reader, PAGE, PROT_RW) == -EACCES  # its descriptor is not open for writing
    other = _mapped(kernel, fd, PROT_READ, MAP_SHARED, 2 * PAGE)
    assert call(kernel, "mprotect", other, PAGE, PROT_RW) == 0  # a part's protection: still one memory
    kernel.machine.write(other, b"more")
    assert _read(kernel, fd) == b"more" and kernel.machine.read(reader, 4) == b"more"


def test_a_mapping_needs_its_descriptor_open_as_linux_asks(kernel):
    """mmap2 of a descriptor not open for reading, or a shared writable
    mapping of one not open for writing: EACCES, as Linux checks, before any
    mapping changes; a private writable one needs reading only."""
    _made(kernel)
    read_only, write_only = open_path(kernel, "/dev/shm/region"), open_path(kernel, "/dev/shm/region", O_WRONLY)
    assert call(kernel, "mmap2", 0, PAGE, PROT_RW, MAP_SHARED, read_only, 0) == -EACCES
    assert call(kernel, "mmap2", 0, PAGE, PROT_READ, MAP_SHARED, write_only, 0) == -EACCES
    assert call(kernel, "mmap2", 0, PAGE, PROT_READ, MAP_PRIVATE, write_only, 0) == -EACCES
    assert _mapped(kernel, read_only, PROT_RW, MAP_PRIVATE)


def test_a_files_writes_and_reads_agree_with_its_shared_mapping(kernel):
    fd = _made(kernel, "/tmp/cache")
    start = _mapped(kernel, fd, PROT_RW, MAP_SHARED)
    assert _write(kernel, fd, b"from write", 100) == 10
    assert kernel.machine.read(start + 100, 10) == b"from write"
    kernel.machine.write(start + 200, b"from store")
    assert _read(kernel, fd, 10, 200) == b"from store"
    assert call(kernel, "ftruncate", fd, PAGE + 5) == 0  # within its mapped pages: the tail reads zeros
    assert call(kernel, "ftruncate", fd, 2 * PAGE) == 0
    assert _read(kernel, fd, 4, PAGE + 4) == b"\0\0\0\0"
    # a private mapping beside: its pages not yet written would show the shared one's stores (not emulated)
    with pytest.raises(SystemCallFault, match="MAP_PRIVATE and writable MAP_SHARED mappings of /tmp/cache"):
        _mapped(kernel, fd, PROT_RW, MAP_PRIVATE)


def test_a_file_grows_while_mapped_and_its_new_pages_map_with_it(kernel):
    fd = _made(kernel, "/dev/shm/region", PAGE)
    first = _mapped(kernel, fd, PROT_RW, MAP_SHARED)
    assert call(kernel, "ftruncate", fd, 3 * PAGE) == 0  # new pages after the mapped ones
    assert _write(kernel, fd, b"grown", 4 * PAGE) == 5  # a write past the end grows it too
    whole = _mapped(kernel, fd, PROT_RW, MAP_SHARED, 5 * PAGE)  # across the file's buffers: one range
    kernel.machine.write(first + 8, b"old")
    assert kernel.machine.read(whole + 8, 3) == b"old"
    assert kernel.machine.read(whole + 4 * PAGE, 5) == b"grown"
    kernel.machine.write(whole + PAGE - 2, b"span")
    assert _read(kernel, fd, 4, PAGE - 2) == b"span"


def test_mremap_grows_a_shared_mapping_with_the_files_next_pages(kernel):
    fd = _made(kernel, "/dev/shm/region", 4 * PAGE)
    start = _mapped(kernel, fd, PROT_READ, MAP_SHARED)
    _write(kernel, fd, b"next", 2 * PAGE)
    assert call(kernel, "mremap", start, PAGE, 2 * PAGE, 0, 0) == start  # in place: the space after it free
    blocker = call(kernel, "mmap2", start + 2 * PAGE, PAGE, PROT_READ, 0x22 | 0x10, -1 & 0xFFFFFFFF, 0)
    assert blocker == start + 2 * PAGE
    moved = call(kernel, "mremap", start, 2 * PAGE, 3 * PAGE, 1, 0)  # MREMAP_MAYMOVE: elsewhere, the file's pages
    assert moved not in (start, blocker)
    assert kernel.machine.read(moved + 2 * PAGE, 4) == b"next"
    _write(kernel, fd, b"late", PAGE)
    assert kernel.machine.read(moved + PAGE, 4) == b"late"
    assert kernel.machine.protections[moved] == PROT_READ
    assert call(kernel, "munmap", moved, 3 * PAGE) == 0
    assert call(kernel, "ftruncate", fd, PAGE) == 0  # no mapping left of it: free to shrink


def test_a_mapping_past_the_files_pages_or_a_truncation_short_of_them_ends_the_run_named(kernel):
    fd = _made(kernel, "/dev/shm/region", PAGE)
    with pytest.raises(SystemCallFault, match="MAP_SHARED mapping of /dev/shm/region past its end"):
        _mapped(kernel, fd, PROT_RW, MAP_SHARED, 2 * PAGE)
    assert call(kernel, "ftruncate", fd, 2 * PAGE) == 0
    start = _mapped(kernel, fd, PROT_RW, MAP_SHARED, 2 * PAGE)
    with pytest.raises(SystemCallFault, match="truncated from 8192 to 4096 bytes, short of its mapped pages"):
        call(kernel, "ftruncate", fd, PAGE)
    with pytest.raises(SystemCallFault, match="MAP_SHARED mapping of /dev/shm/region past its end"):
        call(kernel, "mremap", start, 2 * PAGE, 3 * PAGE, 1, 0)
    kernel.machine.write(start, b"kept")
    assert call(kernel, "munmap", start, 2 * PAGE) == 0
    assert call(kernel, "ftruncate", fd, 0) == 0  # no mapping left: the file alone
    assert call(kernel, "ftruncate", fd, 4) == 0
    assert _read(kernel, fd) == b"\0\0\0\0"


def test_a_host_files_shared_mapping_is_a_copy_faulting_where_it_could_differ(kernel):
    fd = open_path(kernel, "/lib/libc.so.6", O_RDWR)
    start = _mapped(kernel, fd, PROT_RW, MAP_SHARED)
    with pytest.raises(SystemCallFault, match="write to /lib/libc.so.6 through a descriptor while it is mapped"):
        _write(kernel, fd)
    with pytest.raises(SystemCallFault, match="read of /lib/libc.so.6 through a descriptor"):
        _read(kernel, fd)  # its mapping may have been written
    with pytest.raises(SystemCallFault, match="a second MAP_SHARED mapping of /lib/libc.so.6"):
        _mapped(kernel, open_path(kernel, "/lib/libc.so.6"), PROT_READ, MAP_SHARED)
    assert call(kernel, "munmap", start, PAGE) == 0
    assert _write(kernel, fd) == 4  # no mapping left: the file alone


LINES = (b"%s: the other mapping reads hello\n", b"%s: after write the mapping reads written\n",
         b"%s: after a store read gives stored\n", b"%s: unmapped one, the other reads hello\n",
         b"%s: half of it made writable, a store there reads through\n")
EXPECTED = b"".join(line % name for name in (b"shm", b"memfd") for line in LINES)


def test_shared_mappings_share_bytes_as_under_qemu(compiled):
    runs_as_under_qemu("shared_maps.c", EXPECTED, compiled)
