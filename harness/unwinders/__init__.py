"""Unwinding strategies, built by name for a program (names in ARCHITECTURE.md)."""

from __future__ import annotations

from typing import Callable

from harness import v2
from harness.program import Program
from harness.unwinders.dwarf import DwarfUnwinder
from harness.v2.unwinder import V2Unwinder
from harness.walk import Unwinder


def _v2(name: str, flavour: str, policy: str) -> Callable[[Program], Unwinder]:
    def build(program: Program) -> Unwinder:
        encoded = v2.encode(program.cfi[flavour], program.text_base, policy)
        # Through the bytes, so the verified path is the one a device would run.
        reader = v2.V2Reader.from_blob(encoded.blob("seed"), "seed")
        return V2Unwinder(reader, program.text_base, name)

    return build


def _dwarf(program: Program) -> Unwinder:
    return DwarfUnwinder(program.cfi["gcc"])


# v2: clang-style CFI (no epilogue rows), Chrome's `drop` policy.
# v2-gcc: gcc-style CFI with epilogue rows, encoded with policy `keep`.
# dwarf: the gcc-style rows interpreted directly.
BUILDERS: dict[str, Callable[[Program], Unwinder]] = {
    "v2": _v2("v2", "clang", "drop"),
    "v2-gcc": _v2("v2-gcc", "gcc", "keep"),
    "dwarf": _dwarf,
}
UNWINDER_NAMES = tuple(BUILDERS)


def build_unwinders(program: Program, names=UNWINDER_NAMES) -> list[Unwinder]:
    return [BUILDERS[name](program) for name in names]
