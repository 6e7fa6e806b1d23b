"""Small builders shared by the v2 tests."""

from __future__ import annotations

from harness.formats import chrome_v2, ehabi
from harness.program import CfiRow, FunctionCfi
from harness.registers import SP


def simple_function(name: str, start: int, size: int, cfa_offset: int = 8,
                    row_at: int = 2) -> FunctionCfi:
    """A function whose frame grows by `cfa_offset` at `start + row_at`: its runs
    are `finish` before and `vsp = vsp + cfa_offset; finish` after."""
    rows = (CfiRow(start), CfiRow(start + row_at, SP, cfa_offset))
    return FunctionCfi(name, start, start + size, rows)


def read_back(functions, text_base: int, layout: str, policy: str = "drop"):
    encoded = chrome_v2.encode(functions, text_base, policy, layout=layout)
    return encoded, chrome_v2.V2Reader.from_blob(encoded.blob(), layout)


def run_text(reader: chrome_v2.V2Reader, pc_offset: int) -> str | None:
    found = reader.lookup(pc_offset)
    return None if found is None else ehabi.text(reader.run(found.instruction_index))
