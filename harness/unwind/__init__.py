"""Unwinding strategies, built by name for a program (names in ARCHITECTURE.md),
and the harness's own entries in the registry (harness.unwind.registry):
every unwinder and every table format it writes, declared once, here.

One module per strategy: v2, v2_epilogue, v2_chrome, dwarf, v1, exidx, framepointer,
vmkunwind, qut, scan (and the chain);
beside them the frame and stack reader (frame), the unwinder protocol and
the walk (walk), the kernel's rules (rule) and the EHABI step v2 and exidx
share (ehabi_run)."""

from __future__ import annotations

import sys
import time
from array import array
from pathlib import Path
from typing import Callable, Sequence

from harness import table_cache
from harness.errors import EncodeError, InputError
from harness.formats import chrome_v2
from harness.formats.arm_exidx import parse_sections
from harness.formats.call_sites import (
    CallSites,
    dump_call_sites,
    encode_call_sites,
    mapped_return_addresses,
    return_addresses,
)
from harness.formats.chrome_v1 import V1Table, dump_v1, encode_v1
from harness.formats.chrome_v2.grouping import epilogues_inside
from harness.formats.qut import QutTable, dump_qut, encode_from_cfi, encode_from_exidx
from harness.formats.vmkunwind import VmkTable, dump_vmkunwind, encode_vmkunwind
from harness.program import CodeMap, FunctionCfi, Program
from harness.registers import SP
from harness.thumb.discovery import Progress, analyse_all
from harness.thumb.native import ProgramCode
from harness.unwind import writers
from harness.unwind.dwarf import DwarfUnwinder
from harness.unwind.exidx import ExidxUnwinder, exidx_unwinder_for
from harness.unwind.framepointer import FramePointerUnwinder
from harness.unwind.qut import QutUnwinder
from harness.unwind.registry import (
    CHAIN,
    ENCODE_OPTIONS,
    Measured,
    Strategy,
    TableFormat,
    UnwinderOf,
    register,
    strategy,
)
from harness.unwind.scan import ChainUnwinder, ScanUnwinder
from harness.unwind.v1 import V1Unwinder
from harness.unwind.v2 import V2Unwinder, v2_over_tables
from harness.unwind.v2_chrome import ChromeV2Unwinder
from harness.unwind.v2_epilogue import EpilogueFirst, EpilogueSimulator
from harness.unwind.vmkunwind import VmkunwindUnwinder
from harness.unwind.walk import ALL_CALLEE_SAVED, Unwinder


def _v2_unwinder(program: Program, flavour: str, policy: str, name: str) -> Unwinder:
    if flavour == "code" and program.code_map is not None:  # an ELF module's: kept (harness.table_cache)
        blob = table_cache.cached(_code_key(program, policy),
                                  lambda: _v2_blob(program, flavour, policy, AnalysisNote(program.name)))
    else:
        blob = _v2_blob(program, flavour, policy)
    if blob is None:  # no Thumb function found (a stripped executable): no tables
        return DwarfUnwinder((), name)
    # Through the bytes, so the verified path is the one a device would run.
    return v2_over_tables(chrome_v2.read_tables(blob, "seed")[0], program.text_base, name)


def _v2_blob(program: Program, flavour: str, policy: str, progress: Progress | None = None) -> bytes | None:
    """The v2 table of `program`'s rows; for rows from its code, where one
    table cannot hold them, a parts file of several (v2+epilogue reads
    the CFI flavours' one table)."""
    if flavour != "code":
        functions = program.cfi[flavour]
        return chrome_v2.encode(functions, program.text_base, policy, code_at=program.code).blob("seed") \
            if functions else None
    functions = code_cfi(program, progress)
    return chrome_v2.parts_blob(chrome_v2.encode_parts(functions, program.text_base, policy, code_at=program.code),
                                "seed") if functions else None


def _code_key(program: Program, policy: str) -> str:
    """What v2-code's table of `program` depends on: its code where it is
    loaded, its code map, the policy."""
    return table_cache.key_of("v2-code", policy, program.text_base, repr(program.code_map),
                              *(part for start, data in program.segments for part in (start, data)))


def _v2(name: str, flavour: str, policy: str) -> Callable[[Program], Unwinder]:
    return lambda program: _v2_unwinder(program, flavour, policy, name)


def code_cfi(program: Program, progress: Progress | None = None) -> tuple[FunctionCfi, ...]:
    """Rows from the program's machine code alone, per Thumb function (by
    symbol; a generated program's by its layout), no unwind table read."""
    code_map = program.code_map or CodeMap(tuple((f.start, f.end, f.name) for f in program.functions))
    code_at = ProgramCode(program.segments, missing=True)  # Program.code's reads, with the compiled analysis
    return tuple(f for f in analyse_all(code_map, code_at, progress) if f.start >= program.text_base)


class AnalysisNote:
    """Progress of a module's analysis on stderr (v2-code's tables of a
    library met for the first time: a large one takes a while), once it
    has taken NOTE_AFTER seconds, then every NOTE_EVERY; quiet for the
    quick ones."""

    def __init__(self, module: str):
        self.module, self.started = Path(module).name, time.monotonic()
        self.next = self.started + NOTE_AFTER

    def __call__(self, analysed: int, known: int) -> None:
        now = time.monotonic()
        if now >= self.next:
            print(f"unwind-harness: v2-code: making {self.module}'s tables from its code (kept for later runs): "
                  f"{analysed:,} of {known:,} function starts analysed, {now - self.started:.0f} s", file=sys.stderr)
            self.next = now + NOTE_EVERY


NOTE_AFTER, NOTE_EVERY = 2.0, 10.0


def _v2_epilogue(program: Program, tables: Unwinder) -> Unwinder:
    """v2's tables under the simulation."""

    def same_function(pc: int, target: int) -> bool:
        here = tables.reader.lookup(pc - program.text_base)
        there = tables.reader.lookup(target - program.text_base)
        return here is not None and there is not None and here.function_index == there.function_index

    reader = tables.reader  # none where the program has no tables
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


def _chrome_over_given(built: Unwinder, given: Unwinder, layout: str) -> Unwinder:
    """A chrome-layout blob (one Chrome built, say) run as Chrome runs it."""
    return ChromeV2Unwinder(given.reader, given.text_base) if layout == "chrome" else built


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


def _chain(program: Program, unwinder_of: UnwinderOf) -> Unwinder:
    return ChainUnwinder([unwinder_of(name) for name in CHAIN])


def _exidx(program: Program) -> Unwinder:
    if program.exidx is None:
        return ExidxUnwinder((), "exidx")  # no tables: no_info everywhere
    return exidx_unwinder_for(program.exidx)


def _process_scan(programs: Sequence[Program]) -> Unwinder:
    return ScanUnwinder(address for program in programs for address in call_site_addresses(program))


def has_epilogue_cfi(program: Program) -> bool:
    """Does the compiler describe its epilogues (a row that shrinks the frame)?"""
    for function in program.cfi["reference"]:
        for previous, row in zip(function.rows, function.rows[1:]):
            if row.cfa_reg == previous.cfa_reg == SP and row.cfa_offset < previous.cfa_offset:
                return True
    return False


def _has_cfi(program: Program) -> bool:
    return bool(program.cfi.get("reference"))


def _has_code_to_start_from(program: Program) -> bool:
    """Any Thumb function to start from: a symbol, or data pointing at one."""
    code_map = program.code_map
    return code_map is not None and (bool(code_map.spans) or any(word & 1 for word in code_map.pointers))


def _alone(build: Callable[[Program], Unwinder]) -> Callable[[Program, UnwinderOf], Unwinder]:
    """A strategy built from its program alone."""
    return lambda program, unwinder_of: build(program)


# A program carries two CFI flavours: `tables`, what v2 is built from (for
# generated programs clang style, without epilogue rows), and `reference`,
# complete CFI (generated: gcc style, with epilogue rows; an ELF's own CFI
# serves as both). Each strategy below, in the order the reports show them:
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
register(
    Strategy("v2", _alone(_v2("v2", "tables", "drop")), ALL_CALLEE_SAVED, _has_cfi, chain_place=0,
             size_column="v2 drop", compared=True, over_given_v2=lambda built, given, layout: given),
    Strategy("v2+epilogue", lambda program, unwinder_of: _v2_epilogue(program, unwinder_of("v2")),
             ALL_CALLEE_SAVED, _has_cfi,
             over_given_v2=lambda built, given, layout: EpilogueFirst(built.simulator, given, built.name)),
    Strategy("v2-synth", _alone(_v2("v2-synth", "tables", "synthesize")), ALL_CALLEE_SAVED, _has_cfi),
    Strategy("v2-gcc", _alone(_v2("v2-gcc", "reference", "keep")), ALL_CALLEE_SAVED, _has_cfi,
             only_where=has_epilogue_cfi),  # elsewhere its input is v2's
    Strategy("v2-code", _alone(_v2("v2-code", "code", "keep")), ALL_CALLEE_SAVED, _has_code_to_start_from),
    Strategy("v2-chrome", _alone(_v2_chrome), ChromeV2Unwinder.restores,  # the executable's tables alone
             over_given_v2=_chrome_over_given),
    Strategy("dwarf", _alone(_dwarf), ALL_CALLEE_SAVED, _has_cfi),
    Strategy("v1", _alone(_v1), V1Unwinder.restores, _has_cfi, size_column="v1", compared=True),
    Strategy("exidx", _alone(_exidx), ALL_CALLEE_SAVED, lambda program: program.exidx is not None, chain_place=1,
             size_column="exidx+extab", compared=True),
    Strategy("framepointer", _alone(lambda program: FramePointerUnwinder()), FramePointerUnwinder().restores,
             signal_frames=False, chain_place=2, compared=True),
    Strategy("vmkunwind", _alone(_vmkunwind), VmkunwindUnwinder.restores, _has_cfi, size_column="vmkunwind",
             compared=True),
    Strategy("qut", _alone(_qut), QutUnwinder.restores,  # from the CFI, else the EXIDX (qut_tables)
             lambda program: program.exidx is not None or _has_cfi(program), size_column="qut", compared=True),
    Strategy("scan", _alone(_scan), ScanUnwinder.restores, process_build=_process_scan, signal_frames=False,
             chain_place=3, size_column="call sites", compared=True),
    Strategy("chain", _chain, ChainUnwinder.restores, signal_frames=False, compared=True),
)


def _v2_sizes(program: Program, layout: str) -> Measured:
    """v2 under each epilogue policy, each from the CFI flavour its unwinder
    reads; the design's units (functions, address entries) from `drop`."""
    sizes, counts = {}, {"functions": 0, "addresses": 0, "epilogues_inside": 0}
    for policy, flavour in POLICY_SOURCES.items():
        encoded = chrome_v2.encode(program.cfi[flavour], program.text_base, policy, code_at=program.code,
                                   layout=layout)
        sizes[f"v2 {policy}"] = len(encoded.blob())
        if policy == "drop":
            counts["functions"], counts["addresses"] = len(encoded.functions), encoded.addresses
        elif policy == "synthesize":
            counts["epilogues_inside"] = sum(epilogues_inside(f) for f in encoded.functions)
    return Measured(sizes, counts)


def _v1_sizes(program: Program, layout: str) -> Measured:
    v1 = encode_v1(program.cfi["tables"], program.text_base)
    return Measured({"v1": len(v1.blob)}, {"v1_refused": len(v1.refused)})


def _sized(column: str, blob_of: Callable[[Program], bytes]) -> Callable[[Program, str], Measured]:
    return lambda program, layout: Measured({column: len(blob_of(program))}, {})


# The formats this tool writes, in the size table's order (after the
# compiler's own .debug_frame and .ARM.exidx + .ARM.extab).
POLICY_SOURCES = {"drop": "tables", "keep": "reference", "synthesize": "tables"}  # the CFI each v2 policy reads
register(
    TableFormat("v1", "Chrome's earlier format", ("v1",), _v1_sizes, writers.write_v1, frozenset({"from-code"}),
                V1Table.from_blob, dump_v1),
    TableFormat("v2", "the default", tuple(f"v2 {policy}" for policy in POLICY_SOURCES), _v2_sizes, writers.write_v2,
                frozenset(ENCODE_OPTIONS)),  # dump: by layout
    TableFormat("vmkunwind", "VMware's triples, adapted to ARM", ("vmkunwind",),
                _sized("vmkunwind", lambda p: encode_vmkunwind(p.cfi["reference"], p.text_base).blob),
                writers.write_vmkunwind, read=VmkTable.from_blob, listing=dump_vmkunwind),
    TableFormat("qut", "WeChat's Quicken Unwind Tables; from the .ARM.exidx where the ELF has no CFI", ("qut",),
                _sized("qut", lambda p: qut_tables(p).blob), writers.write_qut, read=QutTable.from_blob,
                listing=dump_qut),
    TableFormat("call-sites", "the return addresses a stack scan accepts", ("call sites",),
                _sized("call sites", lambda p: encode_call_sites(call_site_addresses(p), p.text_base)),
                writers.write_call_sites, read=CallSites.from_blob, listing=dump_call_sites),
)


def with_v2_tables(unwinders: list[Unwinder], tables: Sequence[tuple[int, chrome_v2.V2Reader]], text_base: int,
                   layout: str = "seed") -> list[Unwinder]:
    """`unwinders` with given v2 tables ((text offset, reader) pairs: a
    blob's one, or a parts file's) standing in for the ones they built
    (Strategy.over_given_v2); v2 alone runs several."""
    given = v2_over_tables(tables, text_base, "v2")
    over = {unwinder.name: strategy(unwinder.name).over_given_v2 for unwinder in unwinders}
    one_table = [name for name, over_given in over.items() if over_given is not None and name != "v2"]
    if len(tables) > 1 and one_table:
        raise InputError(f"{', '.join(one_table)} run one v2 table, and the parts file given holds {len(tables)}: "
                         "verify v2 alone with it (--unwinder v2)")
    return [unwinder if over[unwinder.name] is None else over[unwinder.name](unwinder, given, layout)
            for unwinder in unwinders]
