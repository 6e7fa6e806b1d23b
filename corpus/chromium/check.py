#!/usr/bin/env python3
"""Run Debian's armhf Chromium (corpus/chromium/fetch.sh's root) under
qemu-user and check that it does what corpus/chromium/runs.json recorded.

Two runs, each as

    env -i PATH=/usr/bin:/bin HOME=/ LANG=C qemu-arm -L ROOT ROOT/usr/lib/chromium/chromium ARGS...

- `chromium-version`: `--version` (some 74 million instructions, nearly
  all in the dynamic linker relocating Chromium's code; no thread);
- `chromium-render`: one headless process renders corpus/chromium/page.html,
  whose script computes a result in V8 and writes it into the DOM, and
  prints the DOM (`--dump-dom`; about 1.6 billion instructions, some 40
  threads). `{page}` in its arguments is the page's absolute path and
  `{profile}` a fresh empty directory (Chromium's profile).

Per run the exit status and the SHA-256 of stdout (stderr is Chromium's
log, which holds times and process ids). Recording runs each twice and
refuses a run whose two outputs differ.

    check.py            run both, compare with runs.json, exit 1 on a difference
    check.py --record   run both (twice), write runs.json, and packages.txt (every
                        package of the root and its version)

Standard library only.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = os.path.join(HERE, "runs.json")
PACKAGES = os.path.join(HERE, "packages.txt")  # the root's packages and versions, as recorded
PAGE = os.path.join(HERE, "page.html")
TIMEOUT = 600
ENVIRONMENT = {"PATH": "/usr/bin:/bin", "HOME": "/", "LANG": "C"}
# --disable-crashpad-for-testing (Chrome's own switch): without it Chrome forks a
# child that execs chrome_crashpad_handler, a second program, and the harness
# emulates one process; the page's DOM is the same either way.
RENDER = ["--headless", "--single-process", "--no-sandbox", "--no-zygote", "--disable-gpu",
          "--disable-crashpad-for-testing", "--user-data-dir={profile}", "--dump-dom", "file://{page}"]
COMMANDS = {"chromium-version": ["--version"], "chromium-render": RENDER}


def root() -> str:
    base = os.environ.get("UNWIND_HARNESS_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "unwind-harness")
    return os.path.join(base, "chromium", "root")


def run(args: list[str]) -> dict:
    """One run under qemu-user: its exit status and stdout's digest and size."""
    sysroot = root()
    program = os.path.join(sysroot, "usr", "lib", "chromium", "chromium")
    if not os.access(program, os.X_OK):
        raise SystemExit(f"check.py: no {program}: run corpus/chromium/fetch.sh (make chromium does)")
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        argv = [arg.format(page=PAGE, profile=profile) for arg in args]
        done = subprocess.run(["qemu-arm", "-L", sysroot, program, *argv], env=ENVIRONMENT, cwd=HERE,
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=TIMEOUT)
    return {"exit_status": done.returncode, "stdout_sha256": hashlib.sha256(done.stdout).hexdigest(),
            "stdout_bytes": len(done.stdout)}


def versions() -> dict:
    """Chromium's version and the number of packages in the root."""
    with open(os.path.join(root(), "VERSIONS")) as listing:
        packages = dict(line.split() for line in listing if line.strip())
    return {"chromium": packages.get("chromium"), "packages": len(packages)}


def main() -> int:
    parser = argparse.ArgumentParser(description="Debian's armhf Chromium under qemu-user: record or check its runs")
    parser.add_argument("--record", action="store_true", help="write runs.json (each run twice, the same both times)")
    args = parser.parse_args()
    if args.record:
        runs = []
        for name, command in COMMANDS.items():
            first, second = run(command), run(command)
            if first != second:
                print(f"check.py: {name} differs from one run to the next: {first} against {second}", file=sys.stderr)
                return 1
            runs.append({"name": name, "args": command, **first})
        with open(RUNS, "w") as out:
            json.dump({**versions(), "runs": runs}, out, indent=1)
            out.write("\n")
        with open(os.path.join(root(), "VERSIONS")) as listing, open(PACKAGES, "w") as out:
            out.write(listing.read())
        print(f"check.py: recorded {len(runs)} runs in {RUNS}", file=sys.stderr)
        return 0
    with open(RUNS) as recorded:
        expected = json.load(recorded)
    if versions()["chromium"] != expected["chromium"]:
        print(f"check.py: the root holds chromium {versions()['chromium']}, runs.json was recorded with "
              f"{expected['chromium']}: record again (check.py --record)", file=sys.stderr)
        return 1
    failed = 0
    for entry in expected["runs"]:
        got = run(entry["args"])
        want = {key: entry[key] for key in got}
        status = "ok" if got == want else f"DIFFERS: {got} against {want}"
        failed += got != want
        print(f"check.py: {entry['name']}: {status}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
