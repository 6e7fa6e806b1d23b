"""`make synth-fuzz`: the rows from machine code (v2-code's analysis) beside
the compiler's CFI on C programs nobody here wrote.

csmith writes a program per seed (fixed options, so a seed is always the
same program); each is built by arm-linux-gnueabihf-gcc and clang-14,
Thumb-2, in each flag set of FLAG_SETS, linked dynamically and run as a
Linux process against the corpus's armhf sysroot. Per build
(harness.synth_fuzz_judge): the comparison at every instruction, and
where the rows disagree the program is run and each disagreement judged at
its stops by ground truth. The report (harness.synth_fuzz_report) counts
per compiler and flag set, and keeps an example per finding. Same seed and
count, same tools: the same report, byte for byte, but for its seconds.

    python -m harness.synth_fuzz --seed 0 --count 300 --jobs 2
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from harness.abi import Limits
from harness.errors import HarnessError, ToolMissing
from harness.filesystem import write_output
from harness.linux.process import LinuxRun
from harness.linux_verify.corpus import ROOT, cache
from harness.runner import in_processes
from harness.synth_fuzz_judge import Build, judged_build
from harness.synth_fuzz_report import assemble, markdown, report_json
from harness.table_cache import cached, key_of


class Generated(NamedTuple):
    """How csmith's programs are made. No `#pragma pack(1)` structs
    (unaligned halfword and word accesses everywhere); at most `max_funcs`
    functions besides main. csmith declares each `static`, and above -O0 a
    compiler inlines a static function called once and keeps no copy: about
    3.5 functions a build whatever `max_funcs` (gcc -O2, seeds 1-5).
    `out_of_line` drops that `static` from csmith's func_N, so that each
    keeps its copy while callers still inline it: 10.4 functions a build
    at 8, 29.2 at 30."""

    max_funcs: int = 8
    out_of_line: bool = False
    csmith: str = "csmith"  # the csmith that makes them

    def options(self) -> tuple[str, ...]:
        return ("--no-packed-struct", "--max-funcs", str(self.max_funcs))


# The volume run's (make synth-fuzz): 300 programs x 12 builds, some 100,000 functions.
VOLUME = Generated(max_funcs=30, out_of_line=True)
CSMITH_STATIC = re.compile(r"^static (?=[^;=\n]*\bfunc_\d+\s*\()", re.MULTILINE)  # csmith's func_N, declared static
CSMITH_INCLUDE = "/usr/include/csmith"  # csmith.h and its safe-math wrappers (libcsmith-dev)
COMMON_FLAGS = ("-g", "-fasynchronous-unwind-tables", "-mthumb", "-march=armv7-a", "-mfpu=vfpv3-d16",
                "-mfloat-abi=hard", "-w")
LINK_FLAGS = ("-Wl,-z,now",)  # bound at load, as Android links (the harness binds now too)
COMPILERS = {"gcc": ("arm-linux-gnueabihf-gcc",),
             "clang": ("clang-14", "--target=armv7a-linux-gnueabihf", "-fuse-ld=lld")}  # as corpus/linux/build.sh
# clang has no -fno-shrink-wrap: its pass is switched off by the backend option.
NO_SHRINK_WRAP = {"gcc": ("-fno-shrink-wrap",), "clang": ("-mllvm", "-enable-shrink-wrap=false")}
FLAG_SETS = {
    "O0": ("-O0",),
    "O2": ("-O2", "-fomit-frame-pointer"),
    "O3": ("-O3", "-fomit-frame-pointer"),
    "Os": ("-Os", "-fomit-frame-pointer"),
    "O2-fp": ("-O2", "-fno-omit-frame-pointer"),
    "O2-plain": ("-O2", "-fomit-frame-pointer", "-fno-optimize-sibling-calls"),  # and no shrink-wrapping
}
# Instructions a judged run may execute: csmith programs that end took at most
# 5 million here (seeds 0-29, gcc -O0), and a fifth of them never end.
DEFAULT_BUDGET = 10_000_000
ARGV0 = "/usr/bin/csmith-program"  # the same wherever the build lies: the same stack, the same stops


def flags_of(compiler: str, flag_set: str) -> tuple[str, ...]:
    return FLAG_SETS[flag_set] + (NO_SHRINK_WRAP[compiler] if flag_set == "O2-plain" else ())


class FuzzJob(NamedTuple):
    """One csmith program, built and judged in every build asked for."""

    seed: int
    compilers: tuple[str, ...]
    flag_sets: tuple[str, ...]
    budget: int
    sysroot: str
    generated: Generated
    tools: str = ""  # the versions of csmith, the compilers and the sysroot (tool_versions), as JSON


def kept_program_records(job: FuzzJob) -> dict:
    """program_records, kept on disk (harness.table_cache) under a digest
    of the job, the tools' versions and the harness's source: a run
    stopped part way and started again judges only the programs it had not
    (300 programs take hours)."""
    return json.loads(cached(key_of("synth-fuzz program", *job), lambda: json.dumps(program_records(job)).encode()))


def program_records(job: FuzzJob) -> dict:
    """The program of `job.seed`, each of its builds' record (or why it
    failed to build), in compiler and flag-set order."""
    with tempfile.TemporaryDirectory(prefix="synth-fuzz-") as directory:
        source = Path(directory) / "program.c"
        source.write_text(csmith_source(job.generated.csmith, job.seed, directory, job.generated))
        builds = []
        for compiler in job.compilers:
            for flag_set in job.flag_sets:
                build = Build(job.seed, compiler, flag_set, str(Path(directory) / f"{compiler}-{flag_set}"))
                error = compile_program(build, source, directory)
                if error is not None:
                    builds.append({"seed": job.seed, "compiler": compiler, "flags": flag_set, "error": error})
                    continue
                run = LinuxRun(build.path, (), job.sysroot, directory, argv0=ARGV0)
                builds.append(judged_build(build, run, Limits(instructions=job.budget)))
                os.unlink(build.path)
    return {"seed": job.seed, "builds": builds}


def csmith_source(csmith: str, seed: int, directory: str, generated: Generated) -> str:
    """The program csmith writes for `seed` as `generated` says (it leaves
    platform.info in the directory it runs in: `directory`, never the caller's)."""
    try:
        made = subprocess.run([csmith, "--seed", str(seed), *generated.options()], cwd=directory,
                              capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise ToolMissing(f"{csmith}: csmith is not installed (apt-get install csmith libcsmith-dev)") from None
    if made.returncode != 0:
        raise ToolMissing(f"{csmith} --seed {seed} failed: {made.stderr.strip()[:200]}")
    return CSMITH_STATIC.sub("", made.stdout) if generated.out_of_line else made.stdout


def compile_program(build: Build, source: Path, directory: str) -> str | None:
    """Build `source` into build.path; None, or the compiler's first line
    of complaint."""
    command = [*COMPILERS[build.compiler], *COMMON_FLAGS, *flags_of(build.compiler, build.flags),
               f"-ffile-prefix-map={directory}=.", "-I", CSMITH_INCLUDE, str(source), *LINK_FLAGS, "-o", build.path]
    try:
        made = subprocess.run(command, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return "the compiler took more than 600 s"
    if made.returncode != 0:
        lines = [line for line in made.stderr.splitlines() if "error" in line] or made.stderr.splitlines() or ["?"]
        return lines[0].replace(directory, ".")[:200]
    return None


def tool_versions(csmith: str, compilers: tuple[str, ...], sysroot: str) -> dict:
    """The versions of csmith and the compilers (what the report depends
    on); ToolMissing naming whatever is not there."""
    if not Path(sysroot, "lib").is_dir():
        raise ToolMissing(f"{sysroot}: no armhf sysroot (make linux-sysroot)")
    if not Path(CSMITH_INCLUDE, "csmith.h").is_file():
        raise ToolMissing(f"{CSMITH_INCLUDE}/csmith.h: csmith's headers are not installed (apt-get install "
                          "libcsmith-dev)")
    versions = {"csmith": " ".join(_first_lines([csmith, "--version"], "apt-get install csmith libcsmith-dev", 2))}
    for name in compilers:
        versions[name] = _first_lines([COMPILERS[name][0], "--version"], "make toolchains linux-slice", 1)[0]
    return versions


def _first_lines(command: list[str], install: str, count: int) -> list[str]:
    try:  # away from the caller's directory: even `csmith --version` writes platform.info
        with tempfile.TemporaryDirectory(prefix="synth-fuzz-") as directory:
            out = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=directory).stdout
    except FileNotFoundError:
        raise ToolMissing(f"{command[0]}: not installed ({install})") from None
    return out.strip().splitlines()[:count] or ["?"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m harness.synth_fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="the first csmith seed (default 0)")
    parser.add_argument("--count", type=int, default=10, help="programs: seeds SEED..SEED+COUNT-1 (default 10)")
    parser.add_argument("--compilers", default=",".join(COMPILERS), help=f"of {', '.join(COMPILERS)}")
    parser.add_argument("--flag-sets", default=",".join(FLAG_SETS), help=f"of {', '.join(FLAG_SETS)}")
    parser.add_argument("--budget", type=int, default=DEFAULT_BUDGET, help="instructions a judged run may execute")
    parser.add_argument("--jobs", type=int, default=2, help="programs built and judged at once")
    parser.add_argument("--csmith", default="csmith", help="the csmith to run")
    parser.add_argument("--max-funcs", type=int, default=VOLUME.max_funcs,
                        help=f"csmith's functions besides main (default {VOLUME.max_funcs})")
    parser.add_argument("--static", action="store_true",
                        help="keep csmith's functions static (most then inline away above -O0: Generated)")
    parser.add_argument("--afresh", action="store_true",
                        help="judge every program again, not taking those an earlier run of the same harness and "
                             "tools kept (kept_program_records)")
    parser.add_argument("--json", default=str(ROOT / "reports" / "synth-fuzz.json"))
    parser.add_argument("--markdown", default=str(ROOT / "reports" / "synth-fuzz.md"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    compilers, flag_sets = tuple(args.compilers.split(",")), tuple(args.flag_sets.split(","))
    unknown = sorted(set(compilers) - set(COMPILERS)) + sorted(set(flag_sets) - set(FLAG_SETS))
    if unknown or args.count < 1 or args.budget < 1 or args.max_funcs < 1:
        print(f"synth-fuzz: unknown compilers or flag sets {unknown}, or a count, budget or --max-funcs below 1",
              file=sys.stderr)
        return 2
    try:
        report = fuzz(args.seed, args.count, compilers, flag_sets, args.budget, args.jobs,
                      Generated(args.max_funcs, not args.static, args.csmith), kept=not args.afresh)
    except HarnessError as error:
        print(f"synth-fuzz: {error}", file=sys.stderr)
        return 2
    write_output(args.json, report_json(report))
    write_output(args.markdown, markdown(report))
    return 0


def fuzz(seed: int, count: int, compilers: tuple[str, ...], flag_sets: tuple[str, ...], budget: int = DEFAULT_BUDGET,
         jobs: int = 2, generated: Generated = Generated(), kept: bool = False) -> dict:
    """The report of programs seed..seed+count-1 in every build asked for
    (with `kept`, each program's records as an earlier run kept them:
    kept_program_records)."""
    started, sysroot = time.monotonic(), str(cache() / "sysroot")
    versions = tool_versions(generated.csmith, compilers, sysroot)
    tools = json.dumps(versions, sort_keys=True)
    work = [FuzzJob(n, compilers, flag_sets, budget, sysroot, generated, tools)
            for n in range(seed, seed + count)]
    records = in_processes(kept_program_records if kept else program_records, work, jobs,
                           lambda r: print(f"synth-fuzz: seed {r['seed']} done", file=sys.stderr),
                           name=lambda job: f"csmith seed {job.seed}")
    settings = {"seed": seed, "count": count, "budget": budget, "csmith_options": list(generated.options()),
                "out_of_line": generated.out_of_line,
                "common_flags": list(COMMON_FLAGS + LINK_FLAGS), "versions": versions,
                "flag_sets": {c: {f: list(flags_of(c, f)) for f in flag_sets} for c in compilers}}
    return assemble(records, settings, time.monotonic() - started)


if __name__ == "__main__":
    sys.exit(main())
