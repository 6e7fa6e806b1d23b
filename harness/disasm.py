"""Capstone behind one function: Thumb-2 bytes -> plain instruction records."""

from __future__ import annotations

from dataclasses import dataclass

from capstone import CS_ARCH_ARM, CS_GRP_CALL, CS_GRP_INT, CS_GRP_JUMP, CS_GRP_RET, CS_MODE_THUMB, Cs, CsError
from capstone import arm as cs_arm

from harness.frame import DWARF_D0

_CS = Cs(CS_ARCH_ARM, CS_MODE_THUMB)
_CS.detail = True
CC_ALWAYS = cs_arm.ARM_CC_AL
_NAMED = {"sb": 9, "sl": 10, "fp": 11, "ip": 12, "sp": 13, "lr": 14, "pc": 15}


@dataclass(frozen=True)
class Instruction:
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

    @property
    def conditional(self) -> bool:
        return self.cc != CC_ALWAYS


def _reg(name: str) -> int:
    if name in _NAMED:
        return _NAMED[name]
    if name[0] == "r":
        return int(name[1:])
    if name[0] == "d":
        return DWARF_D0 + int(name[1:])
    return -1  # a register this tool does not model (s registers, APSR...)


def _written(name: str) -> tuple[int, ...]:
    """Registers a write to `name` changes, with s and q registers as the d
    registers they are part of."""
    if name[0] == "s" and name[1:].isdigit():
        return (DWARF_D0 + int(name[1:]) // 2,)
    if name[0] == "q" and name[1:].isdigit():
        return (DWARF_D0 + 2 * int(name[1:]), DWARF_D0 + 2 * int(name[1:]) + 1)
    return (_reg(name),)


_TRANSFERS = (CS_GRP_JUMP, CS_GRP_CALL, CS_GRP_RET, CS_GRP_INT)


def _plain(mnemonic: str, conditional: bool) -> str:
    """"popne" -> "pop", "add.w" -> "add", "addw" (imm12 form) -> "add"."""
    op = mnemonic.split(".")[0]
    op = op[:-2] if conditional else op
    return op[:-1] if op in ("addw", "subw") else op


def decode(code: bytes, address: int, count: int = 0) -> list[Instruction]:
    """Up to `count` instructions (0: as many as decode) from `code` at `address`;
    decoding stops at the first undecodable bytes."""
    out = []
    try:
        for insn in _CS.disasm(code, address, count):
            regs, imm, mem = [], None, None
            for operand in insn.operands:
                if operand.type == cs_arm.ARM_OP_REG:
                    regs.append(_reg(insn.reg_name(operand.reg)))
                elif operand.type == cs_arm.ARM_OP_IMM:
                    imm = operand.imm
                elif operand.type == cs_arm.ARM_OP_MEM:
                    mem = (_reg(insn.reg_name(operand.mem.base)), operand.mem.disp)
            conditional = insn.cc not in (CC_ALWAYS, cs_arm.ARM_CC_INVALID)
            writes = tuple(r for w in insn.regs_access()[1] for r in _written(insn.reg_name(w)))
            out.append(Instruction(
                insn.address, insn.size, _plain(insn.mnemonic, conditional and insn.id != cs_arm.ARM_INS_IT),
                tuple(regs), imm, mem, bool(insn.post_index), insn.cc if conditional else CC_ALWAYS,
                f"{insn.mnemonic} {insn.op_str}".strip(), writes,
                any(insn.group(g) for g in _TRANSFERS),
            ))
    except CsError:
        pass
    return out


def decode_one(code: bytes, address: int) -> Instruction | None:
    found = decode(code, address, 1)
    return found[0] if found else None


def sweep(code: bytes, address: int) -> list[tuple[int, int, str]]:
    """(address, size, mnemonic) of a linear sweep, without operand detail:
    about twenty times cheaper than `decode`, for finding boundaries."""
    try:
        return [(a, size, mnemonic) for a, size, mnemonic, _ in _LITE.disasm_lite(code, address)]
    except CsError:
        return []


_LITE = Cs(CS_ARCH_ARM, CS_MODE_THUMB)
