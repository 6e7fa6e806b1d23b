"""The table commands of `unwind-harness`: `encode` (tables from an ELF's
CFI, its code, or a Breakpad symbol file), `dump` (a blob, readable) and
`export-breakpad` (an ELF's CFI as a Breakpad symbol file)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from rich.console import Console

from harness.commands import EXIT_OK, progress_bar, read_v2_table
from harness.compare_rows import compare_elf
from harness.elf_program import elf_functions
from harness.errors import ElfError, InputError
from harness.filesystem import check_output, read_input, write_output
from harness.formats.breakpad import module_id, read_symbol_file, symbol_file
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
from harness.linux.process import LinuxRun
from harness.thumb.discovery import Progress, coverage_lines
from harness.unwind.registry import ENCODE_OPTIONS, table_format
from harness.unwind.writers import TableInput

SHOWN_EVERY = 10.0  # seconds between progress lines where stderr is not a terminal


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
    if not args.from_code:
        return elf_functions(image, False), base, image, ()
    with _analysis_shown(args.elf) as progress:
        return elf_functions(image, True, progress), base, image, ()


@contextmanager
def _analysis_shown(path: str) -> Iterator[Progress]:
    """A progress callback for the analysis of `path`'s code, shown on
    stderr: a bar on a terminal, else a line every SHOWN_EVERY seconds; and
    a line at the end saying how many starts were analysed, how fast."""
    console = Console(stderr=True)
    started = last_line = time.monotonic()
    analysed_at_end = 0
    with progress_bar(console) if console.is_terminal else nullcontext() as bar:
        task = bar.add_task("analysing code", total=None) if bar else None

        def progress(analysed: int, known: int) -> None:
            nonlocal analysed_at_end, last_line
            analysed_at_end = analysed
            if bar:
                bar.update(task, completed=analysed, total=known)
            elif (now := time.monotonic()) - last_line >= SHOWN_EVERY:
                last_line = now
                print(f"{path}: {analysed:,} of {known:,} function starts analysed", file=sys.stderr)
        yield progress
    seconds = time.monotonic() - started
    print(f"{path}: {analysed_at_end:,} function starts analysed in {seconds:.1f} s "
          f"({analysed_at_end / max(seconds, 1e-9):,.0f} a second)", file=sys.stderr)


def _given_options(args) -> list[str]:
    """Those of registry.ENCODE_OPTIONS `args` gives (not their defaults)."""
    given = {"from-code": args.from_code, "layout": args.layout is not None, "epilogue": args.epilogue != "drop",
             "builder": args.builder != "ours", "compare": args.compare}
    return [option for option in ENCODE_OPTIONS if given[option]]


def cmd_encode(args) -> int:
    check_output(args.output, [args.elf, args.stdin])
    chosen = table_format(args.format)
    refused = [f"--{option}" for option in _given_options(args) if option not in chosen.options]
    if refused:
        takes = ", ".join(f"--{option}" for option in ENCODE_OPTIONS if option in chosen.options) or "none of them"
        raise InputError(f"--format {args.format} does not take {', '.join(refused)} (of encode's options it takes "
                         f"{takes})")
    if (args.compare or args.entry or args.run) and not (args.from_code and args.compare):
        raise InputError("--compare needs --from-code, and --entry and --run need --compare")
    if args.entry and args.run:
        raise InputError("--entry runs a bare-metal function, --run a Linux process: not both")
    if (args.sysroot or args.cwd or args.stdin or args.lazy_binding) and not args.run:
        raise InputError("--sysroot, --cwd, --stdin and --lazy-binding say how --run runs the program")
    functions, base, image, records = _rows(args)
    written = chosen.write(TableInput(functions, base, image, records, args.layout, args.epilogue, args.builder))
    write_output(args.output, written.blob)
    print(written.summary)
    if args.from_code:
        print("\n".join(coverage_lines(tuple(functions), executable_ranges(image))))
    print(f"wrote {len(written.blob)} bytes to {args.output}")
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
    tables, layout = read_v2_table(args.file, args.layout)
    if len(tables) > 1:
        print(f"v2 parts file: {len(tables)} tables, each for the code from its text base up to the next's")
    for number, (text_offset, reader) in enumerate(tables):
        if len(tables) > 1:
            print(f"table {number}: text offset {text_offset:#x}")
        text_start = args.text_start + text_offset if args.text_start is not None else (text_offset or None)
        sys.stdout.write(dump(reader, text_start, layout))
    return EXIT_OK


