"""Keystone behind one function: Thumb-2 (or ARM) source lines -> machine code."""

from __future__ import annotations

from keystone import KS_ARCH_ARM, KS_MODE_ARM, KS_MODE_THUMB, Ks, KsError

from harness.errors import HarnessError

_KS = Ks(KS_ARCH_ARM, KS_MODE_THUMB)
_KS_ARM = Ks(KS_ARCH_ARM, KS_MODE_ARM)


class AssemblyError(HarnessError):
    """Keystone rejected generated source (a generator bug)."""


def assemble(lines: list[str], address: int, arm: bool = False) -> bytes:
    """`lines` as Thumb-2 at `address` (ARM with `arm`)."""
    source = "\n".join(lines)
    try:
        encoding, _ = (_KS_ARM if arm else _KS).asm(source, address)
    except KsError as error:
        raise AssemblyError(f"keystone failed at {address:#x}: {error}\n{source[:2000]}") from None
    return bytes(encoding or b"")
