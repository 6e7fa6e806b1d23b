"""Files the kernel makes rather than a disk holds: the devices of /dev and
the views of the process in /proc/self. GuestFiles.lookup asks here first
for a path under /dev or /proc (the sysroot has neither); a name this
module does not know there goes on to the sysroot, which has no such file:
ENOENT, as for any file Linux does not have.

/dev/urandom and /dev/random give the process's random stream
(LinuxKernel.random_bytes, as getrandom does): the same bytes on every run.
/proc files are made when they are looked up (Linux makes them at the
first read: the same for a program that opens and reads them), their
size is 0 as procfs says, and a write to them fails with EINVAL as one to
a file without a write operation does.
"""

from __future__ import annotations

import errno
import stat
import struct
from dataclasses import dataclass
from typing import Callable

from harness.emulation.machine import read_c_string
from harness.filesystem import read_input
from harness.linux.call_table import SystemCallFault
from harness.linux.calls_process import PID
from harness.linux.files import Contents, Device, GuestError, Node, inode_of
from harness.linux.maps import Vma
from harness.linux.procfs import PROC_TEXTS, SYSCTLS, WRITABLE

DEV_MODE = stat.S_IFCHR | 0o666


class Null(Device):
    """/dev/null: reads end at once, writes are taken whole."""

    rdev = (1, 3)

    def read(self, kernel, count: int) -> bytes:
        return b""

    def write(self, kernel, data: bytes) -> int:
        return len(data)


class Zero(Null):
    """/dev/zero: zeros; writes are taken whole."""

    rdev = (1, 5)

    def read(self, kernel, count: int) -> bytes:
        return bytes(count)


class Full(Zero):
    """/dev/full: zeros; every write fails as on a full disk."""

    rdev = (1, 7)

    def write(self, kernel, data: bytes) -> int:
        raise GuestError(errno.ENOSPC)


class Random(Null):
    """/dev/urandom and /dev/random: the process's random stream. A write
    mixes into Linux's pool without changing what a reader can predict
    (nothing): taken whole."""

    def __init__(self, rdev: tuple[int, int]):
        self.rdev = rdev

    def read(self, kernel, count: int) -> bytes:
        return kernel.random_bytes(count)


class Tty(Device):
    """/dev/tty: the process's controlling terminal, which it has none of
    (its stdio are files and pipes): opening it fails as Linux's tty_open
    fails then, with ENXIO."""

    rdev = (5, 0)

    def open(self, kernel) -> None:
        raise GuestError(errno.ENXIO)


DEVICES: dict[str, Callable[[], Device]] = {"null": Null, "zero": Zero, "full": Full, "tty": Tty,
                                            "random": lambda: Random((1, 8)), "urandom": lambda: Random((1, 9))}
# Names in /dev that are links, as udev and the kernel make them.
DEV_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
             "stderr": "/proc/self/fd/2"}


class Generated(Contents):
    """A /proc file's text: read like a file, 0 bytes long to stat, never
    truncated (O_TRUNC on procfs changes nothing). A write fails with EINVAL
    where procfs has no write for the file; where it has one (a sysctl,
    comm), the write would change the kernel, which is not emulated: the
    run ends as a fault naming the file."""

    def __init__(self, data: bytes, path: str, writable: bool = False):
        super().__init__(data)
        self.path, self.writable = path, writable

    def __len__(self) -> int:
        return 0

    def write(self, offset: int, data: bytes) -> None:
        if self.writable:
            raise SystemCallFault(f"a write to {self.path}: changing the kernel's settings is not emulated")
        raise GuestError(errno.EINVAL)

    def truncate(self, size: int) -> None:
        return None


@dataclass(frozen=True)
class Link:
    """A symbolic link: `target` as readlink gives it; `opens`, for /proc's
    magic links (fd/N, exe), gives what following it reaches, whatever the
    target's text says."""

    target: str
    opens: Callable[[], tuple[str, Node]] | None = None
    mode: int = 0o777

    def node(self, path: str) -> Node:
        return Node(stat.S_IFLNK | self.mode, Contents(self.target.encode("utf-8", "surrogateescape")),
                    inode=inode_of(path))


@dataclass(frozen=True)
class Image:
    """What exec left that /proc shows: the loader's mappings (the
    executable, its dynamic linker, [stack], [vectors]), the harness's
    pages that are the program's as well (the stack and the vectors page),
    the bounds of code and data, where the stack started, the argument and
    environment strings, the auxiliary vector, and the program's file."""

    vmas: tuple[Vma, ...] = ()
    live: tuple[tuple[int, int], ...] = ()
    code: tuple[int, int] = (0, 0)
    data: tuple[int, int] = (0, 0)
    start_stack: int = 0
    args: tuple[int, int] = (0, 0)
    environment: tuple[int, int] = (0, 0)
    auxv: bytes = b""
    host_executable: str | None = None


def exec_image(machine, sp: int, **known) -> Image:
    """The Image of a process whose initial stack (argc, argv, envp, auxv as
    the kernel lays them) is at `sp`; `known`: the other fields."""
    pointers = []
    address = sp + 4  # past argc
    for _ in range(2):  # argv, then envp: each up to its NULL
        found = []
        while (word := struct.unpack("<I", machine.read(address, 4))[0]) != 0:
            found.append(word)
            address += 4
        pointers.append(found)
        address += 4
    auxv_start = address
    while struct.unpack("<I", machine.read(address, 4))[0] != 0:
        address += 8

    def span(strings: list[int]) -> tuple[int, int]:
        if not strings:
            return 0, 0
        last = strings[-1]
        return strings[0], last + len(read_c_string(machine, last, 1 << 17)) + 1  # (MAX_ARG_STRLEN)

    return Image(start_stack=sp, args=span(pointers[0]), environment=span(pointers[1]),
                 auxv=machine.read(auxv_start, address + 8 - auxv_start), **known)


class SpecialFiles:
    """/dev and /proc of one process (`kernel`, a LinuxKernel)."""

    def __init__(self, kernel):
        self.kernel = kernel

    def lookup(self, path: str, follow_last: bool) -> tuple[str, Node] | None:
        """(canonical path, node) of `path` (absolute, without . or ..) when
        it is under /dev or /proc and named here; None to look further."""
        parts = [part for part in path.split("/") if part]
        if not parts or parts[0] not in ("dev", "proc"):
            return None
        for index in range(1, len(parts) + 1):
            here, last = self._entry(tuple(parts[:index])), index == len(parts)
            where = "/" + "/".join(parts[:index])
            if here is None:
                return None
            if isinstance(here, Node):
                if not last and not stat.S_ISDIR(here.mode):
                    raise GuestError(errno.ENOTDIR)
                if last:
                    return where, here
                continue
            if last and not follow_last:
                return where, here.node(where)
            rest = "/".join(parts[index:])
            if here.opens is None:  # an ordinary link: its target, from the directory it is in
                parent = "/" + "/".join(parts[: index - 1])
                target = here.target if here.target.startswith("/") else f"{parent.rstrip('/')}/{here.target}"
                return self.kernel.files.lookup(f"{target}/{rest}" if rest else target, follow_last)
            reached, node = here.opens()
            if not rest:
                return reached, node
            if not stat.S_ISDIR(node.mode):
                raise GuestError(errno.ENOTDIR)
            return self.kernel.files.lookup(f"{reached}/{rest}", follow_last)
        return None

    def _entry(self, parts: tuple[str, ...]) -> Node | Link | None:
        """What `parts` names, one level at a time; None: nothing here."""
        if parts[0] == "dev":
            return self._dev(parts[1:])
        if len(parts) == 1:
            return self._directory("/proc", ("self", str(PID), "sys"))
        if parts[1] == "self":
            return Link(str(PID)) if len(parts) == 2 else None  # (followed before going deeper)
        if parts[1] == "sys":
            return self._sysctl(parts)
        if parts[1] == str(PID):
            return self._process(parts[2:])
        return None

    def _dev(self, rest: tuple[str, ...]) -> Node | Link | None:
        if not rest:
            return self._directory("/dev", tuple(sorted((*DEVICES, *DEV_LINKS, "shm"))))  # shm: files.TMPFS_MOUNTS
        if len(rest) > 1:
            return None
        name = rest[0]
        if name in DEV_LINKS:
            return Link(DEV_LINKS[name])
        if name in DEVICES:
            return Node(DEV_MODE, inode=inode_of(f"/dev/{name}"), device=DEVICES[name]())
        return None

    def _directory(self, path: str, entries: tuple[str, ...]) -> Node:
        return Node(stat.S_IFDIR | (0o755 if path.startswith("/dev") else 0o555), entries=entries,
                    inode=inode_of(path))

    def _sysctl(self, parts: tuple[str, ...]) -> Node | None:
        rest = parts[2:]
        below = sorted({key[len(rest)] for key in SYSCTLS if key[: len(rest)] == rest and len(key) > len(rest)})
        if below:
            return self._directory("/".join(("",) + parts), tuple(below))
        text, path = SYSCTLS.get(rest), "/".join(("",) + parts)
        if text is None:
            return None
        return Node(stat.S_IFREG | 0o644, Generated(text.encode(), path, writable=True), inode=inode_of(path))

    def _process(self, rest: tuple[str, ...]) -> Node | Link | None:
        kernel = self.kernel
        here = f"/proc/{PID}"
        if not rest:
            return self._directory(here, ("auxv", "cmdline", "comm", "cwd", "environ", "exe", "fd", "maps", "stat",
                                          "status"))
        name = rest[0]
        if name == "fd":
            return self._descriptor(rest[1:])
        if len(rest) > 1:
            return None
        if name == "exe":
            return Link(kernel.executable, self._executable)
        if name == "cwd":
            return Link(kernel.cwd)
        text, path = PROC_TEXTS.get(name), f"{here}/{name}"
        if text is None:
            return None
        writable = name in WRITABLE
        return Node(stat.S_IFREG | (0o644 if writable else 0o444), Generated(text(kernel), path, writable),
                    inode=inode_of(path))

    def _descriptor(self, rest: tuple[str, ...]) -> Node | Link | None:
        fds = self.kernel.fds
        if not rest:  # listed when opened: with the descriptor the open is about to take, as Linux lists it
            coming = min(set(range(len(fds) + 1)) - set(fds))
            return self._directory(f"/proc/{PID}/fd", tuple(str(fd) for fd in sorted({*fds, coming})))
        opened = fds.get(int(rest[0])) if rest[0].isdigit() and len(rest) == 1 else None
        if opened is None:
            return None
        node = opened.node
        target = f"pipe:[{node.inode}]" if stat.S_ISFIFO(node.mode) else opened.path
        mode = (0o400 if opened.readable else 0) | (0o200 if opened.writable else 0) | 0o100
        return Link(target, lambda: (opened.path, node), mode)

    def _executable(self) -> tuple[str, Node]:
        """What /proc/self/exe opens: the program's own file, whatever path
        it was started by."""
        kernel = self.kernel
        host = kernel.image.host_executable
        if host is None:
            return kernel.files.lookup(kernel.executable)
        return kernel.executable, Node(stat.S_IFREG | 0o755, kernel.files.contents(read_input(host, "program")),
                                       inode=inode_of(kernel.executable))
