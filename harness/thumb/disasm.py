"""Capstone behind one function: Thumb-2 (or ARM) bytes -> plain
instruction records."""

from __future__ import annotations

from typing import NamedTuple

from capstone import (
    CS_ARCH_ARM,
    CS_GRP_CALL,
    CS_GRP_INT,
    CS_GRP_JUMP,
    CS_GRP_RET,
    CS_MODE_ARM,
    CS_MODE_THUMB,
    Cs,
    CsError,
)
from capstone import _cs as capstone_library
from capstone import arm as cs_arm

from harness.registers import DWARF_D0, PC, SP

_CS = Cs(CS_ARCH_ARM, CS_MODE_THUMB)
_CS.detail = True
_CS_ARM = Cs(CS_ARCH_ARM, CS_MODE_ARM)  # glibc's string functions, _dl_runtime_resolve...
_CS_ARM.detail = True
CC_ALWAYS = cs_arm.ARM_CC_AL
# The library the capstone package loaded: the compiled frame analysis
# (harness.thumb.native) decodes with the same one.
CAPSTONE_LIBRARY = capstone_library._name
_NAMED = {"sb": 9, "sl": 10, "fp": 11, "ip": 12, "sp": 13, "lr": 14, "pc": 15}


class Instruction(NamedTuple):
    address: int
    size: int
    op: str  # mnemonic without width (.w) or condition suffix: "pop", "add", "vpop"...
    regs: tuple[int, ...]  # register operands in order (d registers as 256 + n)
    imm: int | None  # the immediate operand, if any
    mem: tuple[int, int] | None  # (base register, displacement) of a memory operand
    post_index: bool
    cc: int  # capstone condition code; CC_ALWAYS outside IT blocks it can see
    text: str
    writes: tuple[int, ...] = ()  # registers written, explicitly or not (s/q registers as their d registers)
    transfers: bool = False  # branches, calls or returns
    reads_pc: bool = False  # explicitly or not (pc-relative loads and adr)
    arm: bool = False  # decoded in ARM state: every instruction may be conditional, pc reads 8 ahead

    @property
    def conditional(self) -> bool:
        return self.cc != CC_ALWAYS


def pc_base(insn: Instruction) -> int:
    """What pc reads as in `insn`'s pc-relative operands (a literal load,
    `adr`): Align(address + 4, 4) in Thumb, address + 8 in ARM."""
    return insn.address + 8 if insn.arm else (insn.address + 4) & ~3


def register_number(name: str) -> int | None:
    """r0-r15 by either name (`r12` or `ip`), else None."""
    if name in _NAMED:
        return _NAMED[name]
    return int(name[1:]) if name[:1] == "r" and name[1:].isdigit() else None


def _reg(name: str) -> int:
    number = register_number(name)
    if number is not None:
        return number
    if name[0] == "d":
        return DWARF_D0 + int(name[1:])
    return -1  # a register this tool does not model (s registers, APSR...)


_NUMBERS: dict[int, int] = {}  # capstone register id -> _reg of its name


def _number(insn, register: int) -> int:
    number = _NUMBERS.get(register)
    if number is None:
        number = _NUMBERS[register] = _reg(insn.reg_name(register))
    return number


_WRITTEN: dict[int, tuple[int, ...]] = {}  # capstone register id -> what a write to it changes


def _written(insn, register: int) -> tuple[int, ...]:
    """Registers a write to `register` changes, with s and q registers as
    the d registers they are part of."""
    found = _WRITTEN.get(register)
    if found is None:
        found = _WRITTEN[register] = _written_by_name(insn.reg_name(register))
    return found


def _written_by_name(name: str) -> tuple[int, ...]:
    if name[0] == "s" and name[1:].isdigit():
        return (DWARF_D0 + int(name[1:]) // 2,)
    if name[0] == "q" and name[1:].isdigit():
        return (DWARF_D0 + 2 * int(name[1:]), DWARF_D0 + 2 * int(name[1:]) + 1)
    return (_reg(name),)


_TRANSFERS = frozenset((CS_GRP_JUMP, CS_GRP_CALL, CS_GRP_RET, CS_GRP_INT))


def _plain(mnemonic: str, conditional: bool) -> str:
    """"popne" -> "pop", "add.w" -> "add", "addw" (imm12 form) -> "add"."""
    op = mnemonic.split(".")[0]
    op = op[:-2] if conditional else op
    return op[:-1] if op in ("addw", "subw") else op


def decode(code: bytes, address: int, count: int = 0, arm: bool = False) -> list[Instruction]:
    """Up to `count` instructions (0: as many as decode) from `code` at `address`
    (in ARM state with `arm`); decoding stops at the first undecodable bytes."""
    out = []
    try:
        for insn in (_CS_ARM if arm else _CS).disasm(code, address, count):
            regs, imm, mem = [], None, None
            for operand in insn.operands:
                if operand.type == cs_arm.ARM_OP_REG:
                    regs.append(_number(insn, operand.reg))
                elif operand.type == cs_arm.ARM_OP_IMM:
                    imm = operand.imm
                elif operand.type == cs_arm.ARM_OP_MEM:
                    mem = (_number(insn, operand.mem.base), operand.mem.disp)
            conditional = insn.cc not in (CC_ALWAYS, cs_arm.ARM_CC_INVALID)
            read, written = insn.regs_access()
            out.append(Instruction(
                insn.address, insn.size, _plain(insn.mnemonic, conditional and insn.id != cs_arm.ARM_INS_IT),
                tuple(regs), imm, mem, bool(insn.post_index), insn.cc if conditional else CC_ALWAYS,
                f"{insn.mnemonic} {insn.op_str}".strip(), tuple(r for w in written for r in _written(insn, w)),
                not _TRANSFERS.isdisjoint(insn.groups), any(_number(insn, r) == PC for r in read), arm,
            ))
    except CsError:
        pass
    return out


def decode_before(code_at, address: int, span: int = 16, arm: bool = False) -> list[Instruction]:
    """The instructions straight before `address`, up to `span` bytes of
    them, ending exactly there (the first start a linear decode lands on
    `address` from); [] when none does. `code_at(address, size)` reads."""
    for low in range(address - span, address, 4 if arm else 2):
        found, at = [], low
        try:
            while at < address and (insn := decode_one(code_at(at, 4), at, arm)) is not None:
                found.append(insn)
                at += insn.size
        except KeyError:  # before the program's first byte (Program.code)
            continue
        if at == address:
            return found
    return []


def decode_one(code: bytes, address: int, arm: bool = False) -> Instruction | None:
    """The instruction `code` starts with, at `address` (in ARM state with
    `arm`). Most instructions decode alike at any address, and those are
    decoded once per process."""
    key = instruction_key(code, arm)
    known = _ANYWHERE.get(key)
    if known is not None:
        return known._replace(address=address)
    known = _HERE.get((key, address))
    if known is not None:
        return known
    found = decode(code, address, 1, arm)
    if not found:
        return None
    insn = found[0]
    if decodes_anywhere(insn):
        if len(_ANYWHERE) < 1 << 16:
            _ANYWHERE[key] = insn
    else:
        if len(_HERE) >= 1 << 18:  # a bound on memory (at most some 120 MB; glibc keeps 84,000): start again
            _HERE.clear()
        _HERE[key, address] = insn
    return insn


def instruction_key(code: bytes, arm: bool = False) -> bytes:
    """The bytes of the instruction `code` starts with (a Thumb-2 32-bit
    one's 4, a 16-bit one's 2; an ARM one's 4, marked apart)."""
    if arm:
        return b"A" + code[:4]
    return code[:4] if len(code) >= 2 and code[1] >> 3 in (0x1D, 0x1E, 0x1F) else code[:2]


def decodes_anywhere(insn: Instruction) -> bool:
    """Does `insn` decode alike at any address (no pc read, no branch target)?"""
    return not insn.reads_pc and not (insn.transfers and insn.imm is not None)


def forget_addresses() -> None:
    """Drop the instructions kept by address: one program's analysis is
    over, and a worker verifying many programs keeps no more of them."""
    _HERE.clear()


# Instructions whose decoding is the same at any address (no pc read, no
# branch target), by their bytes; the others by their bytes and address
# (the analysis of a program visits each several times), until
# `forget_addresses`.
_ANYWHERE: dict[bytes, Instruction] = {}
_HERE: dict[tuple[bytes, int], Instruction] = {}


def sweep(code: bytes, address: int) -> list[tuple[int, int, str]]:
    """(address, size, mnemonic) of a linear sweep, without operand detail:
    about twenty times cheaper than `decode`, for finding boundaries."""
    try:
        return [(a, size, mnemonic) for a, size, mnemonic, _ in _LITE.disasm_lite(code, address)]
    except CsError:
        return []


_LITE = Cs(CS_ARCH_ARM, CS_MODE_THUMB)


def moves_sp_by_register(code: bytes, start: int) -> bool:
    """Does the code at `start` hold `sub sp, sp, rN` (or `sub sp, rN`), a
    dynamic stack allocation?"""
    for address, size, mnemonic in sweep(code, start):
        if mnemonic.split(".")[0] == "sub":
            insn = decode(code[address - start : address - start + size], address, 1)
            if insn and insn[0].regs[:1] == (SP,) and insn[0].imm is None and insn[0].regs[-1] not in (SP,):
                return True
    return False
