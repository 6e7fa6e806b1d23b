"""A whole program's rows from its code alone: which code is a function,
and each function's rows (harness.thumb.frame_analysis).

Function starts come from addresses, never from unwind rules: the Thumb
function symbols (`.symtab`, or `.dynsym` alone in a stripped library),
then the targets of the `bl` calls the analysed paths make (a `bl` stays
in Thumb state, so its target is Thumb code), round after round. A
function found by a call ends where the next known function begins, or
at a bound: the end of its section, or the start of an `.ARM.exidx`
index entry (addresses the linker wrote for each function it had unwind
information for; the table's rules are not read). Code between functions
is not analysed (ARM code, say): its rows refuse, where Chrome's tables
would return to lr.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable

from harness.program import CfiRow, CodeMap, FunctionCfi
from harness.thumb.frame_analysis import Analysed, analyse_calling

GAP = "<not analysed>"  # the name of the refusing rows between functions
FOUND = "fn_"  # names a function found by a call, by its address


def analyse_all(code_map: CodeMap, code_at: Callable[[int, int], bytes]) -> tuple[FunctionCfi, ...]:
    """The rows of every function `code_map` names or its calls reach, in
    address order, with a refusing row over each gap between them. A
    function no path of which returns is noreturn: its callers are
    analysed again with their paths ending at calls to it, round after
    round (without symbols, the code after such a call is the next
    function, which the caller's frame must not describe)."""
    found = _discovered(code_map, code_at)
    labels = sorted({word & ~1 for word in code_map.pointers})
    noreturn: frozenset[int] = frozenset()
    while True:
        ended = frozenset(start for start, one in found.items() if not one.returns)
        if ended == noreturn:
            break
        noreturn = ended
        for start, one in list(found.items()):
            if one.callees & noreturn:
                found[start] = _analyse(one.function.name, start, one.function.end, code_at, labels, noreturn)
    return _with_gaps([found[start].function for start in sorted(found)])


def _discovered(code_map: CodeMap, code_at) -> dict[int, Analysed]:
    """Every function the symbols name, the data points at (Thumb bit
    set) or the analysed calls reach, analysed."""
    symbols = {start: (end, name) for start, end, name in code_map.spans}
    symbol_starts = sorted(symbols)
    pointed = [word & ~1 for word in code_map.pointers if word & 1]
    starts = sorted(set(symbol_starts).union(
        word for word in pointed if _new_function(word, symbol_starts, symbols, code_map)))
    labels = sorted({word & ~1 for word in code_map.pointers})
    found: dict[int, Analysed] = {}
    pending, queued = list(reversed(starts)), set(starts)
    while pending:
        start = pending.pop()
        end, name = symbols.get(start) or (_end_of(start, starts, code_map), f"{FOUND}{start:x}")
        found[start] = _analyse(name, start, end, code_at, labels)
        for target in sorted(found[start].callees - queued):
            if not _new_function(target, symbol_starts, symbols, code_map):
                continue
            insort(starts, target)
            queued.add(target)
            pending.append(target)
            before = starts[starts.index(target) - 1] if starts[0] != target else None
            if before is not None and before not in symbols and before in found \
                    and found[before].function.end > target:
                del found[before]  # a function found by a call ends earlier now: again
                pending.append(before)
    return found


def _analyse(name: str, start: int, end: int, code_at, labels: list[int],
             noreturn: frozenset[int] = frozenset()) -> Analysed:
    return analyse_calling(name, start, end, code_at, labels[bisect_left(labels, start):bisect_left(labels, end)],
                           noreturn, bounded=not name.startswith(FOUND))


def _new_function(target: int, symbol_starts: list[int], symbols, code_map: CodeMap) -> bool:
    """Is `target` code of no symbol's function (so the start of another)?"""
    if target % 2 or not any(low <= target < high for low, high in code_map.ranges):
        return False
    index = bisect_right(symbol_starts, target) - 1
    return index < 0 or target >= symbols[symbol_starts[index]][0]


def _end_of(start: int, starts: list[int], code_map: CodeMap) -> int:
    """Where a function found by a call ends: the next known start or bound."""
    index = bisect_right(starts, start)
    following = starts[index] if index < len(starts) else 1 << 32
    bound = next((b for b in code_map.bounds[bisect_right(code_map.bounds, start):][:1]), 1 << 32)
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
