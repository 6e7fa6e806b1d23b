"""`unwind-harness bench`: what each method of the profiler's chain
recovers (harness.unwind.scan.ChainUnwinder), as LUL counted for Firefox:
per method, the frames it gave and how many of them were right (pc and sp
those of the shadow stack). A walk is followed to its first wrong frame or
refusal: past a wrong frame, every frame is built on a wrong one.

In bare-metal code v2 has an entry almost everywhere; in a Linux process
the system libraries ship no CFI, so the other methods get their turn
there (LINUX_PROGRAM: C++ with exceptions, over libstdc++, libgcc and libc).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from functools import partial

from generators.corpus import generate_program
from harness.elf_program import program_from_elf
from harness.errors import UnwindFailure
from harness.linux.corpus import cache, linux_entries, linux_run
from harness.linux.verify import verify_process
from harness.manifest import ELF_CORPUS, elf_builds
from harness.program import Program
from harness.runner import LINUX_LIMITS
from harness.unwind import CHAIN, build_unwinders
from harness.unwind.walk import walk
from harness.verify.stops import ObservedStop, verify_program

LINUX_PROGRAM, LINUX_EVERY = "cxxexc-gcc-O2-fp", 1000


class _Naming:
    """The chain as an unwinder that remembers which method gave its last frame."""

    def __init__(self, chain):
        self.chain, self.name, self.last = chain, chain.name, ""

    def step(self, frame, stack, innermost: bool):
        caller, self.last = self.chain.step_by(frame, stack, innermost)
        return caller


class Tally:
    """Per method, frames given and frames right; walks that refused."""

    def __init__(self):
        self.given: Counter[str] = Counter()
        self.right: Counter[str] = Counter()
        self.refused = 0

    def follow(self, chain, stop: ObservedStop) -> None:
        """Walk `chain` at `stop` (the one walk, harness.unwind.walk) to its
        first wrong frame or refusal."""
        naming = _Naming(chain)
        for caller, expected in zip(walk(naming, stop.frame, stop.stack, len(stop.expected)), stop.expected):
            if isinstance(caller, UnwindFailure):
                self.refused += 1
                return
            self.given[naming.last] += 1
            if (caller.pc, caller.sp) != (expected.pc, expected.sp):
                return
            self.right[naming.last] += 1

    def figures(self) -> dict:
        return {"methods": {name: {"frames": self.given[name], "right": self.right[name]} for name in CHAIN},
                "refused_walks": self.refused}


def chain_methods(programs: Sequence[Program], wanted: int) -> dict:
    """Over about `wanted` stops of each bare-metal program (evenly spread)."""
    tally = Tally()
    for program in programs:
        chain = build_unwinders(program, ["chain"])[0]
        every = max(1, verify_program(program, []).stops // max(wanted, 1))
        # Verified beside the walk, which tells the chain's scan the sentinel.
        verify_program(program, [chain], observe=partial(tally.follow, chain), every=every)
    return tally.figures()


def chain_in_process(entry: dict, every: int) -> dict:
    """At every `every`-th stop of a Linux corpus program, the chain over
    the process's modules (v2 and EXIDX where each module has them)."""
    tally = Tally()
    chains: list = []
    verify_process(linux_run(entry), ["chain"], partial(build_unwinders, names=["chain"]), every=every,
                   limits=LINUX_LIMITS, observe=lambda stop: tally.follow(chains[0], stop), built=chains.extend)
    return {"program": entry["name"], "every": every, **tally.figures()}


def chain_figures(programs: int, wanted: int, linux: bool) -> dict:
    """`chain_methods` over the first `programs` generated programs and
    every compiled build (`wanted` stops each), and with `linux`, when the
    corpus is built, `chain_in_process` over LINUX_PROGRAM."""
    generated = [generate_program(0, number) for number in range(programs)]
    compiled = [program_from_elf(str(ELF_CORPUS / build["file"]), build["entry"]) for build in elf_builds()]
    figures = {"bare_metal": chain_methods(generated + compiled, wanted)}
    entry = next((e for e in linux_entries("all") if e["name"] == LINUX_PROGRAM), None)
    if linux and entry is not None and (cache() / entry["path"]).exists():
        figures["linux"] = chain_in_process(entry, LINUX_EVERY)
    return figures
