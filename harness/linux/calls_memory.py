"""System calls on memory: brk, mmap2, munmap, mprotect, mremap, mincore (madvise: calls_madvise).

A mapping's protection binds the program's own accesses as on an ARMv7
core (writing or executing implies reading): a store to a read-only page
or any access to a PROT_NONE guard page faults, and the program takes its
SIGSEGV (harness.linux.signals.fault). A mapping is placed only where the
address space is free (harness.linux.memory).
"""

from __future__ import annotations

import errno
import stat
from dataclasses import replace

from harness.emulation.placement import PAGE, RESERVED
from harness.linux.call_table import SystemCallFault, handles
from harness.linux.files import GuestError
from harness.linux.loader import KUSER_PAGE
from harness.linux.memory import MAX_MAPPED, MAX_MAPPINGS, page_up, without
from harness.linux.private_maps import refill
from harness.linux.shared_maps import shared_pages

MAP_SHARED, MAP_FIXED, MAP_ANONYMOUS = 0x01, 0x10, 0x20
MAP_FIXED_NOREPLACE = 0x100000
MREMAP_MAYMOVE, MREMAP_FIXED = 1, 2
PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4
COPY_CHUNK = 16 << 20  # a file mapping's bytes are copied in pieces this large, never a whole file at once


def _protect(kernel, start: int, size: int, protection: int) -> None:
    """The program's accesses to [start, start + size) as `protection` lets
    them; the pages the harness owns (the stack, the helper page) stay as
    they are, though /proc/self/maps says what was asked."""
    allowed = protection & (PROT_READ | PROT_WRITE | PROT_EXEC)
    parts = kernel.space.taken_parts(start, start + size)
    for low, high in kernel.space.owned:
        parts = without(parts, low, high)
    for low, high in parts:
        kernel.machine.protect(low, high - low, allowed | (PROT_READ if allowed else 0))


def _map_fresh(kernel, start: int, size: int, shared=None) -> None:
    """Map [start, start + size) (free in the address space), zeroed, or
    onto `shared`, a file's pages from the mapping's start (PageCache.pieces)."""
    if kernel.space.mapped + size > MAX_MAPPED or kernel.space.regions >= MAX_MAPPINGS:
        raise GuestError(errno.ENOMEM)
    kernel.space.take(start, start + size)
    kernel.space.add_region(start, start + size)
    kernel.space.mapped += size
    if shared is None:
        kernel.machine.map(start, size)
        return
    for low, buffer, at, length in shared:
        kernel.machine.map_shared(start + low - shared[0][0], length, buffer, at)


def _unmap(kernel, start: int, end: int) -> None:
    if not kernel.space.may_release(start, end):
        raise GuestError(errno.EINVAL)  # the harness's own pages: the stack, the helper page
    freed = kernel.space.release(start, end)
    kernel.shared_maps.unmapped(start, end)
    kernel.vmas.unmapped(start, end)
    for low, high in freed:
        kernel.machine.unmap(low, high - low)
        kernel.space.mapped = max(0, kernel.space.mapped - (high - low))


@handles(45, "brk")
def sys_brk(kernel, address):
    """The break moves within [brk_start, ...) while the pages it needs are
    free; otherwise it stays (Linux returns the old break, not an error)."""
    if address < kernel.brk_start:
        return kernel.brk
    old_end, new_end = page_up(kernel.brk), page_up(address)
    if new_end > old_end:
        if not kernel.space.is_free(old_end, new_end):
            return kernel.brk
        try:
            _map_fresh(kernel, old_end, new_end - old_end)
        except GuestError:
            return kernel.brk
    elif new_end < old_end:
        _unmap(kernel, new_end, old_end)
    kernel.brk = address
    return address


def _mappable(kernel, fd: int, protection: int, flags: int):
    """The open file mmap2 maps, as Linux checks it before any mapping
    changes: a regular file (ENODEV), open for reading (EACCES), and for
    writing where a shared mapping may be written (EACCES)."""
    opened = kernel.file(fd)
    if not stat.S_ISREG(opened.node.mode):
        raise GuestError(errno.ENODEV)
    if not opened.readable or flags & MAP_SHARED and protection & PROT_WRITE and not opened.writable:
        raise GuestError(errno.EACCES)
    return opened


def _beside(kernel, opened, flags: int) -> None:
    """A private mapping of a file and a shared one that may be written, at
    once: the private pages the program has not written would show the
    shared one's stores (harness.linux.private_maps), which is not emulated."""
    node = opened.node
    if kernel.shared_maps.writable_of(node) if not flags & MAP_SHARED else opened.writable and kernel.vmas.of_node(node):
        raise SystemCallFault(f"MAP_PRIVATE and writable MAP_SHARED mappings of {opened.path} at once: the private "
                              "pages would show the shared one's stores, which is not emulated")


@handles(192, "mmap2")
def sys_mmap2(kernel, address, length, protection, flags, fd, page_offset):
    if not length or address & (PAGE - 1) or length > MAX_MAPPED:
        raise GuestError(errno.EINVAL if length <= MAX_MAPPED else errno.ENOMEM)
    size = page_up(length)
    opened = None if flags & MAP_ANONYMOUS else _mappable(kernel, fd, protection, flags)
    if flags & (MAP_FIXED | MAP_FIXED_NOREPLACE):
        if address + size > KUSER_PAGE:
            raise GuestError(errno.ENOMEM)  # past user memory (Linux: past TASK_SIZE)
        if not kernel.space.is_free(address, address + size):
            if flags & MAP_FIXED_NOREPLACE or address == 0:
                raise GuestError(errno.EEXIST if flags & MAP_FIXED_NOREPLACE else errno.EINVAL)
            _unmap(kernel, address, address + size)
        start = address
    else:
        hinted = address and kernel.space.is_free(address, address + size)
        start = address if hinted else kernel.space.find(size)
        if start is None:
            raise GuestError(errno.ENOMEM)
    source, shared = None, None
    if opened is not None:
        _beside(kernel, opened, flags)
        source = (opened.path, page_offset * PAGE)
        if flags & MAP_SHARED and not kernel.files.from_host(opened.node):
            shared = shared_pages(opened.node, opened.path, source[1], size)
        kernel.file_mappings.append((start, start + size, *source))
        kernel.note_mapped(opened.path, len(opened.node.data))
    _map_fresh(kernel, start, size, shared)
    if opened is not None and flags & MAP_SHARED:
        kernel.shared_maps.add(start, start + size, opened.node, opened.writable, opened.path)
    kernel.vmas.mapped(start, start + size, protection, flags, source, opened and opened.node)
    for done in range(0, length, COPY_CHUNK) if opened is not None and shared is None else ():  # no copy of it all
        chunk = opened.node.data.read(source[1] + done, min(COPY_CHUNK, length - done))
        if not chunk:
            break
        kernel.machine.raw.write(start + done, chunk)
    _protect(kernel, start, size, protection)
    return start


@handles(91, "munmap")
def sys_munmap(kernel, address, length):
    if address & (PAGE - 1) or not length:
        raise GuestError(errno.EINVAL)
    _unmap(kernel, address, page_up(address + length))
    return 0


def _mapped_pages(kernel, address: int, length: int) -> int:
    """The end of the pages [address, address + length), which must all be
    mapped: EINVAL for an address not page-aligned, ENOMEM for a hole."""
    end = page_up(address + length)
    if address & (PAGE - 1):
        raise GuestError(errno.EINVAL)
    covered = sum(high - low for low, high in kernel.space.taken_parts(address, end))
    if covered != end - address:
        raise GuestError(errno.ENOMEM)
    return end


@handles(125, "mprotect")
def sys_mprotect(kernel, address, length, protection):
    end = _mapped_pages(kernel, address, length)
    if any(low < end and address < high for low, high in RESERVED):
        raise GuestError(errno.ENOMEM)  # the kernel's half and the null page: not the program's mappings
    if protection & PROT_WRITE and kernel.shared_maps.read_only(address, end):
        raise GuestError(errno.EACCES)  # a shared mapping of a file not open for writing
    kernel.vmas.protect(address, end, protection)  # for /proc/self/maps
    _protect(kernel, address, end - address, protection)
    return 0


@handles(219, "mincore")
def sys_mincore(kernel, address, length, vector):
    """Every mapped page is resident: one byte 1 per page (diffutils asks)."""
    end = _mapped_pages(kernel, address, length)
    kernel.machine.write(vector, b"\x01" * ((end - address) // PAGE))
    return 0


@handles(163, "mremap")
def sys_mremap(kernel, address, old_length, new_length, flags, new_address):
    old_end, new_end = page_up(address + old_length), page_up(address + new_length)
    if address & (PAGE - 1) or not new_length or flags & MREMAP_FIXED:
        raise GuestError(errno.EINVAL)
    if not old_length:  # Linux's way to map a shared mapping's pages twice
        vma = kernel.vmas.containing(address)
        if vma is None or not vma.shared:
            raise GuestError(errno.EFAULT if vma is None else errno.EINVAL)
        raise SystemCallFault(f"mremap of {address:#x} with old size 0 (a second mapping of shared pages): not emulated")
    if new_end <= old_end:
        _unmap(kernel, new_end, old_end)
        return address
    if kernel.shared_maps.touches(address, old_end) is not None:
        return _grow_shared(kernel, address, old_end, new_end, flags)
    pieces = kernel.vmas.within(address, old_end)  # what the pages are: they stay so where they move
    last = pieces[-1] if pieces and pieces[-1].end == old_end else None  # what the new pages continue
    if kernel.space.is_free(old_end, new_end):
        _map_fresh(kernel, old_end, new_end - old_end)
        _continue(kernel, last, old_end, new_end)
        return address
    if not flags & MREMAP_MAYMOVE:
        raise GuestError(errno.ENOMEM)
    start = kernel.space.find(new_end - address)
    if start is None:
        raise GuestError(errno.ENOMEM)
    contents = kernel.machine.raw.read(address, old_end - address)
    _map_fresh(kernel, start, new_end - address)
    kernel.machine.raw.write(start, contents)
    _unmap(kernel, address, old_end)
    moved = [replace(vma, start=vma.start - address + start, end=vma.end - address + start) for vma in pieces]
    for vma in moved:
        kernel.vmas.set(vma)
        _protect(kernel, vma.start, vma.end - vma.start, _protection(vma))
    _continue(kernel, moved[-1] if last else None, start + old_end - address, start + new_end - address)
    return start


def _protection(vma) -> int:
    return sum(bit for letter, bit in (("r", PROT_READ), ("w", PROT_WRITE), ("x", PROT_EXEC)) if letter in vma.perms)


def _continue(kernel, last, low: int, high: int) -> None:
    """[low, high), just mapped zeroed after `last` (a mapping's part ending
    at `low`, None: anonymous writable pages), as mremap grows a mapping: its
    protection, and a private file mapping's next pages of the file."""
    if last is None:
        return
    grown = replace(last, start=low, end=high, offset=last.offset + last.end - last.start if last.is_file else 0)
    kernel.vmas.set(grown)
    if grown.is_file and not grown.shared:
        refill(kernel, grown)
    _protect(kernel, low, high - low, _protection(grown))


def _grow_shared(kernel, address: int, old_end: int, new_end: int, flags: int) -> int:
    """mremap growing a MAP_SHARED mapping of a file the program made: the
    file's next pages join it where the address space after it is free,
    else (MREMAP_MAYMOVE) all of it is mapped anew elsewhere and the old
    range unmapped; the bytes are the file's, none copied."""
    node, path = kernel.shared_maps.touches(address, old_end)
    vma = kernel.vmas.containing(address)
    if vma is None or not vma.is_file or vma.end < old_end or kernel.files.from_host(node):
        raise SystemCallFault(f"mremap growing a MAP_SHARED mapping of {path} at {address:#x} (part of a mapping, "
                              "or a host file's): not emulated")
    in_place = kernel.space.is_free(old_end, new_end)
    if not in_place and not flags & MREMAP_MAYMOVE:
        raise GuestError(errno.ENOMEM)
    low = old_end if in_place else kernel.space.find(new_end - address)
    if low is None:
        raise GuestError(errno.ENOMEM)
    offset = vma.offset + (old_end if in_place else address) - vma.start
    size = new_end - (old_end if in_place else address)
    _map_fresh(kernel, low, size, shared_pages(node, path, offset, size))
    kernel.shared_maps.add(low, low + size, node, False, path)
    kernel.file_mappings.append((low, low + size, path, offset))
    protection = _protection(vma)
    whole = (vma.start, vma.offset) if in_place else (low, offset)  # one mapping as Linux's, grown
    kernel.vmas.mapped(whole[0], low + size, protection, MAP_SHARED, (path, whole[1]), node)
    _protect(kernel, low, size, protection)
    if in_place:
        return address
    _unmap(kernel, address, old_end)
    return low
