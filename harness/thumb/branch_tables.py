"""Branch tables in Thumb-2 code: where a table branch goes, and the
bytes it reads as data (harness.thumb.frame_analysis follows them).

- `tbb/tbh [pc, rN]`: byte or half-word offsets right after it;
- GCC without optimisation: `adr rT, table; ldr pc, [rT, rN, lsl #2]`, a
  table of addresses;
- GCC's position-independent switch: `adr rT, table; ldr rO, [rT, rN, lsl
  #2]; add rT, rO; bx rT`, offsets from the table.

Each is as long as the `cmp` guarding it allows (n + 1 entries after `cmp
rX, #n; bhi default`). A table that cannot be sized, or leads out of its
function, is Unknowable.

Also here, as it reads the code's literals alike: the address a
position-independent `ldr rX, [pc, #n]; add rX, pc` forms (`formed_address`).
"""

from __future__ import annotations

from harness.registers import LR, PC, SP
from harness.thumb.disasm import Instruction, decode_before, decode_one, pc_base, register_number
from harness.thumb.frame_effects import Unknowable

CANNOT_FOLLOW = "leaves for an address the analysis cannot follow"
# The most entries a guarding `cmp` may allow a table: a larger bound is no
# switch a compiler wrote (a hostile file's `cmp.w r0, #0x7f000000` would
# have the analysis read two billion entries), and leaves the table unbounded.
MAX_TABLE_ENTRIES = 1 << 16


def jump_table(insn: Instruction, code_at, start: int, end: int) -> list[int]:
    """The targets of `tbb/tbh [pc, rN]`, offsets from the instruction after
    it: its table follows it (or lies where an `adr rB` just before put the
    base of `tbh [rB, rN]`: clang), with as many entries as the `cmp rN, #n`
    guarding it allows (n + 1); unguarded (clang, where rN's range is
    known), it ends where the first case begins."""
    table = jump_table_address(insn, code_at)
    size = 1 if insn.op == "tbb" else 2
    if table is None:
        raise Unknowable(f"'{insn.text}' {CANNOT_FOLLOW}")
    count = guarded_entries(insn, code_at)
    targets: list[int] = []
    while count is None or len(targets) < count:
        offset = table + size * len(targets)
        target = insn.address + 4 + 2 * int.from_bytes(code_at(offset, size), "little")
        if count is None and (offset + size > min(targets, default=end) or not start <= target < end):
            break  # unguarded: the first case, or an entry that cannot be one, ends the table
        if not start <= target < end:
            raise Unknowable(f"'{insn.text}': a table entry leads out of the function")
        targets.append(target)
    if not targets:
        raise Unknowable(f"'{insn.text}': no table found")
    return targets


def jump_table_address(insn: Instruction, code_at) -> int | None:
    """Where the table of `tbb/tbh [pc, rN]` or `tbh [rB, rN]` lies: right
    after it, or where the last instruction before it writing rB (among a
    few) put pc-relative (`adr rB, table`, `addw rB, pc, #n`); else None."""
    if insn.mem[0] == PC:
        return insn.address + insn.size
    return _pc_relative(insn.mem[0], insn, code_at)


def _pc_relative(reg: int, insn: Instruction, code_at) -> int | None:
    """The address the last instruction before `insn` writing `reg` (among
    a few) put there pc-relative (`adr rB, label`, `addw rB, pc, #n`), else None."""
    for earlier in reversed(decode_before(code_at, insn.address, arm=insn.arm)):
        if reg in earlier.writes:
            if earlier.conditional or earlier.op not in ("adr", "add") or earlier.regs[1:] not in ((), (PC,)) \
                    or earlier.imm is None:
                return None
            return pc_base(earlier) + earlier.imm
    return None


def ladder_start(insn: Instruction, code_at) -> int | None:
    """Where `adr rB, ladder; add rN, rB, rI, lsl #k; mov pc, rN` jumps
    into: the first instruction of the ladder (libgcc's Thumb-2 division
    enters its unrolled loop part way so); None for any other jump through
    a register."""
    reg = insn.regs[-1] if insn.regs else None
    for earlier in reversed(decode_before(code_at, insn.address, arm=insn.arm)):
        if reg in earlier.writes:
            if earlier.op != "add" or earlier.conditional or earlier.imm is not None or len(earlier.regs) != 3 \
                    or earlier.regs[0] != reg:
                return None
            return _pc_relative(earlier.regs[1], earlier, code_at)
        if earlier.transfers:
            return None
    return None


def address_table(insn: Instruction, code_at, start: int, end: int) -> list[int]:
    """The targets of `adr rX, table; ldr pc, [rX, rN, lsl #2]` (GCC's
    switch without optimisation): a table of addresses, as many as the
    guarding `cmp rN, #n` allows."""
    table = table_address(insn, code_at)
    count = guarded_entries(insn, code_at)
    if table is None or count is None:
        raise Unknowable(f"'{insn.text}' {CANNOT_FOLLOW}")
    targets = [int.from_bytes(code_at(table + 4 * index, 4), "little") & ~1 for index in range(count)]
    if not all(start <= target < end for target in targets):
        raise Unknowable(f"'{insn.text}': a table entry leads out of the function")
    return targets

def table_address(insn: Instruction, code_at) -> int | None:
    """The address `adr rX, #n` right before `insn` put in its base register
    (or `addw rX, pc, #n`, the same instruction as GCC writes it for lr)."""
    for back in (2, 4):
        found = decode_one(code_at(insn.address - back, 4), insn.address - back)
        if found is not None and found.size == back and found.imm is not None and (
                found.op == "adr" and found.regs == (insn.mem[0],)
                or found.op == "add" and found.regs == (insn.mem[0], PC)):
            return pc_base(found) + found.imm
    return None

def offset_table_at(insn: Instruction, code_at) -> tuple[int, int | None] | None:
    """(table, entries or None) of GCC's position-independent switch ending
    in `insn`: `adr rT, table; ldr rO, [rT, rI, lsl #2]; add rT, rO; bx rT`
    (offsets from the table; entries from the guarding `cmp`), else None."""
    add, load, adr = (decode_one(code_at(insn.address - back, 4), insn.address - back) for back in (2, 6, 8))
    reg = insn.regs[0]
    if not (add and load and adr and add.size == 2 and load.size == 4 and adr.size == 2 and add.op == "add"
            and add.regs == (reg, load.regs[0]) and load.op == "ldr" and load.mem and load.mem[0] == reg
            and adr.op == "adr" and adr.regs == (reg,)):
        return None
    return pc_base(adr) + adr.imm, guarded_entries(load, code_at)

def offset_table(insn: Instruction, code_at, start: int, end: int) -> list[int] | None:
    """The targets of such a switch; None for any other `bx rN` (a tail
    call through a register)."""
    found = offset_table_at(insn, code_at)
    if found is None:
        return None
    table, count = found
    if count is None:
        raise Unknowable(f"'{insn.text}': no bound on its table found")
    targets = [(table + int.from_bytes(code_at(table + 4 * index, 4), "little", signed=True)) & ~1
               for index in range(count)]
    if not all(start <= target < end for target in targets):
        raise Unknowable(f"'{insn.text}': a table entry leads out of the function")
    return targets

def guarded_entries(insn: Instruction, code_at) -> int | None:
    """n + 1 from the `cmp rI, #n` guarding a table branch on index rI,
    among the few instructions before it: rI must not change in between but
    for a reload from the stack (-O0 spills the index and compares the value
    before storing it: there the nearest cmp counts). None when rI was
    computed after the last cmp (clang's unguarded tables), or the bound is
    past MAX_TABLE_ENTRIES."""
    index = _index_register(insn)
    reloaded = False
    for earlier in reversed(decode_before(code_at, insn.address)):
        if earlier.op == "cmp" and earlier.imm is not None and (reloaded or earlier.regs[:1] == (index,)):
            return earlier.imm + 1 if earlier.imm < MAX_TABLE_ENTRIES else None
        if index in earlier.writes and not earlier.conditional:  # (clang: `itt hi; movwhi r0; bxhi lr`)
            if not (earlier.op == "ldr" and earlier.mem and earlier.mem[0] == SP):
                return None
            reloaded = True
    return None


def _index_register(insn: Instruction) -> int | None:
    """rI of `tbb [pc, rI]`, `ldr rX, [rT, rI, lsl #2]` (the last register
    operand; capstone names r12 `ip`: Debian's gawk indexes a tbb by it)."""
    names = [part.strip(" []!") for part in insn.text.split(" ", 1)[-1].split(",")]
    registers = [number for name in names if (number := register_number(name)) is not None and number < SP]
    return registers[-1] if registers else None


def data_read(insn: Instruction, code_at) -> set[int]:
    """The bytes `insn` reads as data from the code: a literal (`ldr rX,
    [pc, #n]`, at Align(pc, 4) + n; pc + 8 + n in ARM code, where no
    table pattern here applies) or a jump table after a tbb/tbh."""
    if insn.arm:
        return _literal(insn)
    if insn.op in ("tbb", "tbh"):
        count = guarded_entries(insn, code_at) or 0  # unguarded: data up to the first case, found anyway
        table = jump_table_address(insn, code_at)
        return set(range(table, table + count * (1 if insn.op == "tbb" else 2))) if table is not None else set()
    if insn.op == "ldr" and PC in insn.writes and insn.mem and insn.mem[0] != SP:
        table, count = table_address(insn, code_at), guarded_entries(insn, code_at)
        return set(range(table, table + 4 * count)) if table is not None and count else set()
    if insn.op == "bx" and insn.regs != (LR,):
        found = offset_table_at(insn, code_at)
        return set(range(found[0], found[0] + 4 * found[1])) if found and found[1] else set()
    return _literal(insn)


def _literal(insn: Instruction) -> set[int]:
    if insn.op.startswith(("ldr", "vldr")) and insn.mem and insn.mem[0] == PC:
        literal = pc_base(insn) + insn.mem[1]
        return set(range(literal, literal + (8 if insn.op in ("ldrd", "vldr") else 4)))
    return set()


def formed_address(insn: Instruction, code_at) -> int | None:
    """The address `add rX, pc` (ARM: `add rX, pc, rX`) forms from a literal
    loaded into rX just before (`ldr rX, [pc, #n]`): position-independent
    code takes the address of a function or of data so. None for another
    `add`, or when rX came from elsewhere."""
    if insn.op != "add" or insn.imm is not None or PC not in insn.regs[1:] or not insn.regs:
        return None
    offset = next((reg for reg in insn.regs[1:] if reg != PC), insn.regs[0])
    for earlier in reversed(decode_before(code_at, insn.address, arm=insn.arm)):
        if offset in earlier.writes:
            literal = _literal(earlier) if not earlier.conditional and earlier.op == "ldr" else set()
            if not literal or earlier.regs[:1] != (offset,):
                return None
            value = int.from_bytes(code_at(min(literal), 4), "little")
            return (value + insn.address + (8 if insn.arm else 4)) & 0xFFFFFFFF  # pc as `add` reads it
        if earlier.transfers:
            return None
    return None


def thunk_target(insn: Instruction, code_at) -> int | None:
    """Where a long-branch thunk goes, its state in bit 0: `movw rX, #lo;
    movt rX, #hi; add rX, pc; bx rX` (lld's, to a far function or a PLT
    entry: Chromium's calls of `__stack_chk_fail` go through one); None for
    any other instruction."""
    if insn.op != "bx" or insn.arm or len(insn.regs) != 1 or insn.regs[0] in (LR, PC):
        return None
    before = decode_before(code_at, insn.address, span=12)
    if len(before) < 3 or before[-1].op != "add" or before[-1].regs != (insn.regs[0], PC) \
            or before[-1].imm is not None or before[-2].regs[:1] != insn.regs:
        return None
    value = wide_constant(before[-2], code_at)
    return None if value is None else (value + before[-1].address + 4) & 0xFFFFFFFF


def wide_constant(insn: Instruction, code_at) -> int | None:
    """The 32-bit value `movt rX, #hi` completes, with `movw rX, #lo` just
    before it on the straight run (as code linked where it runs takes an
    address: `movw r3, #:lower16:f; movt r3, #:upper16:f`); else None."""
    if insn.op != "movt" or insn.imm is None or insn.conditional:
        return None
    target = insn.regs[0]
    for earlier in reversed(decode_before(code_at, insn.address, arm=insn.arm)):
        if target in earlier.writes:
            if earlier.op != "movw" or earlier.conditional or earlier.imm is None:
                return None
            return earlier.imm | insn.imm << 16
        if earlier.transfers:
            return None
    return None
