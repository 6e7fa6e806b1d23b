"""A regular file's bytes in memory (harness.linux.files): those it was
read with, shared by every open, under the pages the program wrote since;
and the store that caps what all of a run's files hold together. A guest
is untrusted: a write far past a file's end stores its own page alone (a
hole reads as zeros), as tmpfs does, and a full store is ENOSPC.
"""

from __future__ import annotations

import errno

from harness.linux.call_table import GuestError, SystemCallFault
from harness.linux.page_cache import PageCache, page_up

PAGE = 0x1000
STORE_CAP = 256 << 20  # bytes the guest's files may hold in memory together (then ENOSPC, as a full tmpfs)
# A file's largest size on 32-bit Linux (MAX_LFS_FILESIZE, ULONG_MAX pages):
# a seek may reach it, a write stops there (EFBIG where nothing fits).
MAX_FILE_SIZE = 0xFFFFFFFF << 12


class FileStore:
    """The bytes all of a run's in-memory files hold (Contents' private
    pages), against STORE_CAP."""

    def __init__(self, cap: int = STORE_CAP):
        self.cap = cap
        self.held = 0

    def charge(self, count: int) -> None:
        if self.held + count > self.cap:
            raise GuestError(errno.ENOSPC)
        self.held += count


class Contents:
    """A regular file's bytes: those it was read with (`base`, shared, never
    changed) under the pages written since (private, charged to the store),
    and its size; a page neither holds reads as zeros (a hole)."""

    def __init__(self, base: bytes = b"", store: FileStore | None = None):
        self._base = bytes(base)
        self._pages: dict[int, bytearray] = {}
        self._store = store or FileStore()
        self.size = len(self._base)
        self.shared: mmap.mmap | None = None  # the bytes while MAP_SHARED mapped (share), as a page cache
        self.pins = 0  # the shared mappings of `shared` live in the machine: its size is fixed while any are

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        return self.read(0, self.size)

    def __del__(self) -> None:
        store = self.__dict__.get("_store")
        if store is not None:  # a file gone (unlinked and closed, or replaced): its pages free again
            store.held -= PAGE * len(self._pages) + (self.shared.capacity if self.shared is not None else 0)

    def share(self) -> PageCache:
        """The file's bytes moved into a page cache (PageCache), which
        MAP_SHARED mappings map and reads and writes go through."""
        if self.shared is None:
            held = bytes(self)
            self._store.charge(max(PAGE, page_up(self.size)))
            self.shared = PageCache(held)
            self._store.held -= PAGE * len(self._pages)
            self._base, self._pages = b"", {}
        return self.shared

    def _unshare(self, size: int) -> None:
        """The page cache's bytes back into pages, the file to become `size`
        bytes long, short of its pages: where no mapping maps them any more."""
        if self.pins:
            raise SystemCallFault(f"a file MAP_SHARED mapped truncated from {self.size} to {size} bytes, short of "
                                  "its mapped pages: their SIGBUS is not emulated")
        held, old_size = bytes(self), self.size
        self._store.held -= self.shared.capacity
        self.shared, self.size = None, 0
        self.write(0, held)
        self.size = old_size

    def _grow_shared(self, end: int) -> None:
        if end > self.shared.capacity:
            self._store.charge(page_up(end) - self.shared.capacity)
            self.shared.grow(page_up(end))

    def read(self, offset: int, count: int) -> bytes:
        """Up to `count` bytes from `offset` (fewer at the end of the file)."""
        end = min(self.size, offset + count)
        if offset >= end:
            return b""
        if self.shared is not None:
            return self.shared.read(offset, end - offset)
        if not self._pages:
            return self._base[offset:end].ljust(end - offset, b"\0")
        out = bytearray()
        position = offset
        while position < end:
            page, within = divmod(position, PAGE)
            step = min(end - position, PAGE - within)
            held = self._pages.get(page)
            if held is not None:
                out += held[within : within + step]
            else:
                out += self._base[position : position + step].ljust(step, b"\0")
            position += step
        return bytes(out)

    def write(self, offset: int, data: bytes) -> int:
        """`data` at `offset`, as much of it as fits below MAX_FILE_SIZE: the
        bytes written. EFBIG where none fits, ENOSPC where the store cannot
        hold the pages it needs; nothing written then."""
        if not data:
            return 0
        if offset >= MAX_FILE_SIZE:
            raise GuestError(errno.EFBIG)
        data = data[: MAX_FILE_SIZE - offset]
        if self.shared is not None:
            self._grow_shared(offset + len(data))
            self.shared.write(offset, data)
            self.size = max(self.size, offset + len(data))
            return len(data)
        first, last = offset // PAGE, (offset + len(data) - 1) // PAGE
        self._store.charge(PAGE * sum(1 for page in range(first, last + 1) if page not in self._pages))
        position = offset
        for page in range(first, last + 1):
            held = self._pages.get(page)
            if held is None:
                held = self._pages[page] = bytearray(self._base[page * PAGE : (page + 1) * PAGE].ljust(PAGE, b"\0"))
            within = position - page * PAGE
            step = min(PAGE - within, offset + len(data) - position)
            held[within : within + step] = data[position - offset : position - offset + step]
            position += step
        self.size = max(self.size, offset + len(data))
        return len(data)

    def truncate(self, size: int) -> None:
        if size > MAX_FILE_SIZE:
            raise GuestError(errno.EFBIG)
        if self.shared is not None and max(PAGE, page_up(size)) < self.shared.capacity:
            self._unshare(size)
        if self.shared is not None:
            self._grow_shared(size)
            if size < self.size:  # what comes back reads as zeros
                self.shared.write(size, bytes(self.shared.capacity - size))
            self.size = size
            return
        if size < self.size:
            keep = (size + PAGE - 1) // PAGE
            dropped = [page for page in self._pages if page >= keep]
            for page in dropped:
                del self._pages[page]
            self._store.held -= PAGE * len(dropped)
            if size % PAGE and keep - 1 in self._pages:
                self._pages[keep - 1][size % PAGE :] = bytes(PAGE - size % PAGE)
            self._base = self._base[:size]
        self.size = size

    def copy(self) -> "Contents":
        """The same bytes, to be written apart (the base shared, the pages copied)."""
        twin = Contents(bytes(self) if self.shared is not None else self._base, self._store)
        self._store.charge(PAGE * len(self._pages))
        twin._pages = {page: bytearray(held) for page, held in self._pages.items()}
        twin.size = self.size
        return twin
