"""`unwind-harness` command line. Exit codes: 0 ok, 1 verification failure or
regression, 2 bad input or usage (one line on stderr, never a traceback)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from generators.corpus import DEFAULT_PROGRAMS, DEFAULT_SEED, default_corpus
from harness import __version__, report, v2
from harness.cfi import read_cfi
from harness.compiled import has_epilogue_cfi, program_from_elf
from harness.epilogue import EpilogueFirst
from harness.elf import open_elf, section_size, text_base
from harness.errors import InputError
from harness.sizes import CHROME_REFERENCE, size_row
from harness.unwinders import UNWINDER_NAMES, build_unwinders
from harness.v1 import V1Encoded, encode_v1
from harness.v2.dump import dump
from harness.v2.unwinder import V2Unwinder
from harness.verify import verify_program

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
ELF_CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "elf"


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"not a positive integer: {text!r}")
    return value


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
    if args.format == "v1":
        image = open_elf(args.elf)
        base = text_base(image) if args.text_start is None else args.text_start
        functions = read_cfi(image)
        encoded_v1 = encode_v1(functions, base)
        Path(args.output).write_bytes(encoded_v1.blob)
        print(v1_summary(encoded_v1, len(functions), base))
        print(f"wrote {len(encoded_v1.blob)} bytes to {args.output}")
        return EXIT_OK
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


def verify_all(programs, names, console) -> tuple[list, float]:
    """Verify every program with a progress bar; (results, seconds)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    results = []
    started = time.perf_counter()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("verifying programs", total=len(programs))
        for program in programs:
            results.append(verify_program(program, build_unwinders(program, names)))
            progress.advance(task)
    return results, time.perf_counter() - started


def write_reports(data: dict, directory: Path, json_path: str | None, title: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    Path(json_path or directory / "latest.json").write_text(report.dumps(data))
    (directory / "latest.md").write_text(report.markdown(data, title))
    report.chart(data, directory / "latest.png")


def finish_run(data: dict, results, seconds: float, args, console) -> int:
    report.print_table(data, console)
    stops = sum(r.stops for r in results)
    console.print(f"verified {stops} stops x {len(args.unwinder or UNWINDER_NAMES)} unwinders "
                  f"in {seconds:.1f} s: {stops / max(seconds, 1e-9):,.0f} stops/s")
    status = EXIT_OK
    for result in results:
        if not result.self_check_ok:
            print(f"unwind-harness: {result.program}: self-check failed: "
                  f"{result.fault or f'returned {result.result:#x}, expected {result.expected:#x}'}",
                  file=sys.stderr)
            status = EXIT_FAILED
    baseline_path = Path(args.reports) / "baseline.json"
    if args.write_baseline:
        baseline_path.write_text(report.dumps(data))
        console.print(f"wrote {baseline_path}")
    if args.check_baseline:
        try:
            baseline = json.loads(baseline_path.read_text())
        except (OSError, ValueError) as error:
            raise InputError(f"{baseline_path}: cannot read the baseline: {error}") from None
        if baseline.get("seed") != data["seed"] or baseline.get("input") != data["input"]:
            raise InputError(f"{baseline_path} was recorded for input {baseline.get('input')!r}, "
                             f"seed {baseline.get('seed')}; this run is {data['input']!r}, seed {data['seed']}")
        risen = report.regressions(data, baseline)
        for line in risen:
            print(f"unwind-harness: regression: {line}", file=sys.stderr)
        if risen:
            status = EXIT_FAILED
        else:
            console.print(f"no failure count rose above {baseline_path}")
    return status


def _manifest_builds(directory: Path) -> list[dict]:
    """The builds listed in `directory`/manifest.json ([] if there is none)."""
    try:
        manifest = json.loads((directory / "manifest.json").read_text())
    except (OSError, ValueError):
        return []
    builds = manifest.get("builds", []) if isinstance(manifest, dict) else manifest
    return [b for b in builds if isinstance(b, dict) and "file" in b]


def _manifest_checksum(path: str, entry: str) -> int | None:
    """The expected result recorded for `entry` of this ELF in the manifest
    beside it (corpus/elf/manifest.json), if any."""
    for build in _manifest_builds(Path(path).parent):
        if build.get("file") == Path(path).name:
            if build.get("entry") == entry:
                return build.get("expected_checksum")
            for program in build.get("programs", []):
                if program.get("entry_symbol") == entry:
                    return program.get("expected_checksum")
    return None


def _read_v2_table(path: str, layout: str) -> tuple[v2.V2Reader, str]:
    try:
        blob = Path(path).read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from e
    if layout != "auto":
        return v2.V2Reader.from_blob(blob, layout), layout
    errors = []
    for candidate in v2.LAYOUTS:
        try:
            return v2.V2Reader.from_blob(blob, candidate), candidate
        except InputError as error:
            errors.append(f"as {candidate}: {error}")
    raise InputError(f"{path}: not a v2 blob in either layout ({'; '.join(errors)})")


def elf_unwinders(program, names, v2_table: str | None, layout: str) -> list:
    unwinders = build_unwinders(program, names)
    if v2_table is None:
        return unwinders
    reader, _ = _read_v2_table(v2_table, layout)
    given = V2Unwinder(reader, program.text_base, "v2")
    replaced = []
    for unwinder in unwinders:  # the given tables stand in for the ones built from the CFI
        if unwinder.name == "v2":
            unwinder = given
        elif unwinder.name == "v2+epilogue":
            unwinder = EpilogueFirst(unwinder.simulator, given, unwinder.name)
        replaced.append(unwinder)
    return replaced


def default_elf_unwinders(program) -> list[str]:
    """All, but `v2-gcc` only where the compiler describes epilogues (elsewhere
    its input is the same as `v2`'s)."""
    described = has_epilogue_cfi(program)
    return [n for n in UNWINDER_NAMES if described or n != "v2-gcc"]


def cmd_verify_elf(args) -> int:
    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 120)
    expected = args.expect if args.expect is not None else _manifest_checksum(args.elf, args.entry)
    program = program_from_elf(args.elf, args.entry, expected, args.text_start)
    names = args.unwinder or default_elf_unwinders(program)
    unwinders = elf_unwinders(program, names, args.v2_table, args.layout)
    started = time.perf_counter()
    result = verify_program(program, unwinders, every=args.every)
    seconds = time.perf_counter() - started
    data = report.report_data([result], names, None, args.elf)
    if args.json:
        Path(args.json).write_text(report.dumps(data))
    report.print_table(data, console)
    console.print(f"verified {result.stops} stops x {len(names)} unwinders in {seconds:.1f} s"
                  + (f" (every {args.every}th stop)" if args.every > 1 else ""))
    if not result.self_check_ok:
        print(f"unwind-harness: {args.elf}: {result.fault or f'returned {result.result:#x}, expected {result.expected:#x}'}",
              file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _not_expressed(encoded: v2.Encoded) -> dict[str, int]:
    """CFI the conversion could not express or ignored, counted per message."""
    counts: dict[str, int] = {}
    for _, problem in encoded.problems:
        message = problem.split(": ", 1)[-1]
        rows = 1
        if message.endswith(" rows)"):
            message, _, tail = message.rpartition(" (")
            rows = int(tail.split()[0])
        counts[message] = counts.get(message, 0) + rows
    return dict(sorted(counts.items()))


def verify_elf_corpus(args, console) -> tuple[list[dict], list, list[dict]]:
    """Every build in corpus/elf, each reported on its own: (report groups,
    results, size rows)."""
    groups, results, sizes = [], [], []
    for build in sorted(_manifest_builds(ELF_CORPUS), key=lambda b: b["file"]):
        path = ELF_CORPUS / build["file"]
        # Named by its place in the repository, so reports do not depend on the checkout.
        program = replace(program_from_elf(str(path), build["entry"], build.get("expected_checksum")),
                          name=f"corpus/elf/{build['file']}")
        names = [n for n in default_elf_unwinders(program) if not args.unwinder or n in args.unwinder]
        result = verify_program(program, build_unwinders(program, names))
        results.append(result)
        encoded = v2.encode(program.cfi["tables"], program.text_base, "drop")
        label = {"input": program.name, "build": path.stem,
                 "compiler": build.get("compiler_version", build.get("compiler", "")),
                 "flags": build.get("flags", [])}
        with_cfi = {f.name for f in program.functions}
        groups.append(report.elf_group(result, names, label, _not_expressed(encoded), with_cfi))
        sizes.append(size_row(program.name, [program], section_size(open_elf(str(path)), ".debug_frame")))
        console.print(f"verified {path.name}: {result.stops} stops", highlight=False)
    return groups, results, sizes


def cmd_run(args) -> int:
    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 120)
    programs = default_corpus(args.seed, args.programs)
    names = args.unwinder or list(UNWINDER_NAMES)
    results, seconds = verify_all(programs, names, console)
    sizes = {"layout": "seed", "rows": [size_row(f"generated corpus ({len(programs)} programs)", programs)]}
    data = report.report_data(results, names, args.seed, "generated", sizes)
    if not args.no_elf:
        started = time.perf_counter()
        data["elf"], elf_results, elf_sizes = verify_elf_corpus(args, console)
        results += elf_results
        sizes["rows"] += elf_sizes
        seconds += time.perf_counter() - started
    sizes["rows"].append(CHROME_REFERENCE)
    write_reports(data, Path(args.reports), args.json, "unwind-harness: generated corpus")
    return finish_run(data, results, seconds, args, console)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="unwind-harness",
        description="Chrome Unwind Info v2 for ARM32 Thumb-2: encode, dump, verify.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="the main job: verify the generated corpus at every stop")
    run.add_argument("--seed", type=int, default=DEFAULT_SEED)
    run.add_argument("--programs", type=int, default=DEFAULT_PROGRAMS,
                     help=f"programs in the generated corpus (default {DEFAULT_PROGRAMS})")
    run.add_argument("--unwinder", action="append", choices=UNWINDER_NAMES,
                     help="verify only these (repeatable; default: all)")
    run.add_argument("--json", help="write the JSON report here (default: REPORTS/latest.json)")
    run.add_argument("--no-elf", action="store_true", help="skip the compiled corpus in corpus/elf")
    run.add_argument("--reports", default="reports", help="report directory (default: reports)")
    run.add_argument("--check-baseline", action="store_true",
                     help="exit 1 if a failure count rose above REPORTS/baseline.json")
    run.add_argument("--write-baseline", action="store_true",
                     help="record this run as REPORTS/baseline.json")
    run.set_defaults(handler=cmd_run)

    encode = commands.add_parser("encode", help="v2 (or v1) blob from an ELF's DWARF CFI")
    encode.add_argument("elf")
    encode.add_argument("-o", "--output", required=True)
    encode.add_argument("--format", choices=("v2", "v1"), default="v2",
                        help="v2 (default) or Chrome's earlier v1 format")
    encode.add_argument("--layout", choices=v2.LAYOUTS, default="seed")
    encode.add_argument("--epilogue", choices=v2.EPILOGUE_POLICIES, default="drop")
    encode.add_argument("--text-start", type=_address, default=None,
                        help="text base (default: lowest executable section address)")
    encode.set_defaults(handler=cmd_encode)

    verify = commands.add_parser("verify-elf", help="run a bare-metal Thumb-2 ELF, verifying at every stop")
    verify.add_argument("elf")
    verify.add_argument("--entry", required=True, help="function symbol to call")
    verify.add_argument("--every", type=_positive, default=1, help="verify every Nth stop only")
    verify.add_argument("--unwinder", action="append", choices=UNWINDER_NAMES,
                        help="verify only these (repeatable; default: all that apply)")
    verify.add_argument("--v2-table", help="use this v2 blob for v2 and v2+epilogue instead of encoding the CFI")
    verify.add_argument("--layout", choices=("auto", *v2.LAYOUTS), default="auto", help="layout of --v2-table")
    verify.add_argument("--text-start", type=_address, default=None,
                        help="text base of the tables (default: lowest executable section address)")
    verify.add_argument("--expect", type=_address, default=None,
                        help="the entry's return value (default: from manifest.json beside the ELF)")
    verify.add_argument("--json", help="write the JSON report here")
    verify.set_defaults(handler=cmd_verify_elf)

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
