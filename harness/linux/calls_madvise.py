"""madvise as Linux 6.1 answers it (mm/madvise.c), mapping by mapping.

What a program can see of it: MADV_DONTNEED drops pages, so anonymous
private ones read zeros after it, a private file mapping's read the
file's bytes again (its own stores gone), and shared ones (of a file, or
MAP_SHARED|MAP_ANONYMOUS memory, a shmem file) read what they held, which
the page cache keeps. MADV_REMOVE punches a hole in a shared writable
mapping's file. MADV_FREE lets the kernel drop anonymous private pages
under memory pressure; without any they keep their bytes, as here. The
rest are hints or concern fork and core dumps, which the harness makes
neither of: only their errors show. The kernel has no transparent huge
pages (Debian's armmp kernel: they need LPAE), so their advice is EINVAL.
"""

from __future__ import annotations

import errno

from harness.emulation.placement import PAGE
from harness.linux.call_table import GuestError, SystemCallFault, handles
from harness.linux.loader import KUSER_PAGE
from harness.linux.maps import Vma
from harness.linux.memory import page_up, without
from harness.linux.private_maps import changed, file_bytes, refill

MADV_DONTNEED, MADV_FREE, MADV_REMOVE, MADV_DODUMP, MADV_WIPEONFORK = 4, 8, 9, 17, 18
MADV_POPULATE_READ, MADV_POPULATE_WRITE, MADV_DONTNEED_LOCKED = 22, 23, 24
MADV_HWPOISON, MADV_SOFT_OFFLINE = 100, 101
# NORMAL, RANDOM, SEQUENTIAL, WILLNEED; DONTFORK, DOFORK; MERGEABLE, UNMERGEABLE (KSM);
# DONTDUMP; KEEPONFORK; COLD, PAGEOUT: no effect a program here can see, for any mapping
HINTS = frozenset({0, 1, 2, 3, 10, 11, 12, 13, 16, 19, 20, 21})
VALID = HINTS | {MADV_DONTNEED, MADV_FREE, MADV_REMOVE, MADV_DODUMP, MADV_WIPEONFORK, MADV_POPULATE_READ,
                 MADV_POPULATE_WRITE, MADV_DONTNEED_LOCKED, MADV_HWPOISON, MADV_SOFT_OFFLINE}
VECTORS_END = KUSER_PAGE + PAGE  # past the vectors page nothing is mapped for the program
CHUNK = 256 * PAGE  # pages are read this many bytes at once
ZERO_PAGE = bytes(PAGE)


def _pieces(kernel, start: int, end: int) -> list[Vma | None]:
    """[start, end) as the mappings over it, in order: a Vma for each
    mapping's part (anonymous private where no mapping names the pages),
    None for each unmapped gap."""
    mapped = without(without(kernel.space.taken_parts(start, end), 0, PAGE), VECTORS_END, 1 << 32)
    out: list[Vma | None] = []
    position = start
    for low, high in mapped:
        if position < low:
            out.append(None)
        at = low
        for vma in kernel.vmas.within(low, high) + [Vma(high, high, "")]:
            if at < vma.start:
                out.append(Vma(at, vma.start, "rw-"))
            if vma.start < vma.end:
                out.append(vma)
            at = max(at, vma.end)
        position = high
    return out + ([None] if position < end else [])


def _anonymous(vma: Vma) -> bool:
    """A private anonymous mapping (Linux's vma_is_anonymous): not a file's, not shared, not the vectors page."""
    return not vma.is_file and not vma.shared and vma.name != "[vectors]"


def _zeroed(kernel, start: int, end: int) -> None:
    """[start, end) made zeros, writing only the pages that are not: a page
    never written stays untouched (no host memory for it)."""
    for chunk in range(start, end, CHUNK):
        held = kernel.machine.raw.read(chunk, min(end, chunk + CHUNK) - chunk)
        if held.count(0) == len(held):
            continue
        for at in range(0, len(held), PAGE):
            if held[at : at + PAGE] != ZERO_PAGE:
                kernel.machine.raw.write(chunk + at, ZERO_PAGE)


def _dontneed(kernel, vma: Vma) -> None:
    if _anonymous(vma):
        _zeroed(kernel, vma.start, vma.end)
    elif vma.is_file and not vma.shared:
        refill(kernel, vma)
    # shared pages (a file's, shmem's) come back from the page cache as they were; the vectors page is the kernel's


def _remove(kernel, vma: Vma) -> None:
    """MADV_REMOVE: a hole punched in the file of a shared writable mapping (fallocate PUNCH_HOLE|KEEP_SIZE)."""
    if not vma.is_file:
        raise GuestError(errno.EINVAL)
    if not vma.shared or "w" not in vma.perms:
        raise GuestError(errno.EACCES)
    if vma.node is None:  # MAP_SHARED|MAP_ANONYMOUS: one process, the harness's own pages hold the shmem file
        _zeroed(kernel, vma.start, vma.end)
        return
    if kernel.files.from_host(vma.node):
        raise SystemCallFault(f"madvise(MADV_REMOVE) of {vma.name} mapped MAP_SHARED at {vma.start:#x}: a host "
                              "file's shared mapping is a copy, its hole not emulated")
    low = vma.offset
    high = min(low + vma.end - vma.start, len(vma.node.data))
    if low < high:
        changed(kernel, vma.node, low, high, "madvise(MADV_REMOVE)")
        vma.node.data.write(low, bytes(high - low))  # the page cache: the mapping's pages with it


def _populate(kernel, vma: Vma, write: bool) -> None:
    if "w" not in vma.perms if write else "r" not in vma.perms:
        raise GuestError(errno.EINVAL)  # faultin_vma_page_range: a mapping that does not allow the access
    if vma.is_file and not vma.shared:
        try:
            file_bytes(kernel, vma, vma.start, vma.end)
        except SystemCallFault:
            raise GuestError(errno.EFAULT) from None  # a page past the file's end: SIGBUS, which populate reports


def _advise(kernel, vma: Vma, advice: int) -> None:
    """`advice` on one mapping's part; GuestError for Linux's errors."""
    if advice in (MADV_DONTNEED, MADV_DONTNEED_LOCKED):
        _dontneed(kernel, vma)
    elif advice == MADV_FREE and not _anonymous(vma):
        raise GuestError(errno.EINVAL)
    elif advice == MADV_REMOVE:
        _remove(kernel, vma)
    elif advice == MADV_DODUMP and vma.name == "[vectors]":
        raise GuestError(errno.EINVAL)  # a special mapping (VM_DONTEXPAND)
    elif advice == MADV_WIPEONFORK and (vma.is_file or vma.shared):
        raise GuestError(errno.EINVAL)


@handles(220, "madvise")
def sys_madvise(kernel, address, length, advice):
    """Each mapping over the range takes the advice in turn; the first
    error ends the call, and unmapped pages in the range make it ENOMEM
    once the mappings have taken it (MADV_POPULATE_*: at the gap)."""
    end = page_up(address + length)
    if advice not in VALID or address & (PAGE - 1) or length and end <= address:
        raise GuestError(errno.EINVAL)
    if end == address:
        return 0
    if advice in (MADV_HWPOISON, MADV_SOFT_OFFLINE):
        raise SystemCallFault(f"madvise({advice}) at {address:#x}: poisoning or offlining pages is not emulated")
    gap = False
    for vma in _pieces(kernel, address, end):
        if vma is None:
            if advice in (MADV_POPULATE_READ, MADV_POPULATE_WRITE):
                raise GuestError(errno.ENOMEM)
            gap = True
        elif advice in (MADV_POPULATE_READ, MADV_POPULATE_WRITE):
            _populate(kernel, vma, advice == MADV_POPULATE_WRITE)
        else:
            _advise(kernel, vma, advice)
    if gap:
        raise GuestError(errno.ENOMEM)
    return 0
