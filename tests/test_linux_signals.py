"""Signals delivered as ARM Linux delivers them (harness.linux.signals), and
ground truth across their frames: a handler's caller is the context it
interrupted, at that exact pc, until sigreturn restores it; a siglongjmp
out of a handler drops it. The Linux corpus's csig (corpus/linux/src)
runs each kind; the frame's layout and each default action are checked
call by call on a plain machine."""

from __future__ import annotations

import errno
import hashlib
import json
import struct
from collections import Counter
from pathlib import Path

import pytest
from linux_calls import SCRATCH, call, made_kernel, made_roots, open_path
from test_linux_process import Names, build, qemu

from harness.cli import main
from harness.compare_rows import Comparison, Disagreement, judge_process
from harness.emulation.machine import Context
from harness.formats.elf import function_spans, open_elf
from harness.linux import signals
from harness.linux.call_table import SystemCallFault
from harness.linux.process import LinuxRun, LinuxSystem
from harness.linux.signals import Action
from harness.linux_verify.modules import process_program
from harness.linux_verify.verify import verify_process
from harness.emulation.livestack import LiveStack
from harness.errors import UnwindFailure
from harness.unwind.frame import Frame, Stack
from harness.unwind.rule import EVERYWHERE, NOWHERE, RuleRange
from harness.unwind.registry import build_unwinders
from harness.unwind.sigframes import SignalFrames, trampolines_in
from harness.unwind.walk import Unwinder, without_scratch
from harness.verify.stops import Verify, verify_program
from harness.verify.verification import Verification

EXPECTED_OUTPUT = (b"while blocked: 106\nafter unblock: 107\nreset: 1\nnested: 4\non the alternate stack: 1\n"
                   b"registers kept: 1\njumped: 7\nhits: 108\n")


SOURCE = Path(__file__).resolve().parent.parent / "corpus" / "linux" / "src" / "csig.c"


def program() -> str:
    return build(SOURCE, "-static")


def test_the_signal_program_runs_as_under_qemu(tmp_path):
    report = tmp_path / "report.json"
    assert main(["verify-elf", program(), "--unwinder", "dwarf", "--jobs", "1", "--json", str(report)]) == 0
    entry = json.loads(report.read_text())["programs"][0]
    assert qemu(program()) == (0, EXPECTED_OUTPUT)
    assert (entry["exit_status"], entry["stdout_sha256"]) == (0, hashlib.sha256(EXPECTED_OUTPUT).hexdigest())


def test_a_process_killed_by_its_default_action_is_not_verified(tmp_path, capsys):
    assert qemu(program(), ["abort"])[0] == -6
    assert main(["verify-elf", program(), "--unwinder", "dwarf", "--jobs", "1", "--", "abort"]) == 1
    said = capsys.readouterr()
    assert "killed by signal 6 (SIGABRT)" in said.err
    assert "killed by signal 6 (SIGABRT), its stdout of sha256" in " ".join(said.out.split())
    assert main(["verify-elf", program(), "--unwinder", "dwarf", "--jobs", "1", "--expect-exit", "-6", "--",
                 "abort"]) == 0
    assert ": as expected" in capsys.readouterr().out


def _stops(compiled: bool) -> tuple[list, Names]:
    """(pc, registers, expected frames) at every stop of the signal program."""
    system = LinuxSystem(LinuxRun(program()))
    names = Names(system)
    seen = []

    def observe(stop):
        seen.append((stop.pc, stop.frame.r, tuple((f.pc, f.sp, f.callee_saved) for f in stop.expected)))

    result = verify_program(process_program(system), [], how=Verify(compiled=compiled), observe=observe, system=system)
    assert result.fault is None and system.outcome().exit_status == 0
    return seen, names


@pytest.fixture(scope="module")
def stops():
    return _stops(True)


def test_a_handlers_caller_is_the_interrupted_context_until_sigreturn_pops_it(stops):
    seen, names = stops
    entries = [i for i, (pc, _, _) in enumerate(seen) if names(pc) == "count" and names(seen[i - 1][0]) != "count"]
    assert len(entries) == 8  # five raises, one from deep(0), the blocked one on unblock, SIGHUP
    for i in entries:
        before_pc, before_regs, before_expected = seen[i - 1]  # the svc that sent it (raise's)
        pc, regs, expected = seen[i]
        interrupted = expected[0]
        assert interrupted[0] == seen[i - 1][0] + 2  # the instruction after the svc: exact, no return address
        assert interrupted[1] == before_regs[13] and interrupted[2] == tuple(before_regs[4:12])
        assert expected[1:] == before_expected  # everything below it, as when it was interrupted
        resumed = next(j for j in range(i + 1, len(seen)) if seen[j][0] == interrupted[0])
        assert seen[resumed][2] == before_expected  # sigreturn popped it
        assert seen[resumed][1][13] == before_regs[13]


def test_the_handler_of_the_deepest_raise_sees_every_recursive_caller(stops):
    seen, names = stops
    deepest = max((expected for pc, _, expected in seen if names(pc) == "count"), key=len)
    assert sum(1 for frame in deepest if (names(frame[0] - 1) or "").startswith("deep")) == 40  # deep(40)..deep(1): deep(0) tail-calls raise


def test_siglongjmp_out_of_a_handler_drops_its_frame(stops):
    seen, names = stops
    in_jump = [expected for pc, _, expected in seen if names(pc) == "jump"]
    after = [expected for pc, _, expected in seen if names(pc) == "main"]
    # main's callers, then raise's frames from main down, then the signal frame
    assert in_jump and len(in_jump[0]) > len(after[0]) + 1 and in_jump[0][-len(after[0]):] == after[0]
    main_depths = {len(expected) for expected in after}
    assert main_depths == {len(after[0])}  # back in main after the jump: nothing of the handler left


def test_both_hooks_agree_across_signal_frames(stops):
    python_seen, _ = _stops(False)
    assert python_seen == stops[0]


# ------------------------------------------------------------ call by call


@pytest.fixture
def kernel(tmp_path):
    kernel = made_kernel(made_roots(tmp_path))
    kernel.machine.map(0x80000, 0x4000)
    sp = 0x84000 - 0x100
    in_it_block = 0x6600FC30  # flags, IT state, Thumb, User mode
    interrupted = Context(tuple(range(100, 113)) + (sp, 0x7777, 0x10a00), in_it_block, tuple(range(1000, 1032)),
                          0x3000000)
    kernel.machine.registers = interrupted
    return kernel


def _install(kernel, signal: int, action: Action) -> None:
    kernel.machine.write(SCRATCH, action.packed())
    assert call(kernel, "rt_sigaction", signal, SCRATCH, 0, 8) == 0


def test_an_rt_frame_holds_the_interrupted_context_and_sigreturn_restores_it(kernel):
    _install(kernel, 10, Action(0x9001, signals.SA_SIGINFO | signals.SA_RESTORER, 0x8000, 1 << 11))
    assert call(kernel, "kill", 4242, 10) == 0
    interrupted = kernel.machine.registers  # as kill returns: r0 = 0
    assert interrupted.r[0] == 0 and interrupted.r[1] == 101
    assert signals.deliver_pending(kernel) == interrupted
    now = kernel.machine.registers
    frame = now.r[13]
    assert frame % 8 == 0 and frame + signals.FRAME_SIZE[True] <= interrupted.r[13]
    assert now.r[:3] == (10, frame, frame + 128) and now.r[14] == 0x8000 and now.r[15] == 0x9000
    assert now.cpsr & 0x20 and not now.cpsr & signals.IT_BITS  # Thumb, as the handler's address says
    assert struct.unpack_from("<iii", kernel.machine.read(frame, 12)) == (10, 0, signals.SI_USER)
    saved = signals.SIGCONTEXT.unpack(kernel.machine.read(frame + 128 + 20, signals.SIGCONTEXT.size))
    assert saved[3:19] == interrupted.r and saved[19] == interrupted.cpsr
    assert kernel.signals.blocked == 1 << 9 | 1 << 11  # itself and its sa_mask, while it runs
    kernel.machine.registers = Context(tuple(0 for _ in range(13)) + (frame, 0, 0), 0x10, (0,) * 32, 0)
    assert call(kernel, "rt_sigreturn") == interrupted.r[0]
    assert kernel.machine.registers == interrupted and kernel.signals.blocked == 0


def test_a_frame_without_siginfo_returns_through_the_kernels_trampoline(kernel):
    _install(kernel, 12, Action(0x9000, 0, 0, 0))  # an ARM handler, no restorer
    call(kernel, "tgkill", 4242, 4242, 12)
    signals.deliver_pending(kernel)
    now = kernel.machine.registers
    assert now.r[:3] == (12, 0, 0) and now.r[14] == signals.TRAMPOLINES[False] and not now.cpsr & 0x20


@pytest.mark.parametrize("signal, action, outcome", [
    (15, None, -15),                       # the default: terminate
    (17, None, None),                      # SIGCHLD's default: ignore
    (15, Action(signals.SIG_IGN, 0, 0, 0), None),
])
def test_default_and_ignored_actions(kernel, signal, action, outcome):
    if action:
        _install(kernel, signal, action)
    call(kernel, "kill", 0, signal)
    before = kernel.machine.registers
    assert signals.deliver_pending(kernel) is None
    assert kernel.exit_status == outcome and kernel.machine.registers == before


def test_a_stop_signal_would_never_be_continued(kernel):
    call(kernel, "kill", 4242, 20)  # SIGTSTP
    with pytest.raises(SystemCallFault, match="would stop the process"):
        signals.deliver_pending(kernel)


def test_signals_to_other_processes_and_bad_arguments(kernel):
    assert call(kernel, "kill", 4243, 10) == -errno.ESRCH
    assert call(kernel, "kill", 4242, 65) == -errno.EINVAL
    assert call(kernel, "rt_sigaction", 9, SCRATCH, 0, 8) == -errno.EINVAL  # SIGKILL's action is not the program's
    assert call(kernel, "rt_sigaction", 10, SCRATCH, 0, 4) == -errno.EINVAL
    kernel.machine.write(SCRATCH, struct.pack("<Q", 1 << 8 | 1 << 18))  # SIGKILL and SIGSTOP with others
    assert call(kernel, "rt_sigprocmask", 0, SCRATCH, 0, 8) == 0
    assert kernel.signals.blocked == 0  # neither can be blocked


@pytest.mark.parametrize("signal, handler", [(10, signals.SIG_IGN), (17, signals.SIG_DFL)])  # SIGCHLD: ignored by default
def test_what_is_pending_of_a_signal_goes_when_its_action_comes_to_ignore_it(kernel, signal, handler):
    _install(kernel, signal, Action(0x9001, 0, 0, 0))
    kernel.machine.write(SCRATCH + 0x40, struct.pack("<Q", 1 << (signal - 1) | 1 << 11))
    assert call(kernel, "rt_sigprocmask", 0, SCRATCH + 0x40, 0, 8) == 0
    call(kernel, "kill", 4242, signal)
    call(kernel, "kill", 4242, 12)
    assert [entry.signal for entry in kernel.signals.pending] == [signal, 12]
    _install(kernel, signal, Action(handler, 0, 0, 0))
    assert kernel.signals.pending == [signals.Pending(12, signals.SI_USER)]  # flushed, as Linux's sigaction does
    assert call(kernel, "rt_sigpending", SCRATCH + 0x40, 8) == 0
    assert struct.unpack("<Q", kernel.machine.read(SCRATCH + 0x40, 8))[0] == 1 << 11


# ------------------------------------------------------------ crossing signal frames (the default)


def test_trampolines_are_found_by_their_instructions_where_aligned():
    arm_rt = struct.pack("<II", 0xE3A070AD, 0xEF000000)
    thumb = struct.pack("<HH", 0x2777, 0xDF00)
    thumb2_rt = struct.pack("<HHH", 0xF04F, 0x07AD, 0xDF00)
    code = b"\0" * 4 + arm_rt + b"\0" * 2 + thumb + thumb2_rt + b"\0" + arm_rt  # the last ARM one misaligned
    assert trampolines_in([(0x1000, code)]) == {0x1004: True, 0x100E: False, 0x1012: True}


class _Step(Unwinder):
    """An unwinder whose step returns `caller` and records how it was asked."""

    name, restores = "inner", None

    def __init__(self, caller: Frame):
        self.caller, self.asked = caller, []

    def step(self, frame, stack, innermost):
        self.asked.append((frame.pc, innermost))
        return self.caller


def _signal_frame_stack(sp: int, interrupted: Context) -> Stack:
    """The stack from sp: an rt frame as the kernel writes it (tests/linux_calls' machine)."""
    kernel = made_kernel(made_roots_in_memory())
    kernel.machine.map(sp & ~0xFFF, 0x2000)
    kernel.machine.registers = interrupted
    kernel.signals.actions[10] = Action(0x9001, signals.SA_SIGINFO | signals.SA_RESTORER, 0x20000, 0)
    kernel.signals.send(10, signals.SI_TKILL)
    signals.deliver_pending(kernel)
    frame = kernel.machine.registers.r[13]
    return frame, Stack(frame, kernel.machine.read(frame, (sp & ~0xFFF) + 0x2000 - frame))


def made_roots_in_memory():
    import tempfile
    return made_roots(Path(tempfile.mkdtemp()))


def test_a_step_that_lands_on_a_trampoline_gives_the_interrupted_context_with_its_exact_pc():
    interrupted = Context(tuple(range(100, 113)) + (0x80F00, 0x7777, 0x10A42), 0x60000030,
                          tuple(range(1000, 1032)), 0)
    sp, stack = _signal_frame_stack(0x80F00, interrupted)
    inner = _Step(Frame(r=(0,) * 13 + (sp, 0, 0x20000)))  # the handler returns to the restorer at 0x20000
    crossing = SignalFrames(inner, {0x20000: True})
    handler = Frame(r=(0,) * 13 + (sp - 0x40, 0x20001, 0x9000), cpsr=0x60000030)
    restored = crossing.step(handler, stack, innermost=True)
    assert restored.r == interrupted.r[:15] + (0x10A42,) and restored.d == interrupted.d
    crossing.step(without_scratch(restored), stack, innermost=False)
    assert inner.asked == [(0x9000, True), (0x10A42, True)]  # the restored pc is looked up as it is, no pc - 1
    crossing.step(Frame(r=(0,) * 13 + (0x80F40, 0, 0x10B00), cpsr=0x60000030), stack, innermost=False)
    assert inner.asked[-1] == (0x10B00, False)  # any other caller's pc is a return address
    at_trampoline = Frame(r=(0,) * 13 + (sp, 0, 0x20002), cpsr=0x60000030)  # stopped at the svc
    assert crossing.step(at_trampoline, stack, innermost=True).r == restored.r


def test_a_context_interrupted_where_no_code_is_returns_to_its_lr():
    """csegv's call through a NULL function pointer: the fault is the fetch
    at pc 0, which no table describes; the call left its return address in
    lr and sp as it was, so the caller is lr at that sp (the tables are not
    asked). A restored pc in code is looked up as before."""
    interrupted = Context(tuple(range(100, 113)) + (0x80F00, 0x10A43, 0), 0x60000030, tuple(range(1000, 1032)), 0)
    sp, stack = _signal_frame_stack(0x80F00, interrupted)
    inner = _Step(Frame(r=(0,) * 13 + (sp, 0, 0x20000)))
    crossing = SignalFrames(inner, {0x20000: True}, [(0x9000, 0x9100), (0x10000, 0x10B00), (0x20000, 0x20010)])
    restored = crossing.step(Frame(r=(0,) * 13 + (sp - 0x40, 0x20001, 0x9000), cpsr=0x60000030), stack, True)
    assert restored.pc == 0
    caller = crossing.step(without_scratch(restored), stack, innermost=False)
    assert (caller.pc, caller.sp, caller.r[4:12]) == (0x10A42, 0x80F00, tuple(range(104, 112)))
    assert inner.asked == [(0x9000, True)]


class _Ranges(Unwinder):
    """An unwinder whose rule is "R" over every pc."""

    name, restores = "inner", None

    def rule_at(self, pc, innermost):
        return RuleRange("R", NOWHERE, EVERYWHERE)


def test_the_kernel_takes_the_inner_rules_but_where_a_signal_frame_is_crossed():
    """SignalFrames' rules: the inner unwinder's, clipped, except none (its
    own step) for a frame in a trampoline (innermost) or at its first
    instruction (a caller: the handler's return address), and for an
    innermost frame where no code is."""
    crossing = SignalFrames(_Ranges(), {0x20000: True}, [(0x10000, 0x20010)])
    assert crossing.looks_ahead
    assert crossing.rule_at(0x20000, False) == RuleRange(None, 0x20000, 0x20002)
    assert crossing.rule_at(0x20004, True) == RuleRange(None, 0x20000, 0x20008)
    assert crossing.rule_at(0x30000, True) == RuleRange(None, 0x20010, EVERYWHERE)  # no code there
    assert crossing.rule_at(0x8000, True) == RuleRange(None, NOWHERE, 0x10000)
    assert crossing.rule_at(0x1FFF0, True) == RuleRange("R", 0x10000, 0x20000)
    assert crossing.rule_at(0x20008, True) == RuleRange("R", 0x20008, 0x20010)
    assert crossing.rule_at(0x1FFF0, False) == RuleRange("R", NOWHERE, 0x20000)
    assert crossing.rule_at(0x20004, False) == RuleRange("R", 0x20002, EVERYWHERE)


def test_the_kernel_walks_every_stop_but_those_that_cross_a_signal_frame(monkeypatch):
    """csig (static) at every stop, dwarf and v2-code crossing signal
    frames: the compiled kernel's counts are the Python walks' to the
    stop, and only stops above a signal frame (a walk that reaches a
    trampoline, a handler on the alternate stack) were walked in Python."""
    names = ["dwarf", "v2-code"]
    counts = {}
    deferred = []
    walk = Verification.walk

    def counted_walk(self, number, *args, **kwargs):
        deferred.append(number)
        return walk(self, number, *args, **kwargs)

    monkeypatch.setattr(Verification, "walk", counted_walk)
    for compiled in (True, False):
        result = verify_process(LinuxRun(program()), names, lambda built: build_unwinders(built, names),
                                Verify(compiled=compiled))
        assert result.fault is None
        counts[compiled] = result.counts
        if compiled:
            in_python = len(deferred)
    assert counts[True] == counts[False]
    above = sum(stops for (unwinder, traits, _, _), stops in counts[True].items()
                if unwinder == "dwarf" and "through_signal_frame" in traits)
    assert 0 < in_python <= above < result.stops / 10


def test_a_read_where_nothing_is_mapped_inside_the_stack_fails_as_a_bad_read():
    """A handler on an alternate stack below its thread's stack: the walk's
    stack runs from its sp to the thread's top, over unmapped pages."""
    def read(address, size):
        if 0x1000 <= address < 0x2000:
            return None
        return bytes((address + i) & 0xFF for i in range(size))

    stack = LiveStack(read, 0x0F00, 0x3000)
    assert stack.read_u32(0x0F04) == 0x07060504 and stack.read_u32(0x2000) == 0x03020100
    for reading in (lambda: stack.read_u32(0x1200), lambda: stack.read_u64(0x0FFC)):
        with pytest.raises(UnwindFailure, match="nothing is mapped there") as failure:
            reading()
        assert failure.value.kind == "bad_read"
    assert stack.region(0x1000, 8) == bytes(8)  # a memo's proof reads it as zeros


def test_crossing_signal_frames_makes_the_table_walks_right_in_handlers():
    """csig (static) at every stop, dwarf plain and crossing signal frames:
    above a signal frame, plain dwarf takes lr (the restorer) for the
    caller and is wrong; crossing it, no walk is wrong (those that reach
    the static libc's code without CFI stop there honestly)."""
    kinds = {}
    for crossing in (False, True):
        result = verify_process(LinuxRun(program()), ["dwarf"], lambda built: build_unwinders(built, ["dwarf"]),
                                signal_frames=crossing)
        assert result.fault is None
        kinds[crossing] = Counter()
        for (unwinder, traits, position, kind), stops in result.counts.items():
            if "through_signal_frame" in traits:
                kinds[crossing]["right" if kind is None else "stopped" if kind.startswith("stopped") else "wrong"] \
                    += stops
    assert kinds[False]["wrong"] > 100 and kinds[True]["wrong"] == 0
    assert sum(kinds[True].values()) == sum(kinds[False].values())


def test_a_frame_with_no_room_and_a_bad_sigreturn_end_the_process_with_sigsegv(kernel):
    """As Linux (force_sigsegv): the kernel cannot write the frame below an
    unmapped sp, and a sigreturn's frame that is misaligned or unreadable
    is not one."""
    _install(kernel, 10, Action(0x9001, 0, 0, 0))
    kernel.machine.registers = Context((0,) * 13 + (0x10, 0, 0x8000), 0x10, (0,) * 32, 0)  # sp at an unmapped page
    call(kernel, "kill", 4242, 10)
    assert signals.deliver_pending(kernel) is None and kernel.exit_status == -11
    for sp in (0x80004, 0x10):  # misaligned; unmapped
        kernel.exit_status = None
        kernel.machine.registers = Context((0,) * 13 + (sp, 0, 0x8000), 0x10, (0,) * 32, 0)
        call(kernel, "rt_sigreturn")
        assert kernel.exit_status == -11


def test_a_fault_runs_its_handler_as_under_qemu_and_its_caller_is_the_faulting_store(compiled):
    """The store to an unmapped page raises SIGSEGV at once: the handler
    runs on the kernel's frame, its caller the store that faulted (the
    interrupted pc, in main), and siglongjmp takes it back to main."""
    program = build("segv_handler.c", "-static")
    assert qemu(program) == (0, b"caught 11\n")
    result = verify_process(LinuxRun(program), ["dwarf"], lambda built: build_unwinders(built, ["dwarf"]),
                            how=Verify(compiled=compiled))
    assert result.fault is None and result.self_check_ok and result.result == 0
    system = LinuxSystem(LinuxRun(program))
    names = Names(system)
    in_handler = []

    def observe(stop):
        if names(stop.pc) == "caught":
            in_handler.append([(names(frame.pc), frame.signal) for frame in stop.expected])

    verify_program(process_program(system), [], how=Verify(compiled=compiled), observe=observe, system=system)
    assert system.outcome().stdout == b"caught 11\n"
    assert in_handler and all(callers[0] == ("main", True) for callers in in_handler)


def test_a_fault_in_a_run_from_block_entries_is_named_and_a_process_runs_from_every_instruction():
    """From block entries the engine places a fault at its block's start
    only: such a run ends there, named; verify_process, told by its first
    run, verifies such a process from every instruction, sampled too."""
    program = build("segv_handler.c", "-static")
    system = LinuxSystem(LinuxRun(program))
    result = verify_program(process_program(system), [], how=Verify(hooks="block", every=97), system=system)
    assert "the program takes a fault (unmapped access at 0x10) inside a block run" in result.fault
    result = verify_process(LinuxRun(program), ["dwarf"], lambda built: build_unwinders(built, ["dwarf"]),
                            how=Verify(every=97))
    assert result.fault is None and result.self_check_ok and result.stops > 100


# ------------------------------------------------------------- faults and protections


def test_a_fault_runs_its_handler_with_the_address_or_takes_the_default_where_blocked_or_ignored(kernel):
    kernel.machine.registers = Context((0,) * 13 + (SCRATCH + 0x2000, 0, 0x8000), 0x10, (0,) * 32, 0)
    _install(kernel, signals.SIGSEGV, Action(0x9001, signals.SA_SIGINFO, 0, 0))
    interrupted = signals.fault(kernel, *signals.FAULTS["protected"], 0x1234)
    assert interrupted.r[15] == 0x8000 and kernel.machine.registers.r[15] == 0x9000
    frame = kernel.machine.registers.r[1]  # siginfo: si_signo, si_errno, si_code, si_addr
    assert struct.unpack("<iiiI", kernel.machine.read(frame, 16)) == (11, 0, 2, 0x1234)  # SEGV_ACCERR
    for blocked, handler in ((1 << 10, 0x9001), (0, signals.SIG_IGN)):
        kernel.exit_status = None
        kernel.signals.blocked = blocked
        _install(kernel, signals.SIGSEGV, Action(handler, 0, 0, 0))
        assert signals.fault(kernel, *signals.FAULTS["unmapped"], 0) is None
        assert kernel.exit_status == -11 and not kernel.signals.blocked  # force_sig_fault: the default action


def test_protections_bind_the_program_and_madvise_dontneed_zeroes_anonymous_pages(kernel):
    start = call(kernel, "mmap2", 0, 2 * 0x1000, 1, 0x22, -1 & 0xFFFFFFFF, 0)  # PROT_READ, MAP_PRIVATE|ANONYMOUS
    assert kernel.machine.protections[start] == 1
    assert call(kernel, "mprotect", start, 0x1000, 2) == 0 and kernel.machine.protections[start] == 3  # w implies r
    assert call(kernel, "mprotect", start, 0x1000, 4) == 0 and kernel.machine.protections[start] == 5  # x implies r
    assert call(kernel, "mprotect", start, 0x1000, 0) == 0 and kernel.machine.protections[start] == 0  # a guard
    memory = kernel.machine.raw  # the pages themselves: the read-only page's bytes are not a call's to write
    memory.write(start + 0x1000, b"kept")
    assert call(kernel, "madvise", start + 0x1000, 0x1000, 4) == 0  # MADV_DONTNEED
    assert memory.read(start + 0x1000, 4) == bytes(4)
    memory.write(start + 0x1000, b"kept")
    assert call(kernel, "madvise", start + 0x1000, 0x1000, 8) == 0 and memory.read(start + 0x1000, 4) == b"kept"
    fd = open_path(kernel, "input.txt")
    mapped = call(kernel, "mmap2", 0, 0x1000, 1, 2, fd, 0)  # a file's private pages: they read the file again
    memory.write(mapped, b"mine")
    assert call(kernel, "madvise", mapped, 0x1000, 4) == 0 and memory.read(mapped, 16) == b"hello\nworld\n" + bytes(4)


def test_a_fault_inside_an_it_block_returns_into_it(compiled):
    """The handler of a load that faults inside `ite ne` returns to it: the
    frame keeps the IT state, so the load runs again under its condition and
    the else-instruction does not run."""
    program = build("it_fault.c", "-static")
    assert qemu(program) == (0, b"pick 42\n")
    system = LinuxSystem(LinuxRun(program))
    result = verify_program(process_program(system), [], how=Verify(compiled=compiled), system=system)
    assert result.fault is None and (system.outcome().exit_status, system.outcome().stdout) == (0, b"pick 42\n")


def test_the_rows_judged_in_a_handler_are_judged_against_the_interrupted_context():
    """`encode --compare`'s judging by running (compare_rows.judge_process)
    at every instruction of csig's handlers: one step from a handler's frame
    must give the context the signal interrupted (the shadow stack's caller
    there), which both gcc's CFI and the rows from code reach through the
    trampoline the handler returns to. Stepped plainly, both would stop at
    the trampoline and be judged wrong at every one of these stops."""
    path = program()
    handlers = [(start, end) for start, end, name, _ in function_spans(open_elf(path))
                if name in ("with_info", "where", "clobber")]
    assert len(handlers) == 3
    found = Comparison(disagreements=[Disagreement("handler", address, "", "", "")
                                      for start, end in handlers for address in range(start, end, 2)])
    judged, fault = judge_process(found, LinuxRun(path))
    outcomes = sum(found.outcomes.values(), Counter())
    assert fault is None and judged >= 40
    assert outcomes == Counter({"both right": judged})
