"""`unwind-harness` command line: the arguments of each command, and
dispatch to harness.commands and harness.table_commands. Exit codes: 0 ok, 1 verification failure or
regression, 2 bad input or usage (one line on stderr, never a traceback)."""

from __future__ import annotations

import argparse
import os
import sys

from generators.corpus import DEFAULT_PROGRAMS, DEFAULT_SEED
from harness import __version__, abi, commands, gc_pause, table_commands
from harness.commands import EXIT_BAD_INPUT, EXIT_FAILED
from harness.emulation import guards
from harness.errors import HarnessError, InputError
from harness.formats import chrome_v2
from harness.linux_verify.corpus import CHOICES as LINUX_CHOICES
from harness.runner import LINUX_LIMITS, Shard, parse_shard
from harness.sysroot import cmd_sysroot
from harness.thumb import native
from harness.unwind.registry import FORMAT_NAMES, UNWINDER_NAMES, table_formats
from harness.verify import kernel
from harness.verify.sampling import AUTO
from harness.verify.stops import DEFAULT_LIMITS


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"not a positive integer: {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"not a positive number of seconds: {text!r}")
    return value


def _limits(parser: argparse.ArgumentParser, linux: str = "") -> None:
    """The limits of each program's run (harness.abi.Limits): past
    one, the run ends as a fault at its pc. `linux`: what a Linux corpus
    program gets instead when no limit is given (run)."""
    defaults = DEFAULT_LIMITS
    parser.add_argument("--max-instructions", type=_positive, metavar="N",
                        help=f"fault a program that executes more than N instructions "
                             f"(default {defaults.instructions:,}){linux}")
    parser.add_argument("--max-seconds", type=_seconds, metavar="S",
                        help="fault a program that runs for more than S seconds, wall clock, in each run (a "
                             "process's first run and its verified one). Default: scaled to the run's work, "
                             f"{guards.CLOCK_BASE:g} s + {guards.CLOCK_PER_INSTRUCTION * 1e9:g} ns an instruction "
                             f"+ {guards.CLOCK_PER_STOP * 1e6:g} us a stop verified at every stop (or "
                             f"{guards.CLOCK_PER_SAMPLE * 1e6:g} us a sample), the instructions being those a "
                             f"process's first run counted (its verified run), else the budget (--max-instructions)"
                             f"{linux}")
    parser.add_argument("--max-memory-mb", type=_positive, metavar="MB",
                        help="fault a program once the process's resident size is over this many MiB. "
                             f"Default: {abi.DEFAULT_MEMORY >> 20} MiB beyond what the harness holds as the run "
                             "starts (its tables, the ELFs read) and twice what the files the program maps hold "
                             "(its executable and libraries: a program's own allocations count against the limit)")
    parser.add_argument("--max-depth", type=_positive, metavar="N",
                        help=f"fault a program nested deeper than N calls (default {defaults.depth:,})")


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


def _every(text: str) -> int | str:
    """`auto` or a positive integer (--every)."""
    if text == "auto":
        return text
    try:
        return _positive(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"not auto or a positive integer: {text!r}") from None


def _address(text: str) -> int:
    """An unsigned 32-bit value, decimal or 0x-prefixed."""
    try:
        value = int(text, 0)
    except ValueError:
        value = -1
    if not 0 <= value <= 0xFFFFFFFF:
        raise argparse.ArgumentTypeError(f"not an unsigned 32-bit value: {text!r}")
    return value


def _gate(parser: argparse.ArgumentParser) -> None:
    """The baseline gate and the outputs CI reads."""
    parser.add_argument("--check-baseline", action="store_true",
                        help="exit 1 if a failure count rose above the baseline (refused before any work when "
                             "the baseline is of another program set, seed, unwinder set or sampling)")
    parser.add_argument("--write-baseline", action="store_true", help="record this run as the baseline")
    parser.add_argument("--baseline", metavar="PATH",
                        help="the baseline file (default: the committed reports/baseline.json, or "
                             "REPORTS/baseline.json with --reports)")
    parser.add_argument("--quiet", action="store_true", help="print the verdict block only, not the tables")
    parser.add_argument("--junit", metavar="PATH",
                        help="write JUnit XML: a test case per corpus, build or program x unwinder x position, "
                             "failing where the gate fails")
    parser.add_argument("--summary", metavar="PATH",
                        help="write the verdict and the regressions as Markdown (a CI job summary, e.g. "
                             "$GITHUB_STEP_SUMMARY)")


def _add_run(subparsers) -> None:
    run = subparsers.add_parser("run", help="the main job: every unwinder verified at every stop of the generated "
                                            "programs, the compiled corpus and (--linux) the Linux corpus")
    run.add_argument("--seed", type=int, default=DEFAULT_SEED,
                     help=f"the generated corpus's seed (default {DEFAULT_SEED}; the baseline's)")
    run.add_argument("--programs", type=_positive, default=DEFAULT_PROGRAMS,
                     help=f"programs in the generated corpus (default {DEFAULT_PROGRAMS})")
    run.add_argument("--unwinder", action="append", choices=UNWINDER_NAMES,
                     help="verify only these (repeatable; default: all)")
    run.add_argument("--json", help="write the JSON report here (alone, unless --reports is given too)")
    run.add_argument("--no-elf", action="store_true", help="skip the compiled corpus in corpus/elf")
    run.add_argument("--linux", choices=LINUX_CHOICES, default="none",
                     help="the Linux corpus programs to run too (those built): none (default), the CI slice "
                          "(make run and make test; make linux-slice builds it), or all of "
                          "corpus/linux/manifest.json (make linux-corpus)")
    run.add_argument("--linux-every", type=_positive, default=1, metavar="N",
                     help="verify each Linux program at samples of mean stride N instructions (default 1: "
                          "every stop; the full corpus has about 750 million); not with the baseline options")
    run.add_argument("--reports", help="write latest.json, latest.md and latest.png here (default: out, which git "
                                       "ignores, unless only --json is given); the baseline is read from here")
    _gate(run)
    _parallel(run, "programs")
    _limits(run, f"; a Linux corpus program, unless any limit is given: {LINUX_LIMITS.instructions:,} "
                 f"instructions and {LINUX_LIMITS.seconds:,g} s")
    run.set_defaults(handler=commands.cmd_run)


def _add_merge(subparsers) -> None:
    merge = subparsers.add_parser("merge", help="join shard reports of run or verify-elf into the full report")
    merge.add_argument("shards", nargs="+", help="the shard reports (JSON)")
    merge.add_argument("--json", help="write the JSON report here (alone, unless --reports is given too)")
    merge.add_argument("--reports", help="write latest.json, latest.md and latest.png here (default: out, which git "
                                         "ignores, unless only --json is given); the baseline is read from here")
    _gate(merge)
    merge.set_defaults(handler=commands.cmd_merge)


def _add_encode(subparsers) -> None:
    encode = subparsers.add_parser("encode", help="v2 (or v1) blob from an ELF's DWARF CFI (or a Breakpad "
                                                  "symbol file's STACK CFI)",
                                   usage="%(prog)s [options] ELF -o FILE [-- PROGRAM ARGUMENTS...]")
    encode.add_argument("elf", help="the ELF (or with --input breakpad, the symbol file)")
    encode.add_argument("--input", choices=("elf", "breakpad"), default="elf",
                        help="elf (default), or a Breakpad symbol file (dump_syms output), as Chrome's builders read")
    encode.add_argument("-o", "--output", required=True, help="the blob to write")
    encode.add_argument("--format", choices=FORMAT_NAMES, default="v2",
                        help=", ".join(f"{f.name} ({f.about})" for f in table_formats()) + ": docs/comparators.md")
    encode.add_argument("--layout", choices=chrome_v2.LAYOUTS, default=None,
                        help="seed (the design document's header; default) or chrome (Chrome's header, and only the "
                             "opcodes its runtime executes)")
    encode.add_argument("--epilogue", choices=chrome_v2.EPILOGUE_POLICIES, default="drop",
                        help="epilogue rows: drop them (default, as Chrome), keep the compiler's, or synthesize "
                             "them from the code")
    encode.add_argument("--builder", choices=("ours", "chrome"), default="ours",
                        help="ours (default: each row's complete state) or chrome (create_unwind_table.py's rules, "
                             "as v2-chrome measures them; chrome layout)")
    encode.add_argument("--from-code", action="store_true",
                        help="rows from the machine code alone (harness/thumb/frame_analysis.py), reading no "
                             ".debug_frame, .eh_frame or .ARM.exidx; functions by their Thumb symbols")
    encode.add_argument("--compare", action="store_true",
                        help="with --from-code: the synthesized rows beside the ELF's CFI at every instruction")
    encode.add_argument("--entry", default=None,
                        help="with --compare: run this function (bare metal) and say which rows were right "
                             "where they disagree")
    encode.add_argument("--run", action="store_true",
                        help="with --compare: run the ELF as a Linux process (program arguments after --) and say "
                             "which rows were right where they disagree")
    _process(encode)
    encode.add_argument("--text-start", type=_address, default=None,
                        help="text base (default: lowest executable section address; for a symbol file, its "
                             "lowest function address)")
    encode.set_defaults(handler=table_commands.cmd_encode)
    export = subparsers.add_parser("export-breakpad", help="an ELF's DWARF CFI as a Breakpad symbol file")
    export.add_argument("elf", help="the ARM ELF whose DWARF CFI to write")
    export.add_argument("-o", "--output", required=True, help="the .sym file to write")
    export.set_defaults(handler=table_commands.cmd_export_breakpad)


def _process(parser) -> None:
    """How a Linux program runs as a process (verify-elf; encode --compare --run)."""
    parser.add_argument("--sysroot", help="Linux: the directory absolute paths resolve in (the dynamic linker, "
                                          "the shared libraries); nothing outside it is opened")
    parser.add_argument("--cwd", help="Linux: the working directory relative paths resolve in (default: .)")
    parser.add_argument("--stdin", help="Linux: the file the program reads as stdin (default: none, as /dev/null)")
    parser.add_argument("--lazy-binding", action="store_true",
                        help="Linux: let the dynamic linker bind lazily (default: bind now, as Android links)")


def _add_verify_elf(subparsers) -> None:
    verify = subparsers.add_parser("verify-elf", help="run an ARM ELF, verifying at every stop: a Linux program "
                                   "as a process, or a bare-metal function (--entry)",
                                   usage="%(prog)s [options] ELF [-- PROGRAM ARGUMENTS...]")
    verify.add_argument("elf", help="the ELF: an ARM Linux executable (hard-float EABI5), or bare metal with --entry")
    verify.add_argument("--entry", help="bare metal: the function symbol to call")
    _process(verify)
    verify.add_argument("--expect-exit", type=int, default=None, help="Linux: the exit status a correct run has")
    verify.add_argument("--expect-stdout-sha256", default=None, help="Linux: the sha256 of a correct run's stdout")
    verify.add_argument("--every", type=_every, default="auto", metavar="N|auto",
                        help="verify at samples only, seeded random strides of mean N instructions (1: every "
                             f"stop). Default auto: for a Linux program, every stop up to {AUTO.every_stop:,} "
                             f"instructions (its first run counts them), past them the stride giving about "
                             f"{AUTO.samples:,} samples; a bare-metal function (--entry), every stop. The "
                             "report says which stride was used and that it was chosen automatically")
    verify.add_argument("--unwinder", action="append", choices=UNWINDER_NAMES,
                        help="verify only these (repeatable; default: all that apply)")
    verify.add_argument("--no-signal-frames", dest="signal_frames", action="store_false",
                        help="Linux: the table-driven unwinders stop at signal frames, each with its own step at "
                             "the sigreturn trampoline a handler returns to (by default they cross them by the "
                             "trampoline, as libunwindstack does)")
    verify.add_argument("--v2-table", help="use this v2 blob for v2 and v2+epilogue (a chrome-layout one for "
                                           "v2-chrome too) instead of encoding the CFI")
    verify.add_argument("--layout", choices=("auto", *chrome_v2.LAYOUTS), default="auto", help="layout of --v2-table")
    verify.add_argument("--text-start", type=_address, default=None,
                        help="text base of the tables (default: lowest executable section address)")
    verify.add_argument("--expect", type=_address, default=None,
                        help="the entry's return value (default: from manifest.json beside the ELF)")
    verify.add_argument("--json", help="write the JSON report here")
    _parallel(verify, "stops")
    _limits(verify)
    verify.set_defaults(handler=commands.cmd_verify_elf)


def _add_mutants(subparsers) -> None:
    mutants = subparsers.add_parser("mutants", help="mutation check of the harness: does it catch broken v2 tables?")
    mutants.add_argument("--programs", type=_positive, default=10, help="generated programs (default 10)")
    mutants.add_argument("--per-program", type=_positive, default=20, help="mutants per program (default 20)")
    mutants.add_argument("--seed", type=int, default=DEFAULT_SEED,
                         help=f"seed of the programs and of the mutations (default {DEFAULT_SEED})")
    mutants.add_argument("--json", help="write the counts here as JSON")
    mutants.set_defaults(handler=commands.cmd_mutants)


def _add_bench(subparsers) -> None:
    bench = subparsers.add_parser("bench", help="speed and size figures (rates and ratios from one run)")
    bench.add_argument("--quick", action="store_true", help="small sizes: a few seconds, for CI")
    bench.add_argument("--json", help="write the figures here as JSON")
    bench.set_defaults(handler=commands.cmd_bench)


def _add_dump(subparsers) -> None:
    others = ", ".join(name for name in FORMAT_NAMES if name != "v2")
    dump_cmd = subparsers.add_parser("dump", help=f"readable listing of a v2 (or {others}) blob")
    dump_cmd.add_argument("file", help="the blob to list")
    dump_cmd.add_argument("--format", choices=FORMAT_NAMES, default="v2", help=f"v2 (default), {others}")
    dump_cmd.add_argument("--layout", choices=("auto", *chrome_v2.LAYOUTS), default="auto",
                          help="the v2 blob's layout (default auto: whichever reads it, seed tried first)")
    dump_cmd.add_argument("--text-start", type=_address,
                          help="text base the blob was encoded for (a blob does not record it; without it "
                               "addresses are offsets from the text base)")
    dump_cmd.set_defaults(handler=table_commands.cmd_dump)


def _add_sysroot(subparsers) -> None:
    sysroot = subparsers.add_parser("sysroot", help="the armhf sysroot Linux programs run against: where it is, "
                                                    "and Debian packages added to it for programs of your own")
    actions = sysroot.add_subparsers(dest="action", parser_class=_Parser, metavar="{show,add}",
                                     help="show (the default) or add")
    actions.add_parser("show", help="where the sysroot is and what it holds (the default)")
    add = actions.add_parser("add", help="fetch Debian armhf packages, with every armhf package they depend on, "
                                         "into the sysroot (apt-get download and dpkg -x: nothing installed); "
                                         "kept across rebuilds (make linux-sysroot)")
    add.add_argument("packages", nargs="+", metavar="PACKAGE", help="a Debian package name (libssl3, libzstd1...)")
    sysroot.set_defaults(handler=cmd_sysroot, action="show")


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line, pointing at --help for the usage itself."""

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"unwind-harness: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="unwind-harness",
        description="Chrome Unwind Info v2 for ARM32 Thumb-2: encode, dump, verify.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add in (_add_run, _add_merge, _add_encode, _add_verify_elf, _add_mutants, _add_bench, _add_dump,
                _add_sysroot):
        add(subparsers)
    return parser


def _within_limits(args) -> None:
    """--jobs above the machine's cores is clamped, with a note: more
    processes than cores only cost memory."""
    cores = os.cpu_count() or 1
    if getattr(args, "jobs", 1) > cores:
        print(f"unwind-harness: note: --jobs {args.jobs} is more than the {cores} cores here; using {cores}",
              file=sys.stderr)
        args.jobs = cores


def _fail(message: str, status: int) -> int:
    print(f"unwind-harness: error: {message}", file=sys.stderr)
    return status


def split_program_arguments(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the harness's arguments, the emulated program's: everything after
    the first `--`), so that a program's options never reach the parser."""
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1 :]
    return argv, []


def main(argv: list[str] | None = None) -> int:
    own, program_arguments = split_program_arguments(sys.argv[1:] if argv is None else list(argv))
    args = build_parser().parse_args(own)
    args.args = program_arguments
    if program_arguments and args.command != "verify-elf" and not getattr(args, "run", False):
        return _fail(f"{args.command} takes no program arguments (after --)", EXIT_BAD_INPUT)
    _within_limits(args)
    if sys.stdout is None:  # started with standard output closed
        if args.command == "dump":
            return _fail("standard output is closed: nowhere to write the listing", EXIT_BAD_INPUT)
        sys.stdout = open(os.devnull, "w")
    if (getattr(args, "from_code", False) or args.command in ("run", "verify-elf", "bench")) and not native.AVAILABLE:
        print("unwind-harness: note: the compiled frame analysis (harness/thumb/csrc) is not built; rows from "
              "code are made in Python alone, the same rows several times slower (`pip install -e .` builds it)",
              file=sys.stderr)
    if args.command in ("run", "verify-elf", "bench", "mutants") and not kernel.AVAILABLE:
        print("unwind-harness: note: the compiled kernel (harness/verify/csrc) is not built; verifying "
              "in Python alone, several times slower (`pip install -e .` builds it)", file=sys.stderr)
    gc_pause.settle()
    try:
        return args.handler(args)
    except InputError as error:
        return _fail(str(error), EXIT_BAD_INPUT)
    except HarnessError as error:  # the run itself could not be completed (a worker lost)
        return _fail(str(error), EXIT_FAILED)
    except BrokenPipeError:
        sys.stdout = open(os.devnull, "w")  # nothing more reaches the closed pipe, not even at exit
        return _fail("standard output was closed before everything was written", EXIT_BAD_INPUT)
    except OSError as error:  # a file the command did not open through harness.filesystem
        where = f"{error.filename}: " if error.filename else ""
        return _fail(f"{where}{error.strerror or error}", EXIT_BAD_INPUT)


if __name__ == "__main__":
    sys.exit(main())
