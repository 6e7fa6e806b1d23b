"""Tables built from a module's code, kept on disk across processes and runs
(and `make synth-fuzz`'s records of each program it judged, alike:
harness.synth_fuzz.kept_program_records).

Analysing a library's machine code for `v2-code` (harness.thumb.discovery)
takes glibc about twenty seconds, and every Linux corpus program loads
glibc. What the analysis gives depends only on its inputs, so its table is
kept under a digest of all of them: the code's bytes, where it is loaded,
what is known of its functions (the code map), the encoding policy, and
the harness's own source (any change to the tool is a new cache). A
process keeps what it read or built in memory as well.

Entries live in `$UNWIND_HARNESS_CACHE/tables/<source digest>/` (the cache
defaults to ~/.cache/unwind-harness, as the Linux corpus's). Each entry
starts with the sha256 of its payload: a truncated or altered entry is
built again and replaced, never used. Entries are written to a temporary
file and renamed into place, so workers building the same one at once
never read half of it; where the cache cannot be written (read-only, a
full disk) the table is built all the same. The newest KEPT_SOURCES source
digests are kept, older ones removed. Delete the directory to measure a
run from cold.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Callable

from harness.filesystem import cache_root

PACKAGE = Path(__file__).resolve().parent
KEPT_SOURCES = 3  # source digests kept: a few checkouts may share one cache
IN_MEMORY = 32  # entries a process keeps without reading them again
_DIGEST = hashlib.sha256().digest_size
_held: dict[str, bytes | None] = {}


@lru_cache(maxsize=1)
def source_digest() -> str:
    """The digest of the harness's source, Python and C (the compiled
    kernel judges synth-fuzz's runs): what it built is valid for that
    source only."""
    digest = hashlib.sha256()
    for path in sorted(path for pattern in ("*.py", "*.c", "*.h") for path in PACKAGE.rglob(pattern)):
        digest.update(str(path.relative_to(PACKAGE)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:24]


def key_of(*parts: bytes | str | int) -> str:
    """A cache key from what the cached value depends on."""
    digest = hashlib.sha256()
    for part in parts:
        data = part if isinstance(part, bytes) else str(part).encode()
        digest.update(len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()


def cached(key: str, build: Callable[[], bytes | None]) -> bytes | None:
    """The bytes (or None) `build` gives, from memory, else from the disk,
    else built and kept in both."""
    if key in _held:
        return _held[key]
    path = cache_root() / "tables" / source_digest() / f"{key}.bin"
    value = _read(path)
    if value is _MISSING:
        value = build()
        _write(path, value)
    if len(_held) >= IN_MEMORY:
        _held.pop(next(iter(_held)))
    _held[key] = value
    return value


_MISSING = object()


def _read(path: Path):
    """The entry at `path`: its bytes, None, or _MISSING where there is none
    whole (absent, unreadable, or its digest does not match)."""
    try:
        data = path.read_bytes()
    except OSError:
        return _MISSING
    stored, payload = data[:_DIGEST], data[_DIGEST:]
    if not payload or hashlib.sha256(payload).digest() != stored:
        return _MISSING
    return None if payload[:1] == b"\0" else payload[1:]


def _write(path: Path, value: bytes | None) -> None:
    payload = b"\0" if value is None else b"\1" + value
    try:
        fresh = not path.parent.is_dir()
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".entry-")
    except OSError:
        return  # a cache that cannot be written: the tables were built all the same
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(hashlib.sha256(payload).digest() + payload)
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        return
    if fresh:
        _prune(path.parent.parent)


def _prune(tables: Path) -> None:
    """Keep the newest KEPT_SOURCES source digests' entries."""
    try:
        sources = sorted((p for p in tables.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return
    for old in sources[KEPT_SOURCES:]:
        shutil.rmtree(old, ignore_errors=True)
