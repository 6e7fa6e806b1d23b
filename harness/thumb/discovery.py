"""A whole program's rows from its code alone: which code is a function,
and each function's rows (harness.thumb.frame_analysis).

Function starts come from addresses, never from unwind rules: the Thumb
function symbols (`.symtab`, or `.dynsym` alone in a stripped binary) and
the ARM ones (glibc's memcpy, memmove, memset: analysed in ARM state);
the Thumb code the data points at; the loader's entry points (e_entry,
DT_INIT, DT_FINI); the start of every `.ARM.exidx` index entry (the
linker writes one per function it has unwind information for, or
CANTUNWIND; only the addresses are read, never the rules; ARM where the
code reads so); then the targets of the calls and tail calls the analysed
paths make and the Thumb code addresses they form or load (pc-relative;
in code linked where it runs, from literal pools and movw/movt pairs),
round after round, in the state the branch enters (`bl` keeps it, `blx`
switches) unless a mapping symbol (`$a`, `$t`) says otherwise. In a
function found so (or named by a symbol of size 0), code no path reaches
starts another function where, past its padding, it pushes lr within its
first instructions, a compare and return as a leaf allowed before (after a
call that never returns, the next function; a shrink-wrapped prologue),
or where, analysed alone, every path of it returns or tail-calls a known
start with no problem met, through none of the code around it (a leaf
function no call reaches, in a run of functions whose index entries the
linker merged). A function found so ends where the next known function
begins, or at the end of its section. Data the mapping symbols mark (`$d`:
literal pools) is never decoded. Code between functions is not analysed:
its rows refuse, where Chrome's tables would return to lr.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable

from harness.gc_pause import collector_paused
from harness.program import CfiRow, CodeMap, FunctionCfi
from harness.sorted_ints import SortedInts
from harness.thumb.disasm import forget_addresses
from harness.thumb.analysed import Analysed, ProgramFacts
from harness.thumb.noreturn_rounds import analysed_again, kept, noreturn_rounds
from harness.thumb.frame_analysis import analyse_calling
from harness.thumb.start_shapes import looks_arm, past_padding, pushes_lr

GAP = "<not analysed>"  # the name of the refusing rows between functions
# Functions of the C and C++ runtimes that never return, by name (objtool
# keeps such a list too): a call to one through the PLT ends its path.
NORETURN = frozenset({
    "abort", "exit", "_exit", "_Exit", "quick_exit", "__stack_chk_fail", "__assert_fail", "__assert_perror_fail",
    "__fortify_fail", "__chk_fail", "__libc_fatal", "longjmp", "_longjmp", "siglongjmp", "__longjmp_chk",
    "pthread_exit", "err", "errx", "verr", "verrx", "error_exit", "__cxa_throw", "__cxa_rethrow",
    "__cxa_bad_cast", "__cxa_bad_typeid", "__cxa_call_unexpected", "__cxa_end_cleanup", "_Unwind_Resume",
    "_ZSt9terminatev", "_ZSt17__throw_bad_allocv", "_ZSt20__throw_length_errorPKc",
    "_ZSt20__throw_out_of_rangePKc", "_ZSt24__throw_out_of_range_fmtPKcz", "_ZSt19__throw_logic_errorPKc",
    "_ZSt21__throw_bad_array_new_lengthv"})
FOUND = "fn_"
Progress = Callable[[int, int], None]  # told (starts analysed, starts known)
_silent: Progress = lambda analysed, known: None  # noqa: E731


def analyse_all(code_map: CodeMap, code_at: Callable[[int, int], bytes],
                progress: Progress | None = None) -> tuple[FunctionCfi, ...]:
    """The rows of every function `code_map` names or its calls reach, in
    address order, with a refusing row over each gap between them. A
    function no path of which returns is noreturn: its callers are
    analysed again with their paths ending at calls to it, round after
    round (without symbols, the code after such a call is the next
    function, which the caller's frame must not describe). `progress` is
    told the starts analysed and known as the search goes."""
    try:
        with collector_paused():  # a million functions' records, no cycle among them
            found, _ = _all_analysed(code_map, code_at, progress)
            return _with_gaps([found[start].function for start in sorted(found)])
    finally:
        forget_addresses()


def function_starts(code_map: CodeMap, code_at: Callable[[int, int], bytes]) -> dict[int, bool]:
    """Where analyse_all's functions start, each with whether it is ARM code."""
    try:
        found, arm = _all_analysed(code_map, code_at)
        return {start: start in arm for start in sorted(found)}
    finally:
        forget_addresses()


def _all_analysed(code_map: CodeMap, code_at,
                  progress: Progress | None = None) -> tuple[dict[int, Analysed], set[int]]:
    named = frozenset(code_map.noreturn)  # through the PLT: known by name
    analyse = _analyser(code_map, code_at)
    found, arm, ended = _discovered(code_map, code_at, analyse, named, progress)
    noreturn = noreturn_rounds(found, arm, analyse, named, ended)
    # What no path reaches and starts no function may be a landing pad (entered by the unwinder)
    due = [start for start, one in found.items()
           if one.unreached and (one.function.name.startswith(FOUND) or start in code_map.unsized)]
    found.update(zip(due, analysed_again(found, due, noreturn, arm, analyse, pads=True)))
    return found, arm


def _analyser(code_map: CodeMap, code_at) -> Callable[..., Analysed]:
    """analyse(name, start, end, noreturn, arm, pads, rows): one function's
    analysis, with the labels the program's data holds in tables (a
    computed goto's targets, among them: formats.data_pointers.CodePointers) and the
    data its mapping symbols mark, in it; landing pads looked for where a
    symbol gives its end, or with `pads`."""
    labels = sorted({word & ~1 for word in code_map.labels})
    modes = code_map.modes
    unsized = frozenset(code_map.unsized)

    def analyse(name: str, start: int, end: int, noreturn: frozenset[int], arm: bool, pads: bool = False,
                rows: bool = True) -> Analysed:
        first = max(bisect_right(modes, (start, "~")) - 1, 0)
        marks = [*modes[first:bisect_left(modes, (end, ""))], (end, "")]
        data = tuple((max(low, start), high) for (low, kind), (high, _) in zip(marks, marks[1:])
                     if kind == "d" and high > start)
        facts = ProgramFacts(labels=labels[bisect_left(labels, start):bisect_left(labels, end)], noreturn=noreturn,
                             data_spans=data)
        bounded = pads or (not name.startswith(FOUND) and start not in unsized)
        return analyse_calling(name, start, end, code_at, facts, bounded=bounded, arm=arm, rows=rows)

    return analyse


def _discovered(code_map: CodeMap, code_at, analyse, noreturn: frozenset[int],
                progress: Progress | None = None) -> tuple[dict[int, Analysed], set[int], frozenset[int]]:
    """Every function the symbols name, the data points at (Thumb bit
    set), the loader enters, the `.ARM.exidx` index begins, or the
    analysed calls reach, analysed; and which are ARM code. In code linked
    where it runs, any word of the data or of a literal pool may look like
    an address (an integer of sqlite3's): one is taken for a start only
    once everything else is found, and only where it lies in code no path
    of the function around it reaches. Such words are taken one at a time,
    lowest first, each function found before the next word is looked at:
    a word inside a function no start was known for yet (a static one a
    pointer leads to) may be a target of that function's own jump table.
    Also the functions found never to return (`noreturn`, and more: see
    _Finder.ended)."""
    finder = _Finder(code_map, code_at, analyse, noreturn, progress or _silent)
    while True:
        finder.drain()
        words = sorted(finder.deferred - finder.queued)
        finder.deferred.clear()
        taken = next((index for index, target in enumerate(words) if finder.unreached(target)), None)
        if taken is None:
            return finder.found, finder.arm, finder.noreturn
        finder.deferred.update(words[taken + 1:])  # looked at again once this one's function is found
        finder.add(words[taken], False)


class _Finder:
    """The search for function starts: the starts known, the functions
    analysed, those still to analyse."""

    def __init__(self, code_map: CodeMap, code_at, analyse, noreturn: frozenset[int], progress: Progress):
        self.code_map, self.code_at, self.analyse, self.noreturn = code_map, code_at, analyse, noreturn
        self.progress = progress
        unsized = frozenset(code_map.unsized)  # their functions end as found ones do: the size is not known
        self.symbols = {start: (end, name) for start, end, name in (*code_map.spans, *code_map.arm_spans)
                        if start not in unsized}
        self.names = {start: name for start, _, name in (*code_map.spans, *code_map.arm_spans)}
        self.symbol_starts = sorted(self.symbols)
        first = _first_starts(code_map._replace(pointers=()) if code_map.fixed else code_map, code_at,
                              self.symbol_starts, self.symbols)
        self.deferred = {word & ~1 for word in code_map.pointers if word & 1} if code_map.fixed else set()
        self.arm = {start for start, in_arm in first.items() if in_arm}
        self.starts = SortedInts(first)
        self.found: dict[int, Analysed] = {}
        self.pending, self.queued, self.shared = sorted(first, reverse=True), set(first), set()

    def drain(self) -> None:
        """Analyse every pending start, and the starts their code leads to."""
        while self.pending:
            start = self.pending.pop()
            in_arm = start in self.arm
            end, name = self.symbols.get(start) or (_end_of(start, self.starts, self.code_map),
                                                    self.names.get(start, f"{FOUND}{start:x}"))
            one = self.found[start] = self.analyse(name, start, end, self.noreturn, in_arm)
            self.progress(len(self.found), len(self.queued))
            if start not in self.symbols and self.ended(one):
                one = self.found[start] = self.analyse(name, start, end, self.noreturn, in_arm)
            self.shared.update(one.branched)
            begun = set() if start in self.symbols else \
                {begun for gap in one.unreached if (begun := _begun(self.code_at, self.analyse, one, gap, in_arm,
                                                                    self.noreturn, (self.queued, self.shared)))
                 is not None}  # (start, ARM?)
            if self.code_map.fixed:
                self.deferred.update(word & ~1 for word in one.loaded if word & 1)
            entered = [(target, False) for target in one.callees] + [(target, True) for target in one.arm_callees] \
                + sorted(begun)
            for target, target_arm in sorted(entered):
                self.add(target, target_arm)
            if self.found.get(start) is one:  # (not analysed again for a start found in it)
                self.found[start] = kept(one)

    def ended(self, one: Analysed) -> bool:
        """Does a call of `one`, found without a symbol's end, return into
        code that pushes lr (a prologue: the next function)? Its callee
        then never returns (std::terminate, abort: in a static program no
        PLT entry names them), and joins `noreturn`."""
        ended = one.returned_into - self.noreturn
        if ended:
            self.noreturn = self.noreturn | ended
        return bool(ended)

    def add(self, target: int, in_arm: bool) -> None:
        """A start found: analysed next, with the function before it again
        where that one, found without a symbol's end, ran past it."""
        if target in self.queued or not _new_function(target, self.symbol_starts, self.symbols, self.code_map, in_arm):
            return
        if _marked(self.code_map.modes, target, "a" if in_arm else "t"):
            self.arm.add(target)
        self.starts.add(target)
        self.queued.add(target)
        self.pending.append(target)
        before = self.starts.before(target)
        if before is not None and before not in self.symbols and before in self.found \
                and self.found[before].function.end > target:
            del self.found[before]  # a function found by a call ends earlier now: again
            self.pending.append(before)

    def unreached(self, target: int) -> bool:
        """Does `target` lie in no function found, or in code no path of
        the one around it reaches?"""
        start = self.starts.at_or_before(target)
        around = self.found.get(start) if start is not None else None
        return around is None or target >= around.function.end \
            or any(low <= target < high for low, high in around.unreached)


def _marked(modes: tuple[tuple[int, str], ...], address: int, entered: str) -> bool:
    """Is `address` ARM code: so marked by the last mapping symbol at or
    before it, or with none there, `entered` so ("a") by the branch to it?"""
    index = bisect_right(modes, (address, "~")) - 1
    return (modes[index][1] if index >= 0 and modes[index][1] != "d" else entered) == "a"


def _first_starts(code_map: CodeMap, code_at, symbol_starts: list[int], symbols) -> dict[int, bool]:
    """The starts known before any code is analysed, each with whether it
    is ARM code: the symbols', then those of no symbol's function: the
    Thumb code the data points at, the loader's entry points (bit 0 says
    the state) and the `.ARM.exidx` index entries (whose addresses carry
    no state: ARM only where the mapping symbols or the code say so)."""
    first = {start: False for start, _, _ in code_map.spans}  # those of no size among them
    first.update((start, True) for start, _, _ in code_map.arm_spans)
    given = [(word & ~1, not word & 1) for word in code_map.entries] \
        + [(word & ~1, False) for word in code_map.pointers if word & 1]
    for bound in code_map.bounds:  # the linker's entry for a section may begin at its alignment padding
        start = past_padding(code_at, bound, _next_bound(code_map, bound), False)
        given.append((start, _marked(code_map.modes, start, "a" if looks_arm(code_at, start) else "t")))
    for start, in_arm in given:
        if start not in first and _new_function(start, symbol_starts, symbols, code_map, in_arm):
            first[start] = in_arm
    return first


def _begun(code_at, analyse, around: Analysed, gap: tuple[int, int], arm: bool, noreturn,
           seen: tuple[set[int], set[int]]) -> tuple[int, bool] | None:
    """Where a function begins in code `gap` [low, high) that no path of
    the function found `around` it reaches, if one does: past the padding
    there (`nop`, zeros), code that pushes lr among its first few
    instructions, or code that, taken as a function of its own, has every
    path end in a return or in a tail call to a known start (none runs
    on past the function's code), with no problem met, that no conditional
    branch from another function enters (libgcc's shared division by
    zero), and runs through none of the code `around` reaches (a
    leaf function no call reaches; a C++ landing pad jumps back into its
    function's body or pops the frame it does not have from there, and
    fails so; code of the other state, read so, soon branches anywhere).
    The code is in the state of the function around it, or ARM where it
    reads so (glibc's ARM `__memcpy_neon` after Thumb code, its index
    entry merged with those before it); with that state."""
    high = gap[1]
    low = past_padding(code_at, *gap, arm)
    known, shared = seen  # the starts known, the targets of conditional branches out of functions
    if low >= high or low in shared or _after_into_arm(code_at, low, arm):
        return None
    arm = arm or looks_arm(code_at, low, always=2)  # the analysis below must then hold in ARM state
    if pushes_lr(code_at, low, high, arm):
        return low, arm
    end = around.function.end
    alone = analyse(f"{FOUND}{low:x}", low, end, noreturn, arm, rows=False)  # (only its paths are looked at)
    if not alone.returns or alone.falls_through or alone.function.problems or alone.branched \
            or not known.issuperset(alone.callees | alone.arm_callees):
        return None
    bounds = [low, *(edge for span in alone.unreached for edge in span), end]  # what it runs through, in pairs
    return (low, arm) if all(any(gap_low <= ran_low and ran_high <= gap_high for gap_low, gap_high in around.unreached)
                             for ran_low, ran_high in zip(bounds[::2], bounds[1::2]) if ran_low < ran_high) else None


def _after_into_arm(code_at, address: int, arm: bool) -> bool:
    """Is `address` the halfword after a word-aligned Thumb `bx pc`, which
    goes on at the next word in ARM state? Never run: a veneer's filler
    (`nop`, or Debian's `b.n` back to the `bx`), no function's start."""
    return not arm and address % 4 == 2 and code_at(address - 2, 2) == b"\x78\x47"


def _next_bound(code_map: CodeMap, address: int) -> int:
    """The next `.ARM.exidx` entry's start after `address`, or the end of its section."""
    later = bisect_right(code_map.bounds, address)
    section = next((high for low, high in code_map.ranges if low <= address < high), address)
    return min(code_map.bounds[later], section) if later < len(code_map.bounds) else section


def _new_function(target: int, symbol_starts: list[int], symbols, code_map: CodeMap, arm: bool = False) -> bool:
    """Is `target` code of no symbol's function (so the start of another)?"""
    if target % (4 if arm else 2) or not any(low <= target < high for low, high in code_map.ranges):
        return False
    index = bisect_right(symbol_starts, target) - 1
    return index < 0 or target >= symbols[symbol_starts[index]][0]


def _end_of(start: int, starts: SortedInts, code_map: CodeMap) -> int:
    """Where a function found by a call ends: the next known start or bound."""
    following = starts.after(start)
    following = 1 << 32 if following is None else following
    later = bisect_right(code_map.bounds, start)
    bound = code_map.bounds[later] if later < len(code_map.bounds) else 1 << 32
    section = next(high for low, high in code_map.ranges if low <= start < high)
    return min(following, bound, section)


def _with_gaps(functions: list[FunctionCfi]) -> tuple[FunctionCfi, ...]:
    found: list[FunctionCfi] = []
    for function in functions:
        last = found[-1].end if found else None
        if last is not None and function.start > last:
            found.append(FunctionCfi(GAP, last, function.start, (CfiRow(last, problem="no function found here"),)))
        found.append(function)
    return tuple(found)


def coverage_lines(functions: tuple[FunctionCfi, ...], ranges) -> list[str]:
    """How much of the executable `ranges` the rows describe: functions by
    where their start came from, bytes inside functions, bytes with a row
    that unwinds (not one that refuses)."""
    code = sum(high - low for low, high in ranges)
    named = [f for f in functions if f.name != GAP]
    found = sum(f.name.startswith(FOUND) for f in named)
    inside = sum(f.end - f.start for f in named)
    known = sum(_unwinding_bytes(f) for f in named)
    share = lambda part: f"{100 * part / max(code, 1):.1f}%"
    return [f"functions: {len(named)} ({len(named) - found} by symbol, {found} found from calls and data)",
            f"code bytes: {code}; in functions {inside} ({share(inside)}); with rows that unwind {known} "
            f"({share(known)}), the rest refuses"]


def _unwinding_bytes(function: FunctionCfi) -> int:
    ends = [row.address for row in function.rows[1:]] + [function.end]
    return sum(end - row.address for row, end in zip(function.rows, ends) if row.problem is None)
