"""The rounds of functions found never to return (discovery's, once
every function is found): each round the functions no path of which
returns join the noreturn set, and those that asked of one whether it
returns are analysed again; and how discovery keeps an analysis."""

from __future__ import annotations

from typing import Iterator

from harness.thumb.analysed import Analysed
from harness.thumb.apart import analysed_apart
from harness.thumb.native import NONE


def noreturn_rounds(found: dict[int, Analysed], arm: set[int], analyse, named: frozenset[int],
                    ended: frozenset[int]) -> frozenset[int]:
    """Round after round, the functions no path of which returns join the
    noreturn set (`ended` so far, `named` what every analysis had), and
    those that asked of one of them whether it returns (a call or branch
    of their paths) are analysed again, in `found` order, where they call
    or branch to one that never returns. A round looks only at those that
    asked of a start that joined since their analysis (indexed by what
    they asked), not at every function: Chrome's 982,000 functions took
    minutes of rounds over all of them. Within a round the analyses are
    apart (harness.thumb.apart). The noreturn set at the end."""
    analysed_with = dict.fromkeys(found, named)  # the noreturn set each analysis had (at least)
    position = {start: index for index, start in enumerate(found)}
    asked_by: dict[int, set[int]] = {}
    for start, one in found.items():
        for target in one.asked:
            asked_by.setdefault(target, set()).add(start)
    quiet = {start for start, one in found.items() if not one.returns}
    noreturn, stale = ended, set()  # stale: asked of a start that joined since its analysis
    joined = set(ended - named)  # what the first round tells of besides what it finds
    while grown := quiet - noreturn:
        joined |= grown
        noreturn = noreturn | grown
        for target in joined:
            stale.update(asked_by.get(target, ()))
        joined = set()
        ended_since: dict[int, frozenset[int]] = {}  # by the noreturn set analyses had (a few: one a round)
        due = []
        for start in sorted(stale, key=position.__getitem__):
            one, had = found[start], analysed_with[start]
            since = ended_since.get(id(had))
            if since is None:
                since = ended_since[id(had)] = noreturn - had
            if one.asked & since and (one.callees | one.arm_callees | one.branched) & noreturn:
                due.append(start)
        for start, one in zip(due, analysed_again(found, due, noreturn, arm, analyse)):
            found[start], analysed_with[start] = one, noreturn
            stale.discard(start)
            for target in one.asked:
                asked_by.setdefault(target, set()).add(start)
            (quiet.discard if one.returns else quiet.add)(start)
    return noreturn


def kept(one: Analysed) -> Analysed:
    """What discovery keeps of an analysis once it has read where its calls
    return and the words it loads (each once, when it is made): a large
    program's analyses hold a million functions' records at once."""
    return one._replace(returned_into=NONE, loaded=NONE)


def analysed_again(found: dict[int, Analysed], starts: list[int], noreturn: frozenset[int], arm: set[int], analyse,
                   pads: bool = False) -> Iterator[Analysed]:
    """The functions at `starts` analysed again (`pads`: landing pads
    looked for), each as discovery keeps it, one at a time, in order;
    apart (harness.thumb.apart)."""
    jobs = [(found[start].function.name, start, found[start].function.end, noreturn, start in arm, pads)
            for start in starts]
    return analysed_apart(lambda *job: kept(analyse(*job)), jobs)
