"""Compiler-built ELFs as Programs: segments, CFI, and per-function layout.

Positions come from the code itself: the prologue ends where the CFI rows
stop growing the frame; epilogues are found by disassembling the teardown
before each return (clang emits no epilogue rows). Traits come from the CFI
and a linear sweep. Code without CFI is left out of `functions`, so its stops
land in the `no_info` category.
"""

from __future__ import annotations

import os
from dataclasses import replace

from harness.classify import OWN, FrameFacts, FunctionInfo, traits_of
from harness.code_origin import origin_spans
from harness.errors import ElfError, InputError
from harness.formats.arm_exidx import parse_sections, read_exidx_sections
from harness.formats.data_pointers import code_pointers
from harness.formats.dwarf_cfi import has_cfi, read_cfi
from harness.formats.elf import (
    ElfImage,
    entry_points,
    executable_ranges,
    function_spans,
    load_segments,
    mapping_symbols,
    open_elf,
    plt_entries,
    symbol_address,
    text_base,
    unsized_functions,
)
from harness.program import CfiRow, CodeMap, FunctionCfi, Program, relocated
from harness.registers import DWARF_D0, LR, SP
from harness.thumb.disasm import moves_sp_by_register, sweep
from harness.thumb.discovery import NORETURN, Progress, analyse_all
from harness.thumb.native import ProgramCode
from harness.thumb.epilogue import find_epilogues


def _grows(previous: CfiRow, row: CfiRow) -> bool:
    """Does `row` set up more of the frame than `previous`?"""
    if row.problem or previous.problem:
        return False
    if row.cfa_reg != previous.cfa_reg:
        return row.cfa_reg != SP  # switching to a frame pointer
    return row.cfa_offset > previous.cfa_offset or (
        row.cfa_offset == previous.cfa_offset and set(row.saved) > set(previous.saved)
    )


def prologue_end(function: FunctionCfi) -> int:
    """The address from which the frame is fully set up: after the last row
    of the opening run of rows that each grow the frame."""
    end = function.start
    for previous, row in zip(function.rows, function.rows[1:]):
        if not _grows(previous, row):
            break
        end = row.address
    return end


def frame_facts(function: FunctionCfi, code: bytes, epilogues: int) -> FrameFacts:
    """What the CFI rows and a linear sweep of the code say of the frame."""
    rows = [r for r in function.rows if not r.problem]
    frame_pointer = any(r.cfa_reg != SP for r in rows)
    saved = {reg for r in rows for reg, _ in r.saved}
    calls = any(mnemonic in ("bl", "blx") for _, _, mnemonic in sweep(code, function.start))
    return FrameFacts(
        frame_pointer=frame_pointer,
        leaf=LR not in saved and not calls,
        alloca=frame_pointer and moves_sp_by_register(code, function.start),
        frame_bytes=max((r.cfa_offset for r in rows if r.cfa_reg == SP), default=0),
        vfp=any(reg >= DWARF_D0 + 8 for reg in saved),
        epilogues=epilogues,
    )


def function_info(function: FunctionCfi, code: bytes, base: int) -> FunctionInfo:
    epilogues = tuple(
        (insns[0].address, insns[-1].address + insns[-1].size)
        for _, insns, _ in find_epilogues(code, function.start, function.end, conditional=True)
    )
    traits = traits_of(frame_facts(function, code, len(epilogues)), function.start, function.end, base)
    return FunctionInfo(function.name, function.start, function.end, prologue_end(function), epilogues, traits)


def program_from_elf(path: str, entry: str, expected: int | None = None,
                     text_start: int | None = None) -> Program:
    """A bare-metal ELF run from its symbol `entry`; its code cut by origin
    (harness.code_origin) where libraries were linked into it."""
    image = open_elf(path)
    program = program_from_image(image, symbol_address(image, entry), expected, text_start)
    spans = [span for low, high in executable_ranges(image)
             for span in origin_spans(image, low, high, 0, os.path.basename(path))]
    if all(span.label == OWN for span in spans):
        return program
    return replace(program, modules=tuple(spans))


def program_from_image(image: ElfImage, entry: int, expected: int | None = None, text_start: int | None = None,
                       load_base: int = 0, cfi_required: bool = True) -> Program:
    """The Program of an opened ELF, run from `entry` (a link-time address),
    loaded `load_base` bytes above its link addresses; without CFI (most
    system libraries ship none) ElfError, unless not `cfi_required`."""
    base = text_base(image) if text_start is None else text_start
    cfi = tuple(read_cfi(image)) if cfi_required or has_cfi(image) else ()
    # The ELF's own CFI serves as both flavours (see harness.unwind).
    exidx = read_exidx_sections(image)
    program = relocated(Program(image.path, load_segments(image), entry, base, (),
                                {"tables": cfi, "reference": cfi}, expected, uses_vfp=True,
                                exidx=exidx, code_map=code_map(image, exidx)), load_base)
    functions = program.cfi["tables"]
    return replace(program, functions=tuple(function_info(f, _code_of(program, f), program.text_base)
                                            for f in functions))


def _code_of(program: Program, function: FunctionCfi) -> bytes:
    """The loaded bytes of a function with CFI; ElfError where no PT_LOAD
    segment holds them (the program headers and sections disagree)."""
    try:
        code = program.code(function.start, function.end - function.start)
    except KeyError:
        code = b""
    if len(code) < function.end - function.start:
        raise ElfError(f"{program.name}: {function.name} [{function.start:#x}, {function.end:#x}) has CFI "
                       "but no PT_LOAD segment holds its code")
    return code


def code_reader(image) -> ProgramCode:
    """`code_at(address, size)` over an ELF's loaded segments (b"" outside them)."""
    return ProgramCode(load_segments(image))


def code_map(image: ElfImage, exidx) -> CodeMap:
    """Where the ELF's functions are, by address only: its Thumb and ARM
    function symbols, the words of its data pointing at code, its executable sections, the
    starts of its `.ARM.exidx` index entries (`exidx`, parsed; their
    unwind rules are not read), its PLT entries of functions that
    never return (discovery.NORETURN), its mapping symbols (ARM code,
    Thumb code, data), its entry points (e_entry, DT_INIT, DT_FINI),
    whether it runs where it is linked (literal pools then hold addresses),
    and which function symbols have no size."""
    ranges = tuple(executable_ranges(image))

    def in_code(address: int) -> bool:  # an index entry or entry point elsewhere (a hostile file's) starts nothing
        return any(low <= address < high for low, high in ranges)
    bounds = sorted({entry.start for entry in parse_sections(exidx) if in_code(entry.start)}) \
        if exidx is not None else []
    entries = tuple(entry for entry in entry_points(image) if in_code(entry & ~1))
    noreturn = sorted(address for address, name in plt_entries(image).items() if name in NORETURN)
    spans = function_spans(image)
    pointers = code_pointers(image, ranges)
    return CodeMap(tuple(s[:3] for s in spans if s[3]), pointers.words, ranges, tuple(bounds),
                   tuple(noreturn), tuple(s[:3] for s in spans if not s[3]), mapping_symbols(image),
                   entries, image.elf["e_type"] == "ET_EXEC",
                   unsized_functions(image), pointers.tabled)


def elf_functions(image, from_code: bool, progress: Progress | None = None) -> list:
    """The rows to encode: the ELF's DWARF CFI, or with `from_code` rows
    from its machine code alone (no unwind section read), per Thumb
    function symbol (`progress` told the starts analysed and known)."""
    if not from_code:
        functions = read_cfi(image) if has_cfi(image) else []
        if not functions:
            raise InputError(f"{image.path}: no .debug_frame or .eh_frame describes a function (shipped binaries "
                             "leave them out): --from-code makes the rows from its machine code")
        return functions
    functions = list(analyse_all(code_map(image, read_exidx_sections(image)), code_reader(image), progress))
    if not functions:
        raise InputError(f"{image.path}: no function found to synthesize tables for (no Thumb function symbols, "
                         "no entry point in its code, no .ARM.exidx index)")
    return functions
