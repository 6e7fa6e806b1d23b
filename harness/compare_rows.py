"""Rows from the machine code beside the compiler's CFI, instruction by
instruction (`encode --from-code --compare`), and who was right where they
disagree, by running the program (ground truth, never either table).

Two rows agree at an instruction when they give the same CFA and the same
save slots: the compiler's CFA through sp or r7 agrees with the analysis's
frame when the analysis puts sp (or r7) at that distance below the CFA
(harness.thumb.frame_analysis knows both where both are known).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Sequence

from harness.elf_program import code_reader, elf_functions, program_from_elf
from harness.formats.dwarf_cfi import read_cfi
from harness.formats.elf import open_elf
from harness.program import CfiRow, FunctionCfi
from harness.registers import SP
from harness.thumb.disasm import decode_one
from harness.thumb.frame_analysis import frame_states
from harness.thumb.frame_effects import FP, FrameState
from harness.unwind.dwarf import DwarfUnwinder
from harness.verify.stops import verify_program


class Disagreement(NamedTuple):
    function: str
    address: int
    instruction: str
    compiler: str  # the compiler's rule there
    synthesized: str  # the analysis's


@dataclass
class Comparison:
    functions: int = 0
    agree: int = 0
    refused: int = 0  # instructions where the analysis knows no single frame
    disagreements: list[Disagreement] = field(default_factory=list)
    # address -> Counter of "compiler right", "compiler wrong", "synthesized right"...
    verdicts: dict[int, Counter] = field(default_factory=dict)


def agrees(row: CfiRow, state: FrameState) -> bool:
    if row.problem:
        return False
    base = state.depth if row.cfa_reg == SP else state.fp_offset if row.cfa_reg == FP else None
    return base == row.cfa_offset and dict(row.saved) == dict(state.saved)


def compare(compiler: Sequence[FunctionCfi], code_at: Callable[[int, int], bytes]) -> Comparison:
    """Every instruction a path reaches in each function the compiler describes."""
    found = Comparison()
    for function in compiler:
        states = frame_states(function.start, function.end, code_at)
        found.functions += 1
        for address in sorted(states):
            state, row = states[address], function.row_at(address)
            if state is None:
                found.refused += 1
            elif agrees(row, state):
                found.agree += 1
            else:
                insn = decode_one(code_at(address, 4), address)
                found.disagreements.append(Disagreement(function.name, address, insn.text if insn else "?",
                                                        row.describe().split(": ", 1)[1],
                                                        state.row(address).describe().split(": ", 1)[1]))
    return found


def judge(found: Comparison, program, compiler: Sequence[FunctionCfi], synthesized: Sequence[FunctionCfi]) -> int:
    """Run `program` and, at every stop at a pc where the rows disagree,
    unwind one frame by each and check it against the shadow stack:
    found.verdicts per pc. The number of stops judged."""
    at = {d.address for d in found.disagreements}
    sides = (("compiler", DwarfUnwinder(compiler)), ("synthesized", DwarfUnwinder(synthesized)))
    judged = 0

    def observe(stop) -> None:
        nonlocal judged
        if stop.pc not in at or not stop.expected:
            return
        judged += 1
        caller = stop.expected[0]
        tally = found.verdicts.setdefault(stop.pc, Counter())
        for name, unwinder in sides:
            try:
                frame = unwinder.step(stop.frame, stop.stack, True)
                right = (frame.r[15], frame.r[13], frame.r[4:12]) == (caller.pc, caller.sp, caller.callee_saved)
            except Exception:  # a refusal or a bad read: not right
                right = False
            tally[f"{name} {'right' if right else 'wrong'}"] += 1

    verify_program(program, [], compiled=True, observe=observe)
    return judged


def report_lines(found: Comparison, judged: int | None) -> list[str]:
    compared = found.agree + len(found.disagreements)
    lines = [f"rows compared at {compared} instructions of {found.functions} functions with CFI: "
             f"{found.agree} agree, {len(found.disagreements)} disagree "
             f"({found.refused} more where the analysis refuses)"]
    if judged is not None:
        totals = sum(found.verdicts.values(), Counter())
        lines.append(f"ran the program: {judged} stops at disagreeing instructions; compiler right at "
                     f"{totals['compiler right']}, synthesized right at {totals['synthesized right']}")
    for d in found.disagreements:
        verdict = found.verdicts.get(d.address)
        said = "; ".join(f"{k} {n}" for k, n in sorted(verdict.items())) if verdict else "not executed"
        lines.append(f"  {d.function} {d.address:#x} {d.instruction}: compiler {d.compiler} | synthesized "
                     f"{d.synthesized} | {said if judged is not None else 'not run'}")
    return lines


def compare_elf(path: str, entry: str | None) -> list[str]:
    """`encode --compare`: the rows from code beside the ELF's CFI, and
    with `entry` who was right where they disagree."""
    image = open_elf(path)
    compiler = read_cfi(image)
    found = compare(compiler, code_reader(image))
    judged = None
    if entry is not None:
        judged = judge(found, program_from_elf(path, entry), compiler, elf_functions(image, True))
    return report_lines(found, judged)
