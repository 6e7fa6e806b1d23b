"""Byte layouts of a v2 blob. Same tables, two headers.

`seed`: the design document's `UnwindInfoHeader`, ten little-endian uint32:
  page table (offset, entries), continuation bitvector (offset, bytes),
  function table (offset, entries), function offset table (offset, bytes),
  unwind instruction table (offset, bytes).
`chrome`: the header Chrome shipped, four (offset, count-or-size) pairs:
  page table, function table, function offset table, unwind instruction
  table; no bitvector (a reader derives continuation from the tables).
"""

from __future__ import annotations

import struct
from typing import Literal

from harness.errors import CorruptTable, TableOverflow
from harness.formats.chrome_v2.tables import FunctionTableEntry, V2Tables, continuation_bits, function_table_bytes

Layout = Literal["seed", "chrome"]
LAYOUTS: tuple[Layout, ...] = ("seed", "chrome")

U32_MAX = 0xFFFFFFFF
SEED_FIELDS = (
    "page_table_byte_offset",
    "page_table_entries",
    "function_continuation_bitvector_byte_offset",
    "function_continuation_bitvector_size_in_bytes",
    "function_table_byte_offset",
    "function_table_entries",
    "function_offset_table_byte_offset",
    "function_offset_table_size_in_bytes",
    "unwind_instruction_table_byte_offset",
    "unwind_instruction_table_size_in_bytes",
)
CHROME_FIELDS = tuple(f for f in SEED_FIELDS if "bitvector" not in f)


def header_fields(layout: Layout) -> tuple[str, ...]:
    return SEED_FIELDS if layout == "seed" else CHROME_FIELDS


def bitvector(bits: tuple[bool, ...]) -> bytes:
    out = bytearray((len(bits) + 7) // 8)
    for i, bit in enumerate(bits):
        if bit:
            out[i >> 3] |= 1 << (i & 7)
    return bytes(out)


def serialize(tables: V2Tables, layout: Layout = "seed") -> bytes:
    page_table = struct.pack(f"<{len(tables.page_table)}I", *tables.page_table)
    function_table = function_table_bytes(tables.function_table)
    # Word-aligned tables first, byte tables after: no padding is ever needed.
    parts: dict[str, bytes] = {"page": page_table, "function": function_table}
    if layout == "seed":
        parts["bitvector"] = bitvector(tables.continuation)
    parts["offsets"] = tables.function_offset_table
    parts["instructions"] = tables.unwind_instruction_table
    header_size = 4 * len(header_fields(layout))
    position = header_size
    where: dict[str, int] = {}
    for name, data in parts.items():
        where[name] = position
        position += len(data)
    if position > U32_MAX:
        raise TableOverflow(f"blob of {position} bytes exceeds the 32-bit offsets of the header")
    values = {
        "page_table_byte_offset": where["page"],
        "page_table_entries": len(tables.page_table),
        "function_table_byte_offset": where["function"],
        "function_table_entries": len(tables.function_table),
        "function_offset_table_byte_offset": where["offsets"],
        "function_offset_table_size_in_bytes": len(tables.function_offset_table),
        "unwind_instruction_table_byte_offset": where["instructions"],
        "unwind_instruction_table_size_in_bytes": len(tables.unwind_instruction_table),
    }
    if layout == "seed":
        values["function_continuation_bitvector_byte_offset"] = where["bitvector"]
        values["function_continuation_bitvector_size_in_bytes"] = len(parts["bitvector"])
    header = struct.pack(f"<{len(values)}I", *(values[f] for f in header_fields(layout)))
    return header + b"".join(parts.values())


def parse_header(blob: bytes, layout: Layout) -> dict[str, int]:
    fields = header_fields(layout)
    if len(blob) < 4 * len(fields):
        raise CorruptTable(
            "header", f"blob of {len(blob)} bytes is shorter than the {4 * len(fields)}-byte {layout} header", 0
        )
    return dict(zip(fields, struct.unpack_from(f"<{len(fields)}I", blob, 0)))


def _region(blob: bytes, header: dict[str, int], name: str, offset_field: str,
            size_bytes: int, align: int) -> bytes:
    offset = header[offset_field]
    if offset % align:
        raise CorruptTable(offset_field, f"offset {offset} is not {align}-byte aligned", 4 * list(header).index(offset_field))
    if offset + size_bytes > len(blob):
        raise CorruptTable(
            name,
            f"[{offset}, {offset + size_bytes}) runs past the end of the {len(blob)}-byte blob",
            offset,
        )
    return blob[offset : offset + size_bytes]


def parse(blob: bytes, layout: Layout = "seed") -> tuple[V2Tables, dict[str, int]]:
    """Split a blob into its tables (bounds and sizes checked here; the
    consistency of the tables is checked by the reader). Returns the header too."""
    blob = bytes(blob)
    header = parse_header(blob, layout)
    pages = header["page_table_entries"]
    functions = header["function_table_entries"]
    page_bytes = _region(blob, header, "page table", "page_table_byte_offset", 4 * pages, 4)
    function_bytes = _region(
        blob, header, "function table", "function_table_byte_offset", 4 * functions, 2
    )
    offset_table = _region(
        blob, header, "function offset table", "function_offset_table_byte_offset",
        header["function_offset_table_size_in_bytes"], 1,
    )
    instruction_table = _region(
        blob, header, "unwind instruction table", "unwind_instruction_table_byte_offset",
        header["unwind_instruction_table_size_in_bytes"], 1,
    )
    page_table = struct.unpack(f"<{pages}I", page_bytes)
    function_table = tuple(
        FunctionTableEntry(*struct.unpack_from("<HH", function_bytes, 4 * i)) for i in range(functions)
    )
    if layout == "seed":
        vector = _region(
            blob, header, "function continuation bitvector",
            "function_continuation_bitvector_byte_offset",
            header["function_continuation_bitvector_size_in_bytes"], 1,
        )
        if len(vector) != (pages + 7) // 8:
            raise CorruptTable(
                "function_continuation_bitvector_size_in_bytes",
                f"{len(vector)} bytes for {pages} pages (expected {(pages + 7) // 8})",
                12,
            )
        continuation = tuple(bool(vector[p >> 3] >> (p & 7) & 1) for p in range(pages))
    else:
        continuation = continuation_bits(page_table, function_table)
    tables = V2Tables(page_table, continuation, function_table, offset_table, instruction_table)
    return tables, header

