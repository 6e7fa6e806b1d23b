"""The Linux corpus in the main job: the programs of corpus/linux/manifest.json
that are built (in the cache, `make linux-corpus`), each run as a process
and checked against the exit status and stdout qemu-user gave
(corpus/linux/record.py), every unwinder verified at its stops.

`run --linux slice` (make run, make test) takes the CI slice
(corpus/linux/ci-slice.txt: a few of our own programs, `make linux-slice`
builds them); `--linux all` every program of the manifest.
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

from harness.abi import Limits
from harness.elf_program import program_from_image
from harness.errors import InputError
from harness.filesystem import cache_root, read_input, read_json
from harness.formats.elf import ElfImage, open_elf, section_size
from harness.linux.process import LinuxRun, LinuxSystem
from harness.linux_verify.modules import process_program
from harness.linux_verify.verify import Expected, verify_process
from harness.program import Program
from harness.report.data import elf_group
from harness.report.sizes import size_row
from harness.report.summary import summary_of, to_json
from harness.unwind.registry import build_unwinders, meaningful
from harness.verify.failures import ProgramResult
from harness.verify.stops import Verify

ROOT = Path(__file__).resolve().parent.parent.parent
LINUX_CORPUS = ROOT / "corpus" / "linux"
SLICE = LINUX_CORPUS / "ci-slice.txt"
CHOICES = ("none", "slice", "all")  # what `run --linux` takes
ENTRY_KEYS = {"name": str, "path": str, "args": list, "exit_status": int, "stdout_sha256": str}


def cache() -> Path:
    """Where the built programs and the sysroot are (never in the repository)."""
    return cache_root() / "linux"


def _entries(manifest: Path) -> list[dict]:
    data = read_json(manifest, "manifest")
    programs = data.get("programs") if isinstance(data, dict) else None
    if not isinstance(programs, list):
        raise InputError(f"{manifest}: not a Linux corpus manifest (no list of programs)")
    for index, entry in enumerate(programs):
        for key, kind in ENTRY_KEYS.items():
            if not isinstance(entry, dict) or not isinstance(entry.get(key), kind):
                raise InputError(f"{manifest}: programs[{index}].{key} is missing or not a {kind.__name__}")
    return programs


def linux_entries(which: str, manifest: Path = LINUX_CORPUS / "manifest.json") -> list[dict]:
    """The manifest's programs `which` names (CHOICES) that are built, by
    name; a note on stderr for those that are not."""
    if which == "none" or not manifest.exists():
        return []
    entries = _entries(manifest)
    if which == "slice":
        wanted = set(read_input(SLICE, "manifest").decode().split())
        entries = [e for e in entries if e["name"] in wanted]
    built = [e for e in entries if (cache() / e["path"]).is_file()]
    if len(built) < len(entries):
        print(f"unwind-harness: note: {len(entries) - len(built)} of the {len(entries)} Linux corpus programs "
              f"are not built (make linux-{'slice' if which == 'slice' else 'corpus'}): left out", file=sys.stderr)
    return sorted(built, key=lambda e: e["name"])


def linux_run(entry: dict) -> LinuxRun:
    """How a corpus program runs. Its argv[0] is the same wherever the
    cache is (glibc's start-up reads the strings: a longer path is more
    stops, and the report would depend on the machine's directories)."""
    root = cache()
    return LinuxRun(str(root / entry["path"]), tuple(entry["args"]), str(root / "sysroot"),
                    str(ROOT / (entry.get("cwd") or ".")), entry.get("stdin") and str(ROOT / entry["stdin"]),
                    argv0=f"/usr/bin/{Path(entry['path']).name}")


def build_label(entry: dict) -> dict:
    flags = [f"-{entry['opt']}"] if entry.get("opt") else []
    if entry.get("frame_pointer") is not None:
        flags.append("-fno-omit-frame-pointer" if entry["frame_pointer"] else "-fomit-frame-pointer")
    flags.append("-static" if entry.get("link") == "static" else "-Wl,-z,now")
    return {"input": f"corpus/linux/{entry['name']}", "build": entry["name"],
            "compiler": entry.get("compiler") or entry.get("source", ""), "flags": flags}


def run_linux_unit(index: int, entry: dict, names: tuple[str, ...], limits: Limits, every: int = 1) -> dict:
    """Verify one corpus program at samples of mean stride `every`; its record (as
    run_unit's for an ELF, the interval in its group when not 1)."""
    run = linux_run(entry)
    names = meaningful(process_program(LinuxSystem(run)), names)
    expected = Expected(entry["exit_status"], entry["stdout_sha256"])

    def verified() -> ProgramResult:
        result = verify_process(run, names, partial(build_unwinders, names=names), Verify(every=every, limits=limits),
                                expected)
        result.program = f"corpus/linux/{entry['name']}"  # named by its place, not the cache's
        return result
    summary = summary_of(verified)
    group = elf_group(summary, names, build_label(entry), {})
    return {"index": index, "kind": "linux", "summary": to_json(summary),
            "group": {**group, "every": every} if every > 1 else group,
            "size": executable_sizes(run.program, f"corpus/linux/{entry['name']}")}


def executable_sizes(path: str, label: str) -> dict | None:
    """The size row of the executable's own CFI (None when it ships none)."""
    image = open_elf(path)
    program = executable_with_cfi(image)
    return None if program is None else size_row(label, [program], section_size(image, ".debug_frame"))


def executable_with_cfi(image: ElfImage) -> Program | None:
    """The executable's own code and CFI, without its libraries (None when
    it ships no CFI: Debian's binaries)."""
    program = program_from_image(image, image.elf["e_entry"], cfi_required=False)
    return program if program.cfi["tables"] else None
