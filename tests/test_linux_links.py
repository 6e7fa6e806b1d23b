"""Hard links as Linux makes them (harness.linux.files.GuestFiles.link):
two names of one node in the guest's in-memory files, its data, inode and
link count shared; link and linkat's flags and errors; unlink and rename
over a name taking a link away (tests/linux_src/links.c, against
qemu-user); the host's files never touched; the kernel's own files a fault."""

from __future__ import annotations

import errno
import os
import struct

import pytest
from linux_calls import SCRATCH, call, open_path, put_string
from test_linux_process import runs_as_under_qemu

from harness.linux.call_table import SystemCallFault

STAT, OLD, NEW = SCRATCH + 0x2000, SCRATCH + 0x800, SCRATCH + 0xC00
AT_FDCWD, AT_EMPTY_PATH = (-100) & 0xFFFFFFFF, 0x1000
EXPECTED = (b"a 1\nlink a b: 0\na 2 b 2 fd 2 same 1\nread through a: hello world\nlink a b again: EEXIST\n"
            b"link missing: ENOENT\nlink d: EPERM\nlink into missing: ENOENT\nlink under a file: ENOTDIR\n"
            b"link s t: 0\nt is a symlink 1, s 2, a 2\nlinkat follow: 0\na 3 same 1\nunlink b: 0\na 2 fd 2\n"
            b"rename u a: 0\nu 2 a 2\nrename c a: 0\nfd 1 u 1 a 1\nunlink u: 0\nfd 0\n"
            b"linkat an unlinked file: ENOENT\nlinkat empty path: 0\nf 2 g 2 fd 2\n"
            b"linkat empty path without the flag: ENOENT\nlinkat the cwd: EPERM\nlinkat bad flags: EINVAL\n"
            b"statx g: 0\nstatx nlink 2\n")


def _links(kernel, path: str) -> tuple[int, int]:
    """(st_nlink, st_ino) of `path` by stat64."""
    assert call(kernel, "stat64", put_string(kernel, path, SCRATCH + 0x400), STAT) == 0
    nlink = struct.unpack_from("<I", kernel.machine.read(STAT + 20, 4))[0]
    return nlink, struct.unpack_from("<Q", kernel.machine.read(STAT + 96, 8))[0]


def test_links_behave_as_under_qemu(compiled):
    runs_as_under_qemu("links.c", EXPECTED, compiled)


def test_a_link_to_a_host_file_shares_its_node_and_leaves_the_host_as_it_was(kernel, roots):
    work = roots[1]
    before = sorted(os.listdir(work))
    assert call(kernel, "link", put_string(kernel, "input.txt", OLD), put_string(kernel, "/work/copy", NEW)) == 0
    assert _links(kernel, "input.txt") == _links(kernel, "/work/copy") and _links(kernel, "input.txt")[0] == 2
    fd = open_path(kernel, "/work/copy", 1 | 0o2000)  # O_WRONLY | O_APPEND
    kernel.machine.write(SCRATCH + 0x1000, b"!")
    assert call(kernel, "write", fd, SCRATCH + 0x1000, 1) == 1
    reader = open_path(kernel, "input.txt")
    size = call(kernel, "read", reader, SCRATCH + 0x1000, 64)
    assert kernel.machine.read(SCRATCH + 0x1000 + size - 1, 1) == b"!"  # one file's data under both names
    assert sorted(os.listdir(work)) == before and (work / "input.txt").read_bytes() == b"hello\nworld\n"
    assert call(kernel, "unlink", OLD) == 0 and _links(kernel, "/work/copy")[0] == 1
    assert call(kernel, "linkat", AT_FDCWD, put_string(kernel, "", OLD), AT_FDCWD, NEW, AT_EMPTY_PATH) \
        == -errno.EEXIST  # the working directory: the new name is checked first, as Linux


def test_the_kernels_own_files_are_not_linked_silently(kernel):
    with pytest.raises(SystemCallFault, match="link of /dev/null to /tmp/null"):
        call(kernel, "link", put_string(kernel, "/dev/null", OLD), put_string(kernel, "/tmp/null", NEW))
    with pytest.raises(SystemCallFault, match="link of .* to /proc/x"):
        call(kernel, "link", put_string(kernel, "/tmp", OLD), put_string(kernel, "/proc/x", NEW))
