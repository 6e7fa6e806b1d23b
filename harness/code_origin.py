"""Where the code of a linked executable comes from.

An executable holds more than the program's sources: the C runtime's start
files (crt1.o's _start, crti.o's _init), libgcc's (crtbegin.o's
frame_dummy, the division helpers), and in a static link the C and C++
libraries themselves. Their frames are not the program's: a walk that stops
honestly in them stops in that library (harness.verify.failures), it is not
a failure of the program's code. The ELF tells the origins apart twice:

- its DWARF compile units (.debug_info) give the code of each unit and the
  source file it was compiled from; a unit from a runtime library's source
  tree (libgcc's lib1funcs.S) is that library's, every other is the
  program's own;
- its function symbols name the code outside every unit, which belongs to
  the library whose dynamic symbols export that name (a static link's
  memcpy or __cxa_throw), to the library whose start files define it
  (_start is the C library's, frame_dummy libgcc's), to libgcc when the name is one of the ARM run-time
  ABI's or libgcc's helpers (__aeabi_idiv, __udivsi3, _Unwind_Resume), to
  the library of both its neighbours when they agree (an archive's members
  are linked together), and otherwise to "lib": runtime code whose library
  the binary does not name.

An executable without compile units (stripped, as Debian ships them) is the
program's own throughout: nothing in it tells the origins apart.
"""

from __future__ import annotations

import re
from typing import Mapping

from elftools.dwarf.ranges import BaseAddressEntry

from harness.classify import OWN
from harness.errors import ElfError
from harness.formats.elf import PARSE_ERRORS, STT_FUNC, STT_GNU_IFUNC, ElfImage, function_symbols, open_elf, symbols
from harness.program import ModuleSpan

OTHER = "lib"  # runtime code whose library the binary does not name
# Runtime libraries by a directory of their source tree, as compile units name it.
LIBRARY_SOURCES = (("libgcc", "libgcc"), ("libstdc++-v3", "libstdcxx"), ("newlib", "libc"),
                   ("libgloss", "libc"), ("glibc", "libc"), ("sysdeps", "libc"), ("csu", "libc"))
# libgcc's entry points: the ARM run-time ABI's helpers, the unwinder's, and
# libgcc's integer, floating-point and atomic routines (GCC internals, "The
# GCC low-level runtime library").
LIBGCC_NAMES = re.compile(
    r"__aeabi_\w+|__gnu_\w+|_Unwind_\w+|__gcc_personality_v0|__restore_core_regs|__clear_cache|__sync_\w+"
    r"|__(u?(div|mod)|udivmod|clz|ctz|ffs|popcount|parity|bswap|ash[lr]|lshr|mul|neg|u?cmp|fix\w*|float\w*"
    r"|add|sub|extend\w*|trunc\w*|eq|ne|gt|ge|lt|le|unord)[sdtx]?[if]?[234]")

# The start files every link adds, by the library that ships them: the C
# library's crt1.o and crti.o (program entry, _init/_fini), and libgcc's
# crtbegin.o (the TM clone tables, the destructor and frame-info hooks).
START_FILES = {"_start": "libc", "call_weak_fn": "libc", "_init": "libc", "_fini": "libc",
               "deregister_tm_clones": "libgcc", "register_tm_clones": "libgcc",
               "__do_global_dtors_aux": "libgcc", "__do_global_ctors_aux": "libgcc", "frame_dummy": "libgcc"}


def source_label(name: str) -> str:
    """The MODULES label of a compile unit by its source file's path."""
    parts = name.replace("\\", "/").split("/")
    for directory, label in LIBRARY_SOURCES:
        if directory in parts[:-1]:
            return label
    return OWN


def compile_units(image: ElfImage) -> list[tuple[int, int, str]]:
    """(low, high, label) of the code of each DWARF compile unit, at link
    addresses, sorted; none without .debug_info."""
    try:
        if not image.elf.has_dwarf_info() or image.elf.get_section_by_name(".debug_info") is None:
            return []
        dwarf = image.elf.get_dwarf_info()
        found = []
        for unit in dwarf.iter_CUs():
            top = unit.get_top_DIE()
            attributes = top.attributes
            name = attributes["DW_AT_name"].value if "DW_AT_name" in attributes else b""
            label = source_label(name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name))
            low = attributes["DW_AT_low_pc"].value if "DW_AT_low_pc" in attributes else 0
            if "DW_AT_ranges" in attributes:
                base = low
                for entry in dwarf.range_lists().get_range_list_at_offset(attributes["DW_AT_ranges"].value, unit):
                    if isinstance(entry, BaseAddressEntry):
                        base = entry.base_address
                    elif entry.is_absolute:
                        found.append((entry.begin_offset, entry.end_offset, label))
                    else:
                        found.append((base + entry.begin_offset, base + entry.end_offset, label))
            elif "DW_AT_high_pc" in attributes:
                high = attributes["DW_AT_high_pc"]
                found.append((low, high.value if high.form == "DW_FORM_addr" else low + high.value, label))
    except (*PARSE_ERRORS, KeyError, AttributeError, TypeError) as e:
        raise ElfError(f"{image.path}: corrupt .debug_info: {e}") from e
    return sorted((low & ~1, high, label) for low, high, label in found if low < high)


def exported_functions(image: ElfImage, label: str) -> dict[str, str]:
    """name -> `label` for each function a library's dynamic symbols define
    (STT_LOOS is STT_GNU_IFUNC, glibc's memcpy and friends)."""
    return {s.name: label for s in symbols(image)
            if s.table == ".dynsym" and s.type in (STT_FUNC, STT_GNU_IFUNC) and s.section != 0}


def library_exports(paths: Mapping[str, str]) -> dict[str, str]:
    """name -> library label, from the libraries `paths` (host path -> label);
    a name two libraries define keeps the first's."""
    names: dict[str, str] = {}
    for path, label in paths.items():
        for name, owner in exported_functions(open_elf(path), label).items():
            names.setdefault(name, owner)
    return names


def placed_symbols(image: ElfImage, base: int) -> tuple[tuple[int, int, str], ...]:
    """The ELF's function symbols as ModuleSpan.symbols, loaded `base` bytes up."""
    return tuple((start + base, start + base + max(size, 2), name) for start, size, name in function_symbols(image))


def symbol_label(name: str, exported: Mapping[str, str]) -> str | None:
    """The library a function outside every compile unit belongs to by its
    name, or None when its name does not say."""
    if name in exported:
        return exported[name]
    if name in START_FILES:
        return START_FILES[name]
    if LIBGCC_NAMES.fullmatch(name):
        return "libgcc"
    return None


def _pieces(units, symbols, low: int, high: int, exported) -> list[list]:
    """[start, end, label or None] covering [low, high): the compile units'
    code, and between them a piece per function symbol."""
    pieces: list[list] = []
    at = low
    for unit_low, unit_high, label in units + [(high, high, None)]:
        unit_low, unit_high = max(unit_low, low), min(unit_high, high)
        if unit_low > at:  # a gap: cut at each symbol starting in it
            starts = [(s, name) for s, _size, name in symbols if at < s < unit_low]
            first = next((name for s, _size, name in symbols if s <= at < s + max(_size, 1)), None)
            cuts = [(at, first)] + starts
            for (start, name), (end, _) in zip(cuts, cuts[1:] + [(unit_low, None)]):
                if name is None and pieces:  # no symbol: padding after the code before
                    pieces[-1][1] = end
                else:
                    pieces.append([start, end, symbol_label(name, exported) if name else None])
        if unit_high > max(unit_low, at):
            pieces.append([max(unit_low, at), unit_high, label])
        at = max(at, unit_high)
    return pieces


def origin_spans(image: ElfImage, low: int, high: int, base: int, name: str,
                 exported: Mapping[str, str] = {}) -> list[ModuleSpan]:
    """The code [low, high) (link addresses) of an executable loaded `base`
    bytes above them, cut by origin; one own span without compile units."""
    named = placed_symbols(image, base)
    units = compile_units(image)
    if not units:
        return [ModuleSpan(low + base, high + base, OWN, name, named)]
    pieces = _pieces(units, function_symbols(image), low, high, exported)
    labels = [p[2] for p in pieces]
    for index, piece in enumerate(pieces):  # unnamed: its neighbours' library, when they agree
        if piece[2] is None:
            before = next((x for x in reversed(labels[:index]) if x is not None), None)
            after = next((x for x in labels[index + 1:] if x is not None), None)
            piece[2] = before if before == after and before not in (None, OWN) else OTHER
    spans: list[ModuleSpan] = []
    for start, end, label in pieces:
        if spans and spans[-1].label == label and spans[-1].end == start + base:
            spans[-1] = ModuleSpan(spans[-1].start, end + base, label, name, named)
        elif start < end:
            spans.append(ModuleSpan(start + base, end + base, label, name, named))
    return spans
