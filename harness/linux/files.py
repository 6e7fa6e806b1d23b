"""The emulated program's view of files: two host directories and nothing else.

Absolute guest paths resolve inside the sysroot, but /tmp and /dev/shm,
empty directories in memory (as tmpfs mounts are at boot); relative ones
inside the working directory (seen by the guest as WORKDIR, so that `getcwd()` and the
paths built from it resolve there too). Every path is resolved component by
component on the host, symlinks included, and a path that would leave its
root (`..` above it, a symlink pointing outside) is refused with ENOENT:
the host file is never opened. An absolute symlink inside the sysroot
means what it would mean on the device, a path from the sysroot's root.

Files are read whole on first open (once a run: every later open shares
the bytes and the node, as one inode; a hard link shares it too) and
never written back: writes go to pages in memory over them (Contents)
that later opens of the same path see, so a program can create
and reread its own files while the host stays as it was. Those pages are
the guest's to fill, and a guest is untrusted: FileStore caps what all of
them hold together, and a write past a file's end stores only what it
writes (a hole reads as zeros), as tmpfs does.
"""

from __future__ import annotations

import errno
import os
import stat
import zlib
from dataclasses import dataclass, field

from harness.errors import InputError
from harness.filesystem import read_input
from harness.linux.call_table import GuestError, SystemCallFault
from harness.linux.contents import Contents, FileStore

WORKDIR = "/work"  # the working directory as the guest sees it
MAX_SYMLINKS = 40  # as Linux (ELOOP past it)
MAX_FDS = 1024  # open descriptors a process may have (RLIMIT_NOFILE's soft limit: EMFILE past it)
NAME_MAX = 255  # bytes in one path component (ENAMETOOLONG past it)
UMASK = 0o022  # the process's file mode creation mask (what umask(2) says)
TMPFS_MOUNTS = ("/tmp", "/dev/shm")  # empty directories every Linux system has, in memory here


def as_bytes(path: str) -> bytes:
    """A guest path's bytes. Guest paths are text decoded with
    surrogateescape (harness.linux.calls_files), so any bytes a program
    names, valid UTF-8 or not, come back unchanged."""
    return path.encode("utf-8", "surrogateescape")


def inode_of(guest: str) -> int:
    """The inode number the guest sees for a path: the same on every run and
    machine (never the host's, which would make reports differ)."""
    return zlib.crc32(as_bytes(guest)) | 1


class Device:
    """A character device's behaviour (/dev/null, /dev/zero...): what a read
    of `count` bytes gives and what a write takes, whether it opens, its
    (major, minor) numbers. Subclasses override."""

    rdev = (0, 0)

    def open(self, kernel) -> None:
        """Each open of the device: raises GuestError where it cannot be opened."""

    def ready(self) -> tuple[bool, bool]:
        """(a read would not wait, a write would not wait), for poll."""
        return True, True

    def hangup(self) -> int:
        """The poll events it reports whatever was asked (POLLHUP, POLLERR)."""
        return 0

    def release(self, kernel) -> None:
        """Its open file's last descriptor was closed (LinuxKernel.dropped)."""

    def read(self, kernel, count: int) -> bytes:
        raise GuestError(errno.EINVAL)

    def write(self, kernel, data: bytes) -> int:
        raise GuestError(errno.EINVAL)


@dataclass
class Node:
    """A file as the guest sees it: contents (a regular file's, a symlink's
    target), bytes buffered (a pipe's, stdout's), the names in it (a
    directory), or a device that answers reads and writes."""

    mode: int
    data: Contents | bytearray = field(default_factory=bytearray)
    entries: tuple[str, ...] = ()
    inode: int = 0
    device: Device | None = None
    links: int = 1  # the names it has (st_nlink): hard links add, unlink and rename over take away

    def __post_init__(self) -> None:
        if (stat.S_ISREG(self.mode) or stat.S_ISLNK(self.mode)) and not isinstance(self.data, Contents):
            self.data = Contents(self.data)


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
        # guest path -> contents written by the program; /tmp and /dev/shm are
        # tmpfs mounts of their own, empty at the start (the sysroot's hold none)
        self._written: dict[str, Node] = {path: Node(stat.S_IFDIR | 0o1777, inode=inode_of(path))
                                          for path in TMPFS_MOUNTS}
        self._removed: set[str] = set()
        # guest path -> the node of a host's regular file, its bytes read once a run: one inode
        # whatever opens or links it
        self._host_nodes: dict[str, Node] = {}
        self.store = FileStore()
        # (path, follow_last) -> (path, node) of a file the kernel makes (/dev, /proc:
        # harness.linux.special_files), None for the others; set by the process's kernel.
        self.special = None

    def from_host(self, node: Node) -> bool:
        """Whether `node` is a host file's (its bytes read from the sysroot or working directory)."""
        return any(held is node for held in self._host_nodes.values())

    def contents(self, data: bytes = b"") -> Contents:
        """A new file's contents, held against this run's store."""
        return Contents(data, self.store)

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
            if len(as_bytes(part)) > NAME_MAX:
                raise GuestError(errno.ENAMETOOLONG)
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

    def lookup(self, path: str, follow_last: bool = True, hops: int = 0) -> tuple[str, Node]:
        """(canonical guest path, node) of an existing file; GuestError
        otherwise. A symlink the program made is followed as the host's are
        (`hops` of them so far), where it is the path's last component."""
        made = self.special and self.special(self._plain(path), follow_last or path.endswith("/"))
        if made:
            return made
        try:
            guest, host = self.resolve(path, follow_last)
        except GuestError:
            guest = self._plain(path)
            if guest not in self._written:
                raise
        if guest in self._written:
            node = self._written[guest]
            if stat.S_ISLNK(node.mode) and follow_last:
                return self._follow(guest, node, hops)
            if stat.S_ISDIR(node.mode):  # one the program made: what it holds now
                node.entries = self._listing(guest, ())
            return guest, node
        if guest in self._removed:
            raise GuestError(errno.ENOENT)
        try:
            info = os.lstat(host) if not follow_last else os.stat(host)
        except OSError:
            raise GuestError(errno.ENOENT) from None
        inode = inode_of(guest)
        if stat.S_ISDIR(info.st_mode):
            return guest, Node(stat.S_IFDIR | 0o755, entries=self._listing(guest, os.listdir(host)), inode=inode)
        if stat.S_ISLNK(info.st_mode):
            return guest, Node(stat.S_IFLNK | 0o777, Contents(os.fsencode(os.readlink(host))), inode=inode)
        if not stat.S_ISREG(info.st_mode):
            raise GuestError(errno.EACCES)  # devices, FIFOs and sockets of the host stay closed
        node = self._host_nodes.get(guest)
        if node is None:
            try:
                data = read_input(host, "guest file")
            except InputError:
                raise GuestError(errno.EACCES) from None
            node = self._host_nodes[guest] = Node(stat.S_IFREG | (info.st_mode & 0o777), self.contents(data),
                                                  inode=inode)
        return guest, node

    def _follow(self, guest: str, node: Node, hops: int) -> tuple[str, Node]:
        """What a symlink the program made points at (ELOOP past MAX_SYMLINKS)."""
        if hops >= MAX_SYMLINKS:
            raise GuestError(errno.ELOOP)
        target = bytes(node.data).decode("utf-8", "surrogateescape")
        parent = guest.rsplit("/", 1)[0] or "/"
        return self.lookup(target if target.startswith("/") else f"{parent}/{target}", True, hops + 1)

    def _listing(self, guest: str, host_names: list[str] | tuple[()]) -> tuple[str, ...]:
        """A directory's names: the host's, less those the program removed,
        with those it made in it."""
        prefix = guest.rstrip("/") + "/"
        made = {path[len(prefix):] for path in self._written
                if path.startswith(prefix) and "/" not in path[len(prefix):]}
        return tuple(sorted(name for name in set(host_names) | made if prefix + name not in self._removed))

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

    def refuse_existing(self, path: str, code: int) -> None:
        """GuestError(code) where a file is at `path` (its link not followed);
        where none is, nothing; any other error of the lookup, raised."""
        try:
            self.lookup(path, follow_last=False)
        except GuestError as error:
            if error.code != errno.ENOENT:
                raise
            return
        raise GuestError(code)

    def _new_name(self, path: str) -> str:
        """`path` normalised, for a new name in a directory that exists
        (ENOENT, ENOTDIR otherwise)."""
        plain = self._plain(path)
        parent = plain.rsplit("/", 1)[0] or "/"
        _, directory = self.lookup(parent)
        if not stat.S_ISDIR(directory.mode):
            raise GuestError(errno.ENOTDIR)
        if self._root_of(plain)[1] is None and not plain.startswith(tuple(f"{mount}/" for mount in TMPFS_MOUNTS)):
            raise GuestError(errno.ENOENT)  # no sysroot: / holds only the tmpfs mounts
        return plain

    def create(self, path: str) -> tuple[str, Node]:
        """A new empty file at `path` (in memory), in a directory that exists."""
        plain = self._new_name(path)
        node = Node(stat.S_IFREG | 0o644, self.contents(), inode=inode_of(plain))
        self._written[plain] = node
        self._removed.discard(plain)
        return plain, node

    def made(self, guest: str) -> bool:
        """Is `guest` a file the program made or changed (held in memory)?"""
        return guest in self._written

    def keep(self, guest: str, node: Node) -> None:
        """Later opens of `guest` see `node` (a file the program wrote to)."""
        self._written[guest] = node

    def remove(self, path: str, directory: bool = False) -> None:
        """unlink (`directory` False) or rmdir a file, as Linux refuses them:
        EISDIR, ENOTDIR, ENOTEMPTY."""
        guest, node = self.lookup(path, follow_last=False)
        if stat.S_ISDIR(node.mode) != directory:
            raise GuestError(errno.ENOTDIR if directory else errno.EISDIR)
        if directory and node.entries:
            raise GuestError(errno.ENOTEMPTY)
        self._written.pop(guest, None)
        self._removed.add(guest)
        if not directory:
            node.links -= 1

    def make_directory(self, path: str, mode: int = 0o755) -> None:
        """mkdir: an empty directory in memory with `mode`'s permissions
        under the process's umask (022), EEXIST where a file is."""
        try:
            self.lookup(path, follow_last=False)
        except GuestError as error:
            if error.code != errno.ENOENT:
                raise
            guest, _ = self.create(path)
            self._written[guest] = Node(stat.S_IFDIR | mode & 0o7777 & ~UMASK, inode=inode_of(guest))
            return
        raise GuestError(errno.EEXIST)

    def rename(self, old: str, new: str) -> None:
        """rename(2) of a file (not a directory: the files under it would
        move too, which the harness does not do: SystemCallFault)."""
        source, node = self.lookup(old, follow_last=False)
        if stat.S_ISDIR(node.mode):
            raise SystemCallFault(f"rename of the directory {source}: moving a directory is not emulated")
        try:
            target, there = self.lookup(new, follow_last=False)
        except GuestError as error:
            if error.code != errno.ENOENT:
                raise
            target, there = self.create(new)
        if stat.S_ISDIR(there.mode):
            raise GuestError(errno.EISDIR)
        if there is node:
            return  # the same name, or two hard links of one file: Linux does nothing
        there.links -= 1
        self._written[target] = node
        self._written.pop(source, None)
        self._removed.add(source)

    def link(self, old: tuple[str, Node] | str, new: str, follow: bool = False) -> None:
        """link(2): `new`, a second name of the file `old` names (its symlink
        itself unless `follow`) or of an open file's (guest path, node):
        both names share the node, its data and link count. Linux's errors,
        in its order: ENOENT, then ENOTDIR, ENOENT, EEXIST for `new`, EPERM for a
        directory, ENOENT for a file no name holds any more. A file the
        kernel makes (/proc, /dev) is on no filesystem of the harness's: a fault."""
        source, node = old if isinstance(old, tuple) else self.lookup(old, follow_last=follow)
        plain = self._plain(new)
        for path in (source, plain):
            if path.startswith(("/proc/", "/dev/")) and not path.startswith("/dev/shm/"):
                raise SystemCallFault(f"link of {source} to {plain}: files the kernel makes cannot be linked here")
        self._new_name(new)
        self.refuse_existing(new, errno.EEXIST)
        if stat.S_ISDIR(node.mode) or node.links == 0:
            raise GuestError(errno.EPERM if stat.S_ISDIR(node.mode) else errno.ENOENT)
        self._written[plain] = node
        self._removed.discard(plain)
        node.links += 1
