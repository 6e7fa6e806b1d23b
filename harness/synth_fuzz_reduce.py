"""`make synth-reduce`: a finding of `make synth-fuzz` shown by a small
program. creduce cuts the csmith program of the finding's seed down while
its build, compiled and judged as the fuzz does it (harness.synth_fuzz,
harness.synth_fuzz_judge), still has a finding of the same key: a
refusal's reason key, or the key of a disagreement where the code was
wrong, as the report's findings give them.

    python -m harness.synth_fuzz_reduce --seed 68 --compiler gcc --flags O0 \\
        --key "in data: paths meet with different frames" --out seed68-gcc-O0.c

The test creduce runs on each candidate is `--check SOURCE` (the same
options): exit status 0 when SOURCE builds and has such a finding. A
candidate that does not build is not interesting; one whose run ends
early (creduce makes programs that crash or loop) still is when the
finding shows before it, as in the fuzz, which judges a run up to its
budget.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.abi import Limits
from harness.errors import HarnessError, InputError, ToolMissing
from harness.filesystem import write_output
from harness.linux.process import LinuxRun
from harness.linux_verify.corpus import ROOT, cache
from harness.synth_fuzz import (
    ARGV0,
    COMPILERS,
    DEFAULT_BUDGET,
    FLAG_SETS,
    VOLUME,
    Generated,
    compile_program,
    csmith_source,
)
from harness.synth_fuzz_judge import Build, judged_build

CREDUCE_SECONDS = 3600  # a whole reduction; each test creduce runs has its own timeout (300 s)


def finding_keys(source: Path, compiler: str, flag_set: str, budget: int = DEFAULT_BUDGET) -> set[str] | None:
    """The keys of the findings of `source` built and judged as the fuzz
    does; None when it does not build."""
    with tempfile.TemporaryDirectory(prefix="synth-reduce-") as directory:
        build = Build(0, compiler, flag_set, str(Path(directory) / "program"))
        if compile_program(build, source, directory) is not None:
            return None
        run = LinuxRun(build.path, (), str(cache() / "sysroot"), directory, argv0=ARGV0)
        return {finding["key"] for finding in judged_build(build, run, Limits(instructions=budget))["findings"]}


def reduce(seed: int, compiler: str, flag_set: str, key: str, budget: int = DEFAULT_BUDGET, jobs: int = 2,
           csmith: str = "csmith", generated: Generated = VOLUME) -> str:
    """The source creduce leaves of seed's program with a finding `key`
    in the build `compiler` `flag_set`."""
    with tempfile.TemporaryDirectory(prefix="synth-reduce-") as directory:
        return reduced(csmith_source(csmith, seed, directory, generated), compiler, flag_set, key, budget, jobs,
                       f"seed {seed}")


def reduced(program: str, compiler: str, flag_set: str, key: str, budget: int = DEFAULT_BUDGET, jobs: int = 2,
            name: str = "the program") -> str:
    """What creduce leaves of the C source `program` with a finding `key`
    in the build `compiler` `flag_set`."""
    if shutil.which("creduce") is None:
        raise ToolMissing("creduce: not installed (apt-get install creduce; make toolchains installs it)")
    with tempfile.TemporaryDirectory(prefix="synth-reduce-") as directory:
        source = Path(directory) / "program.c"
        source.write_text(program)
        keys = finding_keys(source, compiler, flag_set, budget)
        if keys is None or key not in keys:
            found = "it does not build" if keys is None else f"its findings: {sorted(keys) or 'none'}"
            raise InputError(f"{name} built by {compiler} {flag_set} has no finding {key!r} ({found})")
        test = Path(directory) / "interesting.sh"
        check = [sys.executable, "-m", "harness.synth_fuzz_reduce", "--check", "program.c", "--compiler", compiler,
                 "--flags", flag_set, "--key", key, "--budget", str(budget)]
        # creduce runs it in a directory of its own, beside its candidate program.c
        test.write_text(f"#!/bin/sh\nPYTHONPATH={shlex.quote(str(ROOT))} exec {shlex.join(check)}\n")
        test.chmod(0o755)
        done = subprocess.run(["creduce", "--n", str(jobs), str(test), "program.c"], cwd=directory,
                              capture_output=True, text=True, timeout=CREDUCE_SECONDS)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["?"]
            raise ToolMissing(f"creduce failed on {name} ({compiler} {flag_set}): {tail[0][:200]}")
        return source.read_text()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m harness.synth_fuzz_reduce", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, help="the csmith seed of the finding")
    parser.add_argument("--compiler", required=True, choices=sorted(COMPILERS))
    parser.add_argument("--flags", required=True, choices=list(FLAG_SETS), help="the build's flag set")
    parser.add_argument("--key", required=True, help="the finding's key, as the report gives it")
    parser.add_argument("--budget", type=int, default=DEFAULT_BUDGET, help="instructions a judged run may execute")
    parser.add_argument("--jobs", type=int, default=2, help="tests creduce runs at once")
    parser.add_argument("--out", help="where the reduced program goes (default: stdout)")
    parser.add_argument("--check", metavar="SOURCE", help="creduce's test: is there such a finding in SOURCE?")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.check is not None:
        try:
            keys = finding_keys(Path(args.check), args.compiler, args.flags, args.budget)
        except HarnessError:  # a candidate the harness cannot read or run: not the finding
            return 1
        return 0 if keys is not None and args.key in keys else 1
    if args.seed is None:
        print("synth-reduce: --seed is needed (or --check SOURCE)", file=sys.stderr)
        return 2
    try:
        reduced = reduce(args.seed, args.compiler, args.flags, args.key, args.budget, args.jobs)
    except HarnessError as error:
        print(f"synth-reduce: {error}", file=sys.stderr)
        return 2
    if args.out is None:
        sys.stdout.write(reduced)
    else:
        write_output(args.out, reduced)
        print(f"synth-reduce: {args.out}: {len(reduced.splitlines())} lines", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
