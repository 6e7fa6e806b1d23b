"""The table commands of `unwind-harness`: `encode` (tables from an ELF's
CFI, its code, or a Breakpad symbol file), `dump` (a blob, readable) and
`export-breakpad` (an ELF's CFI as a Breakpad symbol file)."""

from __future__ import annotations

import sys
from pathlib import Path

from harness.commands import EXIT_OK, read_v2_table
from harness.compare_rows import compare_elf
from harness.elf_program import code_map, code_reader, elf_functions
from harness.errors import ElfError, InputError
from harness.filesystem import check_output, read_input, write_output
from harness.formats import chrome_v2
from harness.formats.arm_exidx import parse_sections, read_exidx_sections, require_exidx_sections
from harness.formats.breakpad import module_id, read_symbol_file, symbol_file
from harness.formats.call_sites import encode_call_sites, mapped_return_addresses
from harness.formats.chrome_v1 import V1Encoded, encode_v1
from harness.formats.chrome_v2.dump import dump
from harness.formats.dwarf_cfi import read_cfi
from harness.formats.elf import (
    build_id,
    executable_ranges,
    function_symbols,
    load_base,
    open_elf,
    section_data,
    text_base,
)
from harness.formats.qut import encode_from_cfi, encode_from_exidx
from harness.formats.vmkunwind import encode_vmkunwind
from harness.linux.process import LinuxRun
from harness.thumb.discovery import coverage_lines
from harness.unwind.registry import table_format


def _rows(args) -> tuple[list, int, object, tuple]:
    """The rows `encode` writes tables of, their text base, the ELF they
    come from (None for a Breakpad symbol file), and the symbol file's
    records as written (Chrome's builder reads those; () for an ELF)."""
    if args.input == "breakpad":
        if args.from_code or args.compare or args.epilogue == "synthesize":
            raise InputError("--from-code, --compare and --epilogue synthesize read an ELF's code: "
                             "not with --input breakpad")
        module = read_symbol_file(read_input(args.elf, "symbol file").decode("utf-8", "replace"), args.elf)
        if not module.functions:
            raise InputError(f"{args.elf}: no STACK CFI INIT record")
        for line in module.unparsed:
            print(f"row left out, the one before stays in force: {line}")
        base = min(f.start for f in module.functions) if args.text_start is None else args.text_start
        return list(module.functions), base, None, module.stack_cfi
    image = open_elf(args.elf)
    base = text_base(image) if args.text_start is None else args.text_start
    return elf_functions(image, args.from_code), base, image, ()


def _comparator_tables(args, functions: list, base: int, image) -> int:
    """`encode --format vmkunwind|qut|call-sites`: the CFI's rows as they
    are (QUT from the `.ARM.exidx` where the ELF has no CFI, as Matrix
    builds it); a stack scan's call sites from the ELF's code."""
    if args.from_code or args.builder != "ours" or args.epilogue != "drop" or args.layout:
        raise InputError(f"--format {args.format} takes the CFI's rows as they are: no --from-code, --builder, "
                         "--epilogue or --layout")
    if args.format == "call-sites":
        if image is None:
            raise InputError("--format call-sites reads an ELF's code: not with --input breakpad")
        sites = mapped_return_addresses(code_map(image, read_exidx_sections(image)), code_reader(image))
        write_output(args.output, blob := encode_call_sites(sites, base))
        print(f"call sites: {len(sites)} return addresses, from the code of every executable section")
        print(f"wrote {len(blob)} bytes to {args.output}")
        return EXIT_OK
    if args.format == "vmkunwind":
        encoded = encode_vmkunwind(functions, base)
        counts = f"{encoded.ranges} ranges, {encoded.rows} distinct rows"
    elif functions or image is None:
        encoded = encode_from_cfi(functions, base)
        counts = f"{encoded.entries} entries from the CFI"
    else:
        sections = require_exidx_sections(image)
        encoded = encode_from_exidx(parse_sections(sections), sections.end, base)
        counts = f"{encoded.entries} entries from the .ARM.exidx (the ELF has no CFI)"
    write_output(args.output, encoded.blob)
    print(f"{args.format}: {len(functions)} functions with CFI, {counts}, {len(encoded.refused)} left without")
    for name, why in encoded.refused[:20]:
        print(f"  {name}: {why}")
    print(f"wrote {len(encoded.blob)} bytes to {args.output}")
    return EXIT_OK


def size_summary(encoded: chrome_v2.Encoded, layout: str) -> str:
    sizes = encoded.table_sizes(layout)
    total = sum(sizes.values())
    functions = len(encoded.functions)
    lines = [
        f"text base: {encoded.text_base:#x}",
        f"functions: {functions}, CFI rows: {encoded.rows}, "
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


def cmd_encode(args) -> int:
    check_output(args.output, [args.elf, args.stdin])
    if (args.compare or args.entry or args.run) and not (args.from_code and args.compare):
        raise InputError("--compare needs --from-code, and --entry and --run need --compare")
    if args.entry and args.run:
        raise InputError("--entry runs a bare-metal function, --run a Linux process: not both")
    if (args.sysroot or args.cwd or args.stdin or args.lazy_binding) and not args.run:
        raise InputError("--sysroot, --cwd, --stdin and --lazy-binding say how --run runs the program")
    functions, base, image, records = _rows(args)
    if args.format in ("vmkunwind", "qut", "call-sites"):
        return _comparator_tables(args, functions, base, image)
    if args.format == "v1":
        encoded_v1 = encode_v1(functions, base)
        write_output(args.output, encoded_v1.blob)
        print(v1_summary(encoded_v1, len(functions), base))
        print(f"wrote {len(encoded_v1.blob)} bytes to {args.output}")
        return EXIT_OK
    if args.builder == "chrome":
        if args.layout == "seed" or args.epilogue != "drop":
            raise InputError("--builder chrome writes Chrome's tables: chrome layout, its own epilogue rule")
        encoded = chrome_v2.encode_as_chrome(records or functions, base)
    else:
        code_at = code_reader(image) if args.epilogue == "synthesize" else None
        encoded = chrome_v2.encode(functions, base, args.epilogue, code_at=code_at, layout=args.layout or "seed")
    blob = encoded.blob()
    write_output(args.output, blob)
    print(size_summary(encoded, encoded.layout))
    if args.from_code:
        print("\n".join(coverage_lines(tuple(functions), executable_ranges(image))))
    print(f"wrote {len(blob)} bytes to {args.output}")
    if args.compare:
        run = LinuxRun(args.elf, tuple(args.args), args.sysroot, args.cwd or ".", args.stdin,
                       args.lazy_binding) if args.run else None
        print("\n".join(compare_elf(args.elf, args.entry, run)))
    return EXIT_OK


def cmd_export_breakpad(args) -> int:
    check_output(args.output, [args.elf])
    image = open_elf(args.elf)
    functions = read_cfi(image)
    if not functions:
        raise ElfError(f"{args.elf}: no DWARF CFI (.debug_frame or .eh_frame) to export")
    text = symbol_file(Path(args.elf).name, module_id(build_id(image), section_data(image, ".text")), functions,
                       function_symbols(image), load_base(image))
    write_output(args.output, text)
    print(f"wrote {len(functions)} functions' STACK CFI records to {args.output}")
    return EXIT_OK


def cmd_dump(args) -> int:
    listed = table_format(args.format)
    if listed.read is not None:
        try:
            table = listed.read(read_input(args.file, f"{args.format} blob"))
        except InputError as error:
            raise InputError(f"{args.file}: {error}") from None
        sys.stdout.write(listed.listing(table, args.text_start))
        return EXIT_OK
    reader, layout = read_v2_table(args.file, args.layout)
    sys.stdout.write(dump(reader, args.text_start, layout))
    return EXIT_OK


