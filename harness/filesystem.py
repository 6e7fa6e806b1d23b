"""Every file the tool reads or writes goes through here.

Reading: only regular files (a FIFO, a device or a directory is refused
before it is opened), each kind of input under a size cap, checked before
the file is read and again while it is read (it may grow).

Writing: never over a file the same command reads, and atomically: the
bytes go to a temporary file in the same directory, renamed into place
only once all of them are written, so a failure (a full disk, a file-size
limit) leaves the previous file as it was. Every error names the file.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Iterable

from harness.errors import InputError

MiB = 1 << 20
CAPS = {  # bytes an input of each kind may have
    "ELF": 256 * MiB,
    "v2 blob": 64 * MiB,
    "v1 blob": 64 * MiB,
    "vmkunwind blob": 64 * MiB,
    "qut blob": 64 * MiB,
    "call-sites blob": 64 * MiB,
    "shard report": 32 * MiB,
    "baseline": 64 * MiB,
    "manifest": 4 * MiB,
    "guest file": 256 * MiB,  # a file an emulated Linux program opens (harness.linux.files)
    "stdin": 64 * MiB,
    "symbol file": 1024 * MiB,  # dump_syms writes about 400 MB for Chrome
}
_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


def cache_root() -> Path:
    """Where the tool keeps what it builds for later runs (the Linux corpus,
    tables from code): $UNWIND_HARNESS_CACHE, else ~/.cache/unwind-harness;
    never in the repository."""
    return Path(os.environ.get("UNWIND_HARNESS_CACHE", Path.home() / ".cache" / "unwind-harness"))


def _reason(error: OSError) -> str:
    return error.strerror or str(error)


def read_input(path: str | os.PathLike, kind: str) -> bytes:
    """The bytes of the input file `path` of `kind` (a key of CAPS);
    InputError naming the file if it is not a regular file, is larger than
    its kind may be, or cannot be read."""
    cap = CAPS[kind]
    try:
        info = os.stat(path)
    except OSError as error:
        raise InputError(f"{path}: cannot read: {_reason(error)}") from None
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{path}: not a regular file ({_KINDS.get(stat.S_IFMT(info.st_mode), 'a special file')})")
    if info.st_size > cap:
        raise InputError(f"{path}: {info.st_size:,} bytes, more than the {cap:,} a {kind} may have")
    try:
        with open(path, "rb") as file:
            data = file.read(cap + 1)
    except OSError as error:
        raise InputError(f"{path}: cannot read: {_reason(error)}") from None
    if len(data) > cap:
        raise InputError(f"{path}: grew past the {cap:,} bytes a {kind} may have while it was read")
    return data


def read_json(path: str | os.PathLike, kind: str) -> object:
    """An input file of `kind` parsed as JSON; InputError naming the file
    if it is not JSON (or nests deeper than Python can parse)."""
    data = read_input(path, kind)
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as error:
        reason = "nested too deeply" if isinstance(error, RecursionError) else str(error)
        raise InputError(f"{path}: not a {kind} (not JSON: {reason})") from None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and os.path.samefile(a, b))
    except OSError:
        return False


def check_output(path: str | os.PathLike | None, inputs: Iterable[str | os.PathLike | None] = ()) -> None:
    """Refuse, before any work, an output that cannot be written: a
    directory, a missing directory, or a file the command also reads."""
    if path is None:
        return
    target = Path(path)
    if target.is_dir():
        raise InputError(f"{path}: cannot write: is a directory")
    if not target.parent.is_dir():
        raise InputError(f"{path}: cannot write: no directory {target.parent}")
    for source in inputs:
        if source is not None and _same_file(target, Path(source)):
            raise InputError(f"{path}: is also an input of this command; write the output elsewhere")


def write_output(path: str | os.PathLike, data: bytes | str) -> None:
    """Write `data` to `path` atomically (see the module's docstring)."""
    target = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    descriptor, temporary = None, None
    try:
        descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or ".")
        with os.fdopen(descriptor, "wb") as file:
            descriptor = None
            file.write(payload)
        os.chmod(temporary, 0o644 & ~_umask())
        os.replace(temporary, target)
        temporary = None
    except OSError as error:
        raise InputError(f"{path}: cannot write: {_reason(error)}") from None
    finally:
        if descriptor is not None:
            os.close(descriptor)
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
