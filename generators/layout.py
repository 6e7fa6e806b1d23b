"""Plans -> a Program: place functions (some across 128 KiB page boundaries),
assemble each at its address, then derive positions, traits, the two CFI
flavours and the EHABI sections a compiler would emit from the instructions as
placed."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from generators import frame_model as fx
from generators.assembler import AssemblyError, assemble
from generators.ehabi_writer import Inexpressible, frame_instructions, write_exidx
from generators.functions import MASK, Insn, Plan, evaluate, instructions
from harness.classify import PAGE, FrameFacts, FunctionInfo, traits_of
from harness.program import CfiRow, ExidxSections, FunctionCfi, Program

TEXT_BASE = 0x00100000
ALIGN = 4
FILL = b"\x00\xde"  # udf #0: padding that must never run


@dataclass(frozen=True)
class Placed:
    """One instruction as assembled: where it is and how long."""

    insn: Insn
    address: int
    size: int


def _size(code: bytes) -> int:
    """Bytes of the Thumb instruction `code` starts with: a first half-word
    whose top five bits are 11101, 11110 or 11111 begins a 32-bit one."""
    return 4 if code[1] >> 3 in (0x1D, 0x1E, 0x1F) else 2


def _chunks(insns: list[Insn]) -> list[list[Insn]]:
    """Split at fillers: keystone shifts absolute branch targets that follow a
    `.space`, so fillers are written here and each chunk assembled alone."""
    chunks: list[list[Insn]] = [[]]
    for insn in insns:
        if insn.role == "filler":
            chunks.append([])
        else:
            chunks[-1].append(insn)
    return chunks


def _assemble_function(name: str, insns: list[Insn], start: int,
                       addresses: dict[str, int]) -> tuple[bytes, list[Placed]]:
    """Machine code of one function at `start`, and where each instruction went.

    Records the address of chunk k as "name#k" in `addresses` (callers run
    this twice: first to learn sizes, then with every address known).
    """
    fillers = [i.filler for i in insns if i.role == "filler"]
    code = bytearray()
    placed: list[Placed] = []
    for index, chunk in enumerate(_chunks(insns)):
        if index:
            code += FILL * (fillers[index - 1] // 2)
            addresses[f"{name}#{index}"] = start + len(code)
        at = start + len(code)
        piece = assemble([i.source(addresses) for i in chunk if i.role != "label" or i.text],
                         at)
        offset = 0
        for insn in chunk:
            size = 0 if insn.role == "label" else _size(piece[offset:])
            placed.append(Placed(insn, at + offset, size))
            offset += size
        if offset != len(piece):
            raise AssemblyError(f"{name}: instruction walk ended at {offset} of {len(piece)} bytes")
        code += piece
    return bytes(code), placed


def cfi_rows(placed: list[Placed], start: int, end: int, flavour: str) -> tuple[CfiRow, ...]:
    """Rows from the instructions' frame effects.

    `gcc`: every effect, and after each unconditional return the state of the
    body before that epilogue (remember/restore state). `clang`: prologue
    effects only, as clang emits for arm32.
    """
    state = fx.FrameState()
    rows = [state.row(start)]
    remembered: fx.FrameState | None = None
    for p in placed:
        role = p.insn.role
        if flavour == "clang" and role != "prologue":
            continue
        before = state
        if role == "teardown" and remembered is None:
            remembered = state
        if role == "return":
            state = remembered if remembered is not None else state
            remembered = None
        elif p.insn.effect is not None:
            state = p.insn.effect(state)
        after = p.address + p.size
        if state.row(after) != before.row(after) and after < end:  # depth alone is no row
            rows.append(state.row(after))
    return tuple(rows)


def _positions(placed: list[Placed], start: int) -> tuple[int, tuple[tuple[int, int], ...]]:
    prologue_end = start
    epilogues: list[tuple[int, int]] = []
    open_at: int | None = None
    for p in placed:
        role = p.insn.role
        if role == "prologue":
            prologue_end = p.address + p.size
        elif role == "teardown" and open_at is None:
            open_at = p.address
        elif role in ("return", "cond_return"):
            epilogues.append((open_at if open_at is not None else p.address, p.address + p.size))
            open_at = None
    return prologue_end, tuple(epilogues)


def _facts(plan: Plan) -> FrameFacts:
    """The frame of a function as its plan made it."""
    return FrameFacts(frame_pointer=plan.frame_pointer, leaf=plan.leaf and not plan.saves_lr, alloca=plan.alloca,
                      frame_bytes=plan.locals, vfp=plan.vfp, epilogues=plan.epilogues)


def _padding_before(plan: Plan, address: int, size: int) -> int:
    if not plan.straddle:
        return 0
    boundary = TEXT_BASE + ((address + size // 2 - TEXT_BASE) // PAGE + 1) * PAGE
    return (boundary - size // 2) // ALIGN * ALIGN - address


def body_instructions(function: FunctionCfi) -> bytes | None:
    """A compiler's EXIDX instructions for `function`: its frame state once the
    prologue is done, which is the last clang-style row (those rows hold
    prologue effects only); None (EXIDX_CANTUNWIND) where EHABI cannot say it."""
    row = function.rows[-1]
    if row.problem:
        return None
    try:
        return frame_instructions(row)
    except Inexpressible:
        return None


def exidx_sections(clang_rows: list[FunctionCfi], text_end: int) -> ExidxSections:
    """`.ARM.exidx` right after the text (4-aligned), `.ARM.extab` after it."""
    exidx_address = (text_end + 3) // 4 * 4
    extab_address = exidx_address + 8 * (len(clang_rows) + 1)  # one entry more: the final CANTUNWIND
    return write_exidx([(f.start, body_instructions(f)) for f in clang_rows],
                       exidx_address, extab_address, clang_rows[-1].end)


class _AnyAddress(dict):
    """Pass 1 address map: every target is the text base until placed."""

    def __missing__(self, key: str) -> int:
        return TEXT_BASE


def build_program(name: str, plans: list[Plan], entry: str, arg: int) -> Program:
    bodies = {plan.name: instructions(plan) for plan in plans}
    # Pass 1: sizes (calls and far branches have fixed-size encodings).
    dummy = _AnyAddress()
    sizes = {p.name: len(_assemble_function(p.name, bodies[p.name], TEXT_BASE, dummy)[0]) for p in plans}
    addresses: dict[str, int] = {}
    address = TEXT_BASE
    for plan in plans:
        address += _padding_before(plan, address, sizes[plan.name])
        addresses[plan.name] = address
        address = (address + sizes[plan.name] + ALIGN - 1) // ALIGN * ALIGN
    for key, value in dummy.items():  # chunks keep their offsets within the function
        if "#" in key:
            addresses[key] = addresses[key.split("#")[0]] + value - TEXT_BASE
    text = bytearray(FILL * ((address - TEXT_BASE) // 2))
    functions, clang_rows, gcc_rows = [], [], []
    # Pass 2: assemble in place, then read positions and CFI off the result.
    for plan in plans:
        start = addresses[plan.name]
        code, placed = _assemble_function(plan.name, bodies[plan.name], start, addresses)
        if len(code) != sizes[plan.name]:
            raise AssemblyError(f"{plan.name} changed size between passes")
        text[start - TEXT_BASE : start - TEXT_BASE + len(code)] = code
        end = start + len(code)
        prologue_end, epilogues = _positions(placed, start)
        functions.append(FunctionInfo(plan.name, start, end, prologue_end, epilogues,
                                      traits_of(_facts(plan), start, end, TEXT_BASE)))
        clang_rows.append(FunctionCfi(plan.name, start, end, cfi_rows(placed, start, end, "clang")))
        gcc_rows.append(FunctionCfi(plan.name, start, end, cfi_rows(placed, start, end, "gcc")))
    return Program(
        name=name,
        segments=((TEXT_BASE, bytes(text)),),
        entry=addresses[entry],
        text_base=TEXT_BASE,
        functions=tuple(functions),
        cfi={"tables": tuple(clang_rows), "reference": tuple(gcc_rows)},
        expected_result=expected_result(plans, entry, arg),
        uses_vfp=any(p.vfp for p in plans),
        args=(arg,),
        exidx=exidx_sections(clang_rows, address),
    )


def expected_result(plans: list[Plan], entry: str, arg: int) -> int:
    return _result_of_call({p.name: p for p in plans}, entry, arg, 0)


def _result_of_call(by_name: dict[str, Plan], name: str, a: int, depth: int) -> int:
    # Not a closure that calls itself: that is a reference cycle, which
    # would keep the plans until the cycle collector came by.
    return evaluate(by_name[name], a & MASK, depth, partial(_result_of_call, by_name))
