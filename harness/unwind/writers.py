"""What `encode` writes of each table format (TableFormat.write): the blob
from a program's CFI rows, and the lines it prints of it."""

from __future__ import annotations

from typing import NamedTuple, Sequence

from harness.elf_program import code_map, code_reader
from harness.errors import InputError
from harness.formats import chrome_v2
from harness.formats.arm_exidx import parse_sections, read_exidx_sections, require_exidx_sections
from harness.formats.call_sites import encode_call_sites, mapped_return_addresses
from harness.formats.chrome_v1 import V1Encoded, encode_v1
from harness.formats.qut import encode_from_cfi, encode_from_exidx
from harness.formats.vmkunwind import encode_vmkunwind
from harness.program import FunctionCfi


class TableInput(NamedTuple):
    """What a table is written from, and v2's options (TableFormat.options)."""

    functions: Sequence[FunctionCfi]  # the rows: an ELF's CFI (or its code's), or a symbol file's STACK CFI
    base: int  # the text base the table counts from
    image: object | None  # the ELF (None: a symbol file): its code, its .ARM.exidx
    records: tuple = ()  # a symbol file's STACK CFI records as written (Chrome's builder reads those)
    layout: str | None = None  # v2: seed (None) or chrome
    epilogue: str = "drop"  # v2's epilogue policy
    builder: str = "ours"  # v2: ours, or Chrome's create_unwind_table.py rules


class Written(NamedTuple):
    blob: bytes
    summary: str  # what `encode` prints of it


def write_v2(given: TableInput) -> Written:
    if given.builder == "chrome":
        if given.layout == "seed" or given.epilogue != "drop":
            raise InputError("--builder chrome writes Chrome's tables: chrome layout, its own epilogue rule")
        encoded = chrome_v2.encode_as_chrome(given.records or given.functions, given.base)
    else:
        code_at = code_reader(given.image) if given.epilogue == "synthesize" else None
        parts = chrome_v2.encode_parts(given.functions, given.base, given.epilogue, code_at=code_at,
                                       layout=given.layout or "seed")
        if len(parts) > 1:
            return Written(chrome_v2.parts_blob(parts), v2_parts_summary(parts))
        encoded = parts[0]
    return Written(encoded.blob(), v2_summary(encoded, encoded.layout))


def v2_parts_summary(parts: Sequence[chrome_v2.Encoded]) -> str:
    """What encode prints of several tables (harness.formats.chrome_v2.parts)."""
    functions = sum(len(part.functions) for part in parts)
    sizes = [sum(part.table_sizes().values()) for part in parts]
    lines = [f"{len(parts)} tables ({parts[0].layout} layout) in a parts file: one table cannot index the offset "
             f"lists of all {functions} functions with its 16-bit field; each covers its functions from its text "
             "base up to the next table's"]
    lines += [f"  table {number}: text base {part.text_base:#x}, {len(part.functions)} functions, {size} bytes "
              f"(function offset table {part.table_sizes()['function offset table']})"
              for number, (part, size) in enumerate(zip(parts, sizes))]
    lines.append(f"table bytes: {sum(sizes)}, bytes per function: {sum(sizes) / max(functions, 1):.2f}")
    problems = [problem for part in parts for problem in part.problems]
    lines.append(f"CFI the encoder could not express or ignored: {len(problems)}")
    lines += [f"  {name}: {problem}" for name, problem in problems]
    return "\n".join(lines)


def v2_summary(encoded: chrome_v2.Encoded, layout: str) -> str:
    sizes = encoded.table_sizes(layout)
    total = sum(sizes.values())
    functions = len(encoded.functions)
    lines = [
        f"text base: {encoded.text_base:#x}",
        f"functions: {functions} (function table entries: {len(encoded.tables.function_table)}, as dump lists "
        f"them: the gaps between functions have entries too), CFI rows: {encoded.rows}, "
        f"rows dropped by epilogue policy '{encoded.policy}': {encoded.dropped_rows}",
        f"addresses: {encoded.addresses}, distinct instruction runs: {encoded.distinct_runs}",
        f"table bytes ({layout} layout):",
    ]
    lines += [f"  {name:<26}{size:>8}" for name, size in sizes.items()]
    lines.append(f"  {'total':<26}{total:>8}")
    lines.append(f"bytes per function: {total / max(functions, 1):.2f}")
    lines.append(f"bytes per address: {total / max(encoded.addresses, 1):.2f}")
    problems = encoded.problems
    lines.append(f"CFI the encoder could not express or ignored: {len(problems)}")
    lines += [f"  {name}: {problem}" for name, problem in problems]
    return "\n".join(lines)


def write_v1(given: TableInput) -> Written:
    encoded = encode_v1(given.functions, given.base)
    return Written(encoded.blob, v1_summary(encoded, len(given.functions), given.base))


def v1_summary(encoded: V1Encoded, functions: int, base: int) -> str:
    size = len(encoded.blob)
    lines = [
        f"text base: {base:#x}",
        f"functions: {functions}, in the table: {len(encoded.functions)}, "
        f"frameless (no entry needed): {len(encoded.frameless)}, refused: {len(encoded.refused)}",
        f"rows: {encoded.addresses}, index entries: {encoded.index_entries}",
        f"table bytes: {size} ({size / max(functions, 1):.2f} per function)",
    ]
    lines += [f"  refused {name}: {why}" for name, why in encoded.refused]
    return "\n".join(lines)


def write_vmkunwind(given: TableInput) -> Written:
    encoded = encode_vmkunwind(given.functions, given.base)
    return _rows_written("vmkunwind", given, encoded, f"{encoded.ranges} ranges, {encoded.rows} distinct rows")


def write_qut(given: TableInput) -> Written:
    """From the CFI, or where an ELF has none, from its .ARM.exidx (as Matrix builds it)."""
    if given.functions or given.image is None:
        encoded = encode_from_cfi(given.functions, given.base)
        return _rows_written("qut", given, encoded, f"{encoded.entries} entries from the CFI")
    sections = require_exidx_sections(given.image)
    encoded = encode_from_exidx(parse_sections(sections), sections.end, given.base)
    return _rows_written("qut", given, encoded, f"{encoded.entries} entries from the .ARM.exidx (the ELF has no CFI)")


def _rows_written(name: str, given: TableInput, encoded, counts: str) -> Written:
    lines = [f"{name}: {len(given.functions)} functions with CFI, {counts}, {len(encoded.refused)} left without"]
    lines += [f"  {function}: {why}" for function, why in encoded.refused[:20]]
    return Written(encoded.blob, "\n".join(lines))


def write_call_sites(given: TableInput) -> Written:
    """The return addresses a stack scan accepts, from the code of every executable section."""
    if given.image is None:
        raise InputError("--format call-sites reads an ELF's code: not with --input breakpad")
    sites = mapped_return_addresses(code_map(given.image, read_exidx_sections(given.image)), code_reader(given.image))
    return Written(encode_call_sites(sites, given.base),
                   f"call sites: {len(sites)} return addresses, from the code of every executable section")
