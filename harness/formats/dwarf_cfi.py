"""DWARF call frame information as per-function rows.

A row is the complete unwind state from its address until the next row: the
CFA rule (register + offset) and where each tracked callee-saved register
(r4-r11, r14, d8-d15) is saved, as an offset from the CFA.

Register numbers: 0-15 for core registers; d registers use the DWARF numbers
256-287 (d0-d31). GCC's legacy numbering (64-95 for s0-s31) is mapped to
these when the reader sees s(2n) and s(2n+1) saved side by side.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from elftools.dwarf.callframe import FDE, CFARule, RegisterRule

from harness.errors import ElfError
from harness.formats.elf import PARSE_ERRORS, ElfImage, executable_ranges, function_symbols
from harness.program import TRACKED_REGS, CfiRow, FunctionCfi
from harness.registers import DWARF_D0, LR, SP, reg_name

# One line of a decoded FDE table: (pc, CFA rule, {DWARF register: rule}).
Line = tuple[int, CFARule, Mapping[int, RegisterRule]]

LEGACY_S0 = 64  # GCC numbers s0-s31 as 64-95 and describes d8 as s16 + s17
NOT_SAVED = (RegisterRule.SAME_VALUE, RegisterRule.UNDEFINED)
CFI_SECTIONS = (".debug_frame", ".eh_frame")  # in order of preference


def read_cfi(image: ElfImage) -> list[FunctionCfi]:
    """Every function described by .debug_frame or .eh_frame, sorted by start.

    A function in both sections is taken from .debug_frame. FDEs that cover
    nothing, or start outside every executable section (what linkers leave
    for discarded code), are skipped.
    """
    names: dict[int, str] = {}
    for address, _size, name in function_symbols(image):
        names.setdefault(address, name)
    code = executable_ranges(image)
    functions: dict[int, FunctionCfi] = {}
    for fdes in _decoded_fdes(image):
        for location, size, lines in fdes:
            start = location & ~1
            if size == 0 or start in functions or not any(lo <= start < hi for lo, hi in code):
                continue
            name = names.get(start, f"sub_{start:x}")
            functions[start] = function_cfi(name, start, start + size, lines)
    return sorted(functions.values(), key=lambda f: f.start)


def has_cfi(image: ElfImage) -> bool:
    """Does the ELF have a .debug_frame or .eh_frame section?"""
    return any(image.elf.get_section_by_name(name) for name in CFI_SECTIONS)


def _decoded_fdes(image: ElfImage) -> list[list[tuple[int, int, list[Line]]]]:
    """[(initial_location, address_range, lines)] per CFI section, in CFI_SECTIONS order."""
    present = [name for name in CFI_SECTIONS if image.elf.get_section_by_name(name)]
    if not present:
        raise ElfError(f"{image.path} has no .debug_frame or .eh_frame")
    try:
        dwarf = image.elf.get_dwarf_info(follow_links=False)
    except PARSE_ERRORS as e:
        raise ElfError(f"{image.path}: cannot read the DWARF sections: {e}") from e
    entries = {".debug_frame": (dwarf.CFI_entries, dwarf.debug_frame_sec),
               ".eh_frame": (dwarf.EH_CFI_entries, dwarf.eh_frame_sec)}
    decoded = []
    for section in present:
        parse, descriptor = entries[section]
        try:
            found = parse()
        except PARSE_ERRORS as e:
            raise ElfError(f"{image.path}: corrupt {section}{_where(descriptor)}: {_reason(e)}") from e
        lines = []
        for entry in found:
            if isinstance(entry, FDE):
                try:
                    lines.append(_fde_lines(entry))
                except PARSE_ERRORS as e:
                    raise ElfError(f"{image.path}: corrupt {section}: the FDE at byte {entry.offset}: "
                                   f"{_reason(e)}") from e
        decoded.append(lines)
    return decoded


def _where(descriptor) -> str:
    """Where pyelftools stopped: inside the entry it could not parse, or
    past the end where a length or pointer sent it."""
    if descriptor is None:
        return ""
    position = descriptor.stream.tell()
    if position >= descriptor.size:
        return f" (a length or pointer leads to byte {position}, past its {descriptor.size} bytes)"
    return f" near byte {position}"


def _reason(error: Exception) -> str:
    """pyelftools' message, or the error's kind when it has none."""
    return str(error) or type(error).__name__


def _fde_lines(fde: FDE) -> tuple[int, int, list[Line]]:
    location = fde["initial_location"]
    table = fde.get_decoded().table
    # pyelftools only leaves the table empty when neither the CIE nor the FDE
    # gives a register-based CFA: the function starts with no usable rule.
    if not table:
        table = [{"pc": location, "cfa": CFARule()}]
    lines = [
        (line["pc"], line["cfa"], {k: v for k, v in line.items() if isinstance(k, int)})
        for line in table
    ]
    return location, fde["address_range"], lines


def function_cfi(name: str, start: int, end: int, lines: Iterable[Line]) -> FunctionCfi:
    """Convert one FDE's decoded table (lines in table order) to a FunctionCfi.

    Pure: `lines` may be synthetic. Row addresses lose their Thumb bit. Later
    lines at the same address replace earlier ones (only the last is ever in
    force); consecutive rows with the same state and notes are merged.
    """
    dropped: list[tuple[int, str]] = []
    kept: list[tuple[CfiRow, tuple[str, ...]]] = []
    for pc, cfa, rules in lines:
        address = pc & ~1
        if not start <= address < end:
            dropped.append((address, "row outside the function ignored"))
            continue
        if kept and address < kept[-1][0].address:
            dropped.append((address, "row before the previous row ignored"))
            continue
        row, notes = convert_row(address, cfa, rules)
        if kept and kept[-1][0].address == address:
            kept.pop()
        if kept and _same_state(kept[-1], (row, notes)):
            continue
        kept.append((row, notes))
    if not kept or kept[0][0].address != start:
        missing = "no CFI row at the function start"
        kept.insert(0, (CfiRow(start, problem=missing), (missing,)))
    noted = dropped + [(row.address, note) for row, notes in kept for note in notes]
    return FunctionCfi(name, start, end, tuple(row for row, _ in kept), _summarise(noted))


def _same_state(a: tuple[CfiRow, tuple[str, ...]], b: tuple[CfiRow, tuple[str, ...]]) -> bool:
    return replace(a[0], address=0) == replace(b[0], address=0) and a[1] == b[1]


def _summarise(noted: list[tuple[int, str]]) -> tuple[str, ...]:
    """One line per distinct message: its first address, and a count if repeated."""
    first: dict[str, int] = {}
    count: dict[str, int] = {}
    for address, message in noted:
        first[message] = min(first.get(message, address), address)
        count[message] = count.get(message, 0) + 1
    return tuple(
        f"{first[m]:#x}: {m}" + (f" ({count[m]} rows)" if count[m] > 1 else "")
        for m in sorted(first, key=lambda m: (first[m], m))
    )


def convert_row(
    address: int, cfa: CFARule, rules: Mapping[int, RegisterRule]
) -> tuple[CfiRow, tuple[str, ...]]:
    """One table line as a CfiRow, plus notes on everything it could not keep.

    The notes include the row's problem (if any) and rules that do not make
    the row unusable but are not represented in it.
    """
    problems: list[str] = []
    notes: list[str] = []
    cfa_reg, cfa_offset = SP, 0
    if cfa.expr is not None:
        problems.append("CFA is a DWARF expression")
    elif cfa.reg is None:
        problems.append("no CFA rule")
    elif not 0 <= cfa.reg < 16:
        problems.append(f"CFA based on {_dwarf_name(cfa.reg)}")
    else:
        cfa_reg, cfa_offset = cfa.reg, cfa.offset
    saved = []
    for reg, rule in sorted(_join_s_pairs(rules).items()):
        name = _dwarf_name(reg)
        if isinstance(rule, RegisterRule) and rule.type in NOT_SAVED:
            if rule.type == RegisterRule.UNDEFINED and reg in TRACKED_REGS:
                notes.append(f"{name} is undefined" + (" (outermost frame)" if reg == LR else ""))
        elif reg not in TRACKED_REGS:
            notes.append(f"{_describe(name, rule)} ignored (not a callee-saved register)")
        elif (offset := _offset(rule)) is not None:
            saved.append((reg, offset))
        else:
            problems.append(_describe(name, rule))
    problem = "; ".join(problems) or None
    row = CfiRow(address, cfa_reg, cfa_offset, tuple(saved), problem)
    return row, tuple(problems + notes)


def _join_s_pairs(rules: Mapping[int, RegisterRule]) -> dict[int, RegisterRule | str]:
    """Rules with GCC's s-register pairs replaced by d-register rules.

    s(2k) at CFA+o with s(2k+1) at CFA+o+4 is d k saved at CFA+o. Any other
    pair that saves something becomes a string saying why it is no d save.
    """
    joined: dict[int, RegisterRule | str] = {
        reg: rule for reg, rule in rules.items() if not LEGACY_S0 <= reg < LEGACY_S0 + 32
    }
    for k in range(16):
        lo, hi = rules.get(LEGACY_S0 + 2 * k), rules.get(LEGACY_S0 + 2 * k + 1)
        if all(r is None or r.type in NOT_SAVED for r in (lo, hi)):
            continue
        d = DWARF_D0 + k
        if d in joined:
            joined[d] = f"d{k} described both as d{k} and as s{2 * k}/s{2 * k + 1}"
        elif _offset(lo) is not None and _offset(hi) == _offset(lo) + 4:
            joined[d] = RegisterRule(RegisterRule.OFFSET, lo.arg)
        else:
            joined[d] = (
                f"d{k} not saved as one pair (s{2 * k}: {_brief(lo)}, s{2 * k + 1}: {_brief(hi)})"
            )
    return joined


def _offset(rule: RegisterRule | str | None) -> int | None:
    """The n of an OFFSET rule (saved at CFA+n); None for any other rule."""
    if isinstance(rule, RegisterRule) and rule.type == RegisterRule.OFFSET:
        return rule.arg
    return None


def _brief(rule: RegisterRule | None) -> str:
    if rule is None:
        return "no rule"
    if rule.type == RegisterRule.OFFSET:
        return f"cfa{rule.arg:+d}"
    return rule.type.lower()


def _describe(name: str, rule: RegisterRule | str) -> str:
    if isinstance(rule, str):
        return rule
    match rule.type:
        case RegisterRule.OFFSET:
            return f"save of {name}"
        case RegisterRule.VAL_OFFSET:
            return f"{name} = cfa{rule.arg:+d} (val_offset rule)"
        case RegisterRule.REGISTER:
            return f"{name} kept in {_dwarf_name(rule.arg)}"
        case RegisterRule.EXPRESSION:
            return f"{name} saved at a DWARF expression"
        case RegisterRule.VAL_EXPRESSION:
            return f"{name} is a DWARF expression value"
        case _:
            return f"{name} has an unsupported {rule.type.lower()} rule"


def _dwarf_name(reg: int) -> str:
    if 0 <= reg < 16 or DWARF_D0 <= reg < DWARF_D0 + 32:
        return reg_name(reg)
    if LEGACY_S0 <= reg < LEGACY_S0 + 32:
        return f"s{reg - LEGACY_S0}"
    return f"dwarf register {reg}"
