"""`unwind-harness` command line. Exit codes: 0 ok, 1 verification failure or
regression, 2 bad input or usage (one line on stderr, never a traceback)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import __version__, v2
from harness.cfi import read_cfi
from harness.elf import open_elf, text_base
from harness.errors import InputError
from harness.v2.dump import dump

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
FIXTURES = Path(__file__).resolve().parent.parent / "corpus" / "fixtures"


def _address(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an address: {text!r}") from None


def encode_elf(path: str, policy: str, text_start: int | None) -> v2.Encoded:
    image = open_elf(path)
    base = text_base(image) if text_start is None else text_start
    return v2.encode(read_cfi(image), base, policy)


def size_summary(encoded: v2.Encoded, layout: str) -> str:
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


def cmd_encode(args) -> int:
    encoded = encode_elf(args.elf, args.epilogue, args.text_start)
    blob = encoded.blob(args.layout)
    Path(args.output).write_bytes(blob)
    print(size_summary(encoded, args.layout))
    print(f"wrote {len(blob)} bytes to {args.output}")
    return EXIT_OK


def cmd_dump(args) -> int:
    try:
        blob = Path(args.file).read_bytes()
    except OSError as e:
        raise InputError(f"{args.file}: cannot read: {e.strerror or e}") from e
    reader = v2.V2Reader.from_blob(blob, args.layout)
    sys.stdout.write(dump(reader, args.text_start, args.layout))
    return EXIT_OK


def cmd_run(args) -> int:
    """Until the emulation harness lands: encode every committed fixture."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="v2 tables for the committed ELF fixtures (seed layout)")
    for column in ("fixture", "functions", "rows", "dropped (drop)", "bytes (drop)",
                   "bytes (keep)", "bytes/function", "bytes/address", "problems"):
        table.add_column(column, justify="left" if column == "fixture" else "right")
    for path in sorted(FIXTURES.glob("*.elf")):
        drop = encode_elf(str(path), "drop", None)
        keep = encode_elf(str(path), "keep", None)
        size_drop = len(drop.blob())
        table.add_row(
            path.name, str(len(drop.functions)), str(drop.rows), str(drop.dropped_rows),
            str(size_drop), str(len(keep.blob())),
            f"{size_drop / len(drop.functions):.1f}", f"{size_drop / max(drop.addresses, 1):.2f}",
            str(len(drop.problems)),
        )
    Console().print(table)
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="unwind-harness",
        description="Chrome Unwind Info v2 for ARM32 Thumb-2: encode, dump, verify.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="the main job")
    run.set_defaults(handler=cmd_run)

    encode = commands.add_parser("encode", help="v2 blob from an ELF's DWARF CFI")
    encode.add_argument("elf")
    encode.add_argument("-o", "--output", required=True)
    encode.add_argument("--layout", choices=v2.LAYOUTS, default="seed")
    encode.add_argument("--epilogue", choices=v2.EPILOGUE_POLICIES, default="drop")
    encode.add_argument("--text-start", type=_address, default=None,
                        help="text base (default: lowest executable section address)")
    encode.set_defaults(handler=cmd_encode)

    dump_cmd = commands.add_parser("dump", help="readable listing of a v2 blob")
    dump_cmd.add_argument("file")
    dump_cmd.add_argument("--layout", choices=v2.LAYOUTS, default="seed")
    dump_cmd.add_argument("--text-start", type=_address, default=0,
                          help="text base the blob was encoded for (default 0)")
    dump_cmd.set_defaults(handler=cmd_dump)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except InputError as error:
        print(f"unwind-harness: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
