"""The boundary between Python and the compiled kernel (harness/verify/csrc),
declared once.

Python packs and reads with the structs, flags and records below; the C
side includes `harness/verify/csrc/abi.h`, which setup.py writes from this
module at build time (`header()`), so the two cannot drift apart:
tests/test_kernel.py checks that the header the kernel was built with is
this module's.

Both layers read it: the emulation (harness.emulation: a run's limits and
guards, the register slots, the engine as the tracer drives it) and the
verifier (rules, shadow frames, answers). It sits above neither, so that
the emulation imports nothing of the verifier. It imports nothing but the
standard library: setup.py runs it before the package is installed.
"""

from __future__ import annotations

import struct
from typing import Callable, NamedTuple

# ------------------------------------------------------------ structs


class Field(NamedTuple):
    name: str
    ctype: str  # int32_t, uint32_t or uint64_t
    count: int = 1


_CODES = {"int32_t": "i", "uint32_t": "I", "uint64_t": "Q"}


class Layout(NamedTuple):
    """A packed little-endian struct, read in C by `memcpy` or a cast."""

    name: str
    fields: tuple[Field, ...]

    @property
    def struct(self) -> struct.Struct:
        return struct.Struct("<" + "".join(f"{f.count}{_CODES[f.ctype]}" for f in self.fields))

    def c(self) -> str:
        """The C typedef, fields of one type grouped as declared."""
        groups: list[tuple[str, list[str]]] = []
        for field in self.fields:
            name = field.name if field.count == 1 else f"{field.name}[{field.count}]"
            if groups and groups[-1][0] == field.ctype:
                groups[-1][1].append(name)
            else:
                groups.append((field.ctype, [name]))
        members = " ".join(f"{ctype} {', '.join(names)};" for ctype, names in groups)
        return f"typedef struct {{ {members} }} __attribute__((packed)) {self.name};"


# A rule (harness.unwind.rule: Offsets, and the others in its form): this header, then `pre_loads` core
# Loads from sp, `loads` core and `vfp_loads` VFP Loads from the base.
# `index` is -1 for none.
RULE_HEADER = Layout("RuleHeader", tuple(Field(name, "int32_t") for name in (
    "flags", "base", "index", "offset", "end", "lowest", "highest", "loads", "vfp_loads",
    "pre_loads", "pre_lowest", "pre_highest")))
LOAD = Layout("Load", (Field("reg", "int32_t"), Field("offset", "int32_t")))
# The fields of the rules whose kinds the kernel reads (trace_log.c), in order:
# a failure rule's kind, and the fixed kind of a plain rule's or a scan's guard failures.
OFFSETS_FIELDS = ("base", "offset", "index", "loads", "vfp_loads", "end", "bounds", "pc_from_lr", "aligned",
                  "above_sp", "leaf_unless_record", "outside_it", "caller_aligned8", "guard_failure", "guard_kind",
                  "pre_loads", "pre_bounds")
SCAN_FIELDS = ("window", "sites", "guard_failure", "guard_kind")
FAILS_FIELDS = ("kind", "reason")
# One shadow frame (harness.verify.groundtruth.ShadowFrame): r = r4-r11, d = d8-d15.
EXPECTED = Layout("Expected", (Field("pc", "uint32_t"), Field("sp", "uint32_t"), Field("r", "uint32_t", 8),
                               Field("state", "uint32_t"), Field("d", "uint64_t", 8)))
# A shadow frame's state bits: d8-d15 known (the program uses VFP); the
# frame never resumes, so its registers are not compared (groundtruth).
# SIGNAL_FRAME: the context a signal handler interrupted (its caller).
EXPECTED_STATES = ("VFP_KNOWN", "NEVER_RESUMES", "SIGNAL_FRAME")
VFP_KNOWN, NEVER_RESUMES, SIGNAL_FRAME = (1 << bit for bit in range(len(EXPECTED_STATES)))
# A stop's state, as the shadow stack tells it (classify.STATE_TRAITS names
# each bit's trait): an exception in flight; the top frame is a signal
# frame (the stop is in a handler's own code); a signal frame is on the stack.
STOP_STATES = ("IN_FLIGHT", "IN_HANDLER", "ABOVE_SIGNAL_FRAME", "IN_SPAWNED_THREAD")
IN_FLIGHT, IN_HANDLER, ABOVE_SIGNAL_FRAME, IN_SPAWNED_THREAD = (1 << bit for bit in range(len(STOP_STATES)))

# Rule flags: bit i is FLAGS[i] (their meaning: harness.unwind.rule;
# NO_INFO: a rule that FAILS refuses with no_info, or whose guard failures
# are no_info (`guard_kind`), which the tracer need not log where it is a
# stop in a library: harness.verify.tally.counted_kind).
# SCAN: a stack scan (harness.unwind.scan): `lowest` is the window in
# bytes, `index` the Verifier's table of sorted uint32 return addresses
# (Verifier.add_sites: one table per scan, however many rules use it).
# CHAIN: a chain of methods (harness.unwind.scan.ChainUnwinder): `highest`
# is the count of alternatives (at most CHAIN_METHODS) that follow the
# header, each an int32 byte length and then its rule (length 0: defer).
# GUARD_KIND_FIXED: the rule's guard failures are of one kind (its
# `guard_kind`), so the tracer counts them as one cause per function and
# logs each one's values (base, sp, low) to be worded when read.
FLAGS = ("BOUNDS", "PC_FROM_LR", "ALIGNED", "ABOVE_SP", "LEAF_UNLESS_RECORD", "OUTSIDE_IT", "FAILS", "GUARD_FAILS",
         "NO_INFO", "CALLER_ALIGNED8", "SCAN", "CHAIN", "GUARD_KIND_FIXED")
(BOUNDS, PC_FROM_LR, ALIGNED, ABOVE_SP, LEAF_UNLESS_RECORD, OUTSIDE_IT, FAILS, GUARD_FAILS, NO_INFO, CALLER_ALIGNED8,
 SCAN, CHAIN, GUARD_KIND_FIXED) = (1 << bit for bit in range(len(FLAGS)))
# The most methods a chain rule holds; the Verifier counts, per unwinder and
# method, the frames each gave and how many were right (Verifier.methods).
CHAIN_METHODS = 8

# ------------------------------------------------------------ registers

# What the tracer reads at every stop, in this order: r0-r15, cpsr, and
# d8-d15 when the program uses VFP (harness.emulation.emulator maps the names
# to the engine's register ids).
SLOTS = tuple(f"r{n}" for n in range(16)) + ("cpsr",) + tuple(f"d{n}" for n in range(8, 16))
CPSR_SLOT, FIRST_VFP_SLOT = SLOTS.index("cpsr"), SLOTS.index("d8")

# ------------------------------------------------------------ the engine


class Engine(NamedTuple):
    """The emulator as the tracer drives it: its handle and the addresses of
    its functions (Unicorn's C API), the code and block hook types, `ctl`'s
    control word that drops the translated code of [begin, end), and the
    register ids of SLOTS (without the d registers when the program uses no
    VFP)."""

    handle: int
    reg_read_batch: int
    mem_read: int
    emu_start: int
    emu_stop: int
    hook_add: int
    hook_del: int
    ctl: int
    hook_code: int
    hook_block: int
    remove_cache: int
    registers: tuple[int, ...]


# ------------------------------------------------------------ a traced run


class TraceSettings(NamedTuple):
    """What a compiled tracer (csrc/trace.c: Tracer) runs with; it reads
    each field by its name (TRACE_FIELD_NAMES in csrc/abi.h) into a C struct."""

    engine: Engine
    verifier: object  # the kernel's Verifier (StopKernel.verifier), or None: ground truth alone
    sentinel: int  # the return address that ends the run
    uses_vfp: bool  # the program uses VFP: d8-d15 are read and compared
    every: int  # 1: a stop before every instruction; more: sampled stops of this mean stride (sampling)
    shard: tuple[int, int]  # (index, count): the stops of this shard are verified
    classify: Callable  # (pc, stop state, thread) -> (stop class, where id, low, high)
    slow: Callable  # slow(SlowStop): a stop where a walk deferred, or one observed
    observe_all: bool  # `slow` at every stop (at `observed` alone, where given)
    compare_bottom: bool = True  # False: the bottom frame stands for "no caller" (a process's first)
    raises: tuple[int, ...] = ()  # the entry points that raise an exception, sorted
    quiet: tuple[tuple[int, int], ...] = ()  # pcs [low, high) of modules not the program's own, sorted
    resumes: bytes | None = None  # an earlier run's frames that resumed, a bit per serial
    observed: tuple[int, ...] = ()  # sorted: the only pcs observe_all calls slow at
    by_blocks: bool = False  # hooks at block entries instead of before every instruction


class SlowStop(NamedTuple):
    """A stop the tracer hands to Python (TraceSettings.slow): one where a
    walk deferred, or one observed. Made by csrc/trace_stop.c, field by field."""

    number: int  # the stop's number in the run
    pc: int
    regs: tuple[int, ...]  # r0-r14
    cpsr: int
    vfp: tuple[int, ...] | None  # d8-d15, where the program uses VFP
    deferred: tuple[int, ...]  # the indices of the unwinders whose walk deferred
    shadow: bytes  # the shadow stack: EXPECTED records, outermost first
    serials: tuple[int, ...]  # each shadow frame's serial, outermost first
    state: int  # the stop's STOP_STATES bits
    thread: int  # the label of the thread stopped


# ------------------------------------------------------------ limits


class Limits(NamedTuple):
    """How far one program's run may go (both hooks: harness.verify.stops
    and csrc/trace.c); past any of them the run ends as a fault, with the pc
    and the guard (GUARDS) that stopped it. The clock's None: scaled to
    the run's work (harness.emulation.guards.clocked) before the run starts;
    the memory's None: DEFAULT_MEMORY beyond what the harness holds as the
    run starts and what the files the program maps hold (guards.memory_ceiling)."""

    instructions: int = 4_000_000_000  # instructions executed: a billion-instruction program runs to its end
    seconds: float | None = None  # wall clock, from the start of the run (None: scaled to the work)
    memory_bytes: int | None = None  # the process's resident size (/proc/self/statm; else the peak, getrusage)
    depth: int = 10_000  # shadow frames, the harness's own bottom frame included


# Why a run was stopped: the tracer's `run` reports one of these with the pc.
# SELF_LOOP: two consecutive stops at one pc with every register read there
# unchanged (no Thumb instruction both writes memory and branches to itself).
GUARDS = ("NONE", "INSTRUCTIONS", "SELF_LOOP", "SECONDS", "MEMORY", "DEPTH")
GUARD_NONE, GUARD_INSTRUCTIONS, GUARD_SELF_LOOP, GUARD_SECONDS, GUARD_MEMORY, GUARD_DEPTH = range(len(GUARDS))
# Failing answers logged one by one per run, at most (beyond, tallied only).
FAILURE_LOG_CAP = 1_000_000
# Instructions between two checks of the clock and of memory in csrc/trace.c
# (and after every system call): a few thousand, so that a guest touching a
# page an instruction grows by 16 MiB at most between checks.
CHECK_EVERY = 1 << 12
# What a run may add to the harness's resident size by default (Limits.memory_bytes None).
DEFAULT_MEMORY = 1 << 30
# What the process may grow by between two checks of its resident size: one
# system call (a 16 MiB read copied through the host: 32 MiB) and one check
# interval of stores (16 MiB). The memory guard fires this far below the limit.
MEMORY_RESERVE = 48 << 20

# ------------------------------------------------------------ answers

# What one unwinder's walk at one stop came to. PASS and DEFER never reach
# Python as records: passes are counted in C, DEFER is `False`.
ANSWERS = ("FAILS", "MISMATCH", "GUARD_FAILS", "CALLER_FAILS", "CHAIN_FAILS", "PASS", "DEFER")
FAILS_ANSWER, MISMATCH_ANSWER, GUARD_FAILS_ANSWER, CALLER_FAILS_ANSWER, CHAIN_FAILS_ANSWER = range(5)


class FailingRule(NamedTuple):
    """The rule at frame `frame` is a failure rule (its id: `rule_id`)."""

    frame: int
    kind: int
    rule_id: int
    pc: int  # of the frame being unwound


class Mismatch(NamedTuple):
    """The caller of frame `frame` has `got` in `register` (15 pc, 13 sp,
    4-11, or 264-271 for d8-d15) where the shadow stack has `want`."""

    frame: int
    kind: int
    register: int
    got: int
    want: int
    pc: int


class GuardFailure(NamedTuple):
    """The guards of rule `rule_id` failed for a frame at sp, its base at
    `base`, over the stack [low, high) (the running thread's)."""

    frame: int
    kind: int
    rule_id: int
    base: int
    sp: int
    low: int
    high: int
    pc: int


class CallerFails(NamedTuple):
    """The caller the rule gave for frame `frame` (at pc, sp `callee_sp`)
    fails harness.unwind.walk.check_caller with its sp `caller_sp`, as the
    unwinder's step then does."""

    frame: int
    kind: int
    caller_sp: int
    callee_sp: int
    pc: int


class ChainFails(NamedTuple):
    """Every method of the chain rule `rule_id` failed at frame `frame` (at
    pc), the last with no_info, in a library: a stop there, tallied and
    never logged, so never worded (elsewhere the kernel defers, and `step`
    words the chain's failure)."""

    frame: int
    kind: int
    rule_id: int
    pc: int


RECORDS = {FAILS_ANSWER: FailingRule, MISMATCH_ANSWER: Mismatch, GUARD_FAILS_ANSWER: GuardFailure,
           CALLER_FAILS_ANSWER: CallerFails, CHAIN_FAILS_ANSWER: ChainFails}
Answer = FailingRule | Mismatch | GuardFailure | CallerFails | ChainFails


def answer(values: tuple) -> Answer:
    """The record of a failing answer as the kernel returns it (a tuple in
    the record's field order)."""
    return RECORDS[values[1]]._make(values)


# ------------------------------------------------------------ the header


def _enum(names: tuple[str, ...], values) -> str:
    return "enum { " + ", ".join(f"{name} = {value}" for name, value in zip(names, values)) + " };"


def header() -> str:
    """harness/verify/csrc/abi.h: everything above, for the C side."""
    lines = [
        "/* Generated from harness/abi.py by setup.py: do not edit. */",
        "#ifndef HARNESS_ABI_H", "#define HARNESS_ABI_H", "#include <stdint.h>", "",
        _enum(FLAGS, (1 << bit for bit in range(len(FLAGS)))),
        RULE_HEADER.c(), LOAD.c(), EXPECTED.c(),
        *(_enum(tuple(f"{record}_{name.upper()}" for name in fields) + (f"{record}_FIELD_COUNT",),
                range(len(fields) + 1))
          for record, fields in (("OFFSETS", OFFSETS_FIELDS), ("SCAN", SCAN_FIELDS), ("FAILS", FAILS_FIELDS))),
        _enum(EXPECTED_STATES, (1 << bit for bit in range(len(EXPECTED_STATES)))),
        _enum(STOP_STATES + ("STOP_STATE_COUNT",), [1 << bit for bit in range(len(STOP_STATES))] + [1 << len(STOP_STATES)]),
        "",
        _enum(("CPSR", "FIRST_VFP", "MAX_REGISTERS"), (CPSR_SLOT, FIRST_VFP_SLOT, len(SLOTS))),
        _enum(tuple(f"ENGINE_{name.upper()}" for name in Engine._fields) + ("ENGINE_FIELDS",),
              range(len(Engine._fields) + 1)),
        _enum(tuple(f"TRACE_{name.upper()}" for name in TraceSettings._fields) + ("TRACE_FIELDS",),
              range(len(TraceSettings._fields) + 1)),
        "#define TRACE_FIELD_NAMES " + ", ".join(f'"{name}"' for name in TraceSettings._fields),
        _enum(tuple(f"ANSWER_{name}" for name in ANSWERS), range(len(ANSWERS))),
        _enum(tuple(f"GUARD_{name}" for name in GUARDS), range(len(GUARDS))),
        _enum(("FAILURE_LOG_CAP", "CHECK_EVERY", "CHAIN_METHODS"), (FAILURE_LOG_CAP, CHECK_EVERY, CHAIN_METHODS)), "",
        "#endif", "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(header(), end="")
