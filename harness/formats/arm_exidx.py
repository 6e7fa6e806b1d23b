"""Reading an ARM ELF's own exception tables: `.ARM.exidx` and `.ARM.extab`
(ARM EHABI sections 6-7).

Each `.ARM.exidx` entry is two words: a prel31 offset to the function start,
then EXIDX_CANTUNWIND (1), an inline compact model (bit 31 set, personality
index 0: three instruction bytes), or a prel31 offset into `.ARM.extab`. There
a word with bit 31 set is a compact model (index 0 Su16: three bytes in the
word; index 1/2 Lu16/Lu32: byte 2 counts the extra words, instructions in
bytes 1, 0, then those words most significant byte first); bit 31 clear is a
prel31 offset to a generic personality routine. GCC's personalities
(__gxx_personality_v0, __gcc_personality_v0: the only generic ones GNU
toolchains emit) use the GNU model: the next word's top byte counts the
extra words, its low three bytes are the first instructions, then the
extra words, most significant byte first, then the routine's own data
(libgcc's __gnu_unwind_frame reads exactly this). As libunwindstack
(ArmExidx::ExtractEntryData), more than 5 extra words is malformed. An
entry that cannot be read or decoded refuses its own function only.

`parse_exidx` is a pure function of the two sections' bytes and addresses.
A malformed index raises ExidxError naming the section and the byte offset;
a malformed entry becomes an "unreadable" entry carrying that message.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from harness.errors import EhabiError, ElfError, InputError, TruncatedSequence
from harness.formats import ehabi
from harness.formats.elf import PARSE_ERRORS, ElfImage, executable_ranges, open_elf
from harness.program import ExidxSections

EXIDX = ".ARM.exidx"
EXIDX_CANTUNWIND = 1
EXTAB = ".ARM.extab"
ADDRESS_SPACE_END = 1 << 32  # `end` when nothing bounds the last entry
MAX_EXTRA_WORDS = 5  # more words of instructions than libunwindstack reads (ArmExidx: malformed)


class ExidxError(InputError):
    """A malformed `.ARM.exidx` / `.ARM.extab`; names the section and byte offset."""

    def __init__(self, section: str, offset: int, message: str, path: str | None = None):
        where = f"{path}: " if path else ""
        super().__init__(f"{where}corrupt {section} at byte {offset}: {message}")
        self.section = section
        self.offset = offset
        self.message = message


@dataclass(frozen=True)
class ExidxEntry:
    """One function's entry. `start` has the Thumb bit clear; the function ends
    where the next entry starts. `instructions` (compact only) are the raw
    instruction bytes, `ops` their decoding, always ending in finish or refuse."""

    start: int
    instructions: bytes | None
    kind: str  # "compact" | "cantunwind" | "generic" | "unreadable"
    ops: tuple[ehabi.Op, ...] = ()
    problem: str | None = None  # an unreadable entry: why


def prel31(word: int, address: int) -> int:
    """The target of a prel31 field stored at `address`."""
    offset = word & 0x7FFFFFFF
    if offset & 0x40000000:
        offset -= 0x80000000
    return (address + offset) & 0xFFFFFFFF


def decode_instructions(data: bytes, section: str, offset: int) -> tuple[ehabi.Op, ...]:
    """Decode a compact model's instruction bytes; an implicit finish follows
    them (EHABI 10.2), and bytes after the first finish are padding."""
    try:
        try:
            return tuple(ehabi.decode(data, run=True))
        except TruncatedSequence:
            # Either no finish (fine: implicit) or an instruction cut short,
            # which the plain decode below reports.
            return tuple(ehabi.decode(data)) + (ehabi.FINISH,)
    except EhabiError as e:
        raise ExidxError(section, offset, f"undecodable instructions {data.hex()}: {e}") from None


def _word(data: bytes, offset: int, section: str) -> int:
    if offset < 0 or offset + 4 > len(data):
        raise ExidxError(section, offset, f"truncated: word runs past the section end ({len(data)} bytes)")
    return int.from_bytes(data[offset : offset + 4], "little")


def _compact(word: int, extab: bytes, offset: int, where: str) -> bytes:
    """Instruction bytes of the compact model whose first word (bit 31 set)
    sits at `offset` of `extab` (which is the `where` section)."""
    index = (word >> 24) & 0x0F
    if word & 0x70000000:
        raise ExidxError(where, offset, f"compact model word {word:#010x} has bits 28-30 set")
    if index == 0:
        return word.to_bytes(4, "big")[1:]
    if index in (1, 2) and where == EXTAB:
        count = _extra_words(word >> 16 & 0xFF, offset)
        out = bytearray(word.to_bytes(4, "big")[2:])
        for i in range(count):
            out += _word(extab, offset + 4 + 4 * i, EXTAB).to_bytes(4, "big")
        return bytes(out)
    raise ExidxError(where, offset, f"personality index {index} is not allowed here")


def _extra_words(count: int, offset: int) -> int:
    if count > MAX_EXTRA_WORDS:
        raise ExidxError(EXTAB, offset, f"{count} more words of instructions (libunwindstack reads at most "
                                        f"{MAX_EXTRA_WORDS})")
    return count


def _generic(start: int, extab: bytes, where: int) -> ExidxEntry:
    """The GNU-model entry for the function at `start` whose personality
    word sits at `where` of `extab`."""
    head = _word(extab, where + 4, EXTAB)
    data = bytearray(head.to_bytes(4, "big")[1:])
    for index in range(_extra_words(head >> 24, where + 4)):
        data += _word(extab, where + 8 + 4 * index, EXTAB).to_bytes(4, "big")
    return ExidxEntry(start, bytes(data), "generic", decode_instructions(bytes(data), EXTAB, where + 4))


def _entry(start: int, second: int, offset: int, exidx: bytes, exidx_address: int,
           extab: bytes, extab_address: int) -> ExidxEntry:
    """The entry at `offset` of `.ARM.exidx` for the function at `start`,
    whose second word is `second`; ExidxError if it cannot be read."""
    if second == EXIDX_CANTUNWIND:
        return ExidxEntry(start, None, "cantunwind")
    if second & 0x80000000:
        data = _compact(second, exidx, offset + 4, EXIDX)
        return ExidxEntry(start, data, "compact", decode_instructions(data, EXIDX, offset + 4))
    target = prel31(second, exidx_address + offset + 4)
    where = target - extab_address
    if not 0 <= where <= len(extab) - 4 or where % 4:
        raise ExidxError(EXIDX, offset + 4,
                         f"extab pointer {target:#x} is outside {EXTAB} "
                         f"[{extab_address:#x}, {extab_address + len(extab):#x})")
    word = _word(extab, where, EXTAB)
    if not word & 0x80000000:
        return _generic(start, extab, where)
    data = _compact(word, extab, where, EXTAB)
    return ExidxEntry(start, data, "compact", decode_instructions(data, EXTAB, where))


def parse_sections(sections: ExidxSections) -> tuple[ExidxEntry, ...]:
    """The entries of a program's `.ARM.exidx` / `.ARM.extab` (harness.program)."""
    return parse_exidx(sections.exidx, sections.exidx_address, sections.extab, sections.extab_address)


def parse_exidx(exidx: bytes, exidx_address: int, extab: bytes = b"",
                extab_address: int = 0) -> tuple[ExidxEntry, ...]:
    """The entries of an `.ARM.exidx` section, which must be sorted by start.
    A broken index (its size, a function word, the order) is an ExidxError;
    an entry whose instructions cannot be read is kept as an "unreadable"
    entry naming why: its function refuses, the rest of the table stands
    (as libunwindstack fails one function, not the library)."""
    if len(exidx) % 8:
        raise ExidxError(EXIDX, len(exidx) - len(exidx) % 8,
                         f"size {len(exidx)} is not a multiple of 8")
    entries: list[ExidxEntry] = []
    for offset in range(0, len(exidx), 8):
        first = _word(exidx, offset, EXIDX)
        second = _word(exidx, offset + 4, EXIDX)
        if first & 0x80000000:
            raise ExidxError(EXIDX, offset, f"function word {first:#010x} has bit 31 set")
        start = prel31(first, exidx_address + offset) & ~1
        if entries and start < entries[-1].start:
            raise ExidxError(EXIDX, offset, f"entry for {start:#x} follows {entries[-1].start:#x}: not sorted")
        try:
            entries.append(_entry(start, second, offset, exidx, exidx_address, extab, extab_address))
        except ExidxError as error:
            entries.append(ExidxEntry(start, None, "unreadable", (), str(error)))
    return tuple(entries)


def _section(image: ElfImage, name: str):
    try:
        section = image.elf.get_section_by_name(name)
        if section is None:
            return None
        return section.data(), section["sh_addr"]
    except PARSE_ERRORS as e:
        raise ElfError(f"{image.path}: cannot read {name}: {e}") from e


def read_exidx_sections(image_or_path: ElfImage | str) -> ExidxSections | None:
    """An ELF's own `.ARM.exidx` / `.ARM.extab` (None if it has no `.ARM.exidx`),
    checked to parse. `end` is the end of the executable section holding the
    last entry: the linker's table covers the code it was built for."""
    image = open_elf(image_or_path) if isinstance(image_or_path, str) else image_or_path
    exidx = _section(image, EXIDX)
    if exidx is None:
        return None
    extab = _section(image, EXTAB) or (b"", 0)
    sections = ExidxSections(exidx[0], exidx[1], extab[0], extab[1], ADDRESS_SPACE_END)
    try:
        entries = parse_sections(sections)
    except ExidxError as e:
        raise ExidxError(e.section, e.offset, e.message, image.path) from None
    if not entries:
        return sections
    last = entries[-1].start
    end = next((hi for lo, hi in executable_ranges(image) if lo <= last < hi), ADDRESS_SPACE_END)
    return replace(sections, end=end)


def require_exidx_sections(image_or_path: ElfImage | str) -> ExidxSections:
    """As `read_exidx_sections`; ElfError if the ELF has no `.ARM.exidx`."""
    image = open_elf(image_or_path) if isinstance(image_or_path, str) else image_or_path
    sections = read_exidx_sections(image)
    if sections is None:
        raise ElfError(f"{image.path}: no {EXIDX} section")
    return sections


def read_exidx(image_or_path: ElfImage | str) -> tuple[ExidxEntry, ...]:
    """Entries of an ELF's `.ARM.exidx`; ElfError if it has none."""
    return parse_sections(require_exidx_sections(image_or_path))

