"""The words of an ELF's data that point into its code: callbacks, vtable
entries, a computed goto's labels (what function discovery and the
frame analysis take as starts and jump targets)."""

from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right
from typing import NamedTuple

from elftools.elf.relocation import RelocationSection

from harness.errors import ElfError
from harness.formats.elf import PARSE_ERRORS, SHF_ALLOC, SHF_EXECINSTR, ElfImage

R_ARM_RELATIVE = 23  # a word the dynamic linker moves with the module: an address


# Consecutive words pointing at code that make a table of addresses (a
# computed goto's labels, `static void *targets[] = {&&a, &&b, ...}`). A lone
# word may be an integer that only looks like one: in a program linked where
# it runs, any constant within the code's addresses does (CPython's data holds
# some 60 such words inside its interpreter loop, most not at an instruction).
LABEL_TABLE_RUN = 2


class CodePointers(NamedTuple):
    """The words of an ELF's data that point into its code, as they are
    (with the Thumb bit, a Thumb function's address: a callback, a vtable
    entry), sorted; and those of them in tables (LABEL_TABLE_RUN words or
    more in a row, each pointing into the code): a computed goto's labels
    are among these."""

    words: tuple[int, ...] = ()
    tabled: tuple[int, ...] = ()


def code_pointers(image: ElfImage, ranges) -> CodePointers:
    """The CodePointers of the ELF's data: every allocated section that is
    not code (.rodata too where the linker put it in the code's segment,
    as it does without -z separate-code) pointing into the executable
    `ranges` [low, high). In a module the dynamic linker moves, only words
    it relocates (R_ARM_RELATIVE) are addresses (only those are read: a
    million in Chromium); elsewhere every word is taken (an integer that
    looks like an address is then taken too)."""
    ranges = sorted(ranges)
    lows = [low for low, _ in ranges]
    found, tabled = set(), set()
    try:
        relocated = _relative_slots(image)
        for section in image.elf.iter_sections():
            if not section["sh_flags"] & SHF_ALLOC or section["sh_flags"] & SHF_EXECINSTR \
                    or section["sh_type"] == "SHT_NOBITS" or not section["sh_size"]:
                continue
            data, address = section.data(), section["sh_addr"]
            first = address + -address % 4  # the first aligned word's address
            last = first + (len(data) - (first - address)) // 4 * 4
            slots = range(first, last, 4) if relocated is None else \
                [slot for slot in relocated[bisect_left(relocated, first):bisect_left(relocated, last)] if slot % 4 == 0]
            run, previous = [], None
            for slot in slots:
                (word,) = struct.unpack_from("<I", data, slot - address)
                index = bisect_right(lows, word) - 1
                if previous != slot - 4 or not (index >= 0 and word < ranges[index][1]):
                    if len(run) >= LABEL_TABLE_RUN:  # a word in between that is no address ends a run
                        tabled.update(run)
                    run = []
                previous = slot
                if index >= 0 and word < ranges[index][1]:
                    found.add(word)
                    run.append(word)
            if len(run) >= LABEL_TABLE_RUN:
                tabled.update(run)
    except PARSE_ERRORS as e:
        raise ElfError(f"{image.path}: corrupt sections or relocations: {e}") from e
    return CodePointers(tuple(sorted(found)), tuple(sorted(tabled)))


def _relative_slots(image: ElfImage) -> list[int] | None:
    """Where the R_ARM_RELATIVE relocations of the ELF apply, sorted; None
    without any. Read as the packed records they are (pyelftools' parse of
    each, a million, took 18 s)."""
    order = "<" if image.elf.little_endian else ">"
    slots = set()
    for section in image.elf.iter_sections():
        if isinstance(section, RelocationSection):
            layout = order + ("IIi" if section.is_RELA() else "II")
            size = struct.calcsize(layout)
            data = section.data()
            slots.update(fields[0] for fields in struct.iter_unpack(layout, data[:len(data) // size * size])
                         if fields[1] & 0xFF == R_ARM_RELATIVE)
    return sorted(slots) or None
