"""The committed compiled corpus (corpus/elf) and its manifest.json: which
builds there are, and what each entry must return (the checksum a native
build of the same sources computes)."""

from __future__ import annotations

import json
from pathlib import Path

ELF_CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "elf"


def elf_builds(directory: Path = ELF_CORPUS) -> list[dict]:
    """The builds listed in `directory`/manifest.json, by file name ([] if none)."""
    try:
        manifest = json.loads((directory / "manifest.json").read_text())
    except (OSError, ValueError):
        return []
    builds = manifest.get("builds", []) if isinstance(manifest, dict) else manifest
    return sorted((b for b in builds if isinstance(b, dict) and "file" in b), key=lambda b: b["file"])


def expected_checksum(path: str, entry: str) -> int | None:
    """The result recorded for `entry` of the ELF at `path` in the manifest
    beside it, if any."""
    for build in elf_builds(Path(path).parent):
        if build.get("file") == Path(path).name:
            if build.get("entry") == entry:
                return build.get("expected_checksum")
            for program in build.get("programs", []):
                if program.get("entry_symbol") == entry:
                    return program.get("expected_checksum")
    return None
