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

from harness.abi import Limits
from harness.classify import OWN
from harness.elf_program import code_reader, elf_functions, program_from_elf
from harness.errors import HarnessError
from harness.formats.dwarf_cfi import read_cfi
from harness.formats.elf import open_elf
from harness.linux.process import LinuxRun
from harness.linux_verify.modules import discover, module_program, process_code, process_trampolines
from harness.linux_verify.verify import verify_process
from harness.program import CfiRow, FunctionCfi
from harness.registers import SP
from harness.thumb.disasm import decode_one
from harness.thumb.frame_analysis import analyse, frame_states
from harness.thumb.frame_effects import FP, FrameState
from harness.unwind import code_cfi
from harness.unwind.dwarf import DwarfUnwinder
from harness.unwind.sigframes import SignalFrames
from harness.verify.stops import Verify, verify_program


class Disagreement(NamedTuple):
    function: str
    address: int
    instruction: str
    compiler: str  # the compiler's rule there
    synthesized: str  # the analysis's


class Refusal(NamedTuple):
    """One reason the analysis gave for refusing (its `problems`), and the
    instructions of its function it accounts for: those refused from its
    address on, up to the next reason's (before the first: the first's)."""

    function: str
    start: int  # the function's
    end: int
    address: int  # where the analysis met the problem
    reason: str
    instructions: int


# Refused where paths under different IT conditions meet with different
# frames: no single row describes the pc, and the analysis names no problem.
UNNAMED_REFUSAL = "frames differ under different conditions (no problem named)"

# Per stop, the two judgements together (compiler right?, synthesized right?).
OUTCOMES = {(True, True): "both right", (True, False): "compiler right", (False, True): "code right",
            (False, False): "both wrong"}


@dataclass
class Comparison:
    functions: int = 0
    agree: int = 0
    refused: int = 0  # instructions where the analysis knows no single frame
    disagreements: list[Disagreement] = field(default_factory=list)
    # address -> Counter of "compiler right", "compiler wrong", "synthesized right"...
    verdicts: dict[int, Counter] = field(default_factory=dict)
    # address -> Counter of OUTCOMES' values: both judgements of each stop
    outcomes: dict[int, Counter] = field(default_factory=dict)
    refusals: list[Refusal] = field(default_factory=list)


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
        refused = sorted(address for address, state in states.items() if state is None)
        if refused:
            found.refusals.extend(refusals(function, refused, code_at))
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


def refusals(function: FunctionCfi, refused: Sequence[int], code_at: Callable[[int, int], bytes]) -> list[Refusal]:
    """The reasons the analysis of `function` gives (its problems, the
    analysis run again: only functions that refuse pay for it), each with
    the `refused` instructions it accounts for."""
    problems = analyse(function.name, function.start, function.end, code_at).problems
    reasons = sorted((int(where, 16), why) for where, why in (p.split(": ", 1) for p in problems))
    if not reasons:
        return [Refusal(function.name, function.start, function.end, refused[0], UNNAMED_REFUSAL, len(refused))]
    counts = Counter(max((n for n, (at, _) in enumerate(reasons) if at <= address), default=0)
                     for address in refused)
    return [Refusal(function.name, function.start, function.end, at, why, counts[n])
            for n, (at, why) in enumerate(reasons)]


def judge(found: Comparison, program, compiler: Sequence[FunctionCfi], synthesized: Sequence[FunctionCfi]) -> int:
    """Run `program` (bare metal) and, at every stop at a pc where the rows
    disagree, unwind one frame by each and check it against the shadow
    stack: found.verdicts per pc. The number of stops judged."""
    observe, judged = _observer(found, DwarfUnwinder(compiler), DwarfUnwinder(synthesized), 0)
    verify_program(program, [], how=Verify(compiled=True), observe=observe, observe_at=_pcs(found, 0))
    return judged[0]


# A judged run unwinds in Python at every stop at a disagreeing pc, and a hot
# epilogue runs there hundreds of thousands of times (Lua's): more time than
# a verified run gets.
JUDGE_LIMITS = Limits(seconds=1800.0)


def judge_process(found: Comparison, run: LinuxRun, limits: Limits = JUDGE_LIMITS) -> tuple[int, str | None]:
    """As `judge`, for an executable run as a Linux process: both rule sets
    are moved to where it is loaded; verdicts stay by link-time address.
    Each side crosses signal frames by their trampolines: a handler's caller
    in the shadow stack is the context the signal interrupted, which a step
    by CFI reaches only through the trampoline the handler returns to.
    (The stops judged, the run's fault or None.)"""
    modules = discover(run, limits).modules
    executable = next(m for m in modules if m.label == OWN)
    program = module_program(executable)
    programs = [module_program(m) for m in modules]
    trampolines, code = process_trampolines(programs), process_code(programs)
    observe, judged = _observer(found, SignalFrames(DwarfUnwinder(program.cfi["reference"]), trampolines, code),
                                SignalFrames(DwarfUnwinder(code_cfi(program)), trampolines, code), executable.base)
    result = verify_process(run, [], lambda program: [], Verify(limits=limits, compiled=True), observe=observe,
                            observe_at=_pcs(found, executable.base))
    return judged[0], result.fault


def _pcs(found: Comparison, base: int) -> frozenset[int]:
    """Where the rows disagree, `base` bytes above their link addresses."""
    return frozenset(d.address + base for d in found.disagreements)


def _observer(found: Comparison, compiler: DwarfUnwinder, synthesized: DwarfUnwinder, base: int):
    """The `observe` hook that judges each side at the stops it is shown
    (those at `_pcs`; verdicts by link address, `base` below the pc), and a
    one-item list counting them."""
    judged = [0]

    def observe(stop) -> None:
        if not stop.expected:
            return
        judged[0] += 1
        caller = stop.expected[0]
        tally = found.verdicts.setdefault(stop.pc - base, Counter())
        right = {}
        for name, unwinder in (("compiler", compiler), ("synthesized", synthesized)):
            try:
                frame = unwinder.step(stop.frame, stop.stack, True)
                # A caller that never resumes is judged on pc and sp only (docs/architecture.md).
                right[name] = (frame.r[15], frame.r[13]) == (caller.pc, caller.sp) and (
                    not caller.resumes or tuple(frame.r[4:12]) == tuple(caller.callee_saved))
            except HarnessError:  # a refusal or a bad read: not right
                right[name] = False
            tally[f"{name} {'right' if right[name] else 'wrong'}"] += 1
        found.outcomes.setdefault(stop.pc - base, Counter())[OUTCOMES[right["compiler"], right["synthesized"]]] += 1

    return observe, judged


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


def compared_elf(path: str, entry: str | None = None,
                 run: LinuxRun | None = None) -> tuple[Comparison, int | None, str | None]:
    """The rows from code beside the ELF's CFI and, with `entry` (bare
    metal) or `run` (a Linux process), the verdicts where they disagree:
    (the comparison, the stops judged or None, the run's fault or None)."""
    image = open_elf(path)
    compiler = read_cfi(image)
    found = compare(compiler, code_reader(image))
    if entry is not None:
        return found, judge(found, program_from_elf(path, entry), compiler, elf_functions(image, True)), None
    if run is not None:
        return found, *judge_process(found, run)
    return found, None, None


def compare_elf(path: str, entry: str | None, run: LinuxRun | None = None) -> list[str]:
    """`encode --compare`: the report of `compared_elf`."""
    found, judged, fault = compared_elf(path, entry, run)
    lines = report_lines(found, judged)
    return lines if fault is None else [*lines, f"the run ended early: {fault}"]
