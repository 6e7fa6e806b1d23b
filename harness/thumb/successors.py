"""Where each instruction goes next on a path of the frame analysis
(harness.thumb.frame_analysis): both outcomes of a condition (IT blocks,
conditional branches, `cbz`; in ARM code any instruction's own), every
target of a branch table or computed goto, nothing after a return, a tail
call or a call that never returns.
A path remembers the condition it knows to hold or fail since flags were
last set (`Path.fact`), so that a second IT block under the same condition
is taken alike.
"""

from __future__ import annotations

from typing import Callable, Iterable, NamedTuple

from harness.registers import LR, PC, SP
from harness.thumb.branch_tables import CANNOT_FOLLOW, address_table, jump_table, ladder_start, offset_table
from harness.thumb.disasm import CC_ALWAYS, Instruction, decode_one
from harness.thumb.frame_effects import UNKNOWN, FrameState, Unknowable, after, torn_down

# Condition codes (ARM ARM A8.3): the inverse of c is c ^ 1; 14 is always.
ALWAYS = 14
_FLAG_SETTERS = ("cmp", "cmn", "tst", "teq")


class Body(NamedTuple):
    """One function's code: [start, end), how to read it, and the labels
    in it that the program's data holds (targets of a computed goto)."""

    start: int
    end: int
    code_at: Callable[[int, int], bytes]
    labels: tuple[int, ...] = ()
    noreturn: frozenset[int] = frozenset()  # functions that never return: a call to one ends the path
    arm: bool = False  # it starts in ARM state (glibc's string functions), not Thumb
    data: tuple[tuple[int, int], ...] = ()  # [low, high) of its bytes the mapping symbols call data
    # Its code from its start on, what an instruction's effect looks back at
    # (frame_effects: a `mov rX, sp` straight before a push): the bytes before
    # its start are another function's (its literal pool's 0x46ea reads as
    # `mov sl, sp`). None: code_at.
    own_code: Callable[[int, int], bytes] | None = None


class FromStart(NamedTuple):
    """`code_at` for the bytes at `start` and after it; KeyError before it
    (as before a program's first byte: disasm.decode_before goes on)."""

    start: int
    code_at: Callable[[int, int], bytes]

    def __call__(self, address: int, size: int) -> bytes:
        if address < self.start:
            raise KeyError(f"{address:#x} lies before the function at {self.start:#x}")
        return self.code_at(address, size)


class Path(NamedTuple):
    state: FrameState
    fact: tuple[int, bool] | None = None  # (condition, holds) known since flags were last set
    block: tuple[int, ...] = ()  # conditions of the IT block instructions still to come
    arm: bool = False  # in ARM state (from the function's entry, or past a Thumb `bx pc`)


def successors(insn: Instruction, path: Path, body: Body) -> Iterable[tuple[int, Path]]:
    """(address, path) pairs after `insn` on `path`: both outcomes of a
    conditional instruction, every target of a branch inside the function."""
    following = insn.address + insn.size
    if insn.arm:
        return _arm_successors(insn, path, body, following)
    if insn.op.startswith("it"):
        block = _it_conditions(body.code_at(insn.address, 2))
        if path.fact is not None and path.fact[0] >> 1 == block[0] >> 1:  # flags unchanged: taken alike
            return [(following, path._replace(block=block))]
        return [(following, path._replace(fact=(block[0], holds), block=block)) for holds in (True, False)]
    if path.block:
        condition, path = path.block[0], path._replace(block=path.block[1:])
        if not _holds(path.fact, condition):
            return [(following, path)]
    return _executed(insn, path, body, following)


def _arm_successors(insn: Instruction, path: Path, body: Body, following: int):
    """In ARM state there are no IT blocks: any instruction may carry a
    condition of its own (`ldmfdeq sp!, {r0, r4, pc}`), and runs or is
    passed over by it, as an IT block's one instruction would; a branch
    under a condition the path knows goes one way (`popcc {r8}; bcc`)."""
    if not insn.conditional:
        return _executed(insn, path, body, following)
    condition, runs = insn.cc - 1, insn._replace(cc=CC_ALWAYS)  # capstone numbers conditions from 1
    if path.fact is not None and path.fact[0] >> 1 == condition >> 1:  # flags unchanged: known
        return _executed(runs, path, body, following) if _holds(path.fact, condition) else [(following, path)]
    return [(following, path._replace(fact=(condition, False))),
            *_executed(runs, path._replace(fact=(condition, True)), body, following)]


def _holds(fact: tuple[int, bool] | None, condition: int) -> bool:
    """Does `condition` hold on a path that knows `fact` (set by the IT
    block the instruction is in, so about the same condition or its inverse)?"""
    if condition == ALWAYS or fact is None:
        return True
    known, value = fact
    return value if known == condition else not value


def _it_conditions(code: bytes) -> tuple[int, ...]:
    """The condition of each instruction an IT block governs."""
    first = int.from_bytes(code[:2], "little")
    firstcond, mask = (first >> 4) & 0xF, first & 0xF
    length = 4 - ((mask & -mask).bit_length() - 1)
    conditions = [firstcond]
    for index in range(1, length):
        bit = (mask >> (4 - index)) & 1
        conditions.append((firstcond & 0xE) | bit)
    return tuple(conditions)


def _executed(insn: Instruction, path: Path, body: Body, following: int):
    """Successors of `insn` when it runs."""
    start, end, code_at = body.start, body.end, body.code_at
    fact = None if _sets_flags(insn) else path.fact
    onward = Path(path.state if path.state == UNKNOWN else after(insn, path.state, body.own_code or code_at), fact,
                  path.block, path.arm)
    op = insn.op
    if op in ("cbz", "cbnz"):
        return [(insn.imm, onward), (following, onward)]
    if op in ("bl", "blx") and insn.imm in body.noreturn:
        return []  # never returns: the code after it is not this path's
    if (target := into_arm(insn)) is not None:
        if insn.address % 4:
            raise Unknowable(f"'{insn.text}' at a halfword: ARM code would start unaligned")
        if not start <= target < end:
            return []  # into another function's ARM code (a PLT entry behind its Thumb stub): a tail call
        return [(target, onward._replace(arm=True))]  # into ARM state (a veneer), same frame
    if op == "b":
        inside = start <= insn.imm < end
        if insn.conditional:  # b<c> outside an IT block: taken or not
            return ([(insn.imm, onward)] if inside else []) + [(following, onward)]
        return [(insn.imm, onward)] if inside else []  # out of the function: a tail call
    if op in ("tbb", "tbh"):
        return [(target, onward) for target in jump_table(insn, code_at, start, end)]
    if op == "ldr" and PC in insn.writes and insn.mem and insn.mem[0] != SP and not insn.arm:
        return [(target, onward) for target in address_table(insn, code_at, start, end)]
    if op == "bx" and insn.regs != (LR,) and not insn.arm:
        table = offset_table(insn, code_at, start, end)
        if table is not None:
            return [(target, onward) for target in table]
    if (op == "bx" or op == "mov" and PC in insn.writes) and insn.regs[-1] != LR \
            and start <= (ladder := ladder_start(insn, code_at) or -1) < end:
        return [(target, onward) for target in _ladder(ladder, body, insn.arm)]
    if (op == "bx" or op == "mov" and PC in insn.writes) and insn.regs[-1] != LR and not torn_down(path.state):
        # a jump through a register with the frame still set up is no tail
        # call: a computed goto (Lua's dispatch), to the labels data holds
        if not body.labels:
            raise Unknowable(f"'{insn.text}' jumps with the frame set up, and no data holds a label here")
        return [(label, onward) for label in body.labels]
    if op == "bx" or PC in insn.writes and op in ("pop", "ldr", "ldm", "mov"):
        return []  # a return (bx lr, pop {pc}...), or a tail call through a register (bx rN)
    if op in ("udf", "bkpt"):
        return []  # a trap: the path ends
    if insn.arm and op == "add" and insn.regs[:2] == (PC, PC) and insn.imm is None:
        return [(target, onward) for target in _ladder(following + 4, body, insn.arm)]
    if insn.transfers and op not in ("bl", "blx", "svc") or PC in insn.writes and op not in ("bl", "blx"):
        raise Unknowable(f"'{insn.text}' {CANNOT_FOLLOW}")
    return [(following, onward)]


def into_arm(insn: Instruction) -> int | None:
    """Where a Thumb `bx pc` goes on in ARM state (the word after it), or None for any other instruction."""
    return insn.address + 4 if insn.op == "bx" and insn.regs == (PC,) and not insn.arm else None


def _ladder(first: int, body: Body, arm: bool) -> Iterable[int]:
    """Where a jump into a ladder may land: glibc's memcpy and memmove (ARM:
    `add pc, pc, rN`, pc + 8 + rN) jump into a ladder of loads or stores
    right after it to copy the last few words, libgcc's Thumb-2 division
    into its unrolled loop (`ladder_start`). Taken as every instruction of
    the straight run from `first` up to the first that branches or moves
    sp (one frame throughout, so a landing anywhere in it has the frame the
    run has); a ladder of another shape is not told apart, and ground truth
    judges."""
    address = first
    while address < body.end:
        yield address
        insn = decode_one(body.code_at(address, 4), address, arm)
        if insn is None or insn.transfers or SP in insn.writes or PC in insn.writes:
            return
        address += insn.size


def _sets_flags(insn: Instruction) -> bool:
    return -1 in insn.writes or insn.op in _FLAG_SETTERS or (insn.op.endswith("s") and not insn.op.startswith("v"))


