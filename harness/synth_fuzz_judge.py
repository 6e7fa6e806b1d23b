"""One build of the synthesis fuzz (harness.synth_fuzz): the rows from code
beside the compiler's CFI at every instruction (harness.compare_rows), the
program run where they disagree and each disagreement judged at its stops
by ground truth, and the findings with their examples.

A finding is a place where the rows from code fall short: a disagreement
where, at some stop, the compiler's rule was right and the code's wrong
(or both wrong), or a refusal, by its reason. Each keeps what is needed to
see it again without the run: the function, the pc, the instructions
around it and both rules.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Callable, NamedTuple

from harness.abi import Limits
from harness.compare_rows import Comparison, Disagreement, Refusal, compare, judge_process
from harness.elf_program import code_reader
from harness.formats.dwarf_cfi import read_cfi
from harness.formats.elf import mapping_symbols, open_elf
from harness.linux.process import LinuxRun
from harness.thumb.disasm import decode_one

WINDOW = (4, 3)  # instructions shown before and after a finding's pc
BUDGET_FAULT = "the instruction budget ran out"  # a csmith program that loops long (many never end)


class Build(NamedTuple):
    """What one build is: the csmith seed, the compiler and flag set by
    name, and the executable (a host path)."""

    seed: int
    compiler: str
    flags: str
    path: str


def reason_key(reason: str) -> str:
    """A refusal's reason without what differs between its occurrences: a
    quoted instruction keeps its mnemonic, addresses and numbers go."""
    reason = re.sub(r"'([a-z0-9.]+)[^']*'", r"'\1'", reason)
    return re.sub(r"\b(0x[0-9a-f]+|\d+)\b", "N", reason)


def fault_key(fault: str | None) -> str | None:
    """What ended a run early, without its pc (None: the program ended)."""
    if fault is None:
        return None
    if "instructions" in fault and "more than" in fault:
        return BUDGET_FAULT
    return re.sub(r"0x[0-9a-f]+", "N", fault.split(": ", 1)[-1])


def judged_build(build: Build, run: LinuxRun, limits: Limits) -> dict:
    """The record of one build: its counts, its refusals by reason, the
    outcomes of the stops judged and its findings."""
    image = open_elf(build.path)
    code_at, compiler = code_reader(image), read_cfi(image)
    found = compare(compiler, code_at)
    judged, fault = judge_process(found, run, limits) if found.disagreements else (0, None)
    outcomes = sum(found.outcomes.values(), Counter())
    data = data_spans(image)
    refusals = Counter()
    for refusal in found.refusals:
        refusals[refusal_key(refusal, data)] += refusal.instructions
    return {"seed": build.seed, "compiler": build.compiler, "flags": build.flags, "functions": found.functions,
            "instructions": found.agree + len(found.disagreements) + found.refused, "agree": found.agree,
            "disagree": len(found.disagreements),
            "disagree_data": sum(1 for d in found.disagreements if any(lo <= d.address < hi for lo, hi in data)),
            "disagree_run": sum(1 for d in found.disagreements if d.address in found.outcomes),
            "refused": found.refused, "refusals": dict(sorted(refusals.items())), "stops": judged,
            "outcomes": dict(sorted(outcomes.items())), "fault": fault_key(fault),
            "findings": findings(build, found, code_at, {f.name: (f.start, f.end) for f in compiler}, data)}


def data_spans(image) -> list[tuple[int, int]]:
    """Where the mapping symbols mark data (`$d`: literal pools, jump
    tables) up to the next symbol. The comparison analyses each function
    without them, and code no path reaches is tried as a landing pad: a
    literal pool after a function's last branch may decode and be
    analysed so. No run executes it, and discovery (v2-code's own tables)
    never decodes it."""
    marks = mapping_symbols(image)
    return [(address, following[0]) for (address, kind), following in zip(marks, marks[1:]) if kind == "d"]


def refusal_key(refusal: Refusal, data: list[tuple[int, int]]) -> str:
    """The refusal's reason_key, marked where it lies in data (data_spans)."""
    inside = any(low <= refusal.address < high for low, high in data)
    return f"{'in data: ' if inside else ''}{reason_key(refusal.reason)}"


def findings(build: Build, found: Comparison, code_at: Callable[[int, int], bytes],
             spans: dict[str, tuple[int, int]], data: list[tuple[int, int]] = ()) -> list[dict]:
    """Every disagreement where the code's rule was wrong at a stop, and
    every refusal, as a finding with its example (`spans`: where each
    function lies, by name)."""
    out = []
    for d in found.disagreements:
        outcome = found.outcomes.get(d.address, Counter())
        for kind in ("compiler right", "both wrong"):
            if outcome[kind]:
                out.append(_disagreement(build, d, kind, dict(sorted(outcome.items())), spans[d.function], code_at))
    out.extend(_refusal(build, r, code_at, refusal_key(r, data)) for r in found.refusals)
    return out


def _disagreement(build: Build, d: Disagreement, kind: str, outcome: dict, span: tuple[int, int],
                  code_at: Callable[[int, int], bytes]) -> dict:
    return {"kind": f"code wrong ({kind})" if kind == "compiler right" else "both wrong",
            "key": f"{build.compiler} '{d.instruction.split()[0]}'", **_where(build, d.function, span),
            "pc": f"{d.address:#x}", "instruction": d.instruction, "compiler_rule": d.compiler,
            "code_rule": d.synthesized, "stops": outcome,
            "code": window(code_at, span[0], d.address, span[1])}


def _refusal(build: Build, r: Refusal, code_at: Callable[[int, int], bytes], key: str) -> dict:
    return {"kind": "refusal", "key": key, **_where(build, r.function, (r.start, r.end)),
            "pc": f"{r.address:#x}", "reason": r.reason, "refused": r.instructions,
            "code": window(code_at, r.start, r.address, r.end)}


def _where(build: Build, function: str, span: tuple[int, int]) -> dict:
    return {"seed": build.seed, "compiler": build.compiler, "flags": build.flags, "function": function,
            "function_bytes": span[1] - span[0]}


def window(code_at: Callable[[int, int], bytes], start: int, pc: int, end: int) -> list[str]:
    """The Thumb instructions around `pc`, decoded from `start` on (`=>`
    marks pc; `.short` a halfword that decodes as nothing)."""
    lines, address = [], start
    before, after = WINDOW
    while address < end:
        insn = decode_one(code_at(address, 4), address)
        size = insn.size if insn is not None else 2
        text = insn.text if insn is not None else f".short {int.from_bytes(code_at(address, 2), 'little'):#06x}"
        lines.append((address, f"{'=>' if address == pc else '  '} {address:#x}: {text}"))
        if address >= pc and len([a for a, _ in lines if a > pc]) >= after:
            break
        address += size
    at = next((n for n, (a, _) in enumerate(lines) if a >= pc), len(lines))
    return [text for _, text in lines[max(0, at - before):]]
