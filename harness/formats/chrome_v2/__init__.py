"""Chrome Unwind Info v2: encoder (CFI rows -> tables -> blob) and reader
(the unwinder that runs it is harness.unwind.v2).

    encoded = encode(functions, text_base, policy="drop", layout="chrome")
    blob = encoded.blob()
    reader = V2Reader.from_blob(blob, "chrome")

Tables for the `chrome` layout use only the opcodes Chrome's runtime
executes (VFP saves stepped over, not restored); `seed` tables use every
EHABI opcode the runs need, and read in either layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal, Sequence

from harness.errors import InputError, TableOverflow
from harness.formats.breakpad import StackCfi
from harness.formats.chrome_v2.chrome_builder import chrome_tables, chrome_unwinds
from harness.formats.chrome_v2.encoder import (
    EPILOGUE_POLICIES,
    EpiloguePolicy,
    FunctionUnwind,
    SharedRuns,
    cover_text,
    function_unwind,
)
from harness.formats.chrome_v2.grouping import group_at_excursions
from harness.formats.chrome_v2.layout import LAYOUTS, Layout, header_fields, serialize
from harness.formats.chrome_v2.parts import is_parts, pack_parts, unpack_parts
from harness.formats.chrome_v2.reader import V2Reader
from harness.formats.chrome_v2.synthesize import synthesize_epilogues
from harness.formats.chrome_v2.tables import V2Tables, build_tables
from harness.gc_pause import collector_paused
from harness.program import FunctionCfi

__all__ = [
    "EPILOGUE_POLICIES", "LAYOUTS", "Encoded", "EpiloguePolicy", "Layout",
    "V2Reader", "encode", "encode_as_chrome", "encode_parts", "parts_blob", "read_blob", "read_tables",
]


@dataclass(frozen=True)
class Encoded:
    """Tables built for one code range, plus what the encoder saw on the way."""

    text_base: int
    policy: EpiloguePolicy
    functions: tuple[FunctionUnwind, ...]  # the input functions, encoded
    covering: tuple[FunctionUnwind, ...]  # functions plus gap/edge fillers, in order
    tables: V2Tables
    layout: Layout = "seed"  # the layout its runs were encoded for

    def blob(self, layout: Layout | None = None) -> bytes:
        """The blob in `layout` (by default the one encoded for); runs
        encoded for `seed` hold opcodes Chrome's runtime lacks, so they
        are not put in a `chrome` blob."""
        layout = layout or self.layout
        if layout == "chrome" and self.layout != "chrome":
            raise ValueError("tables encoded for the seed layout may hold opcodes Chrome's runtime lacks")
        return serialize(self.tables, layout)

    def table_sizes(self, layout: Layout | None = None) -> dict[str, int]:
        layout = layout or self.layout
        t = self.tables
        sizes = {
            "header": 4 * len(header_fields(layout)),
            "page table": 4 * len(t.page_table),
            "function table": 4 * len(t.function_table),
            "function offset table": len(t.function_offset_table),
            "unwind instruction table": len(t.unwind_instruction_table),
        }
        if layout == "seed":
            sizes["continuation bitvector"] = (len(t.page_table) + 7) // 8
        return sizes

    @property
    def addresses(self) -> int:
        """Address entries (offset, run) over the input functions, before dedup."""
        return sum(len(f.address_unwinds) for f in self.functions)

    @property
    def distinct_runs(self) -> int:
        return len({u.instructions for f in self.covering for u in f.address_unwinds})

    @property
    def dropped_rows(self) -> int:
        return sum(f.dropped_rows for f in self.functions)

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.functions)

    @property
    def problems(self) -> list[tuple[str, str]]:
        return [(f.name, p) for f in self.functions for p in f.problems]


def read_tables(blob: bytes, layout: Layout | Literal["auto"] = "auto") -> tuple[tuple[tuple[int, V2Reader], ...], Layout]:
    """The tables of a blob or of a parts file: (text offset, reader)
    pairs, the first at 0, and their layout (read_blob's; a parts file's
    tables in one layout)."""
    if not is_parts(blob):
        reader, found = read_blob(blob, layout)
        return ((0, reader),), found
    tables, found = [], layout
    for number, (text_offset, part) in enumerate(unpack_parts(blob)):
        try:
            reader, found = read_blob(part, found)
        except InputError as error:
            raise InputError(f"table {number} of the parts file: {error}") from None
        tables.append((text_offset, reader))
    return tuple(tables), found


def read_blob(blob: bytes, layout: Layout | Literal["auto"] = "auto") -> tuple[V2Reader, Layout]:
    """A reader of `blob` in `layout`, or in whichever layout reads it
    ("auto": seed first); InputError naming both attempts otherwise."""
    if layout != "auto":
        return V2Reader.from_blob(blob, layout), layout
    errors = []
    for candidate in LAYOUTS:
        try:
            return V2Reader.from_blob(blob, candidate), candidate
        except InputError as error:
            errors.append(f"as {candidate}: {error}")
    raise InputError(f"not a v2 blob in either layout ({'; '.join(errors)})")


def encode(functions: Sequence[FunctionCfi], text_base: int, policy: EpiloguePolicy = "drop",
           code_at: Callable[[int, int], bytes] | None = None, layout: Layout = "seed") -> Encoded:
    """Tables for `functions`, their runs in the opcodes `layout` allows.
    Policy `synthesize` disassembles the code (`code_at(address, size)`)
    to add epilogue rows, then encodes as `keep`."""
    if policy == "synthesize":
        if code_at is None:
            raise ValueError("policy 'synthesize' needs the code")
        functions = [synthesize_epilogues(f, code_at) for f in functions]
    chrome, shared = layout == "chrome", SharedRuns()
    rows_policy = "keep" if policy == "synthesize" else policy
    with collector_paused():
        encoded = tuple(function_unwind(f, rows_policy, chrome, shared) for f in functions)
        covering = tuple(cover_text(encoded, text_base))
        tables = build_tables(covering, text_base)
        # Epilogue rows: entries at each excursion from a body, where that is
        # smaller. Not under `drop`, whose entries stay at function starts
        # (the v2+epilogue unwinder takes a function's start from them).
        if policy != "drop":
            grouped = group_at_excursions(covering)
            regrouped = build_tables(grouped, text_base)
            if len(serialize(regrouped, "chrome")) < len(serialize(tables, "chrome")):
                covering, tables = grouped, regrouped
    return Encoded(text_base, policy, encoded, covering, tables, layout)


def encode_parts(functions: Sequence[FunctionCfi], text_base: int, policy: EpiloguePolicy = "drop",
                 code_at: Callable[[int, int], bytes] | None = None, layout: Layout = "seed") -> tuple[Encoded, ...]:
    """`encode`'s tables for `functions`; where one table cannot hold them
    (TableOverflow: its 16-bit offset list index, say), halves of them
    each in tables of their own, the later ones based at their first
    function's start (harness.formats.chrome_v2.parts)."""
    try:
        return (encode(functions, text_base, policy, code_at, layout),)
    except TableOverflow:
        if len(functions) < 2:
            raise
    half = len(functions) // 2
    return encode_parts(functions[:half], text_base, policy, code_at, layout) \
        + encode_parts(functions[half:], functions[half].start, policy, code_at, layout)


def parts_blob(parts: Sequence[Encoded], layout: Layout | None = None) -> bytes:
    """One table's blob, or several tables' in a parts file (text offsets from the first's base)."""
    if len(parts) == 1:
        return parts[0].blob(layout)
    return pack_parts([(part.text_base - parts[0].text_base, part.blob(layout)) for part in parts])


def encode_as_chrome(functions: Sequence[StackCfi | FunctionCfi], text_base: int) -> Encoded:
    """The tables Chrome's own builder writes for `functions` (Breakpad
    records, or rows written as dump_syms writes them), its runs in its
    byte order (harness.formats.chrome_v2.chrome_builder), chrome layout."""
    encoded = chrome_unwinds(functions)
    covering = tuple(cover_text(encoded, text_base))
    return Encoded(text_base, "drop", encoded, covering, chrome_tables(covering, text_base), "chrome")
