"""Unwinding strategies, built by name for a program (names in ARCHITECTURE.md)."""

from __future__ import annotations

from typing import Callable

from harness import v2
from harness.epilogue import EpilogueFirst, EpilogueSimulator
from harness.program import Program
from harness.unwinders.dwarf import DwarfUnwinder
from harness.v2.unwinder import V2Unwinder
from harness.walk import Unwinder


def _v2_unwinder(program: Program, flavour: str, policy: str, name: str) -> V2Unwinder:
    encoded = v2.encode(program.cfi[flavour], program.text_base, policy, code_at=program.code)
    # Through the bytes, so the verified path is the one a device would run.
    reader = v2.V2Reader.from_blob(encoded.blob("seed"), "seed")
    return V2Unwinder(reader, program.text_base, name)


def _v2(name: str, flavour: str, policy: str) -> Callable[[Program], Unwinder]:
    return lambda program: _v2_unwinder(program, flavour, policy, name)


def _v2_epilogue(program: Program) -> Unwinder:
    tables = _v2_unwinder(program, "clang", "drop", "v2")

    def same_function(pc: int, target: int) -> bool:
        here = tables.reader.lookup(pc - program.text_base)
        there = tables.reader.lookup(target - program.text_base)
        return here is not None and there is not None and here.function_index == there.function_index

    return EpilogueFirst(EpilogueSimulator(program.code, same_function), tables, "v2+epilogue")


def _dwarf(program: Program) -> Unwinder:
    return DwarfUnwinder(program.cfi["gcc"])


# v2: clang-style CFI (no epilogue rows), Chrome's `drop` policy.
# v2+epilogue: v2, plus simulating the epilogue ahead of the innermost pc.
# v2-synth: clang-style CFI plus epilogue rows synthesized from disassembly.
# v2-gcc: gcc-style CFI with epilogue rows, encoded with policy `keep`.
# dwarf: the gcc-style rows interpreted directly.
BUILDERS: dict[str, Callable[[Program], Unwinder]] = {
    "v2": _v2("v2", "clang", "drop"),
    "v2+epilogue": _v2_epilogue,
    "v2-synth": _v2("v2-synth", "clang", "synthesize"),
    "v2-gcc": _v2("v2-gcc", "gcc", "keep"),
    "dwarf": _dwarf,
}
UNWINDER_NAMES = tuple(BUILDERS)


def build_unwinders(program: Program, names=UNWINDER_NAMES) -> list[Unwinder]:
    return [BUILDERS[name](program) for name in names]
