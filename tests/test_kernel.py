"""The compiled kernel says exactly what each unwinder's own Python step says,
or defers to it; and it is what the verifier uses."""

from __future__ import annotations

import random
from collections import namedtuple
from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from generators.corpus import generate_program
from harness import abi
from harness.elf_program import program_from_elf
from harness.emulation.emulator import SENTINEL, Emulator
from harness.errors import UnwindFailure
from harness.formats import ehabi
from harness.manifest import ELF_CORPUS, elf_builds
from harness.registers import SP
from harness.report.failing import group_key
from harness.thumb.encoding import may_start_epilogue
from harness.unwind.ehabi_run import caller_by_run, rule_of_run
from harness.unwind.frame import Frame, Stack
from harness.unwind.registry import UNWINDER_NAMES, build_unwinders
from harness.unwind.rule import EVERYWHERE, NOWHERE, Fails, Offsets, PcWording, RuleRange
from harness.unwind.v2_chrome import ChromeV2Unwinder, chrome_rule
from harness.unwind.walk import ALL_CALLEE_SAVED, Unwinder, walk
from harness.verify import kernel, stops
from harness.verify.failures import FailureCause, FailureLog, difference, failure_of, logged_pcs
from harness.verify.groundtruth import ShadowFrame, packed
from harness.verify.kernel import pack_rule
from harness.verify.stops import DEFAULT_BUDGET, Verify, verify_program
from harness.verify.tally import KeyParts, Tally
from harness.verify.verification import Verification
from harness.verify.walks import INVENTED, first_difference

BASE = 0x7000_0000  # where the test stack's bytes start
SIZE = 0x400


def test_the_kernel_is_built():
    assert kernel.AVAILABLE, "harness.verify._kernel is missing: reinstall with `pip install -e .`"


def test_the_kernel_was_built_from_the_declared_boundary():
    """harness/verify/csrc/abi.h, which the kernel includes, is what harness/abi.py
    declares: setup.py writes it at build time."""
    built = (Path(kernel.__file__).parent / "csrc" / "abi.h").read_text()
    assert built == abi.header(), "harness/abi.py changed since the build: reinstall with `pip install -e .`"


def test_answers_come_back_as_named_records():
    assert abi.answer((2, abi.MISMATCH_ANSWER, 13, 5, 6, 0x100)) == abi.Mismatch(2, 1, 13, 5, 6, 0x100)
    assert abi.answer((0, abi.FAILS_ANSWER, 7, 0x100)).rule_id == 7
    guard = abi.answer((1, abi.GUARD_FAILS_ANSWER, 3, 0x10, 0x20, 0x30, 0x40, 0x100))
    assert (guard.low, guard.high, guard.pc) == (0x30, 0x40, 0x100)


def same_results(program, every: int = 1):
    fast = verify_program(program, build_unwinders(program), how=Verify(every=every, compiled=True))
    slow = verify_program(program, build_unwinders(program), how=Verify(every=every, compiled=False))
    assert fast.stops == slow.stops > 0
    assert fast.counts == slow.counts
    assert fast.failures == slow.failures
    assert fast.methods == slow.methods and fast.methods  # the chain's count, frame by frame
    return fast


@pytest.mark.parametrize("seed, index", [(0, 0), (0, 3), (7, 1), (11, 2)])
def test_generated_programs_verify_the_same_with_the_kernel(seed, index):
    same_results(generate_program(seed, index))


def test_a_run_that_must_run_again_gives_what_one_that_knew_gives(monkeypatch):
    """A bare-metal program runs once, comparing every frame's registers;
    where a walk found a wrong register of a frame that then never resumed,
    it runs again knowing (stops._run_once_if_it_can): forced here, the
    second run's verdicts are the reference's, and the first's alike."""
    program = generate_program(0, 3)
    once = same_results(program)
    runs = []
    real = stops._run_compiled
    monkeypatch.setattr(stops, "judged_differently", lambda *args: True)
    monkeypatch.setattr(stops, "_run_compiled", lambda *args, **kwargs: runs.append(
        args[2] if len(args) > 2 else kwargs.get("resumes")) or real(*args, **kwargs))
    twice = same_results(program)
    assert runs[0] is None and isinstance(runs[1], bytes) and len(runs) == 2  # without, then with what resumed
    assert (twice.counts, twice.failures, twice.methods) == (once.counts, once.failures, once.methods)


def test_a_wrong_register_of_a_frame_that_never_resumed_means_a_second_run():
    resumed = bytes([0b0000_0110])  # serials 1 and 2 resumed
    assert not stops.judged_differently(bytes([0b0000_0010]), {2}, resumed)
    assert stops.judged_differently(bytes([0b0000_1000]), set(), resumed)  # serial 3 never resumed
    assert stops.judged_differently(b"", {9}, resumed)  # found by a walk in Python
    assert stops.judged_differently(bytes([0, 1]), set(), resumed)  # serial 8: past what resumed
    assert not stops.judged_differently(b"", set(), b"")


def elf_program(file: str):
    build = next(b for b in elf_builds() if b["file"] == file)
    return program_from_elf(str(ELF_CORPUS / file), build["entry"], build["expected_checksum"])


@pytest.mark.parametrize("file", ["gcc-O2-nofp.elf", "clang-O0-fp.elf"])
def test_compiled_programs_verify_the_same_with_the_kernel(file):
    same_results(elf_program(file), every=5)


def test_the_first_failures_of_each_unwinder_are_those_of_the_whole_log():
    """What a report samples, read straight from the tracer's log, is the
    head of each unwinder's failures in the full log, as the Python hook
    gives them."""
    program = generate_program(0, 3)
    fast = verify_program(program, build_unwinders(program), how=Verify(compiled=True))
    slow = verify_program(program, build_unwinders(program), how=Verify(compiled=False))
    for count in (1, 3):
        first = fast.failure_log.first(count)
        assert first == FailureLog(entries=list(fast.failure_log)).first(count)
        # The Python hook words a mismatch in its cause, the kernel when read: compare them spelled out.
        assert [failure_of(*e) for e in first] == [failure_of(*e) for e in slow.failure_log.first(count)]
        assert len({entry[3].unwinder for entry in first}) >= 3 and len(first) < len(fast.failure_log)


def pair_key(tally: Tally) -> KeyParts:
    """(where, cause) itself, as a key of tally parts."""
    return KeyParts([()] * len(tally.causes), [(where,) for where in tally.wheres],
                    [(cause,) for cause in tally.causes], lambda where, cause: (where, cause))


@pytest.mark.parametrize("number", [1, 3])
@pytest.mark.parametrize("key", [pair_key, group_key])
def test_the_pcs_a_digest_reads_from_the_tracer_are_those_of_the_whole_log(key, number):
    """The tracer groups its log by the key of each failure's tally entry
    (its where and cause, or the digest's group), with the walks deferred
    to Python merged in: the same failures counted, at the same pcs, as the
    log's entries one by one give."""
    program = generate_program(0, number)
    result = verify_program(program, build_unwinders(program), how=Verify(compiled=True))
    key = key(result.tally)
    groups = result.tally.grouped(key)
    grouped = result.failure_log.logged_pcs(key, groups)  # before the entries are built: the tracer's grouping
    log = list(result.failure_log)
    assert grouped == logged_pcs(((key.of(where, cause), pc) for _, pc, where, cause, _ in log), groups)
    found = {group: logged for group, logged in zip(groups.keys, grouped) if logged is not None}
    assert sum(count for count, _ in found.values()) == len(log) > 100
    distinct = {group: len({pc for _, pc, where, cause, _ in log if key.of(where, cause) == group})
                for group in found}
    assert any(count > distinct[group] for group, (count, _) in found.items())  # a pc failing alike twice: twice
    assert any(count > 64 for count, _ in found.values())  # a group's pcs sorted by their bytes (trace.c: sort_pcs)


@pytest.mark.parametrize("cap", [1, 300, 700])
def test_a_truncated_log_gives_the_digest_the_pcs_of_its_entries(monkeypatch, cap):
    """Past the cap each side (the kernel, the walks in Python) logged its
    own first `cap` failures, and the log is the first `cap` of both merged
    in stop order: the pcs the digest reads (split in C, grouped without
    building entries) are those of exactly the entries the log holds."""
    monkeypatch.setattr(abi, "FAILURE_LOG_CAP", cap)
    program = generate_program(0, 3)
    result = verify_program(program, build_unwinders(program), how=Verify(compiled=True))
    key = pair_key(result.tally)
    groups = result.tally.grouped(key)
    grouped = result.failure_log.logged_pcs(key, groups)
    log = list(result.failure_log)
    assert result.failure_log.truncated and len(log) == cap
    assert grouped == logged_pcs((((where, cause), pc) for _, pc, where, cause, _ in log), groups)


def test_guard_failures_of_one_kind_are_one_cause_per_function_each_worded_with_its_values():
    """scan's guard failures (no return address in its window) and the frame
    pointer's (a record outside the stack) are of one kind whatever the
    values: the kernel counts them under one cause per function and frame,
    not one per stop, and words each logged failure with its own values,
    as `step` does (test_generated_programs_verify_the_same_with_the_kernel)."""
    program = generate_program(0, 1)
    result = verify_program(program, build_unwinders(program, ["scan", "framepointer"]), how=Verify(compiled=True))
    for name in ("scan", "framepointer"):
        causes = {cause for _, cause in result.failure_tally if cause.unwinder == name}
        failing = [failure for failure in result.failures if failure.unwinder == name]
        assert len(failing) > 1000 and len(causes) == len({(f.culprit, f.frame, f.kind) for f in failing})
        assert len({failure.detail for failure in failing}) > len(causes) and all("#" not in f.detail for f in failing)


def test_the_kernel_answers_most_walks_itself(monkeypatch):
    """Deferring is for odd states only: most answers come from the kernel
    (in this program, every one: its epilogues inside IT blocks too)."""
    deferred = []
    real = Verification.walk

    def spying(self, number, pc, indices, *rest):
        deferred.extend(indices)
        return real(self, number, pc, indices, *rest)

    monkeypatch.setattr(Verification, "walk", spying)
    program = generate_program(0, 1)
    unwinders = build_unwinders(program)
    result = verify_program(program, unwinders, how=Verify(compiled=True))
    walks = result.stops * len(unwinders)
    assert len(deferred) < 0.01 * walks
    assert len(result.failure_log) + len(deferred) < walks


# ------------------------------------------- the compiled hook against the Python one


def observed(program, compiled: bool) -> list[tuple]:
    seen = []
    verify_program(program, [],
                   how=Verify(compiled=compiled), observe=lambda stop: seen.append((stop.pc, stop.frame, stop.expected)))
    return seen


@pytest.mark.parametrize("make", [lambda: generate_program(0, 0), lambda: generate_program(7, 1),
                                  lambda: elf_program("gcc-O2-nofp.elf")], ids=["0-0", "7-1", "gcc-O2-nofp"])
def test_the_compiled_shadow_stack_is_the_python_one(make):
    """At every stop: the same pc, registers and IT state, and the same
    shadow frames, serials included."""
    program = make()
    fast, slow = observed(program, True), observed(program, False)
    assert len(fast) == len(slow) > 100
    assert fast == slow
    assert max(len(expected) for _, _, expected in fast) > 3


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_observe_at_shows_the_stops_at_those_pcs_only(compiled):
    """`observe_at`: the same stops at the wanted pcs as observing every
    stop gives, and no other (the kernel calls no Python elsewhere); no pc
    wanted, no stop observed."""
    program = generate_program(0, 0)
    every = observed(program, compiled)
    wanted = {pc for pc, _, _ in every[10:200:17]} | {0x4}  # 0x4: never a stop
    seen = []
    verify_program(program, [],
                   how=Verify(compiled=compiled), observe_at=wanted, observe=lambda stop: seen.append((stop.pc, stop.frame, stop.expected)))
    assert seen == [stop for stop in every if stop[0] in wanted] and len(seen) >= 12
    none = []
    verify_program(program, [], how=Verify(compiled=compiled), observe_at=(), observe=none.append)
    assert none == []


def test_the_compiled_hook_makes_the_stops_an_it_block_skips():
    """Unicorn runs no hook before an instruction an IT block skips, yet a
    profiler can sample there: the hook makes those stops too (that they are
    the Python hook's is checked above)."""
    program = elf_program("gcc-O2-nofp.elf")
    executed = 0

    def count(pc: int) -> None:
        nonlocal executed
        executed += 1

    Emulator(program.segments).call(program.entry, count, DEFAULT_BUDGET, program.args)
    assert verify_program(program, [], how=Verify(compiled=True)).stops > executed


def test_an_error_raised_in_a_callback_ends_the_run_and_reaches_the_caller():
    class Stop(Exception):
        pass

    def observe(stop):
        if stop.pc == target:
            raise Stop(stop.pc)

    program = generate_program(0, 0)
    target = program.functions[1].start
    with pytest.raises(Stop):
        verify_program(program, build_unwinders(program, ["v2"]), how=Verify(compiled=True), observe=observe)
    assert verify_program(program, build_unwinders(program, ["v2"]), how=Verify(compiled=True)).self_check_ok


def test_a_tracer_is_set_up_once_and_runs_once():
    program = generate_program(0, 0)
    emulator = Emulator(program.segments)
    engine = emulator.engine(program.uses_vfp)

    record = abi.TraceSettings(engine=engine, verifier=None, sentinel=SENTINEL, uses_vfp=program.uses_vfp,
                               every=1, shard=(0, 1), classify=lambda pc: (0, 0), slow=lambda stop: None,
                               observe_all=False)

    def tracer(**changed):
        return kernel.Tracer(record._replace(**changed))

    with pytest.raises(ValueError, match="shard an index below a positive count"):
        tracer(shard=(1, 1))
    with pytest.raises(TypeError, match="shard must be a tuple"):
        tracer(shard=[0, 1])
    without_by_blocks = namedtuple("Settings", abi.TraceSettings._fields[:-1])(*record[:-1])
    with pytest.raises(AttributeError, match="by_blocks"):  # read by name: a record without the field is refused
        kernel.Tracer(without_by_blocks)
    with pytest.raises(ValueError, match="register ids"):
        tracer(engine=engine._replace(registers=engine.registers[:5]))
    with pytest.raises(TypeError, match="Verifier or None"):
        tracer(verifier=object())
    with pytest.raises(ValueError, match="observed must be sorted"):
        tracer(observed=(8, 4))
    once = tracer()
    assert emulator.call_traced(program.entry, once, DEFAULT_BUDGET, program.args) == program.expected_result
    assert once.stops > 100
    with pytest.raises(RuntimeError, match="runs once"):
        once.run(program.entry | 1, SENTINEL, abi.Limits(seconds=120.0, memory_bytes=1 << 30))


# ------------------------------------------- the kernel against `step`, on random states


@lru_cache(maxsize=None)
def unwinders_of(index: int):
    program = generate_program(3, index)
    return program, build_unwinders(program, UNWINDER_NAMES)


def outcome(stop_kernel, answer):
    """A failing answer worded as the verifier words a failing walk."""
    if isinstance(answer, abi.Mismatch):
        return (answer.frame, *difference(answer.register, answer.got, answer.want))
    return stop_kernel.outcome(answer)


def only_answer(found: list):
    """The answer of a one-unwinder kernel: None if its walk matched."""
    if not found:
        return None
    (index, answer), = found
    assert index == 0
    return answer


def python_walk(unwinder, frame: Frame, stack: Stack, depth: int) -> list[Frame]:
    return [got for got in walk(unwinder, frame, stack, depth) if isinstance(got, Frame)]


def shadow_of(frame: Frame, with_vfp: bool) -> ShadowFrame:
    """The shadow frame of a walked frame, 32-bit as a real one (a walk's
    sums may pass 2**32: then it differs)."""
    vfp = frame.d[8:16] if with_vfp and None not in frame.d[8:16] else None
    return ShadowFrame(frame.pc & 0xFFFF_FFFF, frame.sp & 0xFFFF_FFFF,
                       tuple(r & 0xFFFF_FFFF for r in frame.r[4:12]), vfp)


@lru_cache(maxsize=None)
def moved_base_pcs() -> tuple[tuple[int, int], ...]:
    """(program, pc) where v2+epilogue's innermost rule does not start from
    sp: epilogues that begin `mov sp, r7`, `sub sp, r7, #n` or `add sp, rN`."""
    found = []
    for which_program in range(4):
        program, unwinders = unwinders_of(which_program)
        epilogue = unwinders[UNWINDER_NAMES.index("v2+epilogue")]
        for function in program.functions:
            for pc in range(function.start, min(function.end, function.start + 4096), 2):
                rule = epilogue.rule_at(pc, True).rule
                if rule is not None and (rule.base != SP or rule.index is not None):
                    found.append((which_program, pc))
    return tuple(found)


@st.composite
def stop_states(draw, moved_base: bool = False):
    """A program's unwinders, a random stop in it (registers, stack words that
    point into the stack or the code, an IT state), and shadow frames that
    follow the unwinder's own walk for a while and then differ. With
    `moved_base`, v2+epilogue at a pc whose epilogue rule moves its base."""
    if moved_base:
        which_program, pc = draw(st.sampled_from(moved_base_pcs()))
        program, _ = unwinders_of(which_program)
    else:
        which_program = draw(st.integers(0, 3))
        program, _ = unwinders_of(which_program)
        function = draw(st.sampled_from(program.functions))
        pc = draw(st.integers(function.start // 2, (function.end - 1) // 2)) * 2
    rng = random.Random(draw(st.integers(0, 2**32)))
    sp = BASE + 4 * rng.randrange(0, SIZE // 8)
    code = [f.start + 2 * rng.randrange(0, 8) + 1 for f in program.functions]

    def word():
        pick = rng.random()
        if pick < 0.35:
            return BASE + rng.randrange(0, SIZE + 16) & ~3
        if pick < 0.7:
            return rng.choice(code)
        return rng.choice((0, rng.getrandbits(32), 0xFFFF_FFFF - rng.randrange(0, SIZE)))

    data = b"".join(word().to_bytes(4, "little") for _ in range(SIZE // 4))
    regs = [word() for _ in range(13)] + [sp, rng.choice(code), pc]
    vfp = tuple(rng.getrandbits(64) for _ in range(8)) if draw(st.booleans()) else None
    # cpsr: outside IT blocks; inside, not at the last instruction; at the last one of an `it eq`, Z set and clear
    cpsr = draw(st.sampled_from([0, 0x0000_0400 | 0x0200_0000, 0x0600_0000, 0x6000_0000, 0x4000_0800, 0x0000_0800]))
    name = "v2+epilogue" if moved_base else draw(st.sampled_from(UNWINDER_NAMES))
    return which_program, name, regs, vfp, cpsr, data, draw(st.integers(0, 6)), draw(st.integers(0, 10))


def differing(frame: ShadowFrame, which: int) -> ShadowFrame:
    """`frame` with one value changed: pc, sp, r4-r11 or d8-d15 by `which` (0-10)."""
    pc, sp, core, vfp = frame.pc, frame.sp, list(frame.callee_saved), frame.vfp
    if which == 0:
        pc = (pc + 2) & 0xFFFF_FFFF
    elif which == 1:
        sp = (sp + 4) & 0xFFFF_FFFF
    elif which < 10 or vfp is None:
        core[which % 8] ^= 1
    else:
        vfp = (vfp[0] ^ 1,) + vfp[1:]
    return ShadowFrame(pc, sp, tuple(core), vfp)


def kernel_agrees_with_step(state) -> None:
    which_program, name, regs, vfp, cpsr, data, depth, which = state
    unwinder = unwinders_of(which_program)[1][UNWINDER_NAMES.index(name)]
    sp = regs[13]
    stack = Stack(sp, data[sp - BASE :])
    frame = Frame(r=tuple(regs), d=(None,) * 8 + (vfp or (None,) * 8) + (None,) * 16, cpsr=cpsr)
    walked = python_walk(unwinder, frame, stack, depth + 1)
    expected = [shadow_of(f, vfp is not None) for f in walked]
    if depth < len(expected):  # make the shadow stack differ from the walk at some frame
        expected[depth] = differing(expected[depth], which)
    else:  # the walk failed: one more frame, so that the failing step is compared
        expected.append(ShadowFrame(0x1234, sp + 8, (0,) * 8, None))
    stop_kernel = kernel.StopKernel([unwinder], bytearray(data), BASE, BASE + SIZE)
    outermost_first = b"".join(packed(f) for f in reversed(expected))
    answer = only_answer(stop_kernel.check(regs, regs[15], cpsr, vfp, sp, outermost_first, 0))
    if answer is kernel.DEFER:
        return
    want = first_difference(unwinder, frame, stack, expected)
    got = None if answer is None else outcome(stop_kernel, answer)
    assert got == want


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stop_states())
def test_the_kernel_agrees_with_step(state):
    kernel_agrees_with_step(state)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stop_states(moved_base=True))
def test_the_kernel_agrees_with_step_where_an_epilogue_moves_its_base(state):
    kernel_agrees_with_step(state)


def kernel_agrees_past_the_first_frame(state) -> None:
    """The shadow stack ends where the walk is right so far (its first
    `depth` frames): the outermost has no caller. The kernel's step past it
    invents a caller exactly where walks.first_difference says so."""
    which_program, name, regs, vfp, cpsr, data, depth, _ = state
    unwinder = unwinders_of(which_program)[1][UNWINDER_NAMES.index(name)]
    sp = regs[13]
    stack = Stack(sp, data[sp - BASE :])
    frame = Frame(r=tuple(regs), d=(None,) * 8 + (vfp or (None,) * 8) + (None,) * 16, cpsr=cpsr)
    expected = [shadow_of(f, vfp is not None) for f in python_walk(unwinder, frame, stack, depth)]
    stop_kernel = kernel.StopKernel([unwinder], bytearray(data), BASE, BASE + SIZE)
    stop_kernel.verifier.past_bottom = True
    outermost_first = b"".join(packed(f) for f in reversed(expected))
    answer = only_answer(stop_kernel.check(regs, regs[15], cpsr, vfp, sp, outermost_first, 0))
    if answer is kernel.DEFER:
        return
    want = first_difference(unwinder, frame, stack, expected, past_bottom=True)
    if answer is not None:
        assert outcome(stop_kernel, answer) == want
        return
    assert want in (None, INVENTED)
    assert [n for _, _, n in stop_kernel.verifier.invented()] == ([1] if want == INVENTED else [])


class _Gives(Unwinder):
    """An unwinder whose every step gives `caller`, or fails (None)."""

    name = "gives"

    def __init__(self, caller: Frame | None):
        self.caller = caller

    def step(self, frame: Frame, stack, innermost: bool) -> Frame:
        if self.caller is None:
            raise UnwindFailure("no_info", "nothing here")
        return self.caller


@pytest.mark.parametrize("caller, want", [(None, None), (Frame(r=(0,) * 13 + (0x8000, 0, 0)), None),
                                          (Frame(r=(0,) * 13 + (0x8000, 0, 0x4321)), INVENTED)])
def test_the_step_past_a_threads_first_frame_invents_a_caller_only_where_it_gives_a_nonzero_pc(caller, want):
    """A failing step ends the walk honestly; so does a caller at pc 0 (where
    every walker stops); any other caller is made up."""
    frame = Frame(r=(0,) * 13 + (0x7000, 0, 0x1000))
    stack = Stack(0x7000, bytes(0x2000))
    assert first_difference(_Gives(caller), frame, stack, [], past_bottom=True) == want
    assert first_difference(_Gives(caller), frame, stack, []) is None  # not asked: nothing past the frames


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stop_states())
def test_the_kernel_agrees_with_step_past_a_threads_first_frame(state):
    kernel_agrees_past_the_first_frame(state)


def test_rules_pack_to_what_the_kernel_reads():
    rule = Offsets(base=7, offset=-4, loads=((4, 0), (15, 4)), vfp_loads=((8, 8),), end=16, bounds=(0, 12),
                pc_from_lr=False, aligned=True)
    packed_rule = pack_rule(rule)
    words = [int.from_bytes(packed_rule[i : i + 4], "little", signed=True) for i in range(0, len(packed_rule), 4)]
    assert words == [1 | 4, 7, -1, -4, 16, 0, 12, 2, 1, 0, 0, 0, 4, 0, 15, 4, 8, 8]
    assert pack_rule(Offsets(index=3))[8:12] == (3).to_bytes(4, "little")
    # Loads from sp before the base (a frame saving r8-r11 below its {r7, lr} record): counted, bounded, first.
    two_bases = pack_rule(Offsets(base=7, loads=((14, 4),), pre_loads=((8, 0), (9, 4)), pre_bounds=(0, 8)))
    words = [int.from_bytes(two_bases[i : i + 4], "little", signed=True) for i in range(0, len(two_bases), 4)]
    assert words[7:12] == [1, 0, 2, 0, 8] and words[12:] == [8, 0, 9, 4, 14, 4]


@pytest.mark.skipif(not kernel.AVAILABLE, reason="the compiled kernel is not built")
def test_the_kernels_causes_are_pythons(monkeypatch):
    """Tracer.causes, given the parts, makes a mismatch's, a failure rule's
    and a merged guard failure's cause as Verification.kernel_causes makes
    it from the answer's record: the same causes in the same order (wrong
    pc, sp and callee-saved registers, failing rules and guards: generated
    programs and clang -O2 with a frame pointer), nearly all of them made
    in C; a part it cannot read (no register's kind, no rule) leaves that
    cause to Python."""
    tracers, made_in_c = [], []
    real_tracer, real_causes = kernel.Tracer, Verification.kernel_causes

    def tracer(*args):
        tracers.append(real_tracer(*args))
        return tracers[-1]

    def kernel_causes(self, stop_kernel, found):
        made_in_c.append(sum(type(item) is FailureCause for item in found))
        return real_causes(self, stop_kernel, found)

    monkeypatch.setattr(kernel, "Tracer", tracer)
    monkeypatch.setattr(Verification, "kernel_causes", kernel_causes)
    elf = next(build for build in elf_builds() if build["file"] == "clang-O2-fp.elf")
    programs = [generate_program(0, number) for number in range(3)]
    programs.append(program_from_elf(str(ELF_CORPUS / elf["file"]), elf["entry"], elf["expected_checksum"]))
    kinds = set()
    for program in programs:
        unwinders = build_unwinders(program)
        in_c = verify_program(program, unwinders)
        with monkeypatch.context() as python_only:
            python_only.setattr(Verification, "cause_parts", lambda self, stop_kernel: ())
            in_python = verify_program(program, unwinders)
        assert made_in_c[-1] == 0 and made_in_c[-2] > 0.9 * len(in_c.tally.causes)
        assert in_c.tally.causes == in_python.tally.causes
        assert all(type(cause) is FailureCause for cause in in_c.tally.causes)
        kinds.update(cause.kind for cause in in_c.tally.causes)
        found = tracers[-1].causes()
        assert found and all(type(item) is tuple for item in found)
        names = [unwinder.name for unwinder in unwinders]  # no register's kind, no rule: every cause left to Python
        assert tracers[-1].causes(names, list(in_c.tally.wheres), {}, FailureCause, []) == found
    assert {"wrong_pc", "wrong_sp", "wrong_register", "bad_read", "limit", "no_info"} <= kinds
    with pytest.raises(TypeError):
        tracers[-1].causes([], [], {}, FailureCause)


def test_a_rule_with_a_value_past_int32_is_left_to_step():
    """The kernel's fields are int32: a plain rule with a value past them
    packs to None (its unwinder's step runs there), one at their edge packs."""
    for rule in (Offsets(offset=1 << 31), Offsets(offset=-(1 << 31) - 1), Offsets(loads=((4, 1 << 40),)),
                 Offsets(bounds=(-(1 << 31) - 1, 0)), Offsets(pre_bounds=(0, 1 << 64))):
        assert pack_rule(rule) is None, rule
    assert pack_rule(Offsets(offset=-(1 << 31), end=(1 << 31) - 1)) is not None
    with pytest.raises(TypeError):
        pack_rule(Offsets(offset="four"))


def test_a_failing_rule_is_reported_with_its_reason():
    program, unwinders = unwinders_of(0)
    v1 = unwinders[UNWINDER_NAMES.index("v1")]
    stop_kernel = kernel.StopKernel([v1], bytearray(SIZE), BASE, BASE + SIZE)
    # A caller pc outside every function: v1 has no row there.
    lr_outside = 0x10
    regs = [0] * 13 + [BASE + 0x100, lr_outside, program.functions[0].start]
    expected = [ShadowFrame(lr_outside, BASE + 0x100, (0,) * 8, None), ShadowFrame(0x20, BASE + 0x200, (0,) * 8, None)]
    answer = only_answer(stop_kernel.check(regs, regs[15], 0, None, regs[13],
                                           b"".join(packed(f) for f in reversed(expected)), 0))
    assert stop_kernel.outcome(answer) == (1, "no_info", None, f"v1 has no row for pc {lr_outside:#x}")


# ------------------------------------------------------------- rule ranges


def rule_ranges_hold(program, unwinders, rng: random.Random, samples: int) -> int:
    """For random pcs: every pc of the range `rule_at` gives has the same rule
    (what lets the kernel keep one rule per range). Frame pcs are halfword
    aligned (Thumb), and so are the pcs checked. Returns pcs checked."""
    checked = 0
    low_text = min(f.start for f in program.functions)
    high_text = max(f.end for f in program.functions)
    for _ in range(samples):
        pc = rng.randrange(low_text - 8, high_text + 8) & ~1
        innermost = rng.random() < 0.5
        for unwinder in unwinders:
            rule, low, high = unwinder.rule_at(pc, innermost)
            assert low <= pc < high, (unwinder.name, pc)
            inside = [p & ~1 for p in (low + 1, high - 1, rng.randrange(low, high) if high - low < 1 << 30 else pc)
                      if low_text - 16 <= p < high_text + 16 and low <= p & ~1]
            for other in [pc, *inside]:
                assert unwinder.rule_at(other, innermost).rule == rule, (unwinder.name, pc, other)
                if type(rule) is Fails:  # worded at each pc as the step words it
                    assert step_failure(unwinder, other, innermost) == (rule.kind, worded(rule, other))
                checked += 1
    return checked


def worded(rule: Fails, pc: int) -> str:
    """A failure rule's reason at a frame pc (harness.verify.kernel.StopKernel.outcome)."""
    return rule.reason.at(pc) if isinstance(rule.reason, PcWording) else rule.reason


def step_failure(unwinder, pc: int, innermost: bool) -> tuple[str, str]:
    """(kind, reason) of the unwinder's own step at pc, over a stack it cannot read."""
    frame = Frame(r=(0,) * 13 + (BASE + 0x100, 0x10, pc))
    with pytest.raises(UnwindFailure) as raised:
        unwinder.step(frame, Stack(BASE, b""), innermost)
    return raised.value.kind, raised.value.reason


@pytest.mark.parametrize("seed, index", [(0, 0), (3, 2), (5, 7)])
def test_rule_ranges_hold_for_generated_programs(seed, index):
    program = generate_program(seed, index)
    assert rule_ranges_hold(program, build_unwinders(program), random.Random(index), 150) > 500


@pytest.mark.parametrize("file", ["gcc-O2-fp.elf", "clang-Os-nofp.elf"])
def test_rule_ranges_hold_for_compiled_programs(file):
    build = next(b for b in elf_builds() if b["file"] == file)
    program = program_from_elf(str(ELF_CORPUS / file), build["entry"], build["expected_checksum"])
    assert rule_ranges_hold(program, build_unwinders(program), random.Random(1), 150) > 500


@pytest.mark.parametrize("make", [lambda: generate_program(0, 2), lambda: elf_program("gcc-O2-fp.elf")],
                         ids=["generated", "gcc-O2-fp"])
def test_position_spans_are_exact(make):
    """The kernel classifies a stop once per span of pcs: spans tile each
    function, every pc of a span has its position, and they are few."""
    program = make()
    spans = pcs = 0
    for function in program.functions:
        pc = function.start
        while pc < function.end:
            position, low, high = function.position_span(pc)
            assert low == pc < high and all(function.position(p) == position for p in range(low, high))
            assert function.position_span(high - 1) == (position, low, high)
            spans += 1
            pc = high
        pcs += function.end - function.start
    assert 2 * len(program.functions) < spans < pcs / 8


def test_the_epilogue_filter_passes_every_plan_of_the_corpus():
    """`may_start_epilogue` says False only where the plan declines: at every
    pc of generated programs and of compiled builds."""
    programs = [generate_program(0, index) for index in range(3)]
    for build in elf_builds():
        if build["file"] in ("gcc-O2-fp.elf", "clang-O2-nofp.elf", "gcc-Os-nofp.elf", "clang-Os-fp.elf"):
            programs.append(program_from_elf(str(ELF_CORPUS / build["file"]), build["entry"],
                                             build["expected_checksum"]))
    plans = 0
    for program in programs:
        simulator = build_unwinders(program, ("v2+epilogue",))[0].simulator
        for function in program.functions:
            if function.end - function.start > 4096:
                continue  # huge frames are padding, not instructions
            for pc in range(function.start, function.end, 2):
                if not may_start_epilogue(program.code(pc, 4)):
                    assert isinstance(simulator.plan(pc), str), hex(pc)
                elif not isinstance(simulator.plan(pc), str):
                    plans += 1
    assert plans > 100


def test_without_the_kernel_the_cli_says_so_and_verifies_in_python(monkeypatch, capsys, tmp_path):
    from harness import cli

    monkeypatch.setattr(kernel, "AVAILABLE", False)
    monkeypatch.setattr(kernel, "StopKernel", None)  # any use of the kernel would fail
    assert cli.main(["run", "--programs", "1", "--no-elf", "--unwinder", "v2", "--jobs", "1",
                     "--reports", str(tmp_path)]) == 0
    assert "compiled kernel (harness/verify/csrc) is not built" in capsys.readouterr().err
    assert (tmp_path / "latest.json").exists()


# ------------------------------------------- runs from sp, then from a register


TWO_BASES = (ehabi.Pop((8, 9, 10, 11)), ehabi.SetVsp(7), ehabi.VspAdd(-12), ehabi.Pop((4, 5, 6, 7, 14)), ehabi.FINISH)
# GCC's epilogue rows through r7, each a step of Chrome's: vsp set from r7 again and again, dipping below it.
SAVED = ehabi.Pop((4, 5, 6, 7, 8, 9, 10, 11, 14))
DIPS = (ehabi.SetVsp(7), ehabi.VspAdd(12), ehabi.SetVsp(7), ehabi.VspAdd(-12), ehabi.SetVsp(7), ehabi.VspAdd(12),
        SAVED, ehabi.FINISH)
RISES = (ehabi.SetVsp(7), ehabi.VspAdd(124), ehabi.SetVsp(7), ehabi.VspAdd(-16), ehabi.VspAdd(20), SAVED, ehabi.FINISH)
# Flat runs whose guards are the interpreter's checks: where they fail, the kernel words the failure.
FLAT_RUNS = ((ehabi.VspAdd(16), ehabi.Pop((4, 5, 14)), ehabi.FINISH),
             (ehabi.SetVsp(7), ehabi.VspAdd(-8), ehabi.Pop((4, 7, 14)), ehabi.FINISH),
             (ehabi.Pop((4, 5, 6, 7, 14)), ehabi.VspAdd(8), ehabi.FINISH))


class RunUnwinder(Unwinder):
    """One EHABI run everywhere, stepped as `exidx` does, or as Chrome's runtime does."""

    def __init__(self, run, chrome: bool):
        self.run, self.chrome, self.name = run, chrome, "v2-chrome" if chrome else "exidx"
        self.restores = ChromeV2Unwinder.restores if chrome else ALL_CALLEE_SAVED
        self.reader = ChromeV2Unwinder.__new__(ChromeV2Unwinder)
        self.reader._found = lambda pc: (run, 0, 1 << 32)

    def step(self, frame, stack, innermost):
        if self.chrome:
            return ChromeV2Unwinder.step(self.reader, frame, stack, innermost)
        return caller_by_run(self.run, frame, stack, innermost)

    def rule_at(self, pc, innermost):
        return RuleRange(chrome_rule(self.run) if self.chrome else rule_of_run(self.run), NOWHERE, EVERYWHERE)


@settings(max_examples=400, deadline=None)
@given(st.booleans(), st.integers(0, SIZE // 4 - 1), st.integers(-8, SIZE // 4 + 8), st.integers(0, 2**32 - 1),
       st.sampled_from([0, 1, 2]), st.integers(0, 3), st.sampled_from([TWO_BASES, DIPS, RISES, *FLAT_RUNS]))
def test_the_kernel_takes_the_register_after_the_loads_from_sp(chrome, sp_word, r7_word, seed, skew, which, run):
    """`pop {r8-r11}; vsp = r7; vsp -= 12; pop {r4-r7, lr}` (clang's Thumb
    frames saving r8-r11 below their record) is one rule with loads from sp
    first, and a run that sets vsp from r7 again and again (GCC's) one
    rule under Chrome's checks, and a flat run one rule that fails as the
    interpreter does where its guards fail; the kernel says what the
    interpreter and Chrome's runtime say, r7 anywhere (below sp, outside
    the stack, misaligned), or defers."""
    assert rule_of_run(TWO_BASES).pre_loads == ((8, 0), (9, 4), (10, 8), (11, 12)) and chrome_rule(TWO_BASES)
    assert all(rule_of_run(flat).guard_kind == "bad_read" for flat in FLAT_RUNS)
    assert chrome_rule(FLAT_RUNS[0]).guard_kind == "bad_read" and not chrome_rule(FLAT_RUNS[1]).guard_kind  # limit too
    assert not rule_of_run(TWO_BASES).guard_failure
    assert chrome_rule(DIPS).bounds and chrome_rule(RISES).bounds and rule_of_run(DIPS) is None
    rng = random.Random(seed)
    data = bytes(rng.getrandbits(8) for _ in range(SIZE))
    sp, r7 = BASE + 4 * sp_word + (skew if which == 0 else 0), BASE + 4 * r7_word + (skew if which == 1 else 0)
    regs = [rng.getrandbits(32) for _ in range(13)] + [sp, 0x1235, 0x1000]
    regs[7] = r7
    unwinder = RunUnwinder(run, chrome)
    frame = Frame(r=tuple(regs), d=(None,) * 32)
    stack = Stack(sp, data[sp - BASE:], BASE + SIZE)
    walked = python_walk(unwinder, frame, stack, 1)
    expected = [shadow_of(f, False) for f in walked] or [ShadowFrame(0x1234, sp + 8, (0,) * 8, None)]
    if walked and which == 3:
        expected[0] = differing(expected[0], rng.randrange(0, 10))
    stop_kernel = kernel.StopKernel([unwinder], bytearray(data), BASE, BASE + SIZE)
    answer = only_answer(stop_kernel.check(regs, regs[15], 0, None, sp, packed(expected[0]), 0))
    if answer is not kernel.DEFER:
        want = first_difference(unwinder, frame, stack, expected)
        assert (None if answer is None else outcome(stop_kernel, answer)) == want


def test_a_verified_run_is_freed_without_the_cycle_collector(monkeypatch):
    """Nothing of a verified run sits in a reference cycle: its kernel, its
    emulators (which give their engines back as they go) and its unwinders,
    with their tables, go as soon as the result and the unwinders do, the
    collector off (a cycle waited for it, and its walks over them all were
    a tenth of a generated program's verification; an engine it closed, a
    millisecond or two, landed in whatever run came next)."""
    import gc
    import weakref

    watched = []
    for owner in (kernel.StopKernel, Emulator):
        def init(self, *args, real=owner.__init__, **kwargs):
            real(self, *args, **kwargs)
            watched.append(weakref.ref(self))
        monkeypatch.setattr(owner, "__init__", init)
    program = generate_program(0, 1)
    unwinders = build_unwinders(program)
    assert any(u.name == "v2+epilogue" for u in unwinders)
    watched += [weakref.ref(u) for u in unwinders]
    gc.disable()
    try:
        result = verify_program(program, unwinders)
        assert result.failure_log.first(1) and len(watched) > len(unwinders) + 1
        del result, unwinders
        Emulator(program.segments).call(program.entry, lambda pc: None, DEFAULT_BUDGET, program.args)  # a hook in Python
        alive = [ref() for ref in watched if ref() is not None]
    finally:
        gc.enable()
    assert not alive


def test_a_kernels_own_rules_leave_the_book_with_its_run_and_still_word_its_failures():
    """A scan's rules hold every return address of their program and are
    their kernel's alone: the process's book lets them go once the run is
    over (it kept them for the life of the process), and the failures they
    gave are still worded from the kernel's copy."""
    from harness.verify import rule_book
    from harness.verify.rule_book import names_sites

    book = rule_book.current()
    before = len(book)
    program = generate_program(0, 1)
    result = verify_program(program, build_unwinders(program, ("scan",)))
    assert book is rule_book.current() and len(book) > before
    assert not any(rule is not None and names_sites(rule) for rule in book.rules[before:])
    worded = [entry[4] for entry in result.failure_log.first(10) if entry[3].kind == "no_info"]
    assert worded and all(text.startswith("no return address in the 64 words from sp 0x") for text in worded)


def test_a_verified_run_leaves_nothing_behind(monkeypatch):
    """A StopKernel's Verifier holds its bound methods: a cycle only the
    collector can free, with every table of the run's unwinders behind it
    (the Verifier and the Tracer tell the collector what they hold)."""
    import gc
    import weakref

    kept = []
    real = kernel.StopKernel.__init__

    def init(self, *args, **kwargs):
        real(self, *args, **kwargs)
        kept.append((weakref.ref(self), weakref.ref(self.unwinders[0])))
    monkeypatch.setattr(kernel.StopKernel, "__init__", init)
    program = generate_program(0, 1)
    result = verify_program(program, build_unwinders(program))
    assert result.failure_log.first(1) and kept
    del result
    gc.collect()
    assert all(stop_kernel() is None and unwinder() is None for stop_kernel, unwinder in kept)
