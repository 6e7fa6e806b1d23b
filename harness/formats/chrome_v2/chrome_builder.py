"""Chrome's own way from Breakpad STACK CFI records to v2 tables
(build/android/gyp/create_unwind_table.py, as of 2023), in our code: what
Chrome ships, for the `v2-chrome` unwinder to measure beside our `v2`.

Chrome reads `dump_syms` text, where each record after a function's INIT
lists only the rules that change. Each record's text is matched, whole,
by the first of four forms that fits, and turned into the instructions
that undo it, against the CFA offset tracked so far:

- return to lr, `.cfa: sp 0 + .ra: lr` -> `finish`; the CFA is 0 again;
- push or sub sp, an optional `.cfa: sp N +`, an optional `.ra: .cfa -k
  + ^` and core registers `rK: .cfa -k + ^` -> `vsp += step`, then a pop
  of r4-r15 among them, ascending (lr last); step = N - CFA before, less
  4 per register popped when at least that (r0-r3 are stepped over).
  Where each register was saved is not read: the pop assumes the pushed
  order. The CFA becomes N, or stays as it was when N is absent or 0;
- CFA from a register, `.cfa: rK N +` alone -> `vsp = rK`, then `vsp +=
  N - CFA before`; the CFA becomes N;
- VFP saves, an optional `.cfa: sp N +` and `unnamed_registerK: .cfa -k
  + ^` -> `vsp += N - CFA before` (Chrome restores no VFP register), or
  no instruction without N: an entry that repeats the run before.

A record no form fits is left out: the run before covers its addresses.
A record that lowers the CFA (other than the CFA-from-a-register form) is
taken for an epilogue, and it and every later record of the function are
left out. Each record's run is its own instructions, then the runs of the
records before it (the newest undone first). A function whose INIT is not
the return to lr gets no entry (Chrome's builder asserts; here the
return-to-lr gap filler covers it, as it covers gaps).

Table bytes as Chrome lays them out (`chrome_tables`): the instruction
table holds each distinct run once, ordered by uses per byte, then by the
bytes, both descending; the function offset table each distinct list
once, in order of first use; nothing shares a suffix; the page table
ends at the page of the last entry.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Callable, NamedTuple

from harness.formats import ehabi, uleb128
from harness.formats.breakpad import StackCfi, stack_cfi
from harness.formats.chrome_v2.encoder import AddressUnwind, FunctionUnwind
from harness.formats.chrome_v2.tables import V2Tables, offset_list, tables_from
from harness.program import FunctionCfi
from harness.registers import LR


class Undo(NamedTuple):
    """What one record becomes: its instructions and the CFA after it."""

    ops: tuple[ehabi.Op, ...]
    cfa: int
    from_register: bool = False  # the CFA-from-a-register form: never an epilogue


def _return_to_lr(match: re.Match, cfa_before: int) -> Undo:
    return Undo((ehabi.FINISH,), 0)


def _push_or_sub_sp(match: re.Match, cfa_before: int) -> Undo:
    cfa, return_address, saves = match.group("cfa"), match.group("ra"), match.group("saves")
    regs = sorted(n for n in map(int, re.findall(r"r(\d+):", saves)) if 4 <= n <= 15)
    regs += [LR] if return_address else []
    step = int(cfa) - cfa_before if cfa is not None else 0
    if cfa is not None and step >= 4 * len(regs):
        step -= 4 * len(regs)  # `sub sp`, or r0-r3 pushed below the popped registers
    ops = ([ehabi.VspAdd(step)] if step else []) + ([ehabi.Pop(tuple(regs))] if regs else [])
    return Undo(tuple(ops), int(cfa) if cfa and int(cfa) else cfa_before)


def _cfa_from_register(match: re.Match, cfa_before: int) -> Undo:
    cfa = int(match.group("offset"))
    step = cfa - cfa_before
    return Undo((ehabi.SetVsp(int(match.group("reg"))), *([ehabi.VspAdd(step)] if step else [])), cfa, True)


def _vfp_saves(match: re.Match, cfa_before: int) -> Undo:
    if match.group("cfa") is None:
        return Undo((), cfa_before)
    cfa = int(match.group("cfa"))
    return Undo((ehabi.VspAdd(cfa - cfa_before),) if cfa != cfa_before else (), cfa)


_SAVE = r"r\d+: \.cfa -\d+ \+ \^ ?"
FORMS: tuple[tuple[re.Pattern, Callable[[re.Match, int], Undo]], ...] = (
    (re.compile(r"\.cfa: sp 0 \+ \.ra: lr"), _return_to_lr),
    (re.compile(rf"(?:\.cfa: sp (?P<cfa>\d+) \+ ?)?(?:\.ra: \.cfa (?P<ra>-\d+) \+ \^ ?)?(?P<saves>(?:{_SAVE})*)"),
     _push_or_sub_sp),
    (re.compile(r"\.cfa: r(?P<reg>\d+) (?P<offset>\d+) \+"), _cfa_from_register),
    (re.compile(r"(?:\.cfa: sp (?P<cfa>\d+) \+ )?(?:unnamed_register\d+: \.cfa -\d+ \+ \^ ?)+"), _vfp_saves),
)


def undo(rules: str, cfa_before: int) -> Undo | None:
    """The first form that fits `rules` whole, or None (left out)."""
    for pattern, handler in FORMS:
        match = pattern.fullmatch(rules)
        if match:
            return handler(match, cfa_before)
    return None


def chrome_function_unwind(function: StackCfi | FunctionCfi) -> FunctionUnwind | None:
    """The runs Chrome's builder writes for one function's records, or
    None where it writes no entry (an INIT other than the return to lr)."""
    cfi = stack_cfi(function) if isinstance(function, FunctionCfi) else function
    cfa, own, dropped = 0, [], 0
    for number, (address, rules) in enumerate(cfi.records):
        found = undo(rules, cfa)
        if found is None:
            dropped += 1
            continue
        if found.cfa < cfa and not found.from_register:  # an epilogue: it and the rest are left out
            dropped += len(cfi.records) - number
            break
        try:
            encoded = ehabi.encode(found.ops, chrome=True)
        except ValueError:  # an amount no opcode holds (a corrupt CFA offset, 17): Chrome's asserts; left out here
            dropped += 1
            continue
        cfa = found.cfa
        own.append((address - cfi.start, encoded))
    if not own or own[0] != (0, ehabi.encode([ehabi.FINISH])):
        return None
    unwinds, run = [], b""
    for offset, instructions in sorted(own, key=lambda pair: pair[0]):
        run = instructions + run
        unwinds.append(AddressUnwind(offset, run))
    return FunctionUnwind(cfi.start, cfi.start + cfi.size, cfi.name, tuple(unwinds), len(cfi.records), dropped)


def chrome_unwinds(functions: Sequence[StackCfi | FunctionCfi]) -> tuple[FunctionUnwind, ...]:
    """Chrome's runs for every function it writes an entry for."""
    return tuple(found for found in map(chrome_function_unwind, functions) if found is not None)


def chrome_tables(covering: Sequence[FunctionUnwind], text_base: int) -> V2Tables:
    """The four tables as create_unwind_table.py lays them out, for
    functions that already cover the text (encoder.cover_text)."""
    lists = [offset_list(f) for f in covering]
    uses = Counter(run for pairs in lists for _, run in pairs)
    instruction_table, run_index = _concatenated(sorted(uses, key=lambda run: (uses[run] / len(run), run),
                                                        reverse=True))
    encoded = {pairs: b"".join(uleb128.encode(offset) + uleb128.encode(run_index[run])
                               for offset, run in pairs) for pairs in lists}
    offset_table, list_index = _concatenated(list(encoded.values()))
    last_page = (covering[-1].start - text_base) >> 17
    return tables_from(covering, [list_index[encoded[pairs]] for pairs in lists], offset_table,
                       instruction_table, text_base, last_page + 1)


def _concatenated(items: Sequence[bytes]) -> tuple[bytes, dict[bytes, int]]:
    """Distinct items one after another, each at the index it is first given."""
    index: dict[bytes, int] = {}
    table = bytearray()
    for item in items:
        if item not in index:
            index[item] = len(table)
            table += item
    return bytes(table), index
