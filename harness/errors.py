"""Typed errors. Every failure the tool can meet has a class here.

Two families:
- `InputError`: the input (a blob, an ELF, an instruction sequence) is bad.
  The command line turns these into one line on stderr and exit code 2.
- `UnwindFailure`: an unwinder could not produce the caller frame. It carries
  a `kind` from the fixed vocabulary of ARCHITECTURE.md so reports can count it.
"""

from __future__ import annotations


class HarnessError(Exception):
    """Base of every error this package raises on purpose."""

    def __reduce__(self):
        # Subclasses take other arguments than the message they store in
        # `args`, so the default pickling (cls(*args)) fails; errors raised in
        # worker processes (`--jobs`) must reach the parent intact.
        return _rebuild, (type(self), self.args, self.__dict__)


def _rebuild(cls, args, state):
    error = Exception.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class InputError(HarnessError):
    """Bad input: reported as one line, exit code 2."""


class EhabiError(InputError):
    """An ARM EHABI compact unwind instruction sequence cannot be decoded."""

    def __init__(self, message: str, offset: int):
        super().__init__(f"{message} at byte {offset}")
        self.offset = offset


class SpareEncoding(EhabiError):
    """The byte is a spare or reserved encoding of the EHABI instruction set."""


class TruncatedSequence(EhabiError):
    """The sequence ends in the middle of an instruction, or before `finish`."""


class CorruptTable(InputError):
    """An unwind table (v2, or v1) whose structure is inconsistent; names the
    field and offset."""

    def __init__(self, field: str, message: str, offset: int | None = None, table: str = "v2"):
        where = f" (byte {offset})" if offset is not None else ""
        super().__init__(f"corrupt {table} table: {field}{where}: {message}")
        self.field = field
        self.offset = offset


class TableOverflow(InputError):
    """The encoder produced a value that does not fit its field in the layout."""


class EncodeError(InputError):
    """The functions handed to the encoder are inconsistent (overlap, misaligned)."""


class ElfError(InputError):
    """An ELF file that is not a usable ARM ELF (not ARM, truncated, no CFI...)."""


class ToolMissing(HarnessError):
    """A program or package a command needs is not installed (csmith, a
    cross compiler, the armhf sysroot): names it and how to get it."""


class WorkerLost(HarnessError):
    """A worker process died (killed, out of memory) while it verified a
    program: the run is incomplete (exit code 1)."""


# Failure kinds an unwinder may report (ARCHITECTURE.md, "Categories").
FAILURE_KINDS = ("no_info", "unsupported", "bad_read", "limit", "corrupt_table")


class UnwindFailure(HarnessError):
    """An unwind step failed. `kind` is one of FAILURE_KINDS; `reason` is prose."""

    def __init__(self, kind: str, reason: str):
        assert kind in FAILURE_KINDS, kind
        super().__init__(f"{kind}: {reason}")
        self.kind = kind
        self.reason = reason


class BadRead(UnwindFailure):
    """A read outside the captured stack."""

    def __init__(self, address: int, size: int, low: int, high: int):
        super().__init__(
            "bad_read",
            f"read of {size} bytes at {address:#x} outside the stack [{low:#x}, {high:#x})",
        )
        self.address = address
