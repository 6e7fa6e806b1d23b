"""What each command of `unwind-harness` does (harness.cli parses the
arguments and calls these). Exit codes: EXIT_OK, EXIT_FAILED (a
verification failure or a regression), and bad input raised as InputError."""

from __future__ import annotations

import json
import sys
import time
from functools import partial as bind
from pathlib import Path
from typing import Callable, NamedTuple

from generators.corpus import generate_program
from harness.abi import Limits
from harness.elf_program import program_from_elf
from harness.errors import InputError
from harness.filesystem import check_output, read_input, write_output
from harness.formats import chrome_v2
from harness.linux.process import LinuxRun, LinuxSystem, is_linux_program
from harness.linux_verify.corpus import linux_entries
from harness.linux_verify.modules import own_tables, process_program
from harness.linux_verify.verify import Expected, ProcessPart, sampling_of, verify_process_part
from harness.manifest import elf_builds, expected_checksum
from harness.report.baseline import RunIdentity, comparable_baseline, failing_unwinders, gate_outcome, identity_of
from harness.report.ci import junit_xml, summary_markdown
from harness.report.data import dumps, report_data, with_timing, without_seconds
from harness.report.failing import new_failure_json
from harness.report.files import OUTPUT, baseline_file, report_directory, report_paths, write_reports
from harness.report.summary import ProgramSummary, combine, from_json, outcome_line, summary_of, to_json
from harness.report.tables import not_verified
from harness.report.terminal import print_table, print_verdict, verdict_line
from harness.report.verdict import verdicts
from harness.runner import Shard, all_names, assemble, in_processes, run_units, units_of
from harness.shards import partial, read_partials
from harness.unwind import with_v2_tables
from harness.unwind.registry import UNWINDER_NAMES, build_unwinders, meaningful
from harness.verify.sampling import AUTO
from harness.verify.stops import DEFAULT_LIMITS, Verify, verify_program

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
RUN_TITLE = "unwind-harness: the main job"
VERIFY_ELF_REPORTS = OUTPUT / "verify-elf"  # merged verify-elf shards, by default


def _console():
    """A rich console: the terminal's width, or 120 columns into a file."""
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 120)


def read_v2_table(path: str, layout: str) -> tuple[tuple[tuple[int, chrome_v2.V2Reader], ...], str]:
    """The tables of a v2 blob or parts file: (text offset, reader) pairs, and their layout."""
    blob = read_input(path, "v2 blob")
    try:
        return chrome_v2.read_tables(blob, layout)
    except InputError as error:
        raise InputError(f"{path}: {error}") from None


def elf_unwinders(program, names, v2_table: str | None, layout: str) -> list:
    """The unwinders `names` for an ELF, v2 from the blob `v2_table` if given."""
    unwinders = build_unwinders(program, names)
    if v2_table is None:
        return unwinders
    tables, found = read_v2_table(v2_table, layout)
    return with_v2_tables(unwinders, tables, program.text_base, found)


def gate_baseline(args, planned: RunIdentity) -> dict | None:
    """The baseline, read and checked before any work: the gate's with
    --check-baseline (a baseline of another run is refused); otherwise
    the verdict's comparison, where one of the same run is at hand."""
    path = baseline_file(args.baseline, args.reports)
    if args.check_baseline:
        return comparable_baseline(path, planned)
    if args.write_baseline or not path.is_file():
        return None
    try:
        return comparable_baseline(path, planned)
    except InputError:
        return None


def with_verdict(data: dict, baseline: dict | None, risen: list | None, new: list, path: Path | None) -> None:
    """The verdict, and the gate's outcome where it ran (`risen` not None):
    the counts that rose and the failing stops that are new, into the report."""
    data["verdict"] = [v._asdict() for v in verdicts(data, baseline, None if risen is None
                                                     else failing_unwinders(risen))]
    data["gate"] = None if risen is None else {
        "baseline": str(path), "passed": not risen, "regressions": [r._asdict() for r in risen],
        "new_failures": [new_failure_json(f) for f in new]}


def conclude(data: dict, args, console, baseline: dict | None, title: str) -> int:
    """The verdict (and the gate) into the report, the report files, the
    verdict block and the tables, CI's files, and the baseline written."""
    path = baseline_file(args.baseline, args.reports)
    risen, new = gate_outcome(data, baseline, path) if args.check_baseline else (None, [])
    with_verdict(data, baseline, risen, new, path)
    write_reports(data, report_directory(args.reports, args.json), args.json, title)
    print_verdict(data, console)
    if not args.quiet:
        print_table(data, console)
        console.print(verdict_line(data), highlight=False)  # the outcome again, where the terminal is left
    if args.junit:
        write_output(args.junit, junit_xml(data))
    if args.summary:
        write_output(args.summary, summary_markdown(data, title))
    status = EXIT_OK
    for line in not_verified(data):
        print(f"unwind-harness: not verified: {line}", file=sys.stderr)
        status = EXIT_FAILED
    for regression in risen or ():
        print(f"unwind-harness: regression: {regression.line()}", file=sys.stderr)
        status = EXIT_FAILED
    if args.write_baseline:
        kept = {key: value for key, value in data.items() if key not in ("verdict", "gate")}
        _make_directory(path.parent)
        write_output(path, dumps(without_seconds(kept)))  # committed: the same for the same run
        console.print(f"wrote {path}")
    return status


def limits_of(args) -> Limits:
    """The limits of each program's run (--max-instructions, --max-seconds,
    --max-memory-mb, --max-depth; the defaults where not given)."""
    given = (args.max_instructions, args.max_seconds,
             None if args.max_memory_mb is None else args.max_memory_mb << 20, args.max_depth)
    return Limits(*(default if value is None else value for value, default in zip(given, DEFAULT_LIMITS)))


def _with_limits(config: dict, limits: Limits) -> dict:
    """A shard report's config, naming the limits where they are not the
    defaults (so that merge refuses shards run under others)."""
    return config if limits == DEFAULT_LIMITS else {**config, "limits": list(limits)}


class ElfPart(NamedTuple):
    """One stop shard of a verify-elf run of a bare-metal function (what a
    worker of `--jobs` is sent)."""

    elf: str
    entry: str
    expected: int | None  # the function's checksum, where known
    text_start: int | None
    names: list[str]  # the unwinders
    v2_table: str | None  # given v2 tables, standing in for the ones built
    layout: str | None
    every: int
    shard: Shard
    limits: Limits


def verify_elf_part(job: ElfPart) -> dict:
    program = program_from_elf(job.elf, job.entry, job.expected, job.text_start)
    unwinders = elf_unwinders(program, job.names, job.v2_table, job.layout)
    how = Verify(every=job.every, shard=(job.shard.index, job.shard.count), limits=job.limits)
    summary = summary_of(lambda: verify_program(program, unwinders, how))
    summary.sampling = sampling_of(job.every, summary.instructions)  # given: no first run to choose by
    return {"index": job.shard.index, "kind": "stops", "summary": to_json(summary)}


def elf_summary(records: list[dict], elf: str) -> ProgramSummary:
    """One program's summary from the summaries of its stop shards."""
    return combine([from_json(r["summary"]) for r in records], program=elf)


def _verify_elf_jobs(args, limits: Limits) -> tuple[list, list[str], object]:
    """(the worker and its jobs, the unwinders, what the run is) for
    verify-elf: a bare-metal ELF called at --entry, or a Linux process."""
    # Each job emulates the whole program and verifies every jobs-th of this shard's stops.
    parts = [Shard(k, args.jobs).within(args.shard) for k in range(args.jobs)]
    if args.entry is None:
        if not is_linux_program(args.elf):
            raise InputError(f"{args.elf}: not a Linux program (no PT_INTERP, no GNU/Linux ABI note): give --entry "
                             "SYMBOL to call a bare-metal function")
        run = LinuxRun(args.elf, tuple(args.args), args.sysroot, args.cwd or ".", args.stdin, args.lazy_binding)
        program = process_program(LinuxSystem(run))
        names = args.unwinder or meaningful(program, UNWINDER_NAMES)
        own_unwinders = bind(elf_unwinders, names=names, v2_table=args.v2_table, layout=args.layout)
        own_tables(program, own_unwinders)  # bad tables fail here, before any work
        expected = Expected(args.expect_exit, args.expect_stdout_sha256)
        every = AUTO if args.every == "auto" else args.every  # auto: chosen from the first run's instructions
        return [(verify_process_part, ProcessPart(run, names, own_unwinders, every, (part.index, part.count),
                                                  limits, expected, args.signal_frames)) for part in parts], \
            names, {"args": list(args.args), "sysroot": args.sysroot, "cwd": args.cwd, "stdin": args.stdin,
                    **({} if args.signal_frames else {"signal_frames": False})}
    if args.args or args.sysroot or args.stdin or args.cwd or not args.signal_frames:
        raise InputError("verify-elf --entry runs a bare-metal function: program arguments, --sysroot, --cwd, "
                         "--stdin and --no-signal-frames are for Linux programs (run without --entry)")
    expected = args.expect if args.expect is not None else expected_checksum(args.elf, args.entry)
    program = program_from_elf(args.elf, args.entry, expected, args.text_start)
    names = args.unwinder or meaningful(program, UNWINDER_NAMES)
    elf_unwinders(program, names, args.v2_table, args.layout)  # bad tables fail here, before any work
    every = 1 if args.every == "auto" else args.every  # no first run to count a bare-metal function's instructions
    return [(verify_elf_part, ElfPart(args.elf, args.entry, expected, args.text_start, names, args.v2_table,
                                      args.layout, every, part, limits)) for part in parts], names, {"entry": args.entry}


def _run_job(job: tuple[Callable[[NamedTuple], dict], NamedTuple]) -> dict:
    """A worker and its part of the run, run in a process of the pool."""
    worker, part = job
    return worker(part)


def cmd_verify_elf(args) -> int:
    console = _console()
    if args.shard.count > 1 and not args.json:
        raise InputError("verify-elf --shard needs --json PATH for the shard report")
    check_output(args.json, [args.elf, args.v2_table, args.stdin])
    limits = limits_of(args)
    jobs, names, what = _verify_elf_jobs(args, limits)
    started = time.perf_counter()
    records = in_processes(_run_job, jobs, args.jobs)
    seconds = time.perf_counter() - started
    summary = elf_summary(records, args.elf)
    every = (summary.sampling or {}).get("every", 1 if args.every == "auto" else args.every)
    auto = {"every_auto": True} if (summary.sampling or {}).get("chosen") == "auto" else {}
    config = _with_limits({"elf": args.elf, **what, "unwinders": names, "every": every, **auto,
                           "units": args.shard.count}, limits)
    if args.shard.count > 1:
        record = {"index": args.shard.index, "kind": "stops", "summary": to_json(summary)}
        write_output(args.json, dumps(partial("verify-elf", config, args.shard, [record], seconds)))
        console.print(f"shard {args.shard}: verified {summary.stops} stops; join the shards with merge")
        return EXIT_OK
    data = with_timing(report_data([summary], names, None, args.elf), [summary], seconds)
    with_verdict(data, None, None, [], None)
    if args.json:
        write_output(args.json, dumps(data))
    print_verdict(data, console)
    print_table(data, console)
    console.print(f"verified {summary.stops} stops x {len(names)} unwinders in {seconds:.1f} s"
                  + stride_note(summary.sampling), highlight=False)
    console.print(f"{args.elf}: {outcome_line(summary)}", highlight=False)
    check = data["programs"][0]["self_check"]
    if check != "ok":
        print(f"unwind-harness: {args.elf}: {check}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def stride_note(sampling: dict | None) -> str:
    """How the stops were chosen, after the count of those verified."""
    if sampling is None:
        return ""
    if sampling["chosen"] == "auto":
        return f" ({sampling['why']}; chosen automatically, --every N to choose)"
    return f" (samples of mean stride {sampling['every']})"


def progress_bar(console):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    return Progress(*columns, console=console, transient=True)


def _make_directory(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(f"{directory}: cannot make the directory: {error.strerror or error}") from None


def _check_report_outputs(args, inputs=()) -> None:
    """Refuse, before any work, report files that cannot be written or that
    would overwrite an input."""
    directory = report_directory(args.reports, args.json)
    if directory is not None and directory.exists() and not directory.is_dir():
        raise InputError(f"{directory}: cannot write reports there: not a directory")
    for path in report_paths(directory, args.json):
        if path.parent.is_dir() or path == Path(args.json or ""):
            check_output(path, inputs)
    for path in (args.junit, args.summary):
        check_output(path, inputs)


def planned_identity(args, names: list[str], linux: list[dict]) -> RunIdentity:
    builds = () if args.no_elf else tuple(Path(build["file"]).stem for build in elf_builds())
    return RunIdentity(args.seed, args.programs, builds, tuple(entry["name"] for entry in linux), tuple(names),
                       args.linux_every)


def cmd_run(args) -> int:
    _check_report_outputs(args)
    if args.linux_every > 1 and (args.check_baseline or args.write_baseline):
        raise InputError("run --linux-every verifies a sample of the Linux programs' stops: its counts cannot "
                         "be checked against the baseline or written as it")
    names = all_names(args.unwinder)
    limits = limits_of(args)
    linux = linux_entries(args.linux)
    baseline = gate_baseline(args, planned_identity(args, names, linux))  # refused here, before any work
    console = _console()
    units = units_of(args.seed, args.programs, names, not args.no_elf, limits, linux, args.linux_every)
    mine = [u for u in units if args.shard.takes(u.index)]
    started = time.perf_counter()
    with progress_bar(console) as progress:
        task = progress.add_task("verifying programs", total=len(mine))
        records = run_units(mine, args.jobs, lambda record: progress.advance(task))
    seconds = time.perf_counter() - started
    stops = sum(r["summary"]["stops"] for r in records)
    console.print(f"verified {stops} stops x {len(names)} unwinders in {seconds:.1f} s "
                  f"({args.jobs} job{'s' if args.jobs > 1 else ''}): {stops / max(seconds, 1e-9):,.0f} stops/s")
    config = _with_limits({"seed": args.seed, "programs": args.programs, "unwinders": names,
                           "elf": not args.no_elf, "units": len(units)}, limits)
    if linux:
        config["linux"] = [entry["name"] for entry in linux]
    if args.linux_every > 1:
        config["linux_every"] = args.linux_every
    if args.shard.count > 1:
        path = Path(args.json or Path(args.reports or OUTPUT) / f"shard-{args.shard.index}-of-{args.shard.count}.json")
        _make_directory(path.parent)
        write_output(path, dumps(partial("run", config, args.shard, records, seconds)))
        console.print(f"shard {args.shard}: {len(records)} of {len(units)} units in {path}; "
                      "join the shards with merge")
        return EXIT_OK
    return conclude(assemble(records, names, args.seed, seconds), args, console, baseline, RUN_TITLE)


def cmd_merge(args) -> int:
    command, config, records, seconds = read_partials(args.shards)  # validated: see harness.shards
    if command == "verify-elf" and args.reports is None and args.json is None:
        args.reports = str(VERIFY_ELF_REPORTS)  # never the main job's reports, unless asked
    _check_report_outputs(args, args.shards)
    console = _console()
    if command == "verify-elf":
        summary = elf_summary(records, config["elf"])
        data = with_timing(report_data([summary], config["unwinders"], None, config["elf"]), [summary], seconds)
        title = f"unwind-harness verify-elf: {config['elf']}"
    else:
        data = assemble(records, config["unwinders"], config["seed"], seconds)
        title = RUN_TITLE
    baseline = gate_baseline(args, identity_of(data))  # refused here, before anything is written
    return conclude(data, args, console, baseline, title)


def cmd_bench(args) -> int:
    from rich.table import Table

    from harness.bench.suite import FULL, QUICK, run_bench, table_rows

    console = _console()
    check_output(args.json)
    size = QUICK if args.quick else FULL
    console.print(f"unwind-harness bench, {'quick' if args.quick else 'full'} size", highlight=False)
    figures = run_bench(size, lambda step: console.print(f"  measuring {step}", highlight=False))
    table = Table(title="unwind-harness bench" + (" (quick)" if args.quick else ""))
    for name in ("figure", "value", "beside it"):
        table.add_column(name, justify="right" if name == "value" else "left")
    for row in table_rows(figures):
        table.add_row(*row)
    console.print(table)
    if args.json:
        write_output(args.json, json.dumps(figures, indent=1, sort_keys=True) + "\n")
    return EXIT_OK


def cmd_mutants(args) -> int:
    from rich.table import Table

    from harness.mutants import check_program, summary

    check_output(args.json)
    console = _console()
    results = []
    with progress_bar(console) as progress:
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
        write_output(args.json, json.dumps(counts, indent=1) + "\n")
    missed = [r for r in results if r.changed and not r.detected]
    for verdict in missed:
        print(f"unwind-harness: missed mutant: {verdict.mutant}", file=sys.stderr)
    return EXIT_FAILED if missed else EXIT_OK


