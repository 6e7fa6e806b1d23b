"""A stable, readable listing of a v2 blob (like `llvm-readobj --unwind` for EXIDX)."""

from __future__ import annotations

from harness.formats import ehabi
from harness.formats.chrome_v2.reader import V2Reader
from harness.formats.chrome_v2.tables import PAGE_SHIFT


def base_line(text_base: int | None) -> str:
    """How the listing's addresses read: a blob does not record its text base."""
    if text_base is None:
        return "addresses are offsets from the text base (not recorded in a blob: give --text-start)"
    return f"text base {text_base:#x}"


def dump(reader: V2Reader, text_base: int | None, layout: str) -> str:
    tables = reader.tables
    lines = [f"v2 unwind info ({layout} layout), {base_line(text_base)}", "header:"]
    text_base = text_base or 0
    lines += [f"  {name} = {value}" for name, value in reader.header.items()]
    lines.append(f"pages: {len(tables.page_table)}")
    for page, first in enumerate(tables.page_table):
        address = text_base + (page << PAGE_SHIFT)
        note = " (continues a function from an earlier page)" if tables.continuation[page] else ""
        lines.append(f"  page {page} at {address:#x}: first function entry {first}{note}")
    lines.append(f"function table entries: {len(tables.function_table)}")
    for index, entry in enumerate(tables.function_table):
        page = reader.entry_page[index]
        start = (page << PAGE_SHIFT) + (entry.page_offset << 1)
        lines.append(
            f"  function {index} at {text_base + start:#x} (page {page} + {entry.page_offset} half-words),"
            f" offset list at byte {entry.offset_table_index}:"
        )
        for offset, run_index in reader.offset_lists[entry.offset_table_index]:
            body = ehabi.text(reader.run(run_index))
            lines.append(f"    +{offset << 1:#x} ({offset} half-words): run at byte {run_index}: {body}")
    return "\n".join(lines) + "\n"
