"""The v2 unwinder: look the pc up, execute the run, apply Chrome's checks."""

from __future__ import annotations

from harness import ehabi
from harness.errors import UnwindFailure
from harness.frame import Frame, Stack
from harness.v2.reader import UnsupportedRun, V2Reader


class V2Unwinder:
    def __init__(self, reader: V2Reader, text_base: int, name: str = "v2"):
        self.reader = reader
        self.text_base = text_base
        self.name = name
        self._runs: dict[int, tuple[ehabi.Op, ...]] = {}  # pc -> run: the tables never change

    def instructions_for(self, pc: int) -> tuple[ehabi.Op, ...]:
        run = self._runs.get(pc)
        if run is None:
            run = self._runs[pc] = self._lookup(pc)
        return run

    def _lookup(self, pc: int) -> tuple[ehabi.Op, ...]:
        found = self.reader.lookup(pc - self.text_base)
        if found is None:
            raise UnwindFailure("no_info", f"no v2 entry covers pc {pc:#x}")
        run = self.reader.run(found.instruction_index)
        if isinstance(run, UnsupportedRun):
            raise UnwindFailure("unsupported", f"at pc {pc:#x}: {run.reason}")
        return run

    def step(self, frame: Frame, stack: Stack, innermost: bool) -> Frame:
        # A return address may be the first byte after a call to a function
        # that never returns, so callers are looked up one byte earlier.
        lookup_pc = frame.pc if innermost else frame.pc - 1
        return ehabi.unwind_step(self.instructions_for(lookup_pc), frame, stack, innermost)
