"""Table bytes per epilogue policy: what encoding epilogues costs.

drop: the program's `tables` CFI (for generated programs: clang style, no
epilogue rows), Chrome's policy.
keep: the `reference` CFI (generated: gcc style, with epilogue rows).
synthesize: the `tables` CFI plus epilogue rows synthesized from disassembly.
"""

from __future__ import annotations

from typing import Sequence

from harness import v2
from harness.program import Program

POLICY_SOURCES = {"drop": "tables", "keep": "reference", "synthesize": "tables"}


def policy_sizes(programs: Sequence[Program], layout: str = "seed") -> dict:
    totals = {policy: 0 for policy in POLICY_SOURCES}
    functions = addresses = 0
    for program in programs:
        for policy, flavour in POLICY_SOURCES.items():
            encoded = v2.encode(program.cfi[flavour], program.text_base, policy, code_at=program.code)
            totals[policy] += len(encoded.blob(layout))
            if policy == "drop":
                functions += len(encoded.functions)
                addresses += encoded.addresses
    drop = totals["drop"]
    return {
        "layout": layout,
        "functions": functions,
        "addresses_drop": addresses,
        "bytes": totals,
        "increase_over_drop_percent": {
            policy: round(100 * (size - drop) / drop, 2) for policy, size in totals.items() if policy != "drop"
        },
    }
