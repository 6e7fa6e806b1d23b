"""Unwind rows from machine code alone: a dataflow analysis of the frame.

`analyse` follows every path of a Thumb-2 function from its entry and
writes the unwind state before each instruction it reaches, as CFI rows
(harness.program.CfiRow): the CFA through sp wherever sp's distance to it
is known, through r7 (set from sp: the frame pointer) where sp moved by an
amount the code computes, and through sp again once sp is known. It reads
no unwind table.

The state before an instruction (FrameState) is what an unwinder needs:
the CFA as sp or r7 plus an offset, how far sp lies below the CFA (`depth`,
None once sp moved by an amount the code computes), where each callee-saved
register and lr is saved, and which of them no longer hold the caller's
value (a store of such a register is not a save; the save of a register
no path writes is dropped from every row). Each instruction maps a
state to the state after it (harness.thumb.frame_effects); paths join where they meet, and
must agree there.

Conditions: the instructions of an IT block run or not by one condition.
A path entering a block splits into the path where the condition holds and
the one where it fails, and each remembers that (`fact`) until flags are
set again, so that a second block under the same condition (clang splits
`addlt sp, #4` and `ldmialt sp!, {...}` over two) is taken alike. Where
paths with different states meet under different facts, no single row
describes the pc: its row refuses (as where the state cannot be known).

What the analysis cannot model is never guessed: sp or the frame pointer
set by an instruction it does not know, paths that disagree at a join, an
indirect branch inside the function. The function's rows refuse to unwind
from there, and `problems` names the reason and address.
"""

from __future__ import annotations

from typing import Callable, Iterable

from harness.program import CfiRow, FunctionCfi
from harness.registers import LR, PC, SP
from harness.thumb.branch_tables import data_read, formed_address, thunk_target, wide_constant
from harness.thumb.disasm import Instruction, decode_one
from harness.thumb.analysed import NOT_SINGLE, UNREACHED, Analysed, ProgramFacts, labels_in
from harness.thumb.frame_effects import UNKNOWN, FrameState, Unknowable, frame_pointer, lost, torn_down
from harness.thumb.native import compiled_analysis
from harness.thumb.start_shapes import past_padding, pushes_lr
from harness.thumb.successors import Body, FromStart, Path, into_arm, successors
from harness.thumb.untouched import dropped, kept_saves

# (address, fact) pairs visited per function, a guard against pathological
# code: at least MAX_STATES, and STATES_PER_BYTE for each byte of a large
# function (csmith's main at gcc -O0, 388 KB in one function, needs more
# than 200,000)
MAX_STATES = 200_000
STATES_PER_BYTE = 4
LANDING_ROUNDS = 8  # rounds of analysing code only the unwinder enters (landing pads)


class _Asked(frozenset):
    """A set of functions that never return, which remembers what it was asked."""

    def __new__(cls, members: Iterable[int]) -> "_Asked":
        made = super().__new__(cls, members)
        made.asked = set()
        return made

    def __contains__(self, address) -> bool:
        self.asked.add(address)
        return frozenset.__contains__(self, address)


def analyse(name: str, start: int, end: int, code_at: Callable[[int, int], bytes],
            labels: Iterable[int] = (), arm: bool = False) -> FunctionCfi:
    """The rows of the Thumb function [start, end) from its code alone (an
    ARM function with `arm`).

    Code no branch reaches is entered, if at all, by the unwinder: a C++
    landing pad, which resumes with the frame of the call that threw. When
    every call of the function has one frame and every path was followed
    without a problem, each such piece is analysed from that frame, and
    kept where that meets no problem (data decoded by chance soon does);
    otherwise its rows refuse (rounds, as one pad may lead to the next).
    `labels`: addresses the program's data holds (formats.data_pointers.code_pointers)."""
    return analyse_calling(name, start, end, code_at, ProgramFacts(labels=labels), arm=arm).function


def analyse_calling(name: str, start: int, end: int, code_at: Callable[[int, int], bytes],
                    facts: ProgramFacts = ProgramFacts(), bounded: bool = True, arm: bool = False,
                    rows: bool = True) -> Analysed:
    """`analyse`, with the targets of its paths' calls and tail calls
    (where functions no symbol names begin, in the state each is entered
    in) and whether it returns; a call to a function of `facts.noreturn`
    ends its path (the code after it, another function, is not this
    one's), as does reaching `facts.data_spans` (what mapping symbols mark:
    a literal pool after a call that never returns, or after `bxeq lr;
    nop`, a weak call the linker removed). Not `bounded` (the
    end is a guess: no symbol gave it), code no path reaches may be other
    functions: no landing pad is looked for there. Without `rows`, no rows
    are written (a caller that looks only at the paths)."""
    found = compiled_analysis(name, start, end, code_at, facts, bounded, arm, rows)
    if found is not None:
        return found
    watched = _Asked(facts.noreturn)
    body = _body(start, end, code_at, facts.labels, arm)._replace(noreturn=watched, data=facts.data_spans)
    analysis = _analysed(body, pads=bounded)
    if analysis.returns:  # it must give its caller r4-r11 back: where one is overwritten unsaved, it is lost
        analysis.refused.update(address for address, states in analysis.reached.items()
                                if any(lost(state) for state in states.values()))
    written = _rows(start, end, analysis.reached, analysis.sizes, analysis.refused, analysis.kept_saves()) \
        if rows else ()
    return Analysed(FunctionCfi(name, start, end, written, tuple(analysis.problems)), frozenset(analysis.callees),
                    analysis.returns, tuple(analysis.gap_spans()), frozenset(analysis.arm_callees),
                    frozenset(watched.asked),
                    frozenset(analysis.branched), frozenset(analysis.loaded), analysis.falls_through,
                    frozenset(target for target, after in analysis.call_sites
                              if after < end and pushes_lr(code_at, after, end, arm)))


def frame_states(start: int, end: int, code_at: Callable[[int, int], bytes],
                 labels: Iterable[int] = (), arm: bool = False) -> dict[int, FrameState | None]:
    """The frame before each instruction a path reaches, None where no
    single one is known (what `analyse` writes rows from)."""
    analysis = _analysed(_body(start, end, code_at, labels, arm))
    kept = analysis.kept_saves()
    found = {}
    for address, states in analysis.reached.items():
        one = _one_frame(states.values(), address, kept)
        found[address] = None if one is None or address in analysis.refused else \
            dropped(next(iter(states.values())), kept)
    return found


def _one_frame(states, address: int, kept: frozenset[int]) -> CfiRow | None:
    """The row all `states` at `address` share (paths under different
    facts may differ in what no row says: lost registers, r7), or None;
    saves only of the registers `kept` (harness.thumb.untouched)."""
    if len(states) == 1:  # most pcs: one path, or paths under one fact
        state, = states
        return None if state == UNKNOWN else dropped(state, kept).row(address)
    rows = {None if state == UNKNOWN else dropped(state, kept).row(address) for state in states}
    return rows.pop() if len(rows) == 1 else None


def _body(start: int, end: int, code_at, labels: Iterable[int], arm: bool = False) -> Body:
    return Body(start, end, code_at, labels_in(labels, start, end),
                own_code=FromStart(start, code_at),
                arm=arm)


def _analysed(body: Body, pads: bool = True) -> "_Analysis":
    analysis = _Analysis(body)
    analysis.explore([(body.start, Path(FrameState(), arm=body.arm))])
    branched = set(analysis.sizes)  # what branches reach: landing pads never change its rows
    frame = analysis.call_frame()
    for _ in range(LANDING_ROUNDS if pads and frame is not None and not analysis.problems else 0):
        grown = False
        for gap in analysis.gaps():
            trial = analysis.copy()
            trial.falls_through = False
            trial.explore([(gap, Path(frame, arm=body.arm))], branched)
            # code, not data decoded by chance, nor padding that runs on into the next function: keep it
            if not trial.problems and not trial.falls_through:
                trial.falls_through = analysis.falls_through
                analysis, grown = trial, True
        if not grown:
            break
    return analysis


class _Analysis:
    """The paths of one function: the states reached before each
    instruction (per fact), and where the analysis refuses."""

    def __init__(self, body: Body):
        self.body = body
        self.start, self.end, self.code_at = body.start, body.end, body.code_at
        self.reached: dict[int, dict[tuple[int, bool] | None, FrameState]] = {}
        self.sizes: dict[int, int] = {}  # instruction sizes where paths went
        self.calls: set[int] = set()  # addresses of calls on some path
        self.callees: set[int] = set()  # where its calls go, and code addresses it forms (see Analysed)
        self.arm_callees: set[int] = set()
        self.branched: set[int] = set()  # see Analysed
        self.call_sites: set[tuple[int, int]] = set()
        self.loaded: set[int] = set()
        self.returns = False  # a path left by a return or a tail call
        self.falls_through = False
        self.problems: list[str] = []
        self.refused: set[int] = set()
        # bytes of data: marked so ($d), or read as data (jump tables, literal pools)
        self.data: set[int] = {byte for low, high in body.data for byte in range(low, high)}
        self.visited = 0
        self.max_states = max(MAX_STATES, STATES_PER_BYTE * (body.end - body.start))
        self.decoded: dict[tuple[int, bool], Instruction] = {}  # (address, ARM state) -> its instruction

    def explore(self, pending: list[tuple[int, Path]], kept: set[int] = frozenset()) -> None:
        """Follow `pending` paths; one meeting a state at an address of
        `kept` with another frame ends there, leaving that state as it was."""
        while pending:
            address, path = pending.pop()
            if address == self.end:  # falls through into the code after: it goes on there, no noreturn
                self.returns = self.falls_through = True  # (libgcc's `cmp r1, #0; beq div0` runs into its
                # division routine)
            if not self.start <= address < self.end or address in self.data:
                continue  # data (a path into it is one no run takes: after a call that never returns)
            states = self.reached.setdefault(address, {})
            known = states.get(path.fact)
            if known is not None:
                joined = _join(known, path.state, frame_pointer(path.arm))
                if joined != known and address in kept:
                    continue
                if joined is None:
                    self._refuse(address, "paths meet with different frames")
                    joined = UNKNOWN
                if joined == known:
                    continue
                path = path._replace(state=joined)  # a register lost on some path: go on with it lost
            states[path.fact] = path.state
            self.visited += 1
            if self.visited > self.max_states:
                self._refuse(address, f"more than {self.max_states} states; the analysis gave up")
                self.refused.update(range(self.start, self.end, 2))
                return
            insn = None
            try:
                insn = self.decoded.get((address, path.arm))
                if insn is None:
                    insn = self.decoded[(address, path.arm)] = _instruction(self.code_at, address, self.end, path.arm)
                first_visit = address not in self.sizes  # what the code itself says is read once
                self.sizes[address] = insn.size
                leaves_to = self._note_targets(insn, path, first_visit)
                if first_visit:
                    self._read(insn)
                onward = list(successors(insn, path, self.body))
                pending.extend(onward)
                if not onward and insn.op not in ("udf", "bkpt", "bl", "blx") \
                        and not (insn.op == "b" and insn.imm in self.body.noreturn) \
                        and not (leaves_to is not None and leaves_to in self.body.noreturn):  # a tail call to one
                    self.returns = True
            except Unknowable as why:
                self._refuse(address, str(why))
                if insn is not None and path.state != UNKNOWN:
                    self._unknown_onward(insn, path, pending)

    def _note_targets(self, insn: Instruction, path: Path, first_visit: bool) -> int | None:
        """Note the functions `insn` calls, tail-calls or takes the address
        of (and a call with lr saved nowhere); where a Thumb `bx pc` goes
        on in ARM state (successors.into_arm), or a thunk's `bx` goes
        (branch_tables.thunk_target), else None."""
        veneer = into_arm(insn)
        thunk = thunk_target(insn, self.code_at) if insn.op == "bx" else None
        if insn.op in ("bl", "blx"):
            self.calls.add(insn.address)
            if path.state != UNKNOWN and all(reg != LR for reg, _ in path.state.saved):
                # while the callee runs, this frame's return address is nowhere
                self._refuse(insn.address, f"'{insn.text}' calls with lr saved nowhere")
            if insn.imm is not None:  # `blx` switches state, `bl` keeps it
                (self.arm_callees if (insn.op == "blx") != insn.arm else self.callees).add(insn.imm)
                self.call_sites.add((insn.imm, insn.address + insn.size))
        elif insn.op == "b" and not self.start <= insn.imm < self.end and torn_down(path.state):
            (self.branched if insn.conditional else self.arm_callees if insn.arm else self.callees).add(
                insn.imm)  # a tail call: a function
        elif veneer is not None and not self.start <= veneer < self.end and torn_down(path.state):
            self.arm_callees.add(veneer)  # a Thumb stub's `bx pc` into the ARM function after it
        elif thunk is not None and torn_down(path.state):
            (self.callees if thunk & 1 else self.arm_callees).add(thunk & ~1)  # a tail call to a far function
            return thunk & ~1
        elif insn.op == "add" and first_visit \
                and (formed := formed_address(insn, self.code_at)) is not None and formed & 1:
            self.callees.add(formed & ~1)  # a Thumb code address taken pc-relative: a function
        return veneer

    def kept_saves(self) -> frozenset[int]:
        return kept_saves((state for states in self.reached.values() for state in states.values()),
                          self.decoded.values(), self.start, self.end, self.code_at, self.body.arm, self.data,
                          self.sizes)

    def _read(self, insn: Instruction) -> None:
        """What the code itself says at `insn`, once: the data it reads, and
        the words it loads (a literal; a movw/movt pair) that may be addresses."""
        read = data_read(insn, self.code_at)
        self.data.update(read)
        if insn.op == "ldr" and read and insn.mem[0] == PC and PC not in insn.writes:
            self.loaded.add(int.from_bytes(self.code_at(min(read), 4), "little"))
        elif (constant := wide_constant(insn, self.code_at)) is not None:
            self.loaded.add(constant)

    def _unknown_onward(self, insn: Instruction, path: Path, pending: list) -> None:
        """Go on past an instruction whose effect is unknowable with no
        frame known; a branch that cannot be followed ends the path."""
        try:
            pending.extend(successors(insn, path._replace(state=UNKNOWN), self.body))
        except Unknowable:
            pass

    def copy(self) -> "_Analysis":
        twin = _Analysis(self.body)
        twin.reached = {address: dict(states) for address, states in self.reached.items()}
        twin.sizes, twin.calls, twin.data = dict(self.sizes), set(self.calls), set(self.data)
        twin.callees, twin.arm_callees, twin.returns = set(self.callees), set(self.arm_callees), self.returns
        twin.branched, twin.loaded, twin.falls_through = set(self.branched), set(self.loaded), self.falls_through
        twin.call_sites = set(self.call_sites)
        twin.problems, twin.refused = list(self.problems), set(self.refused)
        twin.visited, twin.decoded = self.visited, self.decoded  # what the code says, whatever the paths
        return twin

    def _refuse(self, address: int, why: str) -> None:
        if address not in self.refused:
            self.refused.add(address)
            self.problems.append(f"{address:#x}: {why}")

    def call_frame(self) -> FrameState | None:
        """The one frame every call of the function is made with (lr then
        gone; r7's distance to the CFA where all agree, as at a join), or
        None when the calls disagree or there are none."""
        states = [state for address in self.calls for state in self.reached[address].values()]
        if not states:
            return None
        frame = states[0]._replace(clobbered=states[0].clobbered | {LR})
        for state in states[1:]:
            frame = _join(frame, state, frame_pointer(self.body.arm))
            if frame is None:
                return None
        return None if frame == UNKNOWN else frame

    def gaps(self) -> list[int]:
        """Where code no path reached begins (not data the code reads)."""
        return [low for low, _ in self.gap_spans()]

    def gap_spans(self) -> list[tuple[int, int]]:
        """The code no path reached, [low, high) each (not data the code
        reads, nor padding before data or the end: never run, never a pad)."""
        found, covered = [], self.start
        extents = {**{a: 1 for a in self.data}, **self.sizes}
        for address in sorted(extents):
            if address > covered and covered not in self.data and covered % 2 == 0 and (
                    address in self.sizes or past_padding(self.code_at, covered, address, self.body.arm) < address):
                found.append((covered, address))
            covered = max(covered, address + extents[address])
        last = [(covered, self.end)] if past_padding(self.code_at, covered, self.end, self.body.arm) < self.end else []
        return found + last


def _join(known: FrameState, other: FrameState, fp: int) -> FrameState | None:
    """The state where two paths meet: the same frame (CFA, depth, saves),
    a register that lost the caller's value on either path lost, and r7's
    distance to the CFA where both agree (where sp is known, r7 may hold
    anything); where sp's distance differs but both keep r7 at one distance
    from the CFA (one path moved sp by a computed amount), the CFA through
    r7; None when the frames differ, UNKNOWN past a refusal."""
    if UNKNOWN in (known, other):
        return UNKNOWN
    fp_offset = known.fp_offset if known.fp_offset == other.fp_offset else None
    lost = known.clobbered | other.clobbered
    if known._replace(clobbered=other.clobbered, fp_offset=other.fp_offset) == other \
            and (fp_offset is not None or known.cfa_reg == SP):
        return known._replace(clobbered=lost, fp_offset=fp_offset)
    if fp_offset is not None and known.saved == other.saved:
        return known._replace(depth=None, cfa_reg=fp, clobbered=lost)
    return None


def _instruction(code_at: Callable[[int, int], bytes], address: int, end: int, arm: bool) -> Instruction:
    insn = decode_one(code_at(address, 4), address, arm)
    if insn is None:
        raise Unknowable("undecodable instruction on a path")
    if address + insn.size > end:
        raise Unknowable("a path runs past the function's end")
    return insn


def _rows(start: int, end: int, reached, sizes: dict[int, int], refused: set[int],
          kept: frozenset[int]) -> tuple[CfiRow, ...]:
    """A row wherever the state changes; a refusing row where no single
    state is known, and over code no path reaches (a C++ landing pad is
    entered from the unwinder, not by a branch; data and padding are never
    executed, so refusing there costs nothing)."""
    rows: list[CfiRow] = []

    def add(row: CfiRow) -> None:
        last = rows[-1] if rows else None
        if last is None or (last.cfa_reg, last.cfa_offset, last.saved, last.problem) \
                != (row.cfa_reg, row.cfa_offset, row.saved, row.problem):
            rows.append(row)

    covered = start
    for address in sorted(reached):
        if address > covered:
            add(CfiRow(covered, problem=UNREACHED))
        one = _one_frame(reached[address].values(), address, kept)
        if address in refused or one is None:
            add(CfiRow(address, problem=NOT_SINGLE))
        else:
            add(one)
        covered = max(covered, address + sizes.get(address, 2))
    if covered < end:
        add(CfiRow(covered, problem=UNREACHED))
    return tuple(rows)
