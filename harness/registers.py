"""ARM register numbers as every part of the harness names them.

Core registers are 0-15; d registers use their DWARF numbers, 256-287 for
d0-d31, wherever a register may be either (CFI rows, instruction operands).
"""

from __future__ import annotations

SP, LR, PC = 13, 14, 15
CALLEE_SAVED = (4, 5, 6, 7, 8, 9, 10, 11)
DWARF_D0 = 256  # DWARF register number of d0 (d0-d31 are 256-287)


def reg_name(reg: int) -> str:
    """r0..r15 for core registers, d0..d31 for DWARF numbers 256-287."""
    if DWARF_D0 <= reg < DWARF_D0 + 32:
        return f"d{reg - DWARF_D0}"
    return f"r{reg}"
