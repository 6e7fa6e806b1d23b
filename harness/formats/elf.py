"""Opening 32-bit ARM ELF files with pyelftools, with every failure as ElfError."""

from __future__ import annotations

import io
import struct
import zlib
from dataclasses import dataclass
from typing import Iterator, NamedTuple

from elftools.common.exceptions import DWARFError, ELFError
from elftools.construct.core import ConstructError
from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection
from elftools.elf.sections import SymbolTableSection

from harness.errors import ElfError, InputError
from harness.filesystem import read_input

# What pyelftools lets escape on malformed input: its own errors, the errors
# of its vendored `construct`, and plain Python errors from unchecked reads.
PARSE_ERRORS = (
    ELFError,
    DWARFError,
    ConstructError,
    struct.error,
    zlib.error,
    ValueError,
    IndexError,
    KeyError,
    TypeError,
    AssertionError,
    EOFError,
    OverflowError,
    RecursionError,  # a CIE pointer that leads back to an FDE
)

SHF_ALLOC, SHF_EXECINSTR = 0x2, 0x4


@dataclass(frozen=True)
class ElfImage:
    """A parsed ELF file. `elf` reads from an in-memory copy of the file.
    `stripped`: its `.symtab` is not read, as if `strip` had removed it
    (`.dynsym` stays, as in Debian's binaries): what a stripped build of
    the same code would show."""

    path: str
    elf: ELFFile
    stripped: bool = False


def open_elf(path: str) -> ElfImage:
    """Parse `path` as a little-endian 32-bit ARM ELF; ElfError otherwise."""
    try:
        data = read_input(path, "ELF")
    except InputError as error:
        raise ElfError(str(error)) from None
    if not data.startswith(b"\x7fELF"):
        raise ElfError(f"{path}: not an ELF file")
    try:
        elf = ELFFile(io.BytesIO(data))
        machine, elfclass, little = elf["e_machine"], elf.elfclass, elf.little_endian
    except PARSE_ERRORS as e:
        raise ElfError(f"{path}: truncated or corrupt ELF: {e}") from e
    if machine != "EM_ARM" or elfclass != 32:
        raise ElfError(f"{path}: not a 32-bit ARM ELF (machine {machine}, ELFCLASS{elfclass})")
    if not little:
        raise ElfError(f"{path}: big-endian ARM is not supported")
    try:
        # Section headers are parsed lazily; read them now so that a
        # truncated file fails here rather than in some later reader.
        sections = [
            (s.name, s["sh_type"], s["sh_offset"], s["sh_size"]) for s in elf.iter_sections()
        ]
    except PARSE_ERRORS as e:
        raise ElfError(f"{path}: truncated or corrupt ELF: {e}") from e
    for name, sh_type, offset, size in sections:
        if sh_type != "SHT_NOBITS" and offset + size > len(data):
            raise ElfError(f"{path}: truncated or corrupt ELF: section {name} ends past the file")
    return ElfImage(path, elf)


def executable_ranges(image: ElfImage) -> list[tuple[int, int]]:
    """Sorted [start, end) address ranges of the non-empty executable sections."""
    return sorted(
        (s["sh_addr"], s["sh_addr"] + s["sh_size"])
        for s in image.elf.iter_sections()
        if s["sh_flags"] & SHF_EXECINSTR and s["sh_size"] > 0
    )


def text_base(image: ElfImage) -> int:
    """Lowest address of a non-empty executable section."""
    ranges = executable_ranges(image)
    if not ranges:
        raise ElfError(f"{image.path}: no executable section")
    return ranges[0][0]


STT_FUNC, STT_GNU_IFUNC = 2, 10
SYMBOL = struct.Struct("<IIIBBH")  # Elf32_Sym: st_name, st_value, st_size, st_info, st_other, st_shndx


class Symbol(NamedTuple):
    table: str  # the symbol table's section name (.symtab, .dynsym)
    name: str
    value: int
    size: int
    type: int  # STT_*
    section: int  # st_shndx: 0 is undefined

    @property
    def defined_function(self) -> bool:
        return self.type == STT_FUNC and self.section != 0


def symbols(image: ElfImage) -> Iterator[Symbol]:
    """Every symbol of the ELF's symbol tables, one at a time (an
    unstripped library holds millions), unpacked here: pyelftools parses
    each with `construct`, some 40 µs, where this takes about one."""
    try:
        for section in image.elf.iter_sections():
            if not isinstance(section, SymbolTableSection) or (image.stripped and section.name == ".symtab"):
                continue
            data, strings = section.data(), image.elf.get_section(section["sh_link"]).data()
            size = section["sh_entsize"] or SYMBOL.size
            if size < SYMBOL.size:
                raise ElfError(f"{image.path}: corrupt symbol table {section.name}: entries of {size} bytes")
            for offset in range(0, len(data) - SYMBOL.size + 1, size):
                at, value, length, info, _, index = SYMBOL.unpack_from(data, offset)
                end = strings.find(b"\0", at)  # a name past its table is empty, as pyelftools reads it
                name = strings[at:end if end >= 0 else len(strings)].decode("utf-8", errors="replace")
                yield Symbol(section.name, name, value, length, info & 0xF, index)
    except PARSE_ERRORS as e:
        raise ElfError(f"{image.path}: corrupt symbol table: {e}") from e


def function_symbols(image: ElfImage) -> list[tuple[int, int, str]]:
    """Defined STT_FUNC symbols as sorted (address without Thumb bit, size, name)."""
    return sorted({(sym.value & ~1, sym.size, sym.name) for sym in symbols(image) if sym.defined_function})


def thumb_functions(image: ElfImage) -> tuple[tuple[int, int, str], ...]:
    """Thumb functions (STT_FUNC symbols with the Thumb bit) as sorted
    (start, end, name), see `function_spans`."""
    return tuple(span[:3] for span in function_spans(image) if span[3])


def function_spans(image: ElfImage) -> tuple[tuple[int, int, str, bool], ...]:
    """Functions (STT_FUNC symbols) as sorted (start, end, name, Thumb?):
    one per address (an alias keeps the first name), ending at the symbol's
    size or the next function, whichever is first; a symbol of size 0 ends
    at the next function or its section's end."""
    spans: dict[int, tuple[int, str, bool]] = {}
    limits = executable_ranges(image)
    for sym in symbols(image):
        if sym.defined_function:
            spans.setdefault(sym.value & ~1, (sym.size, sym.name, bool(sym.value & 1)))
    starts = sorted(spans)
    found = []
    for index, start in enumerate(starts):
        size, name, thumb = spans[start]
        section_end = next((high for low, high in limits if low <= start < high), start)
        end = min(start + size if size else section_end, starts[index + 1] if index + 1 < len(starts) else section_end,
                  section_end)
        if end > start and (thumb or start % 4 == 0):  # ARM code is word-aligned
            found.append((start, end, name, thumb))
    return tuple(found)


def unsized_functions(image: ElfImage) -> tuple[int, ...]:
    """The starts of the function symbols of size 0 (assembly without
    `.size`: crt1's `_start`, much of glibc's), sorted: where such a
    function ends, no symbol says."""
    sized: dict[int, bool] = {}
    for sym in symbols(image):
        if sym.defined_function:
            sized[sym.value & ~1] = sized.get(sym.value & ~1, False) or sym.size > 0
    return tuple(sorted(start for start, has_size in sized.items() if not has_size))


def mapping_symbols(image: ElfImage) -> tuple[tuple[int, str], ...]:
    """The ARM ELF mapping symbols (`$a`, `$t`, `$d`, or with a `.suffix`)
    as sorted (address, "a" | "t" | "d"): from each, up to the next, the
    section holds ARM code, Thumb code or data (AAELF32 5.5.5). A linker's
    interworking veneer (`__memmove_from_thumb`: Thumb `bx pc`, then an ARM
    branch) and literal pools are marked so; stripped files have none."""
    found = {}
    for sym in symbols(image):
        name = sym.name
        if name[:2] in ("$a", "$t", "$d") and name[2:3] in ("", ".") and sym.section != 0:
            if found.get(sym.value, "d") == "d":  # data of no length, then code: code
                found[sym.value] = name[1]
    return tuple(sorted(found.items()))


DT_INIT, DT_FINI = 12, 13


def entry_points(image: ElfImage) -> tuple[int, ...]:
    """Where the kernel and the dynamic linker enter the ELF's code, as
    written (bit 0 set: Thumb): `e_entry` and DT_INIT, DT_FINI (`_init`,
    `_fini`), those of them that lie in an executable section; sorted."""
    ranges = executable_ranges(image)
    found = {image.elf["e_entry"]}
    try:
        dynamic = image.elf.get_section_by_name(".dynamic")
        if dynamic is not None and dynamic["sh_type"] == "SHT_DYNAMIC":
            data = dynamic.data()
            found.update(value for tag, value in struct.iter_unpack("<iI", data[:len(data) // 8 * 8])
                         if tag in (DT_INIT, DT_FINI))
    except PARSE_ERRORS as e:
        raise ElfError(f"{image.path}: corrupt .dynamic: {e}") from e
    return tuple(sorted(value for value in found if any(low <= value & ~1 < high for low, high in ranges)))


def plt_entries(image: ElfImage) -> dict[int, str]:
    """The address of each PLT entry (ARM code: `add ip, pc, #a; add ip,
    ip, #b; ldr pc, [ip, #c]!`, found by that pattern) by the name of the
    function whose GOT slot it loads (.rel.plt); a Thumb stub in front
    (`bx pc` into it; then `nop`, or Debian's `b.n` back) counts too."""
    plt, relocations = image.elf.get_section_by_name(".plt"), image.elf.get_section_by_name(".rel.plt")
    if plt is None or not isinstance(relocations, RelocationSection):
        return {}
    try:
        symbols = image.elf.get_section(relocations["sh_link"])
        names = {r["r_offset"]: symbols.get_symbol(r["r_info_sym"]).name for r in relocations.iter_relocations()}
        code, base = plt.data(), plt["sh_addr"]
    except (*PARSE_ERRORS, AttributeError) as e:
        raise ElfError(f"{image.path}: corrupt .rel.plt: {e}") from e
    found = {}
    for offset in range(0, len(code) - 11, 4):
        first, second, load = struct.unpack_from("<3I", code, offset)
        if (first & 0xFFFFF000, second & 0xFFFFF000, load & 0xFFFFF000) != (0xE28FC000, 0xE28CC000, 0xE5BCF000):
            continue
        slot = base + offset + 8 + _arm_immediate(first) + _arm_immediate(second) + (load & 0xFFF)
        if slot in names:
            found[base + offset] = names[slot]
            if offset >= 4 and code[offset - 4:offset] in (b"\x78\x47\xc0\x46", b"\x78\x47\xfd\xe7"):
                found[base + offset - 4] = names[slot]
    return found


def _arm_immediate(word: int) -> int:
    """The value of an ARM data-processing immediate: imm8 rotated right by twice rot."""
    rotation, value = 2 * ((word >> 8) & 0xF), word & 0xFF
    return ((value >> rotation) | (value << (32 - rotation))) & 0xFFFFFFFF


MEMORY_BUDGET = 256 << 20  # bytes of memory all PT_LOAD segments together may ask for


def load_segments(image: ElfImage) -> tuple[tuple[int, bytes], ...]:
    """Contents of every PT_LOAD segment at its virtual address (zero-filled
    up to its memory size, so .bss is there too); ElfError for a segment
    past the 32-bit address space, with less memory than file bytes, or
    asking for more memory than MEMORY_BUDGET in all."""
    segments, total = [], 0
    try:
        for segment in image.elf.iter_segments():
            if segment["p_type"] != "PT_LOAD" or segment["p_memsz"] == 0:
                continue
            address, memsz, filesz = segment["p_vaddr"], segment["p_memsz"], segment["p_filesz"]
            where = f"{image.path}: the PT_LOAD segment at {address:#x}"
            if address + memsz > 1 << 32:
                raise ElfError(f"{where} ({memsz:#x} bytes) runs past the 32-bit address space")
            if filesz > memsz:
                raise ElfError(f"{where} has {filesz:#x} bytes in the file but only {memsz:#x} in memory")
            total += memsz
            if total > MEMORY_BUDGET:
                raise ElfError(f"{where} takes the segments past the {MEMORY_BUDGET >> 20} MiB of memory "
                               f"the harness maps ({memsz:#x} bytes)")
            data = segment.data()
            if len(data) < filesz:
                raise ElfError(f"{image.path}: truncated: a PT_LOAD segment runs past the end of the file")
            segments.append((address, data + bytes(memsz - len(data))))
    except PARSE_ERRORS as e:
        raise ElfError(f"{image.path}: corrupt program headers: {e}") from e
    if not segments:
        raise ElfError(f"{image.path}: no PT_LOAD segment to run")
    return tuple(segments)


def symbol_address(image: ElfImage, name: str) -> int:
    """Address (Thumb bit clear) of the function symbol `name`."""
    for address, _size, symbol in function_symbols(image):
        if symbol == name:
            return address
    raise ElfError(f"{image.path}: no function symbol {name!r}")


def section_size(image: ElfImage, name: str) -> int | None:
    """Size in bytes of section `name`, or None if the ELF has none."""
    try:
        section = image.elf.get_section_by_name(name)
    except PARSE_ERRORS as e:
        raise ElfError(f"{image.path}: corrupt section headers: {e}") from e
    return None if section is None else section["sh_size"]


def section_data(image: ElfImage, name: str) -> bytes:
    """The bytes of section `name` (b"" if the ELF has none, or it takes no
    room in the file)."""
    try:
        section = image.elf.get_section_by_name(name)
        return b"" if section is None or section["sh_type"] == "SHT_NOBITS" else section.data()
    except PARSE_ERRORS as e:
        raise ElfError(f"{image.path}: cannot read {name}: {e}") from e


def build_id(image: ElfImage) -> bytes | None:
    """The GNU build id (NT_GNU_BUILD_ID of .note.gnu.build-id), if any."""
    try:
        section = image.elf.get_section_by_name(".note.gnu.build-id")
        if section is None:
            return None
        for note in section.iter_notes():
            if note["n_type"] == "NT_GNU_BUILD_ID":
                return bytes.fromhex(note["n_desc"])
    except PARSE_ERRORS as e:
        raise ElfError(f"{image.path}: corrupt build id note: {e}") from e
    return None


def load_base(image: ElfImage) -> int:
    """Where the module's addresses count from in a Breakpad symbol file:
    its lowest loadable segment's address (0 without any)."""
    try:
        loads = [segment["p_vaddr"] for segment in image.elf.iter_segments() if segment["p_type"] == "PT_LOAD"]
    except PARSE_ERRORS as e:
        raise ElfError(f"{image.path}: corrupt program headers: {e}") from e
    return min(loads, default=0)
