"""`unwind-harness sysroot`: where the armhf sysroot is, what it holds, and
`sysroot add PACKAGE...`, which puts Debian packages (with every armhf
package they depend on) into it for programs of one's own, through
corpus/linux/sysroot.sh: fetched with apt-get download and unpacked, never
installed; kept across later rebuilds of the sysroot."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from harness.errors import InputError
from harness.filesystem import cache_root

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "corpus" / "linux" / "sysroot.sh"
# Debian policy 5.6.1: lower case letters, digits, + - . ; two or more, the first alphanumeric.
PACKAGE_NAME = re.compile(r"[a-z0-9][a-z0-9+.-]+")
SCRIPT_SECONDS = 1800  # a fresh sysroot downloads and unpacks some 40 packages


def sysroot_directory() -> Path:
    return cache_root() / "linux" / "sysroot"


def added_file() -> Path:
    """The packages added so far, one a line (sysroot.sh keeps it)."""
    return cache_root() / "linux" / "extra-packages"


SONAME = re.compile(r"lib[^/]*\.so\.[0-9]+")  # libzstd.so.1: the name a program's DT_NEEDED asks for
SHOWN = 12  # new libraries named; the rest counted


def _libraries(sysroot: Path) -> set[str]:
    """The shared libraries in the sysroot by the names programs load them by."""
    if not sysroot.is_dir():
        return set()
    return {path.name for path in sysroot.rglob("lib*.so.*") if SONAME.fullmatch(path.name)}


def cmd_sysroot(args) -> int:
    sysroot = sysroot_directory()
    if args.action == "show":
        versions = sysroot / "VERSIONS"
        held = versions.read_text().splitlines() if versions.is_file() else []
        added = added_file().read_text().split() if added_file().is_file() else []
        print(f"sysroot: {sysroot}" + ("" if held else " (not made yet: make linux-sysroot)"))
        print(f"packages: {len(held)}; added with `sysroot add`: {' '.join(added) or 'none'}")
        return 0
    bad = [name for name in args.packages if not PACKAGE_NAME.fullmatch(name)]
    if bad:
        raise InputError(f"not a Debian package name: {bad[0]!r}")
    if not SCRIPT.is_file():
        raise InputError(f"{SCRIPT}: not found: sysroot add needs the repository's corpus scripts")
    before = _libraries(sysroot)
    try:
        done = subprocess.run(["bash", str(SCRIPT)], env={**os.environ, "SYSROOT_ADD": " ".join(args.packages)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=SCRIPT_SECONDS)
    except subprocess.TimeoutExpired:
        raise InputError(f"{SCRIPT.name}: no sysroot after {SCRIPT_SECONDS} s (apt or the network hangs?)") from None
    if done.returncode != 0:
        said = [line for line in done.stderr.splitlines() if line.startswith("sysroot.sh: ")]
        why = said[-1].removeprefix("sysroot.sh: ") if said else f"exit {done.returncode}"
        raise InputError(f"sysroot add {' '.join(args.packages)}: {why}")
    if not before:
        print(f"made {sysroot} with {' '.join(args.packages)}: {len(_libraries(sysroot))} shared libraries")
        return 0
    new = sorted(_libraries(sysroot) - before)
    named = ", ".join(new[:SHOWN]) + (f" and {len(new) - SHOWN} more" if len(new) > SHOWN else "")
    print(f"added {' '.join(args.packages)} to {sysroot}: {len(new)} new shared librar"
          f"{'y' if len(new) == 1 else 'ies'}{': ' + named if new else ''}")
    return 0
