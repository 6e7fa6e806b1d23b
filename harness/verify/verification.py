"""One program's verification, whichever hook drives it (harness.verify.stops):
the verdicts of the walks made in Python, tallied by where the stop is and
why a walk failed, and the causes of the compiled kernel's failing answers."""

from __future__ import annotations

from collections import Counter
from functools import partial
from itertools import islice
from typing import Sequence

from harness import abi
from harness.classify import Classifier, Where, where_in_state
from harness.program import Program
from harness.unwind.frame import Frame
from harness.unwind.walk import Unwinder
from harness.verify import kernel
from harness.verify.failures import (
    MISMATCHES,
    FailureCause,
    LoggedPcs,
    Outcome,
    ProgramResult,
    WalkLog,
    generic,
    logged_pcs,
    mismatch_of,
)
from harness.verify.groundtruth import ShadowFrame
from harness.verify.tally import Grouping, KeyParts, is_stop, sum_by
from harness.verify.walks import INVENTED, MemoizedWalk, chain_frames, first_difference


class Verification:
    """One program's verification, whichever hook drives it: the verdicts of
    walks in Python, and the causes of the kernel's failing answers."""

    def __init__(self, program: Program, unwinders: Sequence[Unwinder], memoize: bool, result: ProgramResult,
                 past_bottom: bool = False):
        self.classify = Classifier(program.function_at, program.module_at)
        self.names = [u.name for u in unwinders]
        self.chains = {index: u for index, u in enumerate(unwinders) if u.step_by is not None}
        self.methods = result.methods
        # past_bottom: a process's threads, whose first frames have no caller (walks.first_difference)
        self.walks = [MemoizedWalk(u, past_bottom) if memoize else partial(first_difference, u, past_bottom=past_bottom)
                      for u in unwinders]
        self.counts = result.counts
        self.invented = result.invented
        self.stop_classes: dict[tuple[frozenset[str], str], int] = {}  # (traits, position) -> the kernel's tally
        self.wheres: list[Where] = []  # by the id the kernel knows them by
        self._where_ids: dict[Where, int] = {}
        self.log = WalkLog()  # the failing walks in Python
        self.log_cap = abi.FAILURE_LOG_CAP  # entries in `log`, at most; the rest are tallied in `unlogged`
        self.unlogged: Counter = Counter()  # (where, cause) -> failing walks in Python past the cap
        self._causes: dict[FailureCause, FailureCause] = {}  # each cause of walks in Python, once
        self.questioned: set[int] = set()  # serials of shadow frames a walk found a wrong register of

    def where(self, pc: int, state: int, thread: int = 0) -> Where:
        """pc's (function, traits, position) at a stop in `state` (abi.STOP_STATES
        bits, as groundtruth.ShadowStack.state tells them) of `thread`
        (classify.where_in_state)."""
        return where_in_state(self.classify(pc), state, thread)

    def ids(self, pc: int, state: int = 0, thread: int = 0) -> tuple[int, int, int, int]:
        """(stop class, where id) of a stop at pc in `state` of `thread`, for
        the kernel, and the pcs [low, high) that share them."""
        where, low, high = self.classify.span(pc)
        where = where_in_state(where, state, thread)
        where_id = self._where_ids.get(where)
        if where_id is None:
            where_id = self._where_ids[where] = len(self.wheres)
            self.wheres.append(where)
        return self.stop_classes.setdefault((where.traits, where.position), len(self.stop_classes)), where_id, low, high

    def failure_cause(self, unwinder: str, outcome: Outcome, frame_pc: int) -> FailureCause:
        """The cause of a failing walk (frame, kind, register, detail) whose
        wrong frame is at frame_pc, with the function it is in (a caller's
        pc is a return address: its call lies one byte before)."""
        frame_index, kind, register, detail = outcome
        culprit, culprit_traits, _ = self.classify(frame_pc if frame_index == 0 else frame_pc - 1)
        return FailureCause(unwinder, kind, frame_index, culprit, register, detail, culprit_traits)

    def kernel_causes(self, stop_kernel: kernel.StopKernel, found) -> list[FailureCause]:
        """The causes of the kernel's failing answers, by cause id (`found`:
        Tracer.causes(), (unwinder index, answer values, culprit) each, or
        the cause the kernel made of those parts: the reference of its C,
        held to it by test). A mismatch's, a failure rule's, a guard
        failure's of a rule whose failures are all of one kind, a rejected
        caller's and a chain's refusal in a library, is shared wherever the
        wrong frame is in the same function (`culprit`, a where id), its
        values given apart (each log entry's, worded where the log is read);
        a mismatch's is made without a record of its answer."""
        causes, names, wheres, new = [], self.names, self.wheres, tuple.__new__
        for item in found:
            if type(item) is FailureCause:  # made by the kernel (`cause_parts`)
                causes.append(item)
                continue
            index, values, culprit = item
            if values[1] == abi.MISMATCH_ANSWER:
                function, traits, _ = wheres[culprit]
                kind, register_name = mismatch_of(values[2])
                causes.append(new(FailureCause, (names[index], kind, values[0], function, register_name, "", traits)))
                continue
            answer = abi.answer(values)
            if culprit >= 0:  # any but a guard failure the tracer did not merge
                function, traits, _ = wheres[culprit]
                causes.append(FailureCause(names[index], stop_kernel.kind_of(answer), answer.frame, function, None, "",
                                           traits))
            else:
                causes.append(self.failure_cause(names[index], stop_kernel.outcome(answer), answer.pc))
        return causes

    def cause_parts(self, stop_kernel: kernel.StopKernel | None) -> tuple:
        """What Tracer.causes makes most causes of, as kernel_causes does:
        a mismatch's, a failure rule's and a merged guard failure's."""
        return self.names, self.wheres, MISMATCHES, FailureCause, [] if stop_kernel is None else stop_kernel.book.rules

    def walk(self, number: int, pc: int, indices, frame: Frame, stack, expected: Sequence[ShadowFrame],
             state: int = 0, thread: int = 0) -> None:
        """The unwinders `indices` walk the stop in Python."""
        where = self.where(pc, state, thread)
        for index in indices:
            if index in self.chains:
                for (method, right), frames in chain_frames(self.chains[index], frame, stack, expected).items():
                    self.methods[(self.names[index], method, right)] += frames
            outcome = self.walks[index](frame, stack, expected)
            if outcome is None or outcome == INVENTED:
                self.counts[(self.names[index], where.traits, where.position, None)] += 1
                if outcome == INVENTED:
                    self.invented[(self.names[index], where.traits, where.position)] += 1
                continue
            if outcome[1] == "wrong_register":  # would not be compared if that frame never resumes
                self.questioned.add(expected[outcome[0] - 1].serial)
            cause, wording = self.shared(self.failure_cause(self.names[index], outcome,
                                                            pc if outcome[0] == 0 else expected[outcome[0] - 1].pc))
            if len(self.log) < self.log_cap and not is_stop(cause):
                self.log.append(number, index, pc, where, cause, wording)
            else:  # past the cap, or a stop in a library: tallied only
                self.unlogged[(where, cause)] += 1

    def add_kernel_counts(self, stop_kernel: kernel.StopKernel) -> None:
        """The walks the kernel counted itself, by stop class (numbered in
        order): those that matched (the counts' kind None), those of them
        that invented a caller past a thread's first frame, and a chain's
        frames per method."""
        names, classes = [(name,) for name in self.names], list(self.stop_classes)
        sum_by(self.counts, stop_kernel.passes(), names, classes, [(None,)] * len(names))
        sum_by(self.invented, stop_kernel.verifier.invented(), names, classes, [()] * len(names))
        self.methods.update(stop_kernel.chain_frames())

    def shared(self, cause: FailureCause) -> tuple[FailureCause, str | None]:
        """The cause with the numbers of its wording left out, one object for
        every walk that fails alike, and the wording where it had numbers
        (a log entry keeps that): a walk in Python that fails at every stop
        (vsp below sp at a new address each time) would otherwise make each
        stop's cause, and its tally, its own, hundreds of bytes a stop."""
        shared = generic(cause.detail)
        wording = None if shared == cause.detail else cause.detail
        key = cause if wording is None else cause._replace(detail=shared)
        return self._causes.setdefault(key, key), wording

    def logged_pcs(self, key: KeyParts, groups: Grouping, kernel_logged: LoggedPcs,
                   first: int | None = None) -> LoggedPcs:
        """LoggedPcs by `groups` (the tally's Grouping by `key`) of the walks
        logged in Python (the `first` of them, or all) and of the kernel's
        (`kernel_logged`, grouped alike)."""
        return logged_pcs(((key.of(where, cause), pc) for where, cause, pc in islice(self.log.failures(), first)),
                          groups, kernel_logged)

    def tally(self) -> Counter:
        """(where, cause) -> stops, of the walks in Python, logged or not."""
        tally = self.log.tally()
        tally.update(self.unlogged)
        return tally
