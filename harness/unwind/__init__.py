"""Unwinding strategies, built by name for a program (names in ARCHITECTURE.md).

One module per strategy: v2, v2_epilogue, v2_chrome, dwarf, v1, exidx, framepointer,
vmkunwind, qut, scan (and the chain);
beside them the frame and stack reader (frame), the unwinder protocol and
the walk (walk), the kernel's rules (rule) and the EHABI step v2 and exidx
share (ehabi_run)."""

from __future__ import annotations

from array import array
from typing import Callable

from harness import table_cache
from harness.errors import EncodeError
from harness.formats import chrome_v2
from harness.formats.arm_exidx import parse_sections
from harness.formats.call_sites import CallSites, encode_call_sites, mapped_return_addresses, return_addresses
from harness.formats.chrome_v1 import V1Table, encode_v1
from harness.formats.qut import QutTable, encode_from_cfi, encode_from_exidx
from harness.formats.vmkunwind import VmkTable, encode_vmkunwind
from harness.program import CodeMap, FunctionCfi, Program
from harness.thumb.discovery import analyse_all
from harness.unwind.dwarf import DwarfUnwinder
from harness.unwind.exidx import ExidxUnwinder, exidx_unwinder_for
from harness.unwind.framepointer import FramePointerUnwinder
from harness.unwind.qut import QutUnwinder
from harness.unwind.scan import ChainUnwinder, ScanUnwinder
from harness.unwind.v1 import V1Unwinder
from harness.unwind.v2 import V2Unwinder
from harness.unwind.v2_chrome import ChromeV2Unwinder
from harness.unwind.v2_epilogue import EpilogueFirst, EpilogueSimulator
from harness.unwind.vmkunwind import VmkunwindUnwinder
from harness.unwind.walk import ALL_CALLEE_SAVED, Restores, Unwinder


def _v2_unwinder(program: Program, flavour: str, policy: str, name: str) -> Unwinder:
    if flavour == "code" and program.code_map is not None:  # an ELF module's: kept (harness.table_cache)
        blob = table_cache.cached(_code_key(program, policy), lambda: _v2_blob(program, flavour, policy))
    else:
        blob = _v2_blob(program, flavour, policy)
    if blob is None:  # no Thumb function found (a stripped executable): no tables
        return DwarfUnwinder((), name)
    # Through the bytes, so the verified path is the one a device would run.
    return V2Unwinder(chrome_v2.V2Reader.from_blob(blob, "seed"), program.text_base, name)


def _v2_blob(program: Program, flavour: str, policy: str) -> bytes | None:
    functions = code_cfi(program) if flavour == "code" else program.cfi[flavour]
    return chrome_v2.encode(functions, program.text_base, policy, code_at=program.code).blob("seed") \
        if functions else None


def _code_key(program: Program, policy: str) -> str:
    """What v2-code's table of `program` depends on: its code where it is
    loaded, its code map, the policy."""
    return table_cache.key_of("v2-code", policy, program.text_base, repr(program.code_map),
                              *(part for start, data in program.segments for part in (start, data)))


def _v2(name: str, flavour: str, policy: str) -> Callable[[Program], Unwinder]:
    return lambda program: _v2_unwinder(program, flavour, policy, name)


def code_cfi(program: Program) -> tuple[FunctionCfi, ...]:
    """Rows from the program's machine code alone, per Thumb function (by
    symbol; a generated program's by its layout), no unwind table read."""
    code_map = program.code_map or CodeMap(tuple((f.start, f.end, f.name) for f in program.functions))
    return tuple(f for f in analyse_all(code_map, program.code) if f.start >= program.text_base)


def _v2_epilogue(program: Program, tables: Unwinder | None = None) -> Unwinder:
    """v2's tables (`tables`, where v2 is built already) under the simulation."""
    tables = tables or _v2_unwinder(program, "tables", "drop", "v2")

    def same_function(pc: int, target: int) -> bool:
        here = tables.reader.lookup(pc - program.text_base)
        there = tables.reader.lookup(target - program.text_base)
        return here is not None and there is not None and here.function_index == there.function_index

    reader = getattr(tables, "reader", None)  # none where the program has no tables
    starts, end = reader.function_starts() if reader is not None else ([], 0)
    functions = (array("q", [program.text_base + start for start in starts]), program.text_base + end) if starts \
        else None
    return EpilogueFirst(EpilogueSimulator(program.code, same_function, program.segments, functions), tables,
                         "v2+epilogue")


def _v2_chrome(program: Program) -> Unwinder:
    """Chrome's builder over `tables` (its own rules for each row) and
    Chrome's runtime over the chrome-layout blob."""
    if not program.cfi["tables"]:
        return DwarfUnwinder((), "v2-chrome")
    try:
        blob = chrome_v2.encode_as_chrome(program.cfi["tables"], program.text_base).blob()
    except EncodeError:  # no function Chrome writes an entry for
        return DwarfUnwinder((), "v2-chrome")
    return ChromeV2Unwinder(chrome_v2.V2Reader.from_blob(blob, "chrome"), program.text_base)


def _dwarf(program: Program) -> Unwinder:
    return DwarfUnwinder(program.cfi["reference"])


def _v1(program: Program) -> Unwinder:
    blob = encode_v1(program.cfi["tables"], program.text_base).blob
    return V1Unwinder(V1Table.from_blob(blob), program.text_base)  # through the bytes, as for v2


def _vmkunwind(program: Program) -> Unwinder:
    blob = encode_vmkunwind(program.cfi["reference"], program.text_base).blob
    return VmkunwindUnwinder(VmkTable.from_blob(blob), program.text_base)  # through the bytes


def qut_tables(program: Program):
    """QUT as Matrix builds it for a module: from its CFI where it has
    some, else from its `.ARM.exidx` (harness.formats.qut.QutEncoded)."""
    if program.cfi["reference"] or program.exidx is None:
        return encode_from_cfi(program.cfi["reference"], program.text_base)
    return encode_from_exidx(parse_sections(program.exidx), program.exidx.end, program.text_base)


def _qut(program: Program) -> Unwinder:
    encoded = qut_tables(program)
    return QutUnwinder(QutTable.from_blob(encoded.blob), program.text_base, encoded.source)  # through the bytes


def call_site_addresses(program: Program) -> list[int]:
    """The return addresses the calls in `program`'s code leave (its
    executable sections, ARM where its symbols say so; a generated
    program's functions)."""
    code_map = program.code_map
    if code_map is None or not code_map.ranges:
        return return_addresses(program.code, [(f.start, f.end) for f in program.functions])
    return mapped_return_addresses(code_map, lambda address, size: _code_or_nothing(program, address, size))


def _code_or_nothing(program: Program, address: int, size: int) -> bytes:
    try:
        return program.code(address, size)
    except KeyError:  # a section the loaded segments do not hold
        return b""


def _scan(program: Program) -> Unwinder:
    blob = encode_call_sites(call_site_addresses(program), program.text_base)
    sites = CallSites.from_blob(blob)  # through the bytes
    return ScanUnwinder(program.text_base + offset for offset in sites.offsets)


CHAIN = ("v2", "exidx", "framepointer", "scan")  # what a profiler ships, in the order it tries them


def _chain(program: Program) -> Unwinder:
    return ChainUnwinder([BUILDERS[name](program) for name in CHAIN])


def _exidx(program: Program) -> Unwinder:
    if program.exidx is None:
        return ExidxUnwinder((), "exidx")  # no tables: no_info everywhere
    return exidx_unwinder_for(program.exidx)


# A program carries two CFI flavours: `tables`, what v2 is built from (for
# generated programs clang style, without epilogue rows), and `reference`,
# complete CFI (generated: gcc style, with epilogue rows; an ELF's own CFI
# serves as both).
# v2: `tables`, Chrome's `drop` policy.
# v2+epilogue: v2, plus simulating the epilogue ahead of the innermost pc.
# v2-synth: `tables` plus epilogue rows synthesized from disassembly.
# v2-gcc: `reference` encoded with policy `keep`.
# v2-code: rows synthesized from the machine code alone (harness.thumb.frame_analysis), policy `keep`.
# v2-chrome: `tables` as Chrome's builder encodes them, run as Chrome's runtime does (pc, sp, r4-r11).
# dwarf: the `reference` rows interpreted directly.
# v1: Chrome's first format, built from `tables` (pc and sp only).
# exidx: the program's .ARM.exidx/.ARM.extab (the body state of each function).
# framepointer: the r7 chain of {r7, lr} records (pc, sp and r7 only).
# vmkunwind: VMware's triple per address range, from the `reference` rows (pc, sp and r7 only).
# qut: WeChat's Quicken Unwind Tables, from `reference` or else the EXIDX (pc, sp, r4, r7, r10, r11).
# scan: the first word up the stack that follows a call (pc and sp only).
# chain: v2, exidx, framepointer, scan: each where the one before has no entry or fails (pc and sp only).
BUILDERS: dict[str, Callable[[Program], Unwinder]] = {
    "v2": _v2("v2", "tables", "drop"),
    "v2+epilogue": _v2_epilogue,
    "v2-synth": _v2("v2-synth", "tables", "synthesize"),
    "v2-gcc": _v2("v2-gcc", "reference", "keep"),
    "v2-code": _v2("v2-code", "code", "keep"),
    "v2-chrome": _v2_chrome,
    "dwarf": _dwarf,
    "v1": _v1,
    "exidx": _exidx,
    "framepointer": lambda program: FramePointerUnwinder(),
    "vmkunwind": _vmkunwind,
    "qut": _qut,
    "scan": _scan,
    "chain": _chain,
}
UNWINDER_NAMES = tuple(BUILDERS)
# What Chrome ships, and other formats, beside v2.
COMPARATORS = ("v2-chrome", "v1", "exidx", "framepointer", "vmkunwind", "qut", "scan", "chain")
# What each is checked on besides pc and sp (see harness.unwind.walk.Restores).
RESTORES: dict[str, Restores] = {
    **dict.fromkeys(BUILDERS, ALL_CALLEE_SAVED),
    "v1": V1Unwinder.restores,
    "v2-chrome": ChromeV2Unwinder.restores,
    "framepointer": FramePointerUnwinder().restores,
    "vmkunwind": VmkunwindUnwinder.restores,
    "qut": QutUnwinder.restores,
    "scan": ScanUnwinder.restores,
    "chain": ChainUnwinder.restores,
}


def build_unwinders(program: Program, names=UNWINDER_NAMES) -> list[Unwinder]:
    """The unwinders `names` over `program`'s tables. The chain's methods,
    and v2+epilogue's tables, are the unwinders of those names where they
    are built too: their tables are built once, and the rules of their rows
    made once."""
    built: dict[str, Unwinder] = {}
    for name in names:
        if name == "chain":
            built[name] = ChainUnwinder([built.get(method) or BUILDERS[method](program) for method in CHAIN])
        elif name == "v2+epilogue":
            built[name] = _v2_epilogue(program, built.get("v2"))
        else:
            built[name] = BUILDERS[name](program)
    return [built[name] for name in names]


def with_v2_tables(unwinders: list[Unwinder], reader: chrome_v2.V2Reader, text_base: int,
                   layout: str = "seed") -> list[Unwinder]:
    """`unwinders` with given v2 tables standing in for the ones built from
    the CFI (in `v2`, and under `v2+epilogue`'s simulation; a chrome-layout
    blob, one Chrome built say, also in `v2-chrome`, run as Chrome runs it)."""
    given = V2Unwinder(reader, text_base, "v2")
    replaced = []
    for unwinder in unwinders:
        if unwinder.name == "v2":
            unwinder = given
        elif unwinder.name == "v2+epilogue":
            unwinder = EpilogueFirst(unwinder.simulator, given, unwinder.name)
        elif unwinder.name == "v2-chrome" and layout == "chrome":
            unwinder = ChromeV2Unwinder(reader, text_base)
        replaced.append(unwinder)
    return replaced
