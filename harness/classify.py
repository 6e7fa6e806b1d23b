"""Categories of a stop (ARCHITECTURE.md, "Categories"): the position of a
pc in its function and the traits of that function.

The rules live here; the facts they are applied to come from whatever made
the program: a generator knows its plans (generators/layout.py), a compiled
ELF is read from its CFI and code (harness.elf_program).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, NamedTuple

POSITIONS = ("prologue", "body", "epilogue")
TRAITS = (
    "leaf",
    "alloca",
    "large_frame",
    "huge_frame",
    "frame_pointer",
    "no_frame_pointer",
    "vfp",
    "page_crossing",
    "multi_epilogue",
)
# A stop's traits, not a function's (harness.verify.groundtruth): an
# exception is on its way to its landing pad; the stop is in a signal
# handler's own code (its caller is the context the signal interrupted);
# a signal frame lies anywhere below the stop (a walk must cross it); the
# stop is in a thread the process made (its walk ends at clone's child).
CXX_EXCEPTION = "cxx_exception"
SIGNAL_HANDLER = "signal_handler"
THROUGH_SIGNAL_FRAME = "through_signal_frame"
SPAWNED_THREAD = "spawned_thread"
STATE_TRAITS = (CXX_EXCEPTION, SIGNAL_HANDLER, THROUGH_SIGNAL_FRAME, SPAWNED_THREAD)  # by bit of abi.STOP_STATES
NO_INFO = "no_info"  # the trait of stops outside every known function
# Where code comes from, for a process (harness.linux_verify.modules): the
# program's own, the C and C++ runtimes, the dynamic linker, PLT stubs, any
# other library, code in no module (anonymous executable memory: a JIT's,
# V8's in Chromium). Stops carry one as a trait, and the file their code
# comes from as another (module_trait); bare-metal programs neither.
MODULES = ("own", "libc", "libstdcxx", "libgcc", "ld.so", "plt", "lib", "jit")
OWN, JIT = "own", "jit"
JIT_NAME = "[jit]"  # the module name of code in no module
MODULE_PREFIX = "module "
LARGE_FRAME, HUGE_FRAME = 1024, 256 * 1024  # bytes of stack adjustment
PAGE = 1 << 17  # the 128 KiB pages of v2's page table


@dataclass(frozen=True)
class FunctionInfo:
    """Layout of one function: [start, end), prologue [start, prologue_end),
    epilogues as [start, end) ranges; everything else is body."""

    name: str
    start: int
    end: int
    prologue_end: int
    epilogues: tuple[tuple[int, int], ...]
    traits: frozenset[str]

    def position(self, pc: int) -> str:
        return self.position_span(pc).value

    def position_span(self, pc: int) -> Spanned:
        """pc's position, and the pcs [low, high) of the function around it
        that share it."""
        if pc < self.prologue_end:
            return Spanned("prologue", self.start, self.prologue_end)
        low, high = self.prologue_end, self.end
        for start, end in self.epilogues:
            if start <= pc < end:
                return Spanned("epilogue", start, end)
            if end <= pc:
                low = max(low, end)
            else:
                high = min(high, start)
        return Spanned("body", low, high)


class Spanned(NamedTuple):
    """What holds at a pc, and the pcs [low, high) around it where it holds too."""

    value: object
    low: int
    high: int


class FrameFacts(NamedTuple):
    """What is known of a function's frame, from which its traits follow."""

    frame_pointer: bool  # the CFA is defined through a frame pointer somewhere
    leaf: bool  # saves no lr and makes no call
    alloca: bool  # sp moves by a register amount
    frame_bytes: int  # the largest stack adjustment
    vfp: bool  # saves some of d8-d15
    epilogues: int


def traits_of(facts: FrameFacts, start: int, end: int, text_base: int) -> frozenset[str]:
    """The traits of a function [start, end) of a text at text_base."""
    traits = {"frame_pointer" if facts.frame_pointer else "no_frame_pointer"}
    flags = {
        "leaf": facts.leaf,
        "alloca": facts.alloca,
        "large_frame": facts.frame_bytes > LARGE_FRAME,
        "huge_frame": facts.frame_bytes > HUGE_FRAME,
        "vfp": facts.vfp,
        "page_crossing": (start - text_base) // PAGE != (end - 1 - text_base) // PAGE,
        "multi_epilogue": facts.epilogues > 1,
    }
    return frozenset(traits | {trait for trait, holds in flags.items() if holds})


def in_order(traits: Iterable[str]) -> list[str]:
    """Traits in the reports' order: the known ones first, then the rest sorted."""
    seen = set(traits)
    return [t for t in TRAITS if t in seen] + sorted(seen - set(TRAITS))


class Where(NamedTuple):
    """Where a stop's pc is: the categories its stops are counted in."""

    function: str
    traits: frozenset
    position: str


def thread_trait(tid: int) -> str:
    """The label of the stops of a thread the process made (its tid): a
    trait of their own, which the reports tell apart per program
    (report.data.thread_table), not a category."""
    return f"{THREAD_PREFIX}{tid}"


THREAD_PREFIX = "thread "


def module_trait(name: str) -> str:
    """The trait of a stop in the module of file name `name` (a process's:
    `chromium`, `libc.so.6`, `chromium@plt` for its PLT, JIT_NAME)."""
    return MODULE_PREFIX + name


def where_in_state(where: Where, state: int, thread: int = 0) -> Where:
    """`where` at a stop in `state` (abi.STOP_STATES bits: the shadow
    stack's), with the trait of each bit set; in `thread`, a thread the
    process made (0: the process's first), labelled with it."""
    if not state:
        return where
    label = {thread_trait(thread)} if thread else set()
    return Where(where.function,
                 where.traits | label | {trait for bit, trait in enumerate(STATE_TRAITS) if state >> bit & 1},
                 where.position)


class Classifier:
    """pc -> where it is (function, traits, position), given which function
    holds a pc (Program.function_at) and, for a process, which module
    (Program.module_at: its MODULES label and its file's module_trait
    become traits, and code without CFI is named by its symbol); cached per pc."""

    def __init__(self, function_at: Callable[[int], FunctionInfo | None],
                 module_at: Callable[[int], tuple[str, str, int, int, str] | None] = lambda pc: None):
        self.function_at = function_at
        self.module_at = module_at
        self._cache: dict[int, Where] = {}

    def __call__(self, pc: int) -> Where:
        found = self._cache.get(pc)
        if found is None:
            found = self._cache[pc] = self.span(pc).value
        return found

    def span(self, pc: int) -> Spanned:
        """pc's Where (function, traits, position), and the pcs [low, high) that share it."""
        function = self.function_at(pc)
        module = self.module_at(pc)
        if function is None:
            if module is None:
                return Spanned(Where(f"{pc:#x}", frozenset({NO_INFO}), "body"), pc, pc + 1)
            return Spanned(Where(module.name, frozenset({NO_INFO, module.label, module_trait(module.file)}), "body"),
                           module.low, module.high)
        position, low, high = function.position_span(pc)
        if module is None:
            return Spanned(Where(function.name, function.traits, position), low, high)
        return Spanned(Where(function.name, function.traits | {module.label, module_trait(module.file)}, position),
                       max(low, module.low), min(high, module.high))
