"""A mutation check of the harness itself.

Take a generated program's v2 tables, change one function's unwind
instructions at random, and verify the program with the mutated tables. The
harness has *detected* a mutant when some stop's verdict differs from the
verdict with the original tables.

Some mutants cannot be detected: the run may never execute, or execute only
where the change makes no difference (a register popped that the caller does
not need, a stop where v2 already fails). To tell those apart without
trusting the harness, an independent oracle walks the stack at every stop
with both tables, step by step and without the verifier's memo, and compares
the frames on what the verifier checks (pc, sp, r4-r11, d8-d15). A mutant
*changes an unwind result* if, at a stop where the original tables unwind
correctly, the two walks differ. The target: every such mutant is detected.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Sequence

from harness.errors import EhabiError, InputError, UnwindFailure
from harness.formats import chrome_v2, ehabi
from harness.formats.chrome_v2.encoder import AddressUnwind, FunctionUnwind
from harness.formats.chrome_v2.layout import serialize
from harness.formats.chrome_v2.tables import build_tables
from harness.program import Program
from harness.unwind.frame import Frame
from harness.unwind.v2 import V2Unwinder
from harness.unwind.walk import walk
from harness.verify.python_hook import ObservedStop
from harness.verify.stops import verify_program

OPERATORS = ("vsp_add", "insert_vsp_add", "drop_register", "add_register", "remove_op", "set_vsp",
             "vfp_count", "refuse", "flip_bit")
SAVED = (4, 5, 6, 7, 8, 9, 10, 11, 14)


@dataclass(frozen=True)
class Mutant:
    function: str
    offset: int  # of the address unwind, bytes into the function
    operator: str
    original: bytes
    mutated: bytes


@dataclass(frozen=True)
class Verdict:
    mutant: Mutant
    rejected: str | None  # the reader refused the mutated tables (that is a detection too)
    detected: bool
    changed: bool  # the oracle saw a different unwind where the original was right
    changed_at: int | None  # first such stop


def mutate_run(run: bytes, operator: str, rng: random.Random) -> bytes | None:
    """`run` changed by `operator`, or None if the operator does not apply."""
    if operator == "flip_bit":
        data = bytearray(run)
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        return bytes(data)
    if operator == "refuse":
        return ehabi.encode([ehabi.REFUSE]) if run != ehabi.encode([ehabi.REFUSE]) else None
    ops = list(ehabi.decode(run, run=True))
    body = ops[:-1]  # without the final finish
    pick = lambda kinds: [i for i, op in enumerate(body) if isinstance(op, kinds)]  # noqa: E731
    if operator == "vsp_add" and pick(ehabi.VspAdd):
        i = rng.choice(pick(ehabi.VspAdd))
        amount = body[i].amount + rng.choice((-8, -4, 4, 8))
        body[i:i + 1] = [ehabi.VspAdd(amount)] if amount else []
    elif operator == "insert_vsp_add":
        body.insert(rng.randrange(len(body) + 1), ehabi.VspAdd(rng.choice((-8, -4, 4, 8))))
    elif operator == "drop_register" and [i for i in pick(ehabi.Pop) if len(body[i].regs) > 1]:
        i = rng.choice([i for i in pick(ehabi.Pop) if len(body[i].regs) > 1])
        regs = list(body[i].regs)
        regs.remove(rng.choice(regs))
        body[i] = ehabi.Pop(tuple(regs))
    elif operator == "add_register" and pick(ehabi.Pop):
        i = rng.choice(pick(ehabi.Pop))
        free = [r for r in SAVED if r not in body[i].regs]
        if not free:
            return None
        body[i] = ehabi.Pop(tuple(sorted(body[i].regs + (rng.choice(free),))))
    elif operator == "remove_op" and body:
        del body[rng.randrange(len(body))]
    elif operator == "set_vsp":
        current = pick(ehabi.SetVsp)
        reg = rng.choice([r for r in (4, 5, 6, 7, 8, 9, 10, 11) if not current or r != body[current[0]].reg])
        if current:
            body[current[0]] = ehabi.SetVsp(reg)
        else:
            body.insert(0, ehabi.SetVsp(reg))
    elif operator == "vfp_count" and pick(ehabi.PopVfp):
        i = rng.choice(pick(ehabi.PopVfp))
        op = body[i]
        count = op.count + rng.choice((-1, 1))
        if not 1 <= count <= 16 - (op.first % 16):
            return None
        body[i] = replace(op, count=count)
    else:
        return None
    try:
        mutated = ehabi.encode(body + [ehabi.FINISH])
    except (EhabiError, ValueError, AssertionError):
        return None
    return mutated if mutated != run else None


def draw_mutants(encoded: chrome_v2.Encoded, count: int, rng: random.Random) -> list[Mutant]:
    """`count` mutants of runs of the encoded functions (never of gap fillers)."""
    candidates = [(f, u) for f in encoded.functions for u in f.address_unwinds]
    mutants: list[Mutant] = []
    for _ in range(50 * count):
        if len(mutants) == count:
            break
        function, unwind = rng.choice(candidates)
        operator = rng.choice(OPERATORS)
        try:
            mutated = mutate_run(unwind.instructions, operator, rng)
        except EhabiError:
            mutated = None
        if mutated is not None:
            mutants.append(Mutant(function.name, unwind.offset, operator, unwind.instructions, mutated))
    return mutants


def mutated_unwinder(encoded: chrome_v2.Encoded, program: Program, mutant: Mutant) -> V2Unwinder:
    """The v2 unwinder over tables with `mutant` applied (InputError if the
    reader rejects them)."""
    def apply(function: FunctionUnwind) -> FunctionUnwind:
        if function.name != mutant.function:
            return function
        unwinds = tuple(AddressUnwind(u.offset, mutant.mutated) if u.offset == mutant.offset else u
                        for u in function.address_unwinds)
        return replace(function, address_unwinds=unwinds)

    tables = build_tables([apply(f) for f in encoded.covering], program.text_base)
    reader = chrome_v2.V2Reader.from_blob(serialize(tables, "seed"), "seed")
    return V2Unwinder(reader, program.text_base, "v2-mutant")


def _projection(frame: Frame) -> tuple:
    """What the verifier compares: pc, sp, r4-r11, d8-d15."""
    return frame.pc, frame.sp, frame.r[4:12], frame.d[8:16]


def oracle_walk(unwinder, stop: ObservedStop) -> list:
    """The frames a fresh walk yields at a stop (depth of the shadow stack),
    then the failure kind if one ended it."""
    return [got.kind if isinstance(got, UnwindFailure) else _projection(got)
            for got in walk(unwinder, stop.frame, stop.stack, len(stop.expected))]


def verdicts(result) -> dict[int, tuple]:
    """stop -> (frame, kind, register, detail) for every failing stop."""
    return {f.stop: (f.frame, f.kind, f.register, f.detail) for f in result.failures}


@dataclass
class Original:
    """The unmutated tables: their unwinder, their verdicts, and the oracle's
    walk at each stop where they unwind right (walked once, for all mutants)."""

    unwinder: V2Unwinder
    verdicts: dict[int, tuple]
    walks: dict[int, list] = field(default_factory=dict)

    def walk(self, number: int, stop: ObservedStop) -> list:
        found = self.walks.get(number)
        if found is None:
            found = self.walks[number] = oracle_walk(self.unwinder, stop)
        return found


def check_mutant(program: Program, encoded: chrome_v2.Encoded, original: Original, mutant: Mutant) -> Verdict:
    try:
        mutated = mutated_unwinder(encoded, program, mutant)
    except InputError as error:
        return Verdict(mutant, str(error), True, False, None)
    changed_at: list[int] = []
    number = 0

    def oracle(stop: ObservedStop) -> None:
        nonlocal number
        if not changed_at and number not in original.verdicts:  # the original unwinds right here
            if original.walk(number, stop) != oracle_walk(mutated, stop):
                changed_at.append(number)
        number += 1

    result = verify_program(program, [mutated], observe=oracle)
    detected = verdicts(result) != original.verdicts
    return Verdict(mutant, None, detected, bool(changed_at), changed_at[0] if changed_at else None)


def original_tables(program: Program) -> tuple[chrome_v2.Encoded, Original]:
    encoded = chrome_v2.encode(program.cfi["tables"], program.text_base, "drop")
    unwinder = V2Unwinder(chrome_v2.V2Reader.from_blob(encoded.blob("seed"), "seed"), program.text_base)
    return encoded, Original(unwinder, verdicts(verify_program(program, [unwinder])))


def check_program(program: Program, count: int, seed: int) -> list[Verdict]:
    encoded, original = original_tables(program)
    rng = random.Random(f"mutants:{seed}:{program.name}")
    return [check_mutant(program, encoded, original, mutant) for mutant in draw_mutants(encoded, count, rng)]


def summary(results: Sequence[Verdict]) -> dict:
    """Counts the README and the command report."""
    changed = [r for r in results if r.changed]
    return {
        "mutants": len(results),
        "rejected_by_reader": sum(r.rejected is not None for r in results),
        "detected": sum(r.detected for r in results),
        "changed_an_unwind": len(changed),
        "changed_and_detected": sum(r.detected for r in changed),
        "changed_but_missed": sum(not r.detected for r in changed),
        "unchanged_survived": sum(not r.changed and not r.detected for r in results),
        "by_operator": {op: sum(r.mutant.operator == op for r in results) for op in OPERATORS},
    }
