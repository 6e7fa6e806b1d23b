"""Breakpad symbol files (`dump_syms` output, google/breakpad
docs/symbol_files.md), the input Chrome's table builders read: writing the
records of an ELF's CFI, and reading them back as rows.

What is read and written, one record a line, hex without 0x:

    MODULE Linux arm <id> <name>
    FUNC <address> <size> <parameter size> <name>
    PUBLIC <address> <parameter size> <name>
    STACK CFI INIT <address> <size> <rules>    the rules in force at a function's start
    STACK CFI <address> <rules>                the rules that change there

A rule is `<register>: <postfix expression>`: `.cfa: sp 8 +` (the CFA is
sp + 8), `r4: .cfa -8 + ^` (r4 saved at CFA - 8), `.ra: .cfa -4 + ^` (the
return address, lr, saved at CFA - 4), `r4: r4` or `.ra: lr` (back in the
register). dump_syms names ARM registers r0-r12, sp, lr, pc and, having no
names for d0-d31, `unnamed_register<DWARF number>`; rules are written in
the order of their names. Addresses are relative to the module's load
address (its first loadable segment). Other records (FILE, lines, INFO,
STACK WIN) are skipped.

A row whose rules this reader cannot express (an expression of another
form, a register saved in a register) is left out, so the row before
stays in force, as Chrome's builders do; the record is listed in
`unparsed`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from harness.errors import InputError
from harness.program import CfiRow, FunctionCfi
from harness.registers import DWARF_D0, LR, SP

RA, CFA = ".ra", ".cfa"
_NAMES = {**{n: f"r{n}" for n in range(13)}, SP: "sp", LR: "lr", 15: "pc"}
_NUMBERS = {name: number for number, name in _NAMES.items()}


def register_name(reg: int) -> str:
    """The name dump_syms gives a DWARF register of ARM (lr's rule is `.ra`'s)."""
    return RA if reg == LR else _NAMES.get(reg, f"unnamed_register{reg}")


def register_number(name: str) -> int | None:
    if name == RA:
        return LR
    if name in _NUMBERS:
        return _NUMBERS[name]
    if name.startswith("unnamed_register") and name[16:].isdigit() and DWARF_D0 <= int(name[16:]) < DWARF_D0 + 32:
        return int(name[16:])
    return None


# ------------------------------------------------------------------ writing

def row_rules(row: CfiRow) -> dict[str, str]:
    """Every rule in force in `row`, by name (a row with a problem has none
    Breakpad can say: {})."""
    if row.problem:
        return {}
    rules = {CFA: f"{_NAMES.get(row.cfa_reg, f'unnamed_register{row.cfa_reg}')} {row.cfa_offset} +", RA: "lr"}
    rules.update((register_name(reg), f".cfa {offset} + ^") for reg, offset in row.saved)
    return rules


def _same_value(name: str) -> str:
    return "lr" if name == RA else name


class StackCfi(NamedTuple):
    """One function's STACK CFI records as their text: the INIT record's
    rules (at `start`) first, then each STACK CFI record's address and
    the rules it changes, in the order written."""

    name: str
    start: int
    size: int
    records: tuple[tuple[int, str], ...]  # (address, rules)


def stack_cfi(function: FunctionCfi) -> StackCfi:
    """The records dump_syms writes for `function` (addresses as they
    are): the first row complete, each later one the rules it changes."""
    before = row_rules(function.rows[0])
    records = [(function.start, _text(before))]
    for row in function.rows[1:]:
        now = row_rules(row)
        if row.problem:
            continue  # nothing Breakpad can say: the row before stays
        changed = {name: rule for name, rule in now.items() if before.get(name) != rule}
        changed.update((name, _same_value(name)) for name in before if name not in now)
        if changed:
            records.append((row.address, _text(changed)))
        before = now
    return StackCfi(function.name, function.start, function.end - function.start, tuple(records))


def cfi_records(function: FunctionCfi, load_base: int) -> list[str]:
    """STACK CFI INIT and STACK CFI lines for one function."""
    cfi = stack_cfi(function)
    (start, init), *rest = cfi.records
    return [f"STACK CFI INIT {start - load_base:x} {cfi.size:x} {init}",
            *(f"STACK CFI {address - load_base:x} {rules}" for address, rules in rest)]


def _text(rules: dict[str, str]) -> str:
    return " ".join(f"{name}: {rules[name]}" for name in sorted(rules))


def symbol_file(module: str, module_id: str, functions: Sequence[FunctionCfi],
                symbols: Iterable[tuple[int, int, str]], load_base: int) -> str:
    """A whole symbol file: MODULE, a FUNC per sized symbol, the CFI."""
    lines = [f"MODULE Linux arm {module_id} {module}"]
    lines += [f"FUNC {start - load_base:x} {size:x} 0 {name}" for start, size, name in sorted(symbols) if size]
    for function in sorted(functions, key=lambda f: f.start):
        lines += cfi_records(function, load_base)
    return "\n".join(lines) + "\n"


def module_id(build_id: bytes | None, text: bytes) -> str:
    """dump_syms's module id: the first 16 bytes of the build id (or of the
    XOR of the first 4 KiB of .text in 16-byte blocks), the first word and
    the next two half-words byte-swapped into GUID order, upper-case hex,
    then a 0 (the age)."""
    if build_id:
        key = (build_id + bytes(16))[:16]
    else:
        block = bytearray(16)
        for offset in range(0, min(len(text), 4096), 16):
            for index, byte in enumerate(text[offset:offset + 16]):
                block[index] ^= byte
        key = bytes(block)
    guid = key[3::-1] + key[5:3:-1] + key[7:5:-1] + key[8:]
    return guid.hex().upper() + "0"


# ------------------------------------------------------------------ reading

class BreakpadModule(NamedTuple):
    functions: tuple[FunctionCfi, ...]  # addresses relative to the module's load address
    unparsed: tuple[str, ...]  # "line N: why" for each record left out
    stack_cfi: tuple[StackCfi, ...] = ()  # the records as written, for Chrome's builder (no tombstones)


class BreakpadError(InputError):
    """A symbol file that is not one; names the line."""


def read_symbol_file(text: str, path: str) -> BreakpadModule:
    """The functions a symbol file's STACK CFI records describe, named by
    its FUNC and PUBLIC records."""
    names: dict[int, str] = {}
    inits: list[tuple[int, int, int, dict[str, str]]] = []  # (line, address, size, rules)
    deltas: dict[int, list[tuple[int, int, dict[str, str]]]] = {}
    raw: list[tuple[int, int, list[tuple[int, str]]]] = []  # (address, size, records as text)
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words:
            continue
        try:
            if words[0] == "FUNC":
                fields = words[2:] if words[1] == "m" else words[1:]
                names.setdefault(int(fields[0], 16), " ".join(fields[3:]))
            elif words[0] == "PUBLIC":
                fields = words[2:] if words[1] == "m" else words[1:]
                names.setdefault(int(fields[0], 16), " ".join(fields[2:]))
            elif words[:3] == ["STACK", "CFI", "INIT"]:
                inits.append((number, int(words[3], 16), int(words[4], 16), _rules(words[5:])))
                raw.append((inits[-1][1], inits[-1][2], [(inits[-1][1], _rules_text(line, 5))]))
            elif words[:2] == ["STACK", "CFI"]:
                if not inits:
                    raise ValueError("a STACK CFI record before any STACK CFI INIT")
                deltas.setdefault(len(inits) - 1, []).append((number, int(words[2], 16), _rules(words[3:])))
                raw[-1][2].append((deltas[len(inits) - 1][-1][1], _rules_text(line, 3)))
        except (ValueError, IndexError) as error:
            raise BreakpadError(f"{path}: line {number}: not a Breakpad record ({error}): {line[:80]}") from None
    unparsed: list[str] = []
    functions = [_function(init, deltas.get(index, []), names, unparsed) for index, init in enumerate(inits)]
    # An INIT at address 0 is a tombstone of dead code (LLVM bug 47148);
    # Chrome's reader skips it and its records.
    stack = tuple(StackCfi(names.get(start, f"fn_{start:x}"), start, size, tuple(records))
                  for start, size, records in raw if start)
    return BreakpadModule(tuple(sorted(functions, key=lambda f: f.start)), tuple(unparsed), stack)


def _rules_text(line: str, fields: int) -> str:
    """What follows the first `fields` words of a record: its rules as written."""
    parts = line.split(None, fields)
    return parts[fields] if len(parts) > fields else ""


def _rules(words: list[str]) -> dict[str, str]:
    rules: dict[str, list[str]] = {}
    current = None
    for word in words:
        if word.endswith(":"):
            current = word[:-1]
            rules[current] = []
        elif current is None:
            raise ValueError(f"an expression before any register name: {word!r}")
        else:
            rules[current].append(word)
    if any(not expression for expression in rules.values()):
        raise ValueError("a register with no expression")
    return {name: " ".join(expression) for name, expression in rules.items()}


def _function(init, deltas, names: dict[int, str], unparsed: list[str]) -> FunctionCfi:
    number, start, size, rules = init
    name = names.get(start, f"fn_{start:x}")
    first = _row(start, rules)
    if isinstance(first, str):
        unparsed.append(f"line {number}: {first}")
        first = CfiRow(start, problem=f"Breakpad rule not understood: {first}")
    rows, in_force = [first], dict(rules)
    for line, address, changes in sorted(deltas, key=lambda d: d[1]):
        in_force.update(changes)
        row = _row(address, in_force)
        if isinstance(row, str):
            unparsed.append(f"line {line}: {row}")
            continue  # the row before stays in force
        if start < address < start + size:
            rows.append(row)
    return FunctionCfi(name, start, start + size, tuple(rows))


def _row(address: int, rules: dict[str, str]) -> CfiRow | str:
    """The row `rules` describe, or why it cannot be expressed."""
    cfa = rules.get(CFA, "").split()
    if len(cfa) != 3 or cfa[2] != "+" or register_number(cfa[0]) is None or not _integer(cfa[1]):
        return f"CFA rule {rules.get(CFA)!r}"
    saved = []
    for name, rule in rules.items():
        if name == CFA:
            continue
        reg = register_number(name)
        if reg is None:
            return f"rule for {name!r}"
        words = rule.split()
        if rule == _same_value(name) or (reg == LR and rule == "lr"):
            continue
        if len(words) != 4 or words[0] != CFA or words[2:] != ["+", "^"] or not _integer(words[1]):
            return f"rule {name}: {rule}"
        saved.append((reg, int(words[1])))
    return CfiRow(address, register_number(cfa[0]), int(cfa[1]), tuple(sorted(saved)))


def _integer(text: str) -> bool:
    return text.lstrip("-").isdigit()
