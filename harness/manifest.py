"""The committed compiled corpus (corpus/elf) and its manifest.json: which
builds there are, and what each entry must return (the checksum a native
build of the same sources computes).

A missing manifest means no recorded checksums; a manifest that is there
but unreadable or wrongly shaped is an error, never a check quietly
skipped."""

from __future__ import annotations

from pathlib import Path

from harness.errors import InputError
from harness.filesystem import read_json

ELF_CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "elf"
MANIFEST = "manifest.json"


def _checksum(path: Path, where: str, value) -> int:
    if type(value) is not int or not 0 <= value < 1 << 32:
        raise InputError(f"{path}: {where}: expected_checksum {value!r} is not an unsigned 32-bit integer")
    return value


def _builds(path: Path) -> list[dict]:
    """The manifest's builds, each checked to have a file name and, where
    it gives them, checksums of the right type."""
    manifest = read_json(path, "manifest")
    builds = manifest.get("builds") if isinstance(manifest, dict) else manifest
    if not isinstance(builds, list):
        raise InputError(f"{path}: not a manifest (no list of builds)")
    for number, build in enumerate(builds):
        where = f"builds[{number}]"
        if not isinstance(build, dict) or not isinstance(build.get("file"), str):
            raise InputError(f"{path}: {where}: a build needs a file name")
        if "expected_checksum" in build:
            _checksum(path, where, build["expected_checksum"])
        programs = build.get("programs", [])
        if not isinstance(programs, list) or not all(isinstance(p, dict) for p in programs):
            raise InputError(f"{path}: {where}.programs: not a list of programs")
        for index, program in enumerate(programs):
            if "expected_checksum" in program:
                _checksum(path, f"{where}.programs[{index}]", program["expected_checksum"])
    return builds


def elf_builds(directory: Path = ELF_CORPUS) -> list[dict]:
    """The builds listed in `directory`/manifest.json, by file name ([] if
    there is no manifest)."""
    path = directory / MANIFEST
    if not path.exists():
        return []
    return sorted(_builds(path), key=lambda b: b["file"])


def expected_checksum(path: str, entry: str) -> int | None:
    """The result recorded for `entry` of the ELF at `path` in the manifest
    beside it, if there is one and it lists that entry."""
    for build in elf_builds(Path(path).parent):
        if build["file"] == Path(path).name:
            if build.get("entry") == entry:
                return build.get("expected_checksum")
            for program in build.get("programs", []):
                if program.get("entry_symbol") == entry:
                    return program.get("expected_checksum")
    return None
