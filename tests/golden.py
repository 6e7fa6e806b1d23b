"""Every file and listing the command line writes, as SHA-256 digests, so
that a change meant to move code without changing behaviour can be checked
byte for byte (tests/golden.json holds the digests).

    python tests/golden.py check          # encode, dump: the test suite runs this part
    python tests/golden.py check --all    # also the main job's and the Linux slice's reports, verify-elf, merge, mutants
    python tests/golden.py record [--all] # after a change that is meant to change outputs

Outputs come from the command line alone (`harness.cli.main`, in this
process), so the check does not depend on where code lives in the package.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterator

ROOT = Path(__file__).resolve().parent.parent
DIGESTS = Path(__file__).resolve().parent / "golden.json"
ELFS = sorted((ROOT / "corpus" / "elf").glob("*.elf")) + sorted((ROOT / "corpus" / "fixtures").glob("*.elf"))
LAYOUTS = ("seed", "chrome")
POLICIES = ("drop", "keep", "synthesize")


def _cli(argv: list[str]) -> tuple[int, str]:
    """Exit status and standard output of one command."""
    sys.path.insert(0, str(ROOT))
    from harness.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        status = main(argv)
    return status, out.getvalue()


def _report(path: Path) -> bytes:
    """A JSON report's bytes without the wall-clock seconds of its `timing`
    blocks, the one part that differs from run to run."""
    def strip(data):
        if isinstance(data, list):
            return [strip(item) for item in data]
        if not isinstance(data, dict):
            return data
        return {key: {k: v for k, v in value.items() if k != "seconds"} if key == "timing" else strip(value)
                for key, value in data.items()}
    return json.dumps(strip(json.loads(path.read_bytes())), indent=1).encode()


def _name(elf: Path) -> str:
    return str(elf.relative_to(ROOT))


def table_outputs(work: Path) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of every encode and dump over the committed ELFs."""
    for elf in ELFS:
        name = _name(elf)
        for layout in LAYOUTS:
            for policy in POLICIES:
                blob = work / f"{elf.stem}.{layout}.{policy}.v2"
                status, text = _cli(["encode", name, "-o", str(blob), "--layout", layout, "--epilogue", policy])
                yield f"encode {name} {layout} {policy}: exit {status}", text.replace(str(blob), "BLOB").encode()
                yield f"encode {name} {layout} {policy}: blob", blob.read_bytes()
            blob = work / f"{elf.stem}.{layout}.drop.v2"
            status, text = _cli(["dump", str(blob), "--layout", layout, "--text-start", "0x10000"])
            yield f"dump {name} {layout}: exit {status}", text.encode()
        blob = work / f"{elf.stem}.v1"
        status, text = _cli(["encode", name, "-o", str(blob), "--format", "v1"])
        yield f"encode {name} v1: exit {status}", text.replace(str(blob), "BLOB").encode()
        yield f"encode {name} v1: blob", blob.read_bytes()
        status, text = _cli(["dump", str(blob), "--format", "v1", "--text-start", "0x10000"])
        yield f"dump {name} v1: exit {status}", text.encode()


def run_outputs(work: Path) -> Iterator[tuple[str, bytes]]:
    """The main job's reports (whole and sharded then merged), the Linux
    slice's, verify-elf and the mutation check."""
    reports = work / "reports"
    _cli(["run", "--reports", str(reports), "--jobs", "2"])
    yield "run: latest.json", _report(reports / "latest.json")
    for suffix in ("md", "png"):
        yield f"run: latest.{suffix}", (reports / f"latest.{suffix}").read_bytes()
    linux = work / "linux"
    _cli(["run", "--linux", "slice", "--reports", str(linux), "--jobs", "2"])
    yield "run --linux slice: latest.json", _report(linux / "latest.json")
    yield "run --linux slice: latest.md", (linux / "latest.md").read_bytes()
    shards = [work / f"shard{k}.json" for k in range(3)]
    for index, shard in enumerate(shards):
        _cli(["run", "--programs", "6", "--shard", f"{index}/3", "--json", str(shard), "--jobs", "1"])
    merged = work / "merged"
    _cli(["merge", *map(str, shards), "--reports", str(merged)])
    yield "run --programs 6, 3 shards merged: latest.json", _report(merged / "latest.json")
    for elf in ("corpus/fixtures/calls-clang-nofp.elf", "corpus/fixtures/vfp-gcc-fp.elf"):
        out = work / "verify.json"
        status, _ = _cli(["verify-elf", elf, "--entry", "entry", "--json", str(out), "--jobs", "2"])
        yield f"verify-elf {elf}: exit {status}", _report(out)
    out = work / "mutants.json"
    status, _ = _cli(["mutants", "--programs", "2", "--per-program", "6", "--json", str(out)])
    yield f"mutants 2 x 6: exit {status}", out.read_bytes()


def digests(everything: bool) -> dict[str, str]:
    sources: list[Callable[[Path], Iterator[tuple[str, bytes]]]] = [table_outputs]
    if everything:
        sources.append(run_outputs)
    found = {}
    with tempfile.TemporaryDirectory() as work:
        for source in sources:
            for name, data in source(Path(work)):
                found[name] = hashlib.sha256(data).hexdigest()
    return found


def differences(found: dict[str, str]) -> list[str]:
    """Names whose digest differs from the recorded one (or was never recorded)."""
    recorded = json.loads(DIGESTS.read_text())
    return [name for name, digest in found.items() if recorded.get(name) != digest]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("check", "record"))
    parser.add_argument("--all", action="store_true", help="also the main job, verify-elf, merge and mutants")
    args = parser.parse_args()
    found = digests(args.all)
    if args.action == "record":
        recorded = json.loads(DIGESTS.read_text()) if DIGESTS.exists() else {}
        recorded.update(found)
        DIGESTS.write_text(json.dumps(dict(sorted(recorded.items())), indent=1) + "\n")
        print(f"recorded {len(found)} digests in {DIGESTS}")
        return 0
    changed = differences(found)
    for name in changed:
        print(f"changed: {name}")
    print(f"{len(found) - len(changed)} of {len(found)} outputs unchanged")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
