#!/usr/bin/env python3
"""Verify Debian's armhf Chromium's two runs (corpus/chromium/runs.json) in
the harness: `unwind-harness verify-elf` with every unwinder at samples,
each run's exit status and stdout held to what qemu-user gave (runs.json).
Each writes reports/chromium-NAME.json, and its terminal report beside it
(reports/chromium-NAME.txt).

    verify.py [--every N] [--run NAME] [--unwinder U ...] [--jobs N] [--harness PATH]

Each of verify-elf's jobs emulates the whole program (and verifies its
share of the stops): `--jobs 1` takes one core, the render some four
minutes at `--every 100000000`.

The guest sees its working directory (this directory) as /work, and no
host path outside it and the root: the render loads file:///work/page.html
and keeps its profile in /work/profile (its writes stay in the harness's
memory). The page's DOM, which the render prints, names neither path, so
its digest is the one qemu-user's run recorded.

Standard library only (the harness runs as a command).
"""
import argparse
import json
import os
import subprocess
import sys

from check import HERE, RUNS, root

REPORTS = os.path.join(os.path.dirname(os.path.dirname(HERE)), "reports")
GUEST_DIRECTORY = "/work"  # harness.linux.files.WORKDIR: the working directory as the guest sees it


def command(harness: str, entry: dict, every: int, unwinders: list[str], jobs: int | None = None) -> list[str]:
    sysroot = root()
    argv = [arg.format(page=f"{GUEST_DIRECTORY}/page.html", profile=f"{GUEST_DIRECTORY}/profile")
            for arg in entry["args"]]
    chosen = [option for name in unwinders for option in ("--unwinder", name)]
    chosen += ["--jobs", str(jobs)] if jobs else []
    return [harness, "verify-elf", os.path.join(sysroot, "usr", "lib", "chromium", "chromium"), "--sysroot", sysroot,
            "--cwd", HERE, "--every", str(every), *chosen, "--expect-exit", str(entry["exit_status"]),
            "--expect-stdout-sha256", entry["stdout_sha256"],
            "--json", os.path.join(REPORTS, f"{entry['name']}.json"), "--", *argv]


def main() -> int:
    parser = argparse.ArgumentParser(description="Debian's armhf Chromium's runs verified by the harness")
    parser.add_argument("--every", type=int, default=10_000, help="mean stride of the samples (default 10000)")
    parser.add_argument("--run", action="append", help="only this run of runs.json (repeatable; default: both)")
    parser.add_argument("--unwinder", action="append", default=[], help="only these unwinders (default: all)")
    parser.add_argument("--jobs", type=int, help="verify-elf's processes (default: its own, all cores)")
    parser.add_argument("--harness", default=os.path.join(os.path.dirname(REPORTS), ".venv", "bin", "unwind-harness"),
                        help="the unwind-harness command (default: the repository's .venv)")
    args = parser.parse_args()
    with open(RUNS) as recorded:
        runs = json.load(recorded)["runs"]
    unknown = set(args.run or ()) - {entry["name"] for entry in runs}
    if unknown:
        print(f"verify.py: no run {', '.join(sorted(unknown))} in {RUNS}", file=sys.stderr)
        return 2
    failed = 0
    for entry in runs:
        if args.run and entry["name"] not in args.run:
            continue
        with open(os.path.join(REPORTS, f"{entry['name']}.txt"), "w") as terminal:
            done = subprocess.run(command(args.harness, entry, args.every, args.unwinder, args.jobs), stdout=terminal,
                                  env={**os.environ, "COLUMNS": "200"})
        print(f"verify.py: {entry['name']}: exit {done.returncode} (reports/{entry['name']}.json, .txt)",
              file=sys.stderr)
        failed += done.returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
