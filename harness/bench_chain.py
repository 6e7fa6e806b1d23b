"""`unwind-harness bench`: what each method of the profiler's chain
recovers (harness.unwind.scan.ChainUnwinder), as LUL counted for Firefox:
per method, the frames it gave and how many of them were right (pc and sp
those of the shadow stack). A walk is followed to its first wrong frame or
refusal: past a wrong frame, every frame is built on a wrong one."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from generators.corpus import generate_program
from harness.elf_program import program_from_elf
from harness.errors import UnwindFailure
from harness.manifest import ELF_CORPUS, elf_builds
from harness.program import Program
from harness.unwind import build_unwinders
from harness.unwind.walk import without_scratch
from harness.verify.stops import ObservedStop, verify_program


def chain_methods(programs: Sequence[Program], wanted: int) -> dict:
    """Over about `wanted` stops of each program (evenly spread): per
    method, frames given and frames right; and the walks that refused."""
    given: Counter[str] = Counter()
    right: Counter[str] = Counter()
    refused = 0
    for program in programs:
        chain = build_unwinders(program, ["chain"])[0]
        total = verify_program(program, []).stops
        every = max(1, total // max(wanted, 1))

        def follow(stop: ObservedStop) -> None:
            nonlocal refused
            frame = stop.frame
            for index, expected in enumerate(stop.expected):
                try:
                    caller, method = chain.step_by(frame, stop.stack, index == 0)
                except UnwindFailure:
                    refused += 1
                    return
                given[method] += 1
                if (caller.pc, caller.sp) != (expected.pc, expected.sp):
                    return
                right[method] += 1
                frame = without_scratch(caller)

        verify_program(program, [chain], observe=follow, every=every)  # which tells the chain's scan the sentinel
    return {"methods": {name: {"frames": given[name], "right": right[name]} for name in chain.methods_named},
            "refused_walks": refused}


def chain_figures(programs: int, wanted: int) -> dict:
    """`chain_methods` over the first `programs` generated programs and
    every compiled build, `wanted` stops each."""
    generated = [generate_program(0, number) for number in range(programs)]
    compiled = [program_from_elf(str(ELF_CORPUS / build["file"]), build["entry"]) for build in elf_builds()]
    return chain_methods(generated + compiled, wanted)
