"""MAP_SHARED mappings of files are copies of their bytes
(harness.linux.shared_maps): where the program could see one differ from
its file, the run ends as a fault naming it, never a silent wrong read."""

from __future__ import annotations

import pytest
from linux_calls import SCRATCH, call, open_path

from harness.linux.call_table import SystemCallFault

O_RDONLY, O_RDWR, O_CREAT = 0, 2, 0o100
PAGE = 0x1000
PROT_READ, PROT_RW, MAP_SHARED, MAP_PRIVATE = 1, 3, 1, 2


def _mapped(kernel, fd: int, protection: int, flags: int) -> int:
    start = call(kernel, "mmap2", 0, PAGE, protection, flags, fd, 0)
    assert 0 < start < 0xFFFFF000
    return start


def _write(kernel, fd: int) -> int:
    kernel.machine.write(SCRATCH, b"data")
    return call(kernel, "pwrite64", fd, SCRATCH, 4, 0, 0, 0)


def test_a_file_written_while_mapped_shared_ends_the_run_named(kernel):
    fd = open_path(kernel, "/tmp/cache", O_RDWR | O_CREAT)
    assert _write(kernel, fd) == 4
    start = _mapped(kernel, fd, PROT_RW, MAP_SHARED)
    with pytest.raises(SystemCallFault, match="write to /tmp/cache through a descriptor while it is mapped MAP_SHA"):
        _write(kernel, fd)
    with pytest.raises(SystemCallFault, match="read of /tmp/cache through a descriptor"):
        call(kernel, "pread64", fd, SCRATCH, 4, 0, 0, 0)  # its mapping may have been written
    with pytest.raises(SystemCallFault, match="a second MAP_SHARED mapping of /tmp/cache"):
        _mapped(kernel, open_path(kernel, "/tmp/cache"), PROT_READ, MAP_SHARED)
    assert call(kernel, "munmap", start, PAGE) == 0
    assert _write(kernel, fd) == 4  # no mapping left: the file alone


def test_private_and_read_only_shared_mappings_are_copies_linux_would_show(kernel):
    fd = open_path(kernel, "/tmp/cache", O_RDWR | O_CREAT)
    assert _write(kernel, fd) == 4
    _mapped(kernel, fd, PROT_RW, MAP_PRIVATE)
    assert _write(kernel, fd) == 4
    reader = open_path(kernel, "/tmp/cache", O_RDONLY)
    _mapped(kernel, reader, PROT_READ, MAP_SHARED)  # never writable: reads of the file agree with it
    assert call(kernel, "pread64", reader, SCRATCH, 4, 0, 0, 0) == 4
