"""The emulated program's view of files: two host directories and nothing else.

Absolute guest paths resolve inside the sysroot; relative ones inside the
working directory (seen by the guest as WORKDIR, so that `getcwd()` and the
paths built from it resolve there too). Every path is resolved component by
component on the host, symlinks included, and a path that would leave its
root (`..` above it, a symlink pointing outside) is refused with ENOENT:
the host file is never opened. An absolute symlink inside the sysroot
means what it would mean on the device, a path from the sysroot's root.

Files are read whole on open and never written back: writes go to a copy
in memory that later opens of the same path see, so a program can create
and reread its own files while the host stays as it was.
"""

from __future__ import annotations

import errno
import os
import stat
import zlib
from dataclasses import dataclass, field

from harness.errors import HarnessError, InputError
from harness.filesystem import read_input

WORKDIR = "/work"  # the working directory as the guest sees it
MAX_SYMLINKS = 40  # as Linux (ELOOP past it)


def inode_of(guest: str) -> int:
    """The inode number the guest sees for a path: the same on every run and
    machine (never the host's, which would make reports differ)."""
    return zlib.crc32(guest.encode()) | 1


class GuestError(HarnessError):
    """A system call's error: its errno (returned to the program as -errno)."""

    def __init__(self, code: int):
        super().__init__(errno.errorcode.get(code, str(code)))
        self.code = code


@dataclass
class Node:
    """A file as the guest sees it: contents (for a regular file), or the
    names in it (for a directory)."""

    mode: int
    data: bytearray = field(default_factory=bytearray)
    entries: tuple[str, ...] = ()
    inode: int = 0


@dataclass
class OpenFile:
    """An open file description: the file, where reads and writes go, how it was opened."""

    node: Node
    path: str
    position: int = 0
    readable: bool = True
    writable: bool = False
    append: bool = False
    flags: int = 0  # as opened (F_GETFL)


class GuestFiles:
    """Path resolution and file contents for one run."""

    def __init__(self, sysroot: str | None, workdir: str):
        self._roots = {"/": os.path.realpath(sysroot) if sysroot else None, WORKDIR: os.path.realpath(workdir)}
        self._written: dict[str, Node] = {}  # guest path -> contents written by the program
        self._removed: set[str] = set()

    def guest_path(self, path: str, cwd: str = WORKDIR) -> str:
        """`path` made absolute and normalised (no `.`, `..` kept for the
        resolver to judge)."""
        return path if path.startswith("/") else f"{cwd.rstrip('/')}/{path}"

    def _root_of(self, path: str) -> tuple[str, str | None, list[str]]:
        """(mount point, its host directory, the components under it)."""
        if path == WORKDIR or path.startswith(WORKDIR + "/"):
            return WORKDIR, self._roots[WORKDIR], [p for p in path[len(WORKDIR):].split("/") if p]
        return "/", self._roots["/"], [p for p in path.split("/") if p]

    def resolve(self, path: str, follow_last: bool = True) -> tuple[str, str]:
        """(canonical guest path, host path) of `path`; GuestError(ENOENT) for
        a path that leaves its root or does not exist, ELOOP for too many
        symlinks."""
        if not path:
            raise GuestError(errno.ENOENT)
        mount, host_root, parts = self._root_of(self.guest_path(path))
        if host_root is None:
            raise GuestError(errno.ENOENT)
        done: list[str] = []
        hops = 0
        while parts:
            part = parts.pop(0)
            if part == ".":
                continue
            if part == "..":
                if not done:
                    raise GuestError(errno.ENOENT)  # above the root: refused, never looked up
                done.pop()
                continue
            host = os.path.join(host_root, *done, part)
            if (parts or follow_last) and os.path.islink(host):
                hops += 1
                if hops > MAX_SYMLINKS:
                    raise GuestError(errno.ELOOP)
                target = os.readlink(host)
                if target.startswith("/"):
                    if mount != "/":
                        raise GuestError(errno.ENOENT)  # out of the working directory
                    done = []
                parts = [p for p in target.split("/") if p] + parts
                continue
            done.append(part)
        guest = (mount.rstrip("/") + "/" + "/".join(done)) if done else mount
        host = os.path.join(host_root, *done)
        if os.path.commonpath([host_root, os.path.realpath(host)]) != host_root:
            raise GuestError(errno.ENOENT)  # a hard case the walk missed: refuse, never open
        return guest, host

    def lookup(self, path: str, follow_last: bool = True) -> tuple[str, Node]:
        """(canonical guest path, node) of an existing file; GuestError otherwise."""
        try:
            guest, host = self.resolve(path, follow_last)
        except GuestError:
            written = self._written.get(self._plain(path))
            if written is None:
                raise
            return self._plain(path), written
        if guest in self._written:
            return guest, self._written[guest]
        if guest in self._removed:
            raise GuestError(errno.ENOENT)
        try:
            info = os.lstat(host) if not follow_last else os.stat(host)
        except OSError:
            raise GuestError(errno.ENOENT) from None
        inode = inode_of(guest)
        if stat.S_ISDIR(info.st_mode):
            return guest, Node(stat.S_IFDIR | 0o755, entries=tuple(sorted(os.listdir(host))), inode=inode)
        if stat.S_ISLNK(info.st_mode):
            return guest, Node(stat.S_IFLNK | 0o777, bytearray(os.readlink(host).encode()), inode=inode)
        if not stat.S_ISREG(info.st_mode):
            raise GuestError(errno.EACCES)  # devices, FIFOs and sockets of the host stay closed
        try:
            data = read_input(host, "guest file")
        except InputError:
            raise GuestError(errno.EACCES) from None
        return guest, Node(stat.S_IFREG | (info.st_mode & 0o777), bytearray(data), inode=inode)

    def _plain(self, path: str) -> str:
        """`path` normalised without touching the host (for files the program made)."""
        out: list[str] = []
        for part in self.guest_path(path).split("/"):
            if part == "..":
                if out:
                    out.pop()
            elif part and part != ".":
                out.append(part)
        return "/" + "/".join(out)

    def create(self, path: str) -> tuple[str, Node]:
        """A new empty file at `path` (in memory), in a directory that exists."""
        plain = self._plain(path)
        parent = plain.rsplit("/", 1)[0] or "/"
        _, directory = self.lookup(parent)
        if not stat.S_ISDIR(directory.mode):
            raise GuestError(errno.ENOTDIR)
        if self._root_of(plain)[1] is None:
            raise GuestError(errno.ENOENT)
        node = Node(stat.S_IFREG | 0o644, inode=inode_of(plain))
        self._written[plain] = node
        self._removed.discard(plain)
        return plain, node

    def keep(self, guest: str, node: Node) -> None:
        """Later opens of `guest` see `node` (a file the program wrote to)."""
        self._written[guest] = node

    def remove(self, path: str) -> None:
        guest, node = self.lookup(path, follow_last=False)
        if stat.S_ISDIR(node.mode):
            raise GuestError(errno.EISDIR)
        self._written.pop(guest, None)
        self._removed.add(guest)
