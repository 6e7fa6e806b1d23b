"""Analyses that depend on none of the others' results, spread over the
machine's cores: discovery's rounds (each analysis with the noreturn set
the round began with) and its landing-pad pass. Each further core takes a
share in a child forked from the process (copy-on-write: it shares the
program's code and what discovery holds), writing its results to a file
of its own as it goes; they are handed on one at a time, in order, so
that each replaces the analysis it supersedes before the next is read.
The results are the same as one analysis after another, in the same
order, on any number of cores."""

from __future__ import annotations

import os
import pickle
import tempfile
from typing import Callable, Iterator, NamedTuple, Sequence

from harness.errors import HarnessError

MOST_CORES = 8
# Jobs a child takes at least: forking a process of a few GB and handing
# results back costs about as much as some hundreds of analyses.
SMALLEST_SHARE = 2_000


class ChildFailed(HarnessError):
    """A child analysing a share of the jobs failed: says how."""


class _Failure(NamedTuple):
    why: str


def analysed_apart(analyse: Callable, jobs: Sequence[tuple]) -> Iterator:
    """analyse(*job) for each job, in order, the later shares in forked children."""
    cores = min(os.cpu_count() or 1, MOST_CORES)
    share = max(-(-len(jobs) // cores), SMALLEST_SHARE)
    if cores < 2 or len(jobs) <= share or not hasattr(os, "fork"):
        yield from (analyse(*job) for job in jobs)
        return
    children = [_forked(analyse, jobs[first:first + share]) for first in range(share, len(jobs), share)]
    try:
        yield from (analyse(*job) for job in jobs[:share])
        for pid, results in children:
            yield from _handed_on(pid, results)
    finally:
        for pid, results in children:
            results.close()
            _reaped(pid)


def _forked(analyse: Callable, jobs: Sequence[tuple]):
    """A child analysing `jobs`: its pid, and the file its results go to (unlinked: gone when closed)."""
    results = tempfile.TemporaryFile()
    pid = os.fork()
    if pid:
        return pid, results
    status = 0  # the child: never returns into the parent's code
    try:
        for job in jobs:
            pickle.dump(analyse(*job), results, pickle.HIGHEST_PROTOCOL)
    except BaseException as error:  # noqa: BLE001 (any failure is the parent's to report)
        pickle.dump(_Failure(f"{type(error).__name__}: {error}"), results)
        status = 1
    results.flush()
    os._exit(status)


def _handed_on(pid: int, results) -> Iterator:
    _, status = os.waitpid(pid, 0)
    results.seek(0)
    while True:
        try:
            found = pickle.load(results)
        except EOFError:
            break
        if isinstance(found, _Failure):
            raise ChildFailed(f"a child analysing a share of the functions failed: {found.why}")
        yield found
    if os.waitstatus_to_exitcode(status):
        raise ChildFailed(f"a child analysing a share of the functions ended with status "
                          f"{os.waitstatus_to_exitcode(status)}")


def _reaped(pid: int) -> None:
    """A child waited for, where it was not yet (the parent's own share failed)."""
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:  # waited for already
        pass
