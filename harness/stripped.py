"""`make stripped`: what a stripped binary costs tables from code
(`v2-code`). Each of our own builds (the compiled corpus, and the Linux
corpus programs built here from source: Debian's shipped ones have no
symbols to check against) is read as `strip` leaves it, `.symtab` gone and
`.dynsym` kept; the function starts discovery finds then (harness.thumb.
discovery) are compared with the true starts its symbol table names: the
share of true starts found, of starts found that are false, and of those
found in the wrong state (ARM or Thumb). With `--verify`, `v2-code` is
verified on the build at seeded samples with its tables made from the
build as it is and from its stripped reading: the difference of the
failure rates is the cost of the missing symbols. The same program runs
both times (a Linux program as a process, a bare-metal build from its
entry's symbol) and its stops are classified alike, by its symbols: a
refusal in the libgcc a static program links (its unwinder's register
dumps) is a stop in a library either way, where a stripped copy's own run
would take every address for the program's own code.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from functools import partial

from harness.elf_program import code_map, code_reader, program_from_elf
from harness.errors import InputError
from harness.filesystem import write_output
from harness.formats.arm_exidx import read_exidx_sections
from harness.formats.elf import ElfImage, function_spans, open_elf, text_base
from harness.linux_verify.corpus import ROOT, cache, linux_entries, linux_run
from harness.linux_verify.verify import Expected, verify_process
from harness.manifest import ELF_CORPUS, elf_builds
from harness.program import Program
from harness.runner import in_processes
from harness.thumb.discovery import function_starts
from harness.unwind.registry import build_unwinders
from harness.unwind.walk import Unwinder
from harness.verify.stops import Verify, verify_program
from harness.verify.tally import STOPPED_PREFIX

UNWINDER = "v2-code"


def true_starts(image: ElfImage) -> dict[int, bool]:
    """The function starts the symbols name, each with whether it is ARM
    code; the PLTs left out (their entries have no symbols to check)."""
    plt = _plts(image)
    return {start: not thumb for start, _, _, thumb in function_spans(image)
            if not any(low <= start < high for low, high in plt)}


def found_starts(image: ElfImage) -> dict[int, bool]:
    """The function starts discovery finds in `image` (as stripped, if it
    is read so), each with whether it is ARM code; the PLTs left out."""
    plt = _plts(image)
    found = function_starts(code_map(image, read_exidx_sections(image)), code_reader(image))
    return {start: arm for start, arm in found.items() if not any(low <= start < high for low, high in plt)}


def _plts(image: ElfImage) -> list[tuple[int, int]]:
    """.plt, and a static program's .iplt (its IFUNC calls: memcpy...)."""
    return [(section["sh_addr"], section["sh_addr"] + section["sh_size"])
            for section in map(image.elf.get_section_by_name, (".plt", ".iplt")) if section is not None]


def compared(truth: dict[int, bool], found: dict[int, bool], names: dict[int, str]) -> dict:
    """How `found` meets `truth`: true starts found, false ones, states wrong."""
    hit = [start for start in truth if start in found]
    false = sorted(start for start in found if start not in truth)
    return {"true": len(truth), "found": len(found), "hit": len(hit), "false": len(false),
            "wrong_state": sum(found[start] != truth[start] for start in hit),
            "missed_names": sorted(names[start] for start in truth if start not in found)[:12],
            "false_addresses": [f"{start:#x}" for start in false[:12]]}


def start_row(path: str) -> dict:
    """One build's starts, with its symbols and as stripped."""
    image = open_elf(path)
    truth = true_starts(image)
    names = {start: name for start, _, name, _ in function_spans(image)}
    return {"symbols": compared(truth, found_starts(image), names),
            "stripped": compared(truth, found_starts(replace(image, stripped=True)), names)}


def share(part: int, whole: int) -> float:
    return 100 * part / whole if whole else 0.0


def v2_code_failures(build: dict, every: int, stripped: bool) -> tuple[int, int]:
    """(stops where v2-code failed, stops verified) at samples of mean
    stride `every`, the build as it is or stripped; InputError where the
    run goes wrong (a fault, a wrong output)."""
    if build["entry"] is not None:
        program = program_from_elf(build["path"], build["entry"], build["expected"])
        own = partial(_read_stripped, program.name) if stripped else partial(build_unwinders, names=[UNWINDER])
        result = verify_program(program, own(program), Verify(every=every))
        ok = result.fault is None and result.result == result.expected
    else:
        run, entry = linux_run(build["linux"]), build["linux"]
        own = partial(_read_stripped, run.program) if stripped else partial(build_unwinders, names=[UNWINDER])
        result = verify_process(run, [UNWINDER], own, Verify(every=every),
                                expected=Expected(entry["exit_status"], entry["stdout_sha256"]))
        ok = result.fault is None and result.stdout_sha256 == entry["stdout_sha256"]
    if not ok:
        raise InputError(f"{build['name']}: the run went wrong: {result.fault or 'wrong output'}")
    failed = sum(n for (name, _, _, kind), n in result.counts.items()
                 if name == UNWINDER and kind is not None and not kind.startswith(STOPPED_PREFIX))  # a walk that
    # stops in another module without tables there (the vectors page) has not failed
    verified = sum(n for (name, _, _, _), n in result.counts.items() if name == UNWINDER)
    return failed, verified


def _read_stripped(path: str, program: Program) -> list[Unwinder]:
    """v2-code over `program` (a bare-metal build, or a process's module),
    the ELF at `path` read as `strip` leaves it (where the loader put it)."""
    if program.name == path:
        image = replace(open_elf(path), stripped=True)
        read = code_map(image, read_exidx_sections(image)).moved(program.text_base - text_base(image))
        program = replace(program, code_map=read)
    return build_unwinders(program, [UNWINDER])


def measured(work: tuple[dict, int]) -> dict:
    """One build's row: its starts and, with `every`, v2-code's failures."""
    build, every = work
    row = {"build": build["name"], **start_row(build["path"])}
    if every:
        for key, stripped in (("with_symbols", False), ("stripped_v2_code", True)):
            failed, stops = v2_code_failures(build, every, stripped)
            row[key] = {"failed": failed, "stops": stops}
    return row


def our_builds(linux: bool) -> list[dict]:
    """The compiled corpus and the Linux corpus programs built from our
    sources or Debian's (not Debian's shipped binaries: stripped already)."""
    builds = [{"name": b["file"], "path": str(ELF_CORPUS / b["file"]), "entry": b["entry"],
               "expected": b["expected_checksum"]} for b in elf_builds()]
    for entry in linux_entries("all") if linux else ():
        if entry.get("source") != "debian-shipped":
            builds.append({"name": entry["name"], "path": str(cache() / entry["path"]), "entry": None,
                           "linux": entry})
    return builds


def table_lines(rows: list[dict]) -> list[str]:
    """The figures per build, and over all of them, as a Markdown table."""
    verified = all("stripped_v2_code" in row for row in rows)
    head = "| build | true starts | found stripped | false | wrong state | found with symbols |"
    lines = [head + (" v2-code with symbols | stripped |" if verified else ""),
             "|---" * (head.count("|") - 1 + (2 if verified else 0)) + "|"]
    for row in [*rows, _total(rows, verified)]:
        bare, full = row["stripped"], row["symbols"]
        line = f"| {row['build']} | {bare['true']:,} | {share(bare['hit'], bare['true']):.2f}% | " \
               f"{bare['false']} ({share(bare['false'], bare['found']):.2f}%) | {bare['wrong_state']} | " \
               f"{share(full['hit'], full['true']):.2f}% |"
        if verified:
            line += "".join(f" {row[key]['failed']:,} of {row[key]['stops']:,} "
                            f"({share(row[key]['failed'], row[key]['stops']):.3f}%) |"
                            for key in ("with_symbols", "stripped_v2_code"))
        lines.append(line)
    return lines


def _total(rows: list[dict], verified: bool) -> dict:
    total: dict = {"build": "**all**"}
    for key in ("symbols", "stripped"):
        total[key] = {field: sum(row[key][field] for row in rows)
                      for field in ("true", "found", "hit", "false", "wrong_state")}
    for key in ("with_symbols", "stripped_v2_code") if verified else ():
        total[key] = {field: sum(row[key][field] for row in rows) for field in ("failed", "stops")}
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.stripped", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", default=str(ROOT / "reports" / "stripped.json"))
    parser.add_argument("--no-linux", action="store_true", help="the compiled corpus only")
    parser.add_argument("--verify", action="store_true", help="also verify v2-code as built and stripped")
    parser.add_argument("--every", type=int, default=50, help="with --verify: the mean stride of the samples")
    parser.add_argument("--only", action="append", help="only the builds of these names (repeatable)")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    builds = [b for b in our_builds(not args.no_linux) if not args.only or b["name"] in args.only]
    rows = in_processes(measured, [(build, args.every if args.verify else 0) for build in builds], args.jobs,
                        lambda row: print(f"measured {row['build']}", file=sys.stderr))
    write_output(args.json, json.dumps({"every": args.every if args.verify else None, "rows": rows},
                                       indent=1, sort_keys=True) + "\n")
    print("\n".join(table_lines(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
