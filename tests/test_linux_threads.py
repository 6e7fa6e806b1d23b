"""Threads: clone as pthread_create makes them, futexes, exit and joins,
signals to a thread, and the one deterministic scheduler (unit tests on a
plain machine); then a threaded C program run as under qemu-user, with a
shadow stack a thread that both hooks keep alike, run after run."""

from __future__ import annotations

import errno
import struct
from collections import Counter
from dataclasses import replace

import pytest
from linux_calls import SCRATCH, call, made_kernel
from test_linux_process import _chains, _live, build, qemu, run_process, sysroot

from harness.linux import calls_threads, signals, timers
from harness.linux.call_table import SystemCallFault
from harness.linux.calls_threads import (
    FUTEX_CMP_REQUEUE,
    FUTEX_PRIVATE_FLAG,
    FUTEX_REQUEUE,
    FUTEX_WAIT,
    FUTEX_WAIT_BITSET,
    FUTEX_WAKE,
    FUTEX_WAKE_BITSET,
    FUTEX_WAKE_OP,
    THREAD_FLAGS,
)
from harness.linux.kernel import FIXED_TIME
from harness.linux.process import LinuxRun, LinuxSystem
from harness.linux.threads import QUANTUM
from harness.linux_verify import modules
from harness.linux_verify import verify as linux_verify
from harness.linux_verify.modules import process_program
from harness.report.data import report_data, thread_table
from harness.report.markdown import markdown
from harness.report.summary import summarize
from harness.unwind.registry import build_unwinders
from harness.verify.stops import Verify, verify_program

PTHREAD_FLAGS = THREAD_FLAGS & ~0x400000 & ~0x1000000  # glibc's: without CLONE_DETACHED and CLONE_CHILD_SETTID
MAIN = 4242
WORD, WORD2, TID_WORD, STACK = SCRATCH + 0x100, SCRATCH + 0x104, SCRATCH + 0x108, SCRATCH + 0x3000
NSEC = 1_000_000_000


def _spawn(kernel, tls: int = 0x5000) -> int:
    """A thread as pthread_create makes one: the tid the creator gets."""
    registers = list(range(100, 116))
    registers[13] = SCRATCH + 0x2000  # the creator's own stack
    kernel.machine.registers = replace(kernel.machine.registers, r=tuple(registers))
    return call(kernel, "clone", PTHREAD_FLAGS, STACK, TID_WORD, tls, TID_WORD)


def _running(kernel) -> int:
    return kernel.threads.current.tid


def _set(kernel, address: int, value: int) -> None:
    kernel.machine.write(address, struct.pack("<I", value))


# ------------------------------------------------------------- clone, exit, join


def test_clone_makes_a_thread_that_starts_after_the_call_with_its_own_stack_and_tls(kernel):
    assert _spawn(kernel) == MAIN + 1
    assert _running(kernel) == MAIN  # the creator goes on
    assert struct.unpack("<I", kernel.machine.read(TID_WORD, 4))[0] == MAIN + 1  # CLONE_PARENT_SETTID
    thread = kernel.threads.find(MAIN + 1)
    assert thread.context.r[0] == 0 and thread.context.r[13] == STACK and thread.context.r[15] == 115
    assert thread.context.r[1:13] == tuple(range(101, 113))  # the rest as the creator had them
    assert kernel.machine.registers.r[13] == SCRATCH + 0x2000
    assert thread.tls == 0x5000 and thread.clear_child_tid == TID_WORD


def test_clone_refuses_what_is_not_a_thread_or_a_process(kernel):
    assert call(kernel, "clone", PTHREAD_FLAGS & ~0x800, STACK, 0, 0, 0) == -errno.EINVAL  # no CLONE_SIGHAND
    assert call(kernel, "clone", PTHREAD_FLAGS | 0x8000, STACK, 0, 0, 0) == -errno.EINVAL  # CLONE_PTRACE
    with pytest.raises(SystemCallFault, match="not an 8-byte aligned stack"):
        call(kernel, "clone", PTHREAD_FLAGS, STACK + 4, 0, 0, 0)


def test_a_join_waits_until_the_thread_exits_and_clears_its_tid(kernel):
    tid = _spawn(kernel)
    # pthread_join: wait while the tid word holds the tid; the processor goes to the thread
    call(kernel, "futex", TID_WORD, FUTEX_WAIT, tid)
    assert _running(kernel) == tid and kernel.machine.registers.r[13] == STACK
    assert call(kernel, "gettid") == tid and call(kernel, "getpid") == MAIN
    call(kernel, "exit", 3)
    assert kernel.exit_status is None  # a thread's exit is not the process's
    assert _running(kernel) == MAIN and kernel.machine.registers.r[0] == 0  # woken: the wait returned 0
    assert kernel.machine.read(TID_WORD, 4) == bytes(4)  # CLONE_CHILD_CLEARTID
    assert kernel.threads.find(tid) is None and len(kernel.threads.live()) == 1
    call(kernel, "exit", 5)  # the last thread's exit ends the process
    assert kernel.exit_status == 5


def test_a_process_holds_at_most_max_threads(kernel, monkeypatch):
    monkeypatch.setattr(calls_threads, "MAX_THREADS", 3)
    assert _spawn(kernel) > 0 and _spawn(kernel) > 0
    assert _spawn(kernel) == -errno.EAGAIN  # as past RLIMIT_NPROC
    assert len(kernel.threads.live()) == 3


def test_exit_group_ends_every_thread(kernel):
    _spawn(kernel)
    call(kernel, "exit_group", 9)
    assert kernel.exit_status == 9


def test_the_tls_register_follows_the_thread(kernel):
    call(kernel, "set_tls", 0x1111)
    tid = _spawn(kernel, tls=0x2222)
    call(kernel, "sched_yield")
    assert _running(kernel) == tid and kernel.machine.tls == 0x2222
    call(kernel, "sched_yield")
    assert _running(kernel) == MAIN and kernel.machine.tls == 0x1111


# ------------------------------------------------------------- the scheduler


def test_a_thread_keeps_the_processor_until_its_quantum_passes_then_the_next_one_runs(kernel):
    first, second = _spawn(kernel), _spawn(kernel)
    kernel.machine.executed += QUANTUM - 1
    call(kernel, "getpid")
    assert _running(kernel) == MAIN
    kernel.machine.executed += 1
    call(kernel, "getpid")
    assert _running(kernel) == first  # in creation order after the one that ran
    kernel.machine.executed += QUANTUM
    call(kernel, "getpid")
    assert _running(kernel) == second
    kernel.machine.executed += QUANTUM
    call(kernel, "getpid")
    assert _running(kernel) == MAIN


def test_the_registers_of_a_thread_are_kept_while_another_runs(kernel):
    tid = _spawn(kernel)
    main_context = replace(kernel.machine.registers, r=(0,) + tuple(range(1, 16)), d=tuple(range(32)), fpscr=7)
    kernel.machine.registers = main_context
    call(kernel, "sched_yield")
    assert _running(kernel) == tid
    kernel.machine.registers = replace(kernel.machine.registers, d=(9,) * 32)
    call(kernel, "sched_yield")
    assert kernel.machine.registers == main_context  # r0 = sched_yield's 0, core and VFP as they were


def test_a_sleep_lets_the_others_run_and_the_clock_jumps_when_none_is_ready(kernel):
    tid = _spawn(kernel)
    kernel.machine.write(SCRATCH + 0x200, struct.pack("<iI", 2, 0))
    call(kernel, "nanosleep", SCRATCH + 0x200, 0)
    assert _running(kernel) == tid
    kernel.machine.write(SCRATCH + 0x200, struct.pack("<iI", 5, 0))
    call(kernel, "nanosleep", SCRATCH + 0x200, 0)  # both sleep: the first deadline comes first
    assert _running(kernel) == MAIN and kernel.now_ns() == (FIXED_TIME + 2) * NSEC
    assert kernel.machine.registers.r[0] == 0


def test_every_thread_waiting_with_no_deadline_is_a_deadlock_naming_each(kernel):
    tid = _spawn(kernel)
    call(kernel, "futex", WORD, FUTEX_WAIT, 0)
    assert _running(kernel) == tid
    with pytest.raises(SystemCallFault, match=f"a deadlock \\(thread {MAIN} on the futex at {WORD:#x}, "
                                              f"thread {tid} on the futex at {WORD2:#x}\\)"):
        call(kernel, "futex", WORD2, FUTEX_WAIT | FUTEX_PRIVATE_FLAG, 0)


def test_the_same_calls_give_the_same_schedule(roots):
    def schedule() -> list[int]:
        kernel = made_kernel(roots)
        seen = []
        for _ in range(3):
            _spawn(kernel)
        for step in range(40):
            kernel.machine.executed += QUANTUM // 3 * (step % 4)
            call(kernel, "sched_yield" if step % 5 == 0 else "getpid")
            seen.append(_running(kernel))
        return seen

    first = schedule()
    assert first == schedule() and len(set(first)) == 4


# ------------------------------------------------------------- futexes


def test_a_wait_returns_at_once_where_the_word_changed_and_a_wake_counts_the_woken(kernel):
    _set(kernel, WORD, 1)
    assert call(kernel, "futex", WORD, FUTEX_WAIT, 0) == -errno.EAGAIN
    assert call(kernel, "futex", WORD, FUTEX_WAKE, 5) == 0  # nobody waits
    assert call(kernel, "futex", WORD + 1, FUTEX_WAKE, 1) == -errno.EINVAL  # misaligned
    assert call(kernel, "futex", WORD, FUTEX_WAIT_BITSET, 1, 0, 0, 0) == -errno.EINVAL  # an empty bitset


def _waiters(kernel, count: int, address: int = WORD, bitsets=None) -> list[int]:
    """`count` threads made, each then waiting on `address` (in creation
    order); the main thread runs again."""
    tids = [_spawn(kernel) for _ in range(count)]
    for index, tid in enumerate(tids):
        call(kernel, "sched_yield")
        while _running(kernel) != tid:
            call(kernel, "sched_yield")
        bitset = bitsets[index] if bitsets else 0xFFFFFFFF
        call(kernel, "futex", address, FUTEX_WAIT_BITSET, 0, 0, 0, bitset)
        while _running(kernel) != MAIN:
            call(kernel, "sched_yield")
    return tids


def test_a_wake_wakes_the_first_waiters_first(kernel):
    tids = _waiters(kernel, 3)
    assert call(kernel, "futex", WORD, FUTEX_WAKE, 2) == 2
    assert [thread.tid for thread in kernel.threads.waiting] == tids[2:]


def test_a_bitset_wake_wakes_only_waiters_sharing_a_bit(kernel):
    tids = _waiters(kernel, 3, bitsets=[0b01, 0b10, 0b11])
    assert call(kernel, "futex", WORD, FUTEX_WAKE_BITSET, 10, 0, 0, 0b10) == 2
    assert [thread.tid for thread in kernel.threads.waiting] == tids[:1]


def test_requeue_wakes_some_and_moves_the_rest(kernel):
    tids = _waiters(kernel, 3)
    assert call(kernel, "futex", WORD, FUTEX_REQUEUE, 1, 1, WORD2) == 2  # one woken, one moved
    assert [(t.tid, t.wait.futex) for t in kernel.threads.waiting] == [(tids[1], WORD2), (tids[2], WORD)]
    _set(kernel, WORD, 7)
    assert call(kernel, "futex", WORD, FUTEX_CMP_REQUEUE, 0, 5, WORD2, 6) == -errno.EAGAIN  # *WORD is not 6
    assert call(kernel, "futex", WORD, FUTEX_CMP_REQUEUE, 0, 5, WORD2, 7) == 1
    assert call(kernel, "futex", WORD2, FUTEX_WAKE, 10) == 2


def test_wake_op_changes_the_second_word_and_wakes_by_its_old_value(kernel):
    _waiters(kernel, 1, WORD)
    _waiters(kernel, 1, WORD2)
    _set(kernel, WORD2, 5)
    # FUTEX_OP_ADD 3, then wake on WORD2 where the old value > 4 (FUTEX_OP_CMP_GT)
    encoded = 1 << 28 | 4 << 24 | 3 << 12 | 4
    assert call(kernel, "futex", WORD, FUTEX_WAKE_OP, 1, 1, WORD2, encoded) == 2
    assert struct.unpack("<I", kernel.machine.read(WORD2, 4))[0] == 8


def test_a_timed_wait_times_out_on_the_emulated_clock(kernel):
    kernel.machine.write(SCRATCH + 0x200, struct.pack("<iI", 0, 5000))  # relative: 5 us
    start = kernel.now_ns()
    assert call(kernel, "futex", WORD, FUTEX_WAIT, 0, SCRATCH + 0x200) == -errno.ETIMEDOUT
    assert kernel.now_ns() == start + 5000
    deadline = kernel.now_ns() + 7000  # FUTEX_WAIT_BITSET: an absolute time
    kernel.machine.write(SCRATCH + 0x200, struct.pack("<qI4x", deadline // NSEC, deadline % NSEC))
    assert call(kernel, "futex_time64", WORD, FUTEX_WAIT_BITSET, 0, SCRATCH + 0x200, 0, 0xFFFFFFFF) \
        == -errno.ETIMEDOUT
    assert kernel.now_ns() == deadline
    assert call(kernel, "futex_time64", WORD, FUTEX_WAIT_BITSET, 0, SCRATCH + 0x200, 0, 1) == -errno.ETIMEDOUT


def test_futex_fd_is_gone_as_from_linux(kernel):
    assert call(kernel, "futex", WORD, 2, 0) == -errno.ENOSYS  # FUTEX_FD (PI futexes: test_linux_pi_futex.py)


# ------------------------------------------------------------- signals to threads


def test_a_signal_to_a_waiting_thread_ends_its_wait_and_its_handler_runs_there(kernel):
    tid = _spawn(kernel)
    kernel.signals.actions[10] = signals.Action(0x9001, signals.SA_SIGINFO, 0, 0)
    call(kernel, "futex", WORD, FUTEX_WAIT, 0)  # main waits; the thread runs
    assert _running(kernel) == tid
    assert call(kernel, "tgkill", MAIN, MAIN, 10) == 0
    assert call(kernel, "tgkill", MAIN, 9999, 10) == -errno.ESRCH
    assert call(kernel, "tgkill", 1, MAIN, 10) == -errno.ESRCH
    call(kernel, "sched_yield")
    # The wait ended with the kernel's restart code; the delivery makes it EINTR (no SA_RESTART)
    assert _running(kernel) == MAIN and kernel.machine.registers.r[0] == -signals.ERESTARTSYS & 0xFFFFFFFF
    interrupted = signals.deliver_pending(kernel)
    assert interrupted is not None and kernel.machine.registers.r[15] == 0x9000  # the handler, in MAIN
    assert interrupted.r[0] == -errno.EINTR & 0xFFFFFFFF
    assert kernel.threads.find(tid).signals.pending == []


def test_a_signal_to_the_process_goes_to_a_thread_that_does_not_block_it(kernel):
    tid = _spawn(kernel)
    kernel.signals.blocked = 1 << 9  # MAIN blocks SIGUSR1
    assert call(kernel, "kill", MAIN, 10) == 0
    assert kernel.threads.find(tid).signals.pending == [signals.Pending(10, signals.SI_USER)]
    assert kernel.threads.find(MAIN).signals.pending == []


# ------------------------------------------------------------- a threaded program


@pytest.mark.parametrize("link", ["-static", "-Wl,-z,now"])
def test_a_threaded_program_runs_as_under_qemu_and_repeats(link):
    program = build("threads.c", link)
    root = None if link == "-static" else sysroot()
    expected = (0, b"sum 5676, jobs 24, returned 9, main's own count 0, timed wait timed out\n")
    assert qemu(program, root=root) == expected
    runs = []
    for _ in range(2):
        result, system = run_process(program, root=root, unwinders=["dwarf", "v2-code", "framepointer"])
        assert result.fault is None
        assert (system.outcome().exit_status, system.outcome().stdout) == expected
        runs.append((result.instructions, result.counts, result.tally.counter(), result.failure_log.first(50)))
    assert runs[0] == runs[1]  # byte for byte: the same schedule, the same failures


def test_each_thread_has_its_own_shadow_stack_and_both_hooks_keep_them_alike():
    program = build("threads.c", "-static")
    chains = _chains(program, compiled=True)
    assert chains == _chains(program, compiled=False)
    _live(chains)
    # A worker's frames end at start_thread, called from clone's child path:
    # nothing of the thread that created it (main) is its caller.
    in_workers = Counter(tuple(callers[-3:]) for name, callers, _, _ in chains if name == "fib")
    assert set(in_workers) <= {("worker", "start_thread", None), ("fib", "worker", "start_thread")} \
        | {("fib", "fib", "worker")}
    assert not any("main" in callers for name, callers, _, _ in chains if name in ("worker", "fib"))
    assert sum(1 for name, callers, _, _ in chains if name == "fib" and callers[-2:] == ["start_thread", None])


def test_a_sampled_run_follows_the_same_threads():
    program = build("threads.c", "-static")
    outcomes = set()
    for every in (1, 97):
        system = LinuxSystem(LinuxRun(program))
        result = verify_program(process_program(system), [], how=Verify(every=every), system=system)
        assert result.fault is None
        outcomes.add((system.outcome().stdout, result.instructions))
    assert len(outcomes) == 1


# ------------------------------------------------------------- timers and time slices


def _itimer(kernel, which: int, interval_us: int, value_us: int) -> int:
    kernel.machine.write(SCRATCH + 0x400, struct.pack("<iiii", 0, interval_us, 0, value_us))
    return call(kernel, "setitimer", which, SCRATCH + 0x400, 0)


def test_an_interval_timer_expires_on_its_clock_and_repeats(kernel):
    assert _itimer(kernel, timers.ITIMER_PROF, 500, 1000) == 0
    start = kernel.machine.executed
    assert kernel.deadline() == start + 1_000_000  # a nanosecond of CPU time an instruction
    kernel.machine.executed += 999_999
    assert not kernel.expire_timers()
    kernel.machine.executed += 1
    assert kernel.expire_timers() and kernel.signals.pending == [signals.Pending(timers.SIGPROF, 0x80)]  # SI_KERNEL
    assert kernel.deadline() == kernel.machine.executed + 500_000  # armed again for its interval
    assert call(kernel, "getitimer", timers.ITIMER_PROF, SCRATCH + 0x500) == 0
    assert struct.unpack("<iiii", kernel.machine.read(SCRATCH + 0x500, 16)) == (0, 500, 0, 500)
    assert _itimer(kernel, timers.ITIMER_PROF, 0, 0) == 0 and kernel.deadline() is None  # disarmed


def test_a_real_timer_counts_sleep_and_ends_a_sleep(kernel):
    assert _itimer(kernel, timers.ITIMER_REAL, 0, 3000) == 0  # 3 ms
    kernel.machine.write(SCRATCH + 0x200, struct.pack("<iI", 5, 0))
    start = kernel.now_ns()
    call(kernel, "nanosleep", SCRATCH + 0x200, 0)  # 5 s: the alarm comes first
    assert kernel.now_ns() == start + 3_000_000  # ended, to fail with EINTR or go on as the delivery says
    assert kernel.machine.registers.r[0] == -signals.ERESTART_RESTARTBLOCK & 0xFFFFFFFF
    assert kernel.signals.pending == [signals.Pending(timers.SIGALRM, 0x80)] and kernel.deadline() is None


def test_timers_refuse_what_linux_refuses(kernel):
    assert call(kernel, "setitimer", 3, 0, 0) == -errno.EINVAL
    assert _itimer(kernel, timers.ITIMER_REAL, 1_000_000, 1) == -errno.EINVAL  # tv_usec past a second
    assert call(kernel, "getitimer", timers.ITIMER_REAL, 0x10) == -errno.EFAULT


def test_a_time_slice_ends_at_an_exact_instruction_where_another_thread_is_ready(kernel):
    assert kernel.deadline() is None  # one thread: no slice to end
    tid = _spawn(kernel)
    assert kernel.deadline() == kernel.threads.scheduled_at + QUANTUM
    kernel.machine.executed = kernel.threads.scheduled_at + QUANTUM - 1
    assert kernel.preempt() is None
    kernel.machine.executed += 1
    switch = kernel.preempt()
    assert (switch.left, switch.tid) == (MAIN, tid) and _running(kernel) == tid
    call(kernel, "futex", WORD, FUTEX_WAIT, 0)  # the thread waits: main alone is ready, no slice to end
    assert _running(kernel) == MAIN and kernel.deadline() is None


def _timed_run(program: str, args: tuple[str, ...], every: int, compiled: bool) -> int:
    system = LinuxSystem(LinuxRun(program, args))
    result = verify_program(process_program(system), [], how=Verify(every=every, compiled=compiled), system=system)
    assert result.fault is None
    assert (system.outcome().exit_status, system.outcome().stdout) == qemu(program, args)
    assert system.outcome().stdout.startswith(b"prof hits 3, alarm 1, left 1, turns taken")
    return result.instructions


def test_timers_and_time_slices_interrupt_code_that_makes_no_system_call():
    """SIGPROF lands in a busy loop, SIGALRM ends a spin, and two threads
    take turns through a flag only the other's time slice ending lets
    change: at the same instructions whether the hook stops before every
    instruction or at block entries (splitting a block at a deadline)."""
    program = build("timers.c", "-static")
    assert _timed_run(program, (), 1, True) == _timed_run(program, (), 97, True) > 3 * QUANTUM


def test_the_python_hook_places_timers_as_the_compiled_one():
    program = build("timers.c", "-static")
    assert _timed_run(program, ("timers",), 1, False) == _timed_run(program, ("timers",), 1, True)


def test_a_verified_run_that_runs_other_instructions_than_its_first_is_a_fault(monkeypatch):
    """The ground truth of a verified run (the frames that resume, the
    schedule) is its first run's: a run that diverged from it is named, never verified."""
    program = build("threads.c", "-static")
    real = modules.discover
    monkeypatch.setattr(linux_verify, "discover", lambda run, limits: replace(real(run, limits), instructions=7))
    result = linux_verify.verify_process(LinuxRun(program), ["dwarf"], lambda built: build_unwinders(built, ["dwarf"]))
    assert "the first 7: the emulation is not deterministic" in result.fault and not result.self_check_ok


def test_past_a_threads_first_frame_both_hooks_count_the_callers_a_walk_makes_up():
    """A thread's first frame has no caller. glibc's _start clears fp and lr,
    so a frame-pointer walk of the main thread ends there; clone's child
    path starts with the creator's lr, which a frame-pointer walk of a
    stop there takes for a caller: a frame made up. Both hooks count alike,
    the compiled one taking outer walks from the stop before (every stop)."""
    program = build("threads.c", "-static")
    names = ["framepointer", "exidx"]
    results = [linux_verify.verify_process(LinuxRun(program), names, lambda built: build_unwinders(built, names),
                                           how=Verify(compiled=compiled)) for compiled in (True, False)]
    assert all(result.fault is None for result in results)
    assert results[0].counts == results[1].counts and results[0].invented == results[1].invented
    invented = Counter()
    for (unwinder, traits, _), n in results[0].invented.items():
        invented[(unwinder, "spawned_thread" in traits)] += n
    assert invented[("framepointer", False)] == 0 and invented[("framepointer", True)] > 0
    matched = sum(n for (unwinder, traits, _, kind), n in results[0].counts.items()
                  if unwinder == "framepointer" and kind is None and "spawned_thread" in traits)
    assert invented[("framepointer", True)] <= matched


def test_each_stop_is_labelled_with_its_thread_and_the_report_counts_per_thread():
    """The stops of a thread the process made carry its tid (a label the
    report tells apart per program, not a category), alike in both hooks;
    the main thread's carry none."""
    program = build("threads.c", "-static")
    names = ["v2-code", "framepointer"]
    results = [linux_verify.verify_process(LinuxRun(program), names, lambda built: build_unwinders(built, names),
                                           how=Verify(every=7, compiled=compiled)) for compiled in (True, False)]
    assert results[0].counts == results[1].counts
    labels = {trait for (_, traits, _, _) in results[0].counts for trait in traits if trait.startswith("thread ")}
    tids = sorted(int(label.split()[1]) for label in labels)
    assert len(tids) >= 2 and tids == list(range(MAIN + 1, MAIN + 1 + len(tids)))  # as clone gave them
    assert all(("spawned_thread" in traits) == any(t.startswith("thread ") for t in traits)
               for (_, traits, _, _) in results[0].counts)
    summary = summarize(results[0])
    table = thread_table([summary], names)
    assert list(table) == ["main", *(f"thread {tid}" for tid in tids)]
    assert sum(row["stops"] for row in table.values()) == summary.stops
    failed = sum(n for (unwinder, _, _, kind), n in summary.counts.items()
                 if unwinder == "framepointer" and kind is not None and not kind.startswith("stopped:"))
    assert sum(row["failed"]["framepointer"] for row in table.values()) == failed
    data = report_data([summary], names, None, program)
    assert "thread 4243" not in {row["category"] for row in data["results"]}  # a label, not a category
    assert "Failed stops per thread" in markdown(data, "t") and data["threads"] == table
