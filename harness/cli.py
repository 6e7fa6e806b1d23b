"""`unwind-harness` command line. Exit codes: 0 ok, 1 verification failure or
regression, 2 bad input or usage (one line on stderr, never a traceback)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from concurrent.futures import ProcessPoolExecutor

from generators.corpus import DEFAULT_PROGRAMS, DEFAULT_SEED, generate_program
from harness import __version__
from harness.verify import kernel
from harness.report import data as report
from harness.formats import chrome_v2
from harness.formats.dwarf_cfi import read_cfi
from harness.elf_program import program_from_elf
from harness.unwind.v2_epilogue import EpilogueFirst
from harness.formats.elf import load_segments, open_elf, text_base
from harness.errors import InputError
from harness.runner import (Shard, all_names, assemble, elf_builds, elf_unwinder_names, parse_shard, partial, read_partials, run_units, units_of)
from harness.report.summary import ProgramSummary, combine, from_json, summarize, to_json
from harness.unwind import UNWINDER_NAMES, build_unwinders
from harness.formats.chrome_v1 import V1Encoded, V1Table, dump_v1, encode_v1
from harness.formats.chrome_v2.dump import dump
from harness.unwind.v2 import V2Unwinder
from harness.verify.stops import verify_program

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"not a positive integer: {text!r}")
    return value


def _shard(text: str) -> Shard:
    try:
        return parse_shard(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _parallel(parser: argparse.ArgumentParser, what: str) -> None:
    cores = os.cpu_count() or 1
    parser.add_argument("--jobs", type=_positive, default=cores,
                        help=f"processes to verify {what} with (default: all cores, {cores} here)")
    parser.add_argument("--shard", type=_shard, default=Shard(),
                        help=f"verify only shard I of N of the {what} (I/N, from 0) and write a "
                             "shard report for merge")


def _address(text: str) -> int:
    """An unsigned 32-bit value, decimal or 0x-prefixed."""
    try:
        value = int(text, 0)
    except ValueError:
        value = -1
    if not 0 <= value <= 0xFFFFFFFF:
        raise argparse.ArgumentTypeError(f"not an unsigned 32-bit value: {text!r}")
    return value


def _check_output(path: str | None) -> None:
    """Refuse an output file that cannot be written before the work, not after it."""
    if path is None:
        return
    target = Path(path)
    if target.is_dir() or not target.parent.is_dir():
        reason = "is a directory" if target.is_dir() else f"no directory {target.parent}"
        raise InputError(f"{path}: cannot write: {reason}")


def _code_reader(image):
    """`code_at(address, size)` over an ELF's loaded segments (for policy `synthesize`)."""
    segments = load_segments(image)

    def code_at(address: int, size: int) -> bytes:
        for start, data in segments:
            if start <= address < start + len(data):
                return data[address - start : address - start + size]
        return b""

    return code_at


def encode_elf(path: str, policy: str, text_start: int | None) -> chrome_v2.Encoded:
    image = open_elf(path)
    base = text_base(image) if text_start is None else text_start
    code_at = _code_reader(image) if policy == "synthesize" else None
    return chrome_v2.encode(read_cfi(image), base, policy, code_at=code_at)


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


def _read_blob(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from e


def cmd_dump(args) -> int:
    if args.format == "v1":
        try:
            table = V1Table.from_blob(_read_blob(args.file))
        except InputError as error:
            raise InputError(f"{args.file}: {error}") from None
        sys.stdout.write(dump_v1(table, args.text_start))
        return EXIT_OK
    reader, _ = _read_v2_table(args.file, args.layout)
    sys.stdout.write(dump(reader, args.text_start, args.layout))
    return EXIT_OK


def write_reports(data: dict, directory: Path, json_path: str | None, title: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    Path(json_path or directory / "latest.json").write_text(report.dumps(data))
    (directory / "latest.md").write_text(report.markdown(data, title))
    report.chart(data, directory / "latest.png")


def finish_run(data: dict, args, console) -> int:
    """Print the tables, report self-check failures, and write or check the baseline."""
    report.print_table(data, console)
    status = EXIT_OK
    for line in report.not_verified(data):
        print(f"unwind-harness: not verified: {line}", file=sys.stderr)
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
        if not isinstance(baseline, dict) or not isinstance(baseline.get("results"), list):
            raise InputError(f"{baseline_path}: not a report (no list of results)")
        if baseline.get("seed") != data["seed"] or baseline.get("input") != data["input"]:
            raise InputError(f"{baseline_path} was recorded for input {baseline.get('input')!r}, "
                             f"seed {baseline.get('seed')}; this run is {data['input']!r}, seed {data['seed']}")
        try:
            risen = report.regressions(data, baseline)
        except (KeyError, TypeError, AttributeError) as error:
            raise InputError(f"{baseline_path}: malformed result rows ({type(error).__name__}: {error})") from None
        for line in risen:
            print(f"unwind-harness: regression: {line}", file=sys.stderr)
        if risen:
            status = EXIT_FAILED
        else:
            console.print(f"no failure count rose above {baseline_path}")
    return status


def _manifest_checksum(path: str, entry: str) -> int | None:
    """The expected result recorded for `entry` of this ELF in the manifest
    beside it (corpus/elf/manifest.json), if any."""
    for build in elf_builds(Path(path).parent):
        if build.get("file") == Path(path).name:
            if build.get("entry") == entry:
                return build.get("expected_checksum")
            for program in build.get("programs", []):
                if program.get("entry_symbol") == entry:
                    return program.get("expected_checksum")
    return None


def _read_v2_table(path: str, layout: str) -> tuple[chrome_v2.V2Reader, str]:
    blob = _read_blob(path)
    if layout != "auto":
        try:
            return chrome_v2.V2Reader.from_blob(blob, layout), layout
        except InputError as error:
            raise InputError(f"{path}: {error}") from None
    errors = []
    for candidate in chrome_v2.LAYOUTS:
        try:
            return chrome_v2.V2Reader.from_blob(blob, candidate), candidate
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


def verify_elf_part(job: tuple) -> dict:
    """One stop shard of a verify-elf run (a process of `--jobs`)."""
    elf, entry, expected, text_start, names, v2_table, layout, every, shard = job
    program = program_from_elf(elf, entry, expected, text_start)
    unwinders = elf_unwinders(program, names, v2_table, layout)
    result = verify_program(program, unwinders, every=every, shard=(shard.index, shard.count))
    return {"index": shard.index, "kind": "stops", "summary": to_json(summarize(result))}


def elf_summary(records: list[dict], elf: str) -> ProgramSummary:
    """One program's summary from the summaries of its stop shards."""
    return combine([from_json(r["summary"]) for r in records], program=elf)


def cmd_verify_elf(args) -> int:
    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 120)
    if args.shard.count > 1 and not args.json:
        raise InputError("verify-elf --shard needs --json PATH for the shard report")
    _check_output(args.json)
    expected = args.expect if args.expect is not None else _manifest_checksum(args.elf, args.entry)
    program = program_from_elf(args.elf, args.entry, expected, args.text_start)
    names = args.unwinder or elf_unwinder_names(program, UNWINDER_NAMES)
    elf_unwinders(program, names, args.v2_table, args.layout)  # bad tables fail here, before any work
    # Each job emulates the whole program and verifies every jobs-th of this shard's stops.
    parts = [Shard(k, args.jobs).within(args.shard) for k in range(args.jobs)]
    jobs = [(args.elf, args.entry, expected, args.text_start, names, args.v2_table, args.layout, args.every, part)
            for part in parts]
    started = time.perf_counter()
    if args.jobs == 1:
        records = [verify_elf_part(jobs[0])]
    else:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            records = list(pool.map(verify_elf_part, jobs))
    seconds = time.perf_counter() - started
    summary = elf_summary(records, args.elf)
    config = {"elf": args.elf, "entry": args.entry, "unwinders": names, "every": args.every,
              "units": args.shard.count}
    if args.shard.count > 1:
        record = {"index": args.shard.index, "kind": "stops", "summary": to_json(summary)}
        Path(args.json).write_text(report.dumps(partial("verify-elf", config, args.shard, [record])))
        console.print(f"shard {args.shard}: verified {summary.stops} stops; join the shards with merge")
        return EXIT_OK
    data = report.report_data([summary], names, None, args.elf)
    if args.json:
        Path(args.json).write_text(report.dumps(data))
    report.print_table(data, console)
    console.print(f"verified {summary.stops} stops x {len(names)} unwinders in {seconds:.1f} s"
                  + (f" (every {args.every}th stop)" if args.every > 1 else ""))
    check = data["programs"][0]["self_check"]
    if check != "ok":
        print(f"unwind-harness: {args.elf}: {check}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _progress(console):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    return Progress(*columns, console=console, transient=True)


def cmd_run(args) -> int:
    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 120)
    names = all_names(args.unwinder)
    units = units_of(args.seed, args.programs, names, not args.no_elf)
    mine = [u for u in units if args.shard.takes(u.index)]
    started = time.perf_counter()
    with _progress(console) as progress:
        task = progress.add_task("verifying programs", total=len(mine))
        records = run_units(mine, args.jobs, lambda record: progress.advance(task))
    seconds = time.perf_counter() - started
    stops = sum(r["summary"]["stops"] for r in records)
    console.print(f"verified {stops} stops x {len(names)} unwinders in {seconds:.1f} s "
                  f"({args.jobs} job{'s' if args.jobs > 1 else ''}): {stops / max(seconds, 1e-9):,.0f} stops/s")
    config = {"seed": args.seed, "programs": args.programs, "unwinders": names, "elf": not args.no_elf,
              "units": len(units)}
    if args.shard.count > 1:
        path = Path(args.json or Path(args.reports) / f"shard-{args.shard.index}-of-{args.shard.count}.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(report.dumps(partial("run", config, args.shard, records)))
        console.print(f"shard {args.shard}: {len(records)} of {len(units)} units in {path}; "
                      "join the shards with merge")
        return EXIT_OK
    data = assemble(records, names, args.seed)
    write_reports(data, Path(args.reports), args.json, "unwind-harness: generated corpus")
    return finish_run(data, args, console)


def cmd_merge(args) -> int:
    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 120)
    command, config, records = read_partials(args.shards)
    try:
        if command == "verify-elf":
            data = report.report_data([elf_summary(records, config["elf"])], config["unwinders"], None,
                                      config["elf"])
        else:
            data = assemble(records, config["unwinders"], config["seed"])
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise InputError(f"merge: malformed shard records in {' '.join(args.shards)} "
                         f"({type(error).__name__}: {error})") from None
    if command == "verify-elf":
        Path(args.json or Path(args.reports) / "latest.json").write_text(report.dumps(data))
        report.print_table(data, console)
        return EXIT_OK if data["programs"][0]["self_check"] == "ok" else EXIT_FAILED
    write_reports(data, Path(args.reports), args.json, "unwind-harness: generated corpus")
    return finish_run(data, args, console)


def cmd_bench(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from harness.bench import FULL, QUICK, run_bench, table_rows

    console = Console(width=None if sys.stdout.isatty() else 120)
    _check_output(args.json)
    size = QUICK if args.quick else FULL
    with console.status(f"measuring ({'quick' if args.quick else 'full'} size: {size.functions:,} functions "
                        f"at scale, {size.programs} programs)"):
        figures = run_bench(size)
    table = Table(title="unwind-harness bench" + (" (quick)" if args.quick else ""))
    for name in ("figure", "value", "beside it"):
        table.add_column(name, justify="right" if name == "value" else "left")
    for row in table_rows(figures):
        table.add_row(*row)
    console.print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")
    return EXIT_OK


def cmd_mutants(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from harness.mutants import check_program, summary

    console = Console(width=None if sys.stdout.isatty() else 120)
    results = []
    with _progress(console) as progress:
        task = progress.add_task("mutating and verifying", total=args.programs)
        for number in range(args.programs):
            results += check_program(generate_program(args.seed, number), args.per_program, args.seed)
            progress.advance(task)
    counts = summary(results)
    table = Table(title=f"Mutation check: {args.programs} programs x {args.per_program} mutants of v2 runs")
    table.add_column("mutants")
    table.add_column("count", justify="right")
    labels = {"mutants": "all", "rejected_by_reader": "rejected by the reader", "detected": "detected",
              "changed_an_unwind": "changed an unwind (oracle)", "changed_and_detected": "  of those, detected",
              "changed_but_missed": "  of those, missed", "unchanged_survived": "changed nothing, survived"}
    for key, label in labels.items():
        table.add_row(label, str(counts[key]))
    console.print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(counts, indent=1) + "\n")
    missed = [r for r in results if r.changed and not r.detected]
    for verdict in missed:
        print(f"unwind-harness: missed mutant: {verdict.mutant}", file=sys.stderr)
    return EXIT_FAILED if missed else EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="unwind-harness",
        description="Chrome Unwind Info v2 for ARM32 Thumb-2: encode, dump, verify.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="the main job: verify the generated corpus at every stop")
    run.add_argument("--seed", type=int, default=DEFAULT_SEED)
    run.add_argument("--programs", type=_positive, default=DEFAULT_PROGRAMS,
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
    _parallel(run, "programs")
    run.set_defaults(handler=cmd_run)

    merge = commands.add_parser("merge", help="join shard reports of run or verify-elf into the full report")
    merge.add_argument("shards", nargs="+", help="the shard reports (JSON)")
    merge.add_argument("--json", help="write the JSON report here (default: REPORTS/latest.json)")
    merge.add_argument("--reports", default="reports", help="report directory (default: reports)")
    merge.add_argument("--check-baseline", action="store_true",
                       help="exit 1 if a failure count rose above REPORTS/baseline.json")
    merge.add_argument("--write-baseline", action="store_true",
                       help="record the merged run as REPORTS/baseline.json")
    merge.set_defaults(handler=cmd_merge)

    encode = commands.add_parser("encode", help="v2 (or v1) blob from an ELF's DWARF CFI")
    encode.add_argument("elf")
    encode.add_argument("-o", "--output", required=True)
    encode.add_argument("--format", choices=("v2", "v1"), default="v2",
                        help="v2 (default) or Chrome's earlier v1 format")
    encode.add_argument("--layout", choices=chrome_v2.LAYOUTS, default="seed")
    encode.add_argument("--epilogue", choices=chrome_v2.EPILOGUE_POLICIES, default="drop")
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
    verify.add_argument("--layout", choices=("auto", *chrome_v2.LAYOUTS), default="auto", help="layout of --v2-table")
    verify.add_argument("--text-start", type=_address, default=None,
                        help="text base of the tables (default: lowest executable section address)")
    verify.add_argument("--expect", type=_address, default=None,
                        help="the entry's return value (default: from manifest.json beside the ELF)")
    verify.add_argument("--json", help="write the JSON report here")
    _parallel(verify, "stops")
    verify.set_defaults(handler=cmd_verify_elf)

    mutants = commands.add_parser("mutants", help="mutation check of the harness: does it catch broken v2 tables?")
    mutants.add_argument("--programs", type=_positive, default=10, help="generated programs (default 10)")
    mutants.add_argument("--per-program", type=_positive, default=20, help="mutants per program (default 20)")
    mutants.add_argument("--seed", type=int, default=DEFAULT_SEED)
    mutants.add_argument("--json", help="write the counts here as JSON")
    mutants.set_defaults(handler=cmd_mutants)

    bench = commands.add_parser("bench", help="speed and size figures (rates and ratios from one run)")
    bench.add_argument("--quick", action="store_true", help="small sizes: a few seconds, for CI")
    bench.add_argument("--json", help="write the figures here as JSON")
    bench.set_defaults(handler=cmd_bench)

    dump_cmd = commands.add_parser("dump", help="readable listing of a v2 (or v1) blob")
    dump_cmd.add_argument("file")
    dump_cmd.add_argument("--format", choices=("v2", "v1"), default="v2", help="v2 (default) or v1")
    dump_cmd.add_argument("--layout", choices=chrome_v2.LAYOUTS, default="seed")
    dump_cmd.add_argument("--text-start", type=_address, default=0,
                          help="text base the blob was encoded for (default 0)")
    dump_cmd.set_defaults(handler=cmd_dump)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in ("run", "verify-elf", "bench", "mutants") and not kernel.AVAILABLE:
        print("unwind-harness: note: the compiled kernel (harness/verify/csrc) is not built; verifying "
              "in Python alone, several times slower (`pip install -e .` builds it)", file=sys.stderr)
    try:
        return args.handler(args)
    except InputError as error:
        print(f"unwind-harness: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as error:  # an output path that could not be written
        where = f"{error.filename}: " if error.filename else ""
        print(f"unwind-harness: error: {where}{error.strerror or error}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
