"""A program to verify, whatever made it (a generator or a compiler).

Everything the verifier needs and nothing more: memory contents, the entry,
per-function layout (positions and traits) for classifying stops, and the
unwind information the unwinders are built from, as data: CFI rows (each a
complete unwind state) and the bytes of `.ARM.exidx`/`.ARM.extab`. Readers
of real formats (harness.formats) and the generators both produce these.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import NamedTuple

from harness.classify import JIT, JIT_NAME, FunctionInfo, Spanned
from harness.registers import DWARF_D0, LR, SP, reg_name

TRACKED_REGS = frozenset((4, 5, 6, 7, 8, 9, 10, 11, LR)) | frozenset(
    DWARF_D0 + n for n in range(8, 16)
)


@dataclass(frozen=True, slots=True)  # a large program's analysis holds millions
class CfiRow:
    """Unwind state from `address` (inclusive) to the next row.

    `saved` is sorted by register: (register, offset from the CFA).
    `problem` is set when the state cannot be expressed (a DWARF expression,
    a register saved in another register...): such a row cannot be unwound.
    """

    address: int
    cfa_reg: int = SP
    cfa_offset: int = 0
    saved: tuple[tuple[int, int], ...] = ()
    problem: str | None = None

    def describe(self) -> str:
        if self.problem:
            return f"{self.address:#x}: unusable ({self.problem})"
        saves = ", ".join(f"{reg_name(r)}@cfa{o:+d}" for r, o in self.saved)
        cfa = f"cfa={reg_name(self.cfa_reg)}{self.cfa_offset:+d}"
        return f"{self.address:#x}: {cfa}" + (f" {saves}" if saves else "")


@dataclass(frozen=True, slots=True)  # (a million of them in a large program's analysis)
class FunctionCfi:
    """One function (one FDE): [start, end), its rows in address order.

    The first row is at `start`. `problems` lists, with addresses, every piece
    of CFI the reader could not express or chose to ignore.
    """

    name: str
    start: int
    end: int
    rows: tuple[CfiRow, ...]
    problems: tuple[str, ...] = ()

    def row_at(self, address: int) -> CfiRow:
        """The row in force at `address` (which must lie in [start, end))."""
        return self.row_range(address)[0]

    def row_range(self, address: int) -> tuple[CfiRow, int, int]:
        """The row in force at `address`, and the addresses [low, high) of
        this function where the same row is in force."""
        current, low, high = self.rows[0], self.start, self.end
        for row in self.rows:
            if row.address > address:
                high = min(high, row.address)
                break
            current, low = row, max(low, row.address)
        return current, low, high


@dataclass(frozen=True)
class ExidxSections:
    """`.ARM.exidx` and `.ARM.extab` as bytes at their addresses; `end` is where
    the last entry's function ends (the end of the code the table covers)."""

    exidx: bytes
    exidx_address: int
    extab: bytes
    extab_address: int
    end: int


class CodeMap(NamedTuple):
    """Where a program's functions are, from addresses alone (no unwind
    rule): what tables from code alone start from (harness.thumb.discovery)."""

    spans: tuple[tuple[int, int, str], ...]  # Thumb function symbols (start, end, name), sorted
    pointers: tuple[int, ...] = ()  # sorted words of its data pointing at code (formats.data_pointers.code_pointers)
    ranges: tuple[tuple[int, int], ...] = ()  # its executable sections [low, high)
    bounds: tuple[int, ...] = ()  # sorted addresses no function runs past: .ARM.exidx index entries
    noreturn: tuple[int, ...] = ()  # PLT entries of functions that never return (abort, exit...)
    arm_spans: tuple[tuple[int, int, str], ...] = ()  # ARM function symbols (start, end, name), sorted
    modes: tuple[tuple[int, str], ...] = ()  # mapping symbols: (address, "a" | "t" | "d"), sorted
    entries: tuple[int, ...] = ()  # where the loader enters (e_entry, DT_INIT, DT_FINI), bit 0 set: Thumb
    fixed: bool = False  # linked where it runs (ET_EXEC): the words its code loads are addresses as they stand
    unsized: tuple[int, ...] = ()  # starts of the function symbols of size 0: where they end is not known
    labels: tuple[int, ...] = ()  # sorted words of pointers in tables of them: a computed goto's targets

    def moved(self, base: int) -> CodeMap:
        def move(addresses: tuple[int, ...]) -> tuple[int, ...]:
            return tuple(address + base for address in addresses)

        def move_spans(spans: tuple[tuple[int, int, str], ...]) -> tuple[tuple[int, int, str], ...]:
            return tuple((s + base, e + base, n) for s, e, n in spans)

        return CodeMap(move_spans(self.spans), move(self.pointers),
                       tuple((low + base, high + base) for low, high in self.ranges), move(self.bounds),
                       move(self.noreturn), move_spans(self.arm_spans),
                       tuple((address + base, kind) for address, kind in self.modes), move(self.entries),
                       self.fixed, move(self.unsized), move(self.labels))


@dataclass(frozen=True)
class ModuleSpan:
    """Code of one module of a process (or its PLT): [start, end), its
    harness.classify.MODULES label, its file name, and its function symbols
    (start, end, name), sorted, that name the code without CFI."""

    start: int
    end: int
    label: str
    name: str
    symbols: tuple[tuple[int, int, str], ...] = ()

    def named(self, pc: int) -> Spanned:
        """(the symbol at pc, or the file's name between symbols; the pcs [low, high) that share it)."""
        index = bisect_right(self.symbols, (pc, 1 << 40)) - 1
        if index >= 0 and pc < self.symbols[index][1]:
            start, end, name = self.symbols[index]
            return Spanned(name, max(start, self.start), min(end, self.end))
        low = self.symbols[index][1] if index >= 0 else self.start
        high = self.symbols[index + 1][0] if index + 1 < len(self.symbols) else self.end
        return Spanned(self.name, max(low, self.start), min(high, self.end))


class ModuleAt(NamedTuple):
    """pc's module (its MODULES label), a name for its code there (a symbol,
    else the file's), the pcs [low, high) that share both, and the module's
    name (its file's; `chromium@plt` for its PLT; JIT_NAME)."""

    label: str
    name: str
    low: int
    high: int
    file: str


@dataclass(frozen=True)
class Program:
    name: str
    segments: tuple[tuple[int, bytes], ...]  # (address, contents)
    entry: int
    text_base: int
    functions: tuple[FunctionInfo, ...]  # sorted by start, not overlapping
    # "tables": what v2 encodes; "reference": complete CFI (see harness.unwind)
    cfi: dict[str, tuple[FunctionCfi, ...]] = field(default_factory=dict)
    expected_result: int | None = None  # what the entry must return
    uses_vfp: bool = False
    args: tuple[int, ...] = ()
    # .ARM.exidx/.ARM.extab: metadata beside the code, not in `segments`
    exidx: ExidxSections | None = None
    # a process's modules, sorted and disjoint (harness.linux_verify.modules); none for bare metal
    modules: tuple[ModuleSpan, ...] = ()
    # where its functions are, for tables from code alone (harness.thumb.discovery);
    # none: the generator's `functions`
    code_map: CodeMap | None = None

    @cached_property
    def _starts(self) -> list[int]:
        return [f.start for f in self.functions]

    def function_at(self, pc: int) -> FunctionInfo | None:
        index = bisect_right(self._starts, pc) - 1
        if index >= 0 and pc < self.functions[index].end:
            return self.functions[index]
        return None

    @cached_property
    def _module_starts(self) -> list[int]:
        return [m.start for m in self.modules]

    def module_at(self, pc: int) -> ModuleAt | None:
        """The module's label and a name for the code at pc; None for a
        bare-metal program. In a process, code outside every module is in
        anonymous executable memory, a JIT's (V8's in Chromium): JIT."""
        if not self.modules:
            return None
        index = bisect_right(self._module_starts, pc) - 1
        if index < 0 or pc >= self.modules[index].end:
            low = self.modules[index].end if index >= 0 else 0
            high = self.modules[index + 1].start if index + 1 < len(self.modules) else 1 << 32
            return ModuleAt(JIT, JIT_NAME, low, high, JIT_NAME)
        module = self.modules[index]
        return ModuleAt(module.label, *module.named(pc), module.name)

    def code_spans(self) -> tuple[tuple[int, int], ...]:
        """[start, end) of its code: a process's modules, a bare-metal
        program's functions as one span."""
        if self.modules:
            return tuple((m.start, m.end) for m in self.modules)
        return ((self.functions[0].start, self.functions[-1].end),) if self.functions else ()

    def code(self, address: int, size: int) -> bytes:
        """Up to `size` bytes at `address` (fewer at the end of a segment)."""
        for start, data in self.segments:
            if start <= address < start + len(data):
                return data[address - start : address - start + size]
        raise KeyError(f"{address:#x} is not in the program")


def relocated(program: Program, base: int) -> Program:
    """`program` loaded `base` bytes above its link addresses (a
    position-independent ELF): every address moved, nothing else. Run
    before `functions` are derived (they are left as they are)."""
    if not base:
        return program

    def moved(function: FunctionCfi) -> FunctionCfi:
        rows = tuple(replace(row, address=row.address + base) for row in function.rows)
        return replace(function, start=function.start + base, end=function.end + base, rows=rows)

    exidx = program.exidx and replace(program.exidx, exidx_address=program.exidx.exidx_address + base,
                                      extab_address=program.exidx.extab_address + base,
                                      end=program.exidx.end + base)
    return replace(program, segments=tuple((address + base, data) for address, data in program.segments),
                   entry=program.entry + base, text_base=program.text_base + base,
                   cfi={flavour: tuple(moved(f) for f in functions) for flavour, functions in program.cfi.items()},
                   exidx=exidx, code_map=program.code_map and program.code_map.moved(base))
