"""Analyses that depend on none of the others' results, spread over the
machine's cores: discovery's rounds (each analysis with the noreturn set
the round began with) and its landing-pad pass. Each further core takes a
share in a child forked from the process (copy-on-write: it shares the
program's code and what discovery holds), and hands its results back
through a pipe; the results are the same as one analysis after another,
in the same order, on any number of cores."""

from __future__ import annotations

import os
import pickle
from typing import Callable, Sequence

MOST_CORES = 8
# Jobs a child takes at least: forking a process of a few GB and handing
# results back costs about as much as some hundreds of analyses.
SMALLEST_SHARE = 2_000


class ChildFailed(RuntimeError):
    """A child analysing a share of the jobs failed: says how."""


def analysed_apart(analyse: Callable, jobs: Sequence[tuple]) -> list:
    """[analyse(*job) for job in jobs], the later shares in forked children."""
    cores = min(os.cpu_count() or 1, MOST_CORES)
    share = max(-(-len(jobs) // cores), SMALLEST_SHARE)
    if cores < 2 or len(jobs) <= share or not hasattr(os, "fork"):
        return [analyse(*job) for job in jobs]
    children = [_forked(analyse, jobs[first:first + share]) for first in range(share, len(jobs), share)]
    results = [analyse(*job) for job in jobs[:share]]
    for pid, pipe in children:
        results.extend(_handed_back(pid, pipe))
    return results


def _forked(analyse: Callable, jobs: Sequence[tuple]) -> tuple[int, int]:
    """A child analysing `jobs`: its pid, and the pipe its results come through."""
    read, write = os.pipe()
    pid = os.fork()
    if pid:
        os.close(write)
        return pid, read
    os.close(read)
    try:  # the child: never returns into the parent's code
        data, status = pickle.dumps([analyse(*job) for job in jobs], pickle.HIGHEST_PROTOCOL), 0
    except BaseException as error:  # noqa: BLE001 (any failure is the parent's to report)
        data, status = pickle.dumps(f"{type(error).__name__}: {error}"), 1
    with os.fdopen(write, "wb") as out:
        out.write(data)
    os._exit(status)


def _handed_back(pid: int, pipe: int) -> list:
    with os.fdopen(pipe, "rb") as source:
        data = source.read()
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) or not data:
        why = pickle.loads(data) if data else f"ended with status {os.waitstatus_to_exitcode(status)}"
        raise ChildFailed(f"a child analysing a share of the functions failed: {why}")
    return pickle.loads(data)
