"""What /proc/self/maps and /proc/self/stat say of the address space: the
kernel's view of each mapping (its protection, the file behind it), kept
as the loader and mmap2/mprotect make them, and the lines Linux 6.1's
fs/proc/task_mmu.c prints from it.

The engine maps every page readable, writable and executable
(harness.linux.calls_memory); the protections here are the ones the
program asked for, which is what it can observe of them on Linux.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field, replace

from harness.formats.elf import open_elf
from harness.linux.files import Node, inode_of
from harness.linux.memory import page_down, page_up

PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4
MAP_SHARED = 0x01
PF_X, PF_W, PF_R = 1, 2, 4
VECTORS = (0xFFFF0000, 0xFFFF1000, "r-x")  # ARM's kuser helper page, as Linux shows it
FILE_DEVICE = "00:01"  # the st_dev fstat gives every file (harness.linux.calls_files)
# The width Linux pads a line's fields to before a name: 25 + sizeof(void *) * 6 - 1.
NAME_COLUMN = 25 + 4 * 6 - 1


@dataclass(frozen=True)
class Vma:
    """One mapping as the kernel sees it: [start, end), its rwx
    protections, shared or private, and the file behind it (`name`, at
    `offset`) or the name Linux gives an anonymous one ([stack]...). A
    file's bytes come from `node` (a guest file's Node, mmap2's) or, for
    the ELFs exec loaded, from `host`, their path on the host."""

    start: int
    end: int
    perms: str  # "r-x"...
    shared: bool = False
    name: str = ""
    offset: int = 0
    is_file: bool = False
    node: Node | None = field(default=None, compare=False, repr=False)
    host: str = field(default="", compare=False, repr=False)

    def at(self, start: int, end: int) -> "Vma":
        """The part [start, end) of this mapping."""
        offset = self.offset + (start - self.start) if self.is_file else 0
        return replace(self, start=start, end=end, offset=offset)

    def continues(self, before: "Vma") -> bool:
        """Would Linux merge this mapping into the one just below it?"""
        return (before.end == self.start and (before.perms, before.shared, before.name, before.is_file)
                == (self.perms, self.shared, self.name, self.is_file)
                and (not self.is_file or before.offset + (before.end - before.start) == self.offset))


def perms_of(protection: int) -> str:
    return "".join(letter if protection & bit else "-"
                   for letter, bit in (("r", PROT_READ), ("w", PROT_WRITE), ("x", PROT_EXEC)))


class Vmas:
    """The mappings the program and the loader made, newest over oldest; a
    page no mapping names is anonymous and writable (brk, mremap's growth).
    Unmapped pages are filtered out when the lines are made (the address
    space knows what is mapped)."""

    def __init__(self):
        self._vmas: list[Vma] = []  # sorted, disjoint
        self._starts: list[int] = []  # each one's start, for bisect
        self.private_nodes: set[int] = set()

    def set(self, vma: Vma) -> None:
        self._replace(vma.start, vma.end, [vma])

    def unmapped(self, start: int, end: int) -> None:
        """[start, end) unmapped: no mapping there, until one is made again."""
        self._replace(start, end, [])

    def _replace(self, start: int, end: int, new: list[Vma]) -> None:
        kept = []
        for old in self._vmas:
            if old.end <= start or end <= old.start:
                kept.append(old)
                continue
            if old.start < start:
                kept.append(old.at(old.start, start))
            if end < old.end:
                kept.append(old.at(end, old.end))
        self._vmas = sorted(kept + new, key=lambda each: each.start)
        self._starts = [each.start for each in self._vmas]
        # the files privately mapped: a write to one may show in its mapping's pages (harness.linux.private_maps)
        self.private_nodes = {id(vma.node) for vma in self._vmas if vma.node is not None and not vma.shared}

    def within(self, start: int, end: int) -> list[Vma]:
        """The mappings' parts in [start, end), in order (pages no mapping names left out)."""
        index = max(0, bisect.bisect_right(self._starts, start) - 1)
        return [vma.at(max(vma.start, start), min(vma.end, end)) for vma in self._vmas[index:]
                if vma.start < end and start < vma.end]

    def of_node(self, node: Node) -> list[Vma]:
        """The private mappings of the file `node`."""
        return [vma for vma in self._vmas if vma.node is node and not vma.shared] if id(node) in self.private_nodes \
            else []

    def containing(self, address: int) -> Vma | None:
        index = bisect.bisect_right(self._starts, address) - 1
        return self._vmas[index] if index >= 0 and address < self._vmas[index].end else None

    def refuses(self, start: int, end: int, access: str) -> bool:
        """Does a mapping over [start, end) deny `access` ("r" or "w") to a
        system call? Reads need any protection (ARMv7: writable or
        executable pages are readable), writes "w"; pages no mapping names
        are anonymous and writable."""
        index = max(0, bisect.bisect_right(self._starts, start) - 1)
        for vma in self._vmas[index:]:
            if vma.start >= end:
                break
            if vma.end > start and (vma.perms == "---" if access == "r" else "w" not in vma.perms):
                return True
        return False

    def mapped(self, start: int, end: int, protection: int, flags: int, file: tuple[str, int] | None,
               node: Node | None = None) -> None:
        """mmap2 placed [start, end): of `file` (guest path, offset; its Node
        `node`) or anonymous."""
        shared = bool(flags & MAP_SHARED)
        if file is not None:
            self.set(Vma(start, end, perms_of(protection), shared, file[0], file[1], is_file=True, node=node))
        else:  # shared anonymous memory is a deleted shmem file, as Linux names it
            self.set(Vma(start, end, perms_of(protection), shared, "/dev/zero (deleted)" if shared else "",
                         is_file=shared))

    def protect(self, start: int, end: int, protection: int) -> None:
        for old in [vma for vma in self._vmas if vma.start < end and start < vma.end]:
            self.set(replace(old.at(max(old.start, start), min(old.end, end)), perms=perms_of(protection)))

    def lines(self, ranges, brk: tuple[int, int]) -> list[Vma]:
        """The mappings over the mapped `ranges` ((start, end) pairs), merged
        as Linux merges them; anonymous memory reaching the break is [heap]."""
        out: list[Vma] = []
        for low, high in ranges:
            position = low
            for vma in [vma for vma in self._vmas if vma.start < high and low < vma.end] + [Vma(high, high, "")]:
                if position < vma.start:  # a part no mapping names: anonymous
                    out.append(Vma(position, min(vma.start, high), "rw-"))
                if vma.end > vma.start:
                    out.append(vma.at(max(vma.start, low), min(vma.end, high)))
                position = max(position, vma.end)
        merged: list[Vma] = []
        for vma in out:
            if merged and vma.continues(merged[-1]):
                merged[-1] = replace(merged[-1], end=vma.end)
            else:
                merged.append(vma)
        start_brk, end_brk = brk
        return [replace(vma, name="[heap]") if not vma.is_file and not vma.name and vma.start <= end_brk
                and vma.end >= start_brk else vma for vma in merged]


def line(vma: Vma) -> str:
    """One line of /proc/self/maps, as show_map_vma prints it."""
    inode = inode_of(vma.name) if vma.is_file else 0
    device = FILE_DEVICE if vma.is_file else "00:00"
    head = (f"{vma.start:08x}-{vma.end:08x} {vma.perms}{'s' if vma.shared else 'p'} {vma.offset:08x} "
            f"{device} {inode} ")
    if not vma.name:
        return head + "\n"
    return head.ljust(NAME_COLUMN) + " " + vma.name + "\n"


@dataclass(frozen=True)
class Loaded:
    """An ELF as Linux's loader maps it: its mappings, and the bounds of its
    code and data as mm_struct keeps them (start_code... in /proc/self/stat)."""

    vmas: tuple[Vma, ...]
    code: tuple[int, int]
    data: tuple[int, int]


def loaded(host_path: str, base: int, guest_path: str) -> Loaded:
    """A program or its dynamic linker placed at `base`, as load_elf_binary
    maps it: each PT_LOAD from its file, the part of its memory past the
    file's last page anonymous (.bss)."""
    vmas, code, data = [], [1 << 32, 0], [0, 0]
    for segment in open_elf(host_path).elf.iter_segments():  # read once already: the loader placed it
        if segment["p_type"] != "PT_LOAD" or not segment["p_memsz"]:
            continue
        flags, address = segment["p_flags"], segment["p_vaddr"] + base
        perms = "".join(letter if flags & bit else "-" for letter, bit in (("r", PF_R), ("w", PF_W), ("x", PF_X)))
        start, file_end = page_down(address), page_up(address + segment["p_filesz"])
        end = page_up(address + segment["p_memsz"])
        if file_end > start:
            vmas.append(Vma(start, file_end, perms, False, guest_path, page_down(segment["p_offset"]), is_file=True,
                            host=host_path))
        if end > file_end:
            vmas.append(Vma(file_end, end, perms))
        if flags & PF_X:
            code = [min(code[0], address), max(code[1], address + segment["p_filesz"])]
        data = [max(data[0], address), max(data[1], address + segment["p_filesz"])]
    return Loaded(tuple(vmas), (code[0] if code[1] else 0, code[1]), (data[0], data[1]))
