"""Hostile guest programs (issue 52): armhf Linux programs that each attack
the host running the emulator one way (tests/hostile/*.c, built into the
cache by `make hostile`), run under `verify-elf` as a user would run them.
Each ends within the time limit and a small allowance, no process the
harness starts holds more than the memory limit, no host file changes
(outside the working directory or in it: the guest's writes stay in
memory), there is never a traceback or a failure of the system-call layer,
and the run ends with the outcome of its class: a fault naming what stopped
it, or the errno Linux gives (the programs print it).

Each program is first checked under qemu-user, which runs it on the host's
real kernel: the programs do what they claim, and where the harness claims
Linux's answer to a call, qemu-user's is the reference.

The runs go through tests/hostile/measure.py, which measures them and keeps
a backstop far above the limits asserted here, so that a harness that does
not bound its guest fails these tests instead of exhausting the machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import resource
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = ROOT / "tests" / "hostile"
CACHE = Path(os.environ.get("UNWIND_HARNESS_CACHE", Path.home() / ".cache" / "unwind-harness"))
PROGRAMS = CACHE / "hostile"
PYTHON = sys.executable

SECONDS = 5  # --max-seconds
# --max-memory-mb: above what the in-memory files' cap (256 MiB) and the
# harness hold together (writev_huge peaks at 345 MiB), so that the class
# meets the cap (ENOSPC) rather than the guard; touch_memory still meets it.
MEMORY_MIB = 600
# Wall time allowed past SECONDS (the `allowance` fixture): three times
# what verify-elf costs for a program that exits at once, measured when the
# module starts, and at least MIN_ALLOWANCE. That cost is the harness's own,
# whatever the guest does: Python's imports, loading the ELF and reading
# its tables (built beforehand: `programs`), forking the workers, the report (0.55 s on an idle 2-core
# machine, 0.27 s of it the imports; six times that with four other test
# suites running). Once for the start, as much again for a guard that fires
# late (the clock is read between instructions, and one system call runs
# between two readings), and again for the report that follows a fault.
MIN_ALLOWANCE = 2.0
# measure.py's backstop: the run's whole session is killed past these.
BACKSTOP_MIB = 1024
BACKSTOP_SECONDS = 20
ADDRESS_SPACE = 4 << 30  # each process's RLIMIT_AS: a healthy run maps about 700 MiB (1.6 GiB for touch_memory)
LIMITS = ["--max-seconds", str(SECONDS), "--max-memory-mb", str(MEMORY_MIB)]
INPUT = b"hostile guests read this file, sixteen bytes and more\n"
QEMU_CPU = "cortex-a15"  # an ARMv7 core: qemu's default CPU, `max`, lets user mode read MIDR; ARMv7 cores do not
QEMU_ENVIRONMENT = {"PATH": "/usr/bin:/bin", "HOME": "/", "LANG": "C"}
BROKEN_LAYER = "system call layer failed"


@pytest.fixture(scope="module", autouse=True)
def programs(tmp_path_factory) -> None:
    """The programs, built (or found up to date) by tests/hostile/build.sh,
    each verified once already. The first verify-elf of a program builds its
    tables and keeps them (harness.table_cache): 3.5 s for these static
    programs where the cache is cold, 0.44 s once it is warm, whatever the
    guest does. Built here, that cost stays out of the timed runs, whose
    wall time is then the harness's start and the guest's run."""
    done = subprocess.run(["bash", str(HOSTILE / "build.sh")], capture_output=True, text=True)
    assert done.returncode == 0, f"tests/hostile/build.sh failed:\n{done.stderr}"
    names = sorted(source.stem for source in HOSTILE.glob("*.c"))
    for name in names:
        assert (PROGRAMS / name).is_file(), f"build.sh did not build {name}"
    cwd = tmp_path_factory.mktemp("tables")

    def verify_briefly(name: str) -> None:
        # How the run ends is the tests' business, not this one's: a harness
        # that does not bound the guest fails them (the backstop ends it here).
        measured([PYTHON, "-m", "harness", "verify-elf", program(name), "--jobs", "1", "--every", "1000",
                  "--max-instructions", "10000", "--max-seconds", "1", "--cwd", str(cwd)], cwd)

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        list(pool.map(verify_briefly, names))


def program(name: str) -> str:
    return str(PROGRAMS / name)


@pytest.fixture(scope="module")
def allowance(programs, tmp_path_factory) -> float:
    """Seconds allowed past the time limit, from the median of three runs of
    a program that prints its usage and exits."""
    cwd = tmp_path_factory.mktemp("calibrate")
    startups = []
    for _ in range(3):
        run = measured([PYTHON, "-m", "harness", "verify-elf", program("privileged"), "--jobs", "2", "--every", "1000",
                        *LIMITS, "--cwd", str(cwd)], cwd)
        assert run.exit == 0 and run.backstop is None, run.describe()
        startups.append(run.seconds)
    return max(MIN_ALLOWANCE, 3 * sorted(startups)[1])


# ------------------------------------------------------------------ the host


@dataclass(frozen=True)
class Sandbox:
    """Where a run may look: `cwd`, the guest's working directory, holds
    input.txt; a canary lies beside it and another in the directory above.
    The harness itself runs in `cwd`'s parent, so that a stray file written
    relative to its own directory shows up too."""

    root: Path
    cwd: Path

    def snapshot(self) -> dict[str, str]:
        """Every file and directory under root: relative path -> sha256 of
        its contents (or `dir`)."""
        found = {}
        for directory, names, files in os.walk(self.root):
            for name in names:
                found[os.path.relpath(os.path.join(directory, name), self.root)] = "dir"
            for name in files:
                path = os.path.join(directory, name)
                with open(path, "rb") as file:
                    found[os.path.relpath(path, self.root)] = hashlib.sha256(file.read()).hexdigest()
        return found


@pytest.fixture
def sandbox(tmp_path) -> Sandbox:
    root = tmp_path / "sandbox"
    cwd = root / "box" / "cwd"
    cwd.mkdir(parents=True)
    (cwd / "input.txt").write_bytes(INPUT)
    (root / "box" / "beside-canary.txt").write_bytes(b"beside the working directory\n")
    (root / "parent-canary.txt").write_bytes(b"in the directory above\n")
    return Sandbox(root, cwd)


@dataclass(frozen=True)
class Measured:
    """One command's run, as tests/hostile/measure.py saw it."""

    exit: int
    stdout: str
    stderr: str
    seconds: float  # until it and every process it started had ended
    peak_rss: int  # bytes: the largest peak of the command and each of its descendants (getrusage)
    polled_rss: int  # bytes: the largest resident size seen polling /proc
    backstop: str | None  # why measure.py killed it, if it did

    @property
    def last_error_line(self) -> str:
        lines = self.stderr.strip().splitlines()
        return lines[-1] if lines else ""

    def describe(self) -> str:
        return (f"exit {self.exit}, {self.seconds:.1f} s, peak {self.peak_rss >> 20} MiB, backstop {self.backstop}\n"
                f"--- stderr (end)\n{self.stderr[-3000:]}\n--- stdout (end)\n{self.stdout[-1500:]}")


def measured(command: list[str], cwd: Path) -> Measured:
    done = subprocess.run([PYTHON, str(HOSTILE / "measure.py"), str(BACKSTOP_MIB), str(BACKSTOP_SECONDS),
                           str(ADDRESS_SPACE), *command], capture_output=True, text=True, cwd=cwd,
                          timeout=BACKSTOP_SECONDS + 60)
    assert done.returncode == 0, f"measure.py failed:\n{done.stderr}"
    return Measured(**json.loads(done.stdout))


def assert_host_unharmed(run: Measured, sandbox: Sandbox, before: dict[str, str], allowance: float,
                         seconds: int = SECONDS):
    """The run ended by itself in bounded time and memory, said nothing of a
    broken harness, and left every file as it was."""
    assert run.backstop is None, f"the test's backstop ended the run: {run.backstop}\n{run.describe()}"
    assert run.seconds <= seconds + allowance, f"took {run.seconds:.1f} s (allowed {seconds + allowance:.1f})\n" \
                                               f"{run.describe()}"
    assert run.peak_rss <= MEMORY_MIB << 20, \
        f"a process peaked at {run.peak_rss >> 20} MiB\n{run.describe()}"
    output = run.stdout + run.stderr
    assert "Traceback" not in output, run.describe()
    assert BROKEN_LAYER not in output, run.describe()
    assert sandbox.snapshot() == before, "host files changed"


# ------------------------------------------------------------------ runs


def verify_elf(name: str, args: tuple[str, ...], sandbox: Sandbox, expected_stdout: str | None = None,
               seconds: int = SECONDS) -> Measured:
    """`verify-elf` as the issue runs it: --jobs 2 on purpose, since every
    worker makes a first run of its own to find the libraries, and that run
    must be bounded too. With `expected_stdout`, verify-elf checks the
    process's exit status (0) and stdout itself and exits 1 on a mismatch
    (it reports only their digest)."""
    command = [PYTHON, "-m", "harness", "verify-elf", program(name), "--jobs", "2", "--every", "1000", *LIMITS,
               "--max-seconds", str(seconds),
               "--cwd", str(sandbox.cwd)]
    if expected_stdout is not None:
        command += ["--expect-exit", "0",
                    "--expect-stdout-sha256", hashlib.sha256(expected_stdout.encode()).hexdigest()]
    return measured([*command, "--", *args], sandbox.cwd.parent)


# A run of the program in the harness's emulated Linux without verifying
# (what the discovery run does), with the limits verify-elf is given: what
# the process wrote and how it ended, as JSON.
PLAIN_RUN = f"""
import json, sys
from harness.errors import HarnessError
from harness.linux.process import LinuxRun, LinuxSystem
from harness.abi import Limits
from harness.emulation.emulator import Emulator
program, cwd, seconds, *args = sys.argv[1:]
system = LinuxSystem(LinuxRun(program, tuple(args), cwd=cwd))
fault = None
try:
    Emulator(system.segments, system, system.placement).call(0, None, Limits(seconds=int(seconds),
                                                                            memory_bytes={MEMORY_MIB} << 20))
except HarnessError as error:
    fault = str(error)
outcome = system.outcome()
print(json.dumps({{"exit_status": outcome.exit_status, "stdout": outcome.stdout.decode(errors="replace"),
                  "stderr": outcome.stderr.decode(errors="replace"), "fault": fault}}))
"""


@dataclass(frozen=True)
class GuestOutput:
    """What the guest wrote in a plain run, and how that run ended."""

    exit_status: int | None
    stdout: str
    stderr: str
    fault: str | None


def plain_run(name: str, args: tuple[str, ...], sandbox: Sandbox, seconds: int = SECONDS) -> GuestOutput:
    run = measured([PYTHON, "-c", PLAIN_RUN, program(name), str(sandbox.cwd), str(seconds), *args],
                   sandbox.cwd.parent)
    assert run.exit == 0 and run.backstop is None, f"the plain run failed:\n{run.describe()}"
    return GuestOutput(**json.loads(run.stdout))


def qemu(name: str, args: tuple[str, ...], cwd: Path, timeout: float = 60,
         file_size: int | None = None) -> subprocess.CompletedProcess | None:
    """The program under qemu-user (an ARMv7 CPU) in `cwd`, with Linux's
    default descriptor limit (1024 soft, 4096 hard) and, if given, a file
    size limit; None if it was still running after `timeout` seconds."""

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 4096))
        if file_size is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))

    try:
        return subprocess.run(["qemu-arm", "-cpu", QEMU_CPU, program(name), *args], capture_output=True, text=True,
                              cwd=cwd, env=QEMU_ENVIRONMENT, timeout=timeout, preexec_fn=limits)
    except subprocess.TimeoutExpired:
        return None


# ------------------------------------------------------------------ cases


@dataclass(frozen=True)
class Faults:
    """A class the harness ends as a fault: verify-elf exits 1, its last
    stderr line names the guard or the cause."""

    program: str
    args: tuple[str, ...]
    cause: str  # words the last stderr line contains


@dataclass(frozen=True)
class Answers:
    """A class that ends with an errno the program prints: verify-elf exits
    0 with that stdout."""

    program: str
    args: tuple[str, ...]
    stdout: str | None  # the exact stdout (None: the class's own test checks it)
    seconds: int = SECONDS  # its --max-seconds


FAULTS = {
    "pipe_fill": Faults("pipe_fill", (), "full pipe"),
    "touch_memory": Faults("touch_memory", (), "memory limit"),
    "getrandom_loop": Faults("getrandom_loop", (), "seconds"),
    "syscall_loop": Faults("syscall_loop", (), "seconds"),
    "read_loop": Faults("read_loop", ("input.txt",), "seconds"),
    "spin_loop": Faults("spin_loop", (), "more than 5 seconds"),  # the clock: the default budget is billions
    "deep_recursion": Faults("deep_recursion", (), "nested calls"),
    "branch_to_itself": Faults("branch_to_itself", (), "branches to itself"),
    # Undefined at PL0: the kernel's SIGILL, whose default kills the process, as under qemu (-4).
    **{f"privileged_{which}": Faults("privileged", (which,), "killed by signal 4 (SIGILL)")
       for which in ("midr", "vbar", "sctlr")},
}
ANSWERS = {
    "pipe_fill_nonblock": Answers("pipe_fill", ("nonblock",), "buffered=65536 errno=EAGAIN\n"),
    # 256 MiB in all in the in-memory files, 16 MiB a call at most.
    "writev_huge": Answers("writev_huge", (), "errno=ENOSPC total=268435456\n"),
    "seek_far": Answers("seek_far", (), "size=3221225473\nseek_2^62 errno=EINVAL\n"
                                        "write_at_2^44-4096 errno=EFBIG\n"),
    "many_opens": Answers("many_opens", ("input.txt",), "opened=1021 errno=EMFILE\n"),  # fds 3..1023
    # a thousand mappings take some 4 s to emulate on an idle machine (the engine's mapping calls slow down
    # with their number): more than SECONDS on a loaded one
    "many_maps": Answers("many_maps", (), None, seconds=15),
    "bad_names": Answers("bad_names", (), None),
    "hostile_args": Answers("hostile_args", ("input.txt",), None),
    # Not privileged in User mode, whatever the contract said: below.
    **{f"privileged_{which}": Answers("privileged", (which,), f"executed {which} mode=0x10\n")
       for which in ("cps", "msr")},
}


@pytest.mark.parametrize("name", FAULTS)
def test_a_hostile_guest_ends_as_a_fault(name, sandbox, allowance):
    """A guest no answer can stop (an endless loop, a wait no thread can
    end, memory it keeps touching) is stopped by a guard, and the fault
    names it; one that runs an instruction user mode may not run is killed
    by the kernel's signal: not verified either."""
    case = FAULTS[name]
    before = sandbox.snapshot()
    run = verify_elf(case.program, case.args, sandbox)
    assert_host_unharmed(run, sandbox, before, allowance)
    assert run.exit == 1, run.describe()
    assert case.cause in run.last_error_line, run.describe()
    assert "fault" in run.last_error_line or "killed by signal" in run.last_error_line, run.describe()


def answered(name: str, sandbox: Sandbox, allowance: float) -> str:
    """The stdout of `name`'s class, after asserting that verify-elf's run
    ends well, bounded, with the stdout the plain run gives."""
    case = ANSWERS[name]
    before = sandbox.snapshot()
    plain = plain_run(case.program, case.args, sandbox, case.seconds)
    run = verify_elf(case.program, case.args, sandbox, expected_stdout=plain.stdout, seconds=case.seconds)
    assert_host_unharmed(run, sandbox, before, allowance, case.seconds)
    assert (plain.fault, plain.exit_status) == (None, 0), plain
    assert BROKEN_LAYER not in plain.stderr
    assert run.exit == 0, f"verify-elf's run differs from the plain one ({plain.stdout!r})\n{run.describe()}"
    return plain.stdout


@pytest.mark.parametrize("name", [name for name, case in ANSWERS.items() if case.stdout is not None])
def test_a_hostile_guest_is_answered(name, sandbox, allowance):
    """A guest asking for more than the host will give gets the errno Linux
    gives at its limit (or, for cps and msr, runs on as on Linux)."""
    assert answered(name, sandbox, allowance) == ANSWERS[name].stdout


def test_mappings_are_refused_past_the_cap(sandbox, allowance):
    """ENOMEM long before Linux's 65,530 areas: the emulator's mapping calls
    slow down faster than linearly with their number, so it holds at most
    4096 (the process's own few among them), and still at least 1000, far
    more than any program of the corpus makes."""
    stdout = answered("many_maps", sandbox, allowance)
    found = re.fullmatch(r"maps=(\d+) errno=ENOMEM\n", stdout)
    assert found and 1000 <= int(found[1]) <= 1024, stdout  # harness.linux.memory.MAX_MAPPINGS, less what the loader mapped


def _lines(stdout: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in stdout.splitlines())


def test_bad_names_get_the_errno_linux_gives(sandbox, tmp_path, allowance):
    """Every path call on every bad name answers as Linux does (qemu-user on
    the host's kernel): ENOENT for a name not in UTF-8 that does not exist
    (and such a name can be made, found and removed), ENAMETOOLONG past
    PATH_MAX and NAME_MAX, EFAULT for an unmapped pointer and NULL."""
    qemu_cwd = tmp_path / "qemu"
    qemu_cwd.mkdir()
    reference = qemu("bad_names", (), qemu_cwd)
    assert reference.returncode == 0, reference.stderr
    expected = _lines(reference.stdout)
    assert {key.split(":")[1]: value for key, value in expected.items() if key.startswith("open:")} == {
        "not_utf8": "ENOENT", "not_utf8_dir": "ENOENT", "path_5000": "ENAMETOOLONG",
        "component_300": "ENAMETOOLONG", "unmapped": "EFAULT", "null": "EFAULT"}
    assert expected["create:not_utf8"] == expected["unlink_created:not_utf8"] == "ok"
    assert _lines(answered("bad_names", sandbox, allowance)) == expected


# The calls where the harness answers as Linux does, and Linux's answer
# (qemu-user on the host kernel agrees: test_hostile_args_as_under_qemu):
# EBADF for descriptors that are not open (negative, or past the limit of
# 1024), EFAULT for buffers, vectors and result pointers that are unmapped or
# in kernel space, EINVAL for a bad whence.
LINUX_ANSWERS = {
    **dict.fromkeys(("read_fd_minus1", "read_fd_minus100", "read_fd_max", "write_fd_minus1", "write_fd_max",
                     "pread_fd_minus1", "writev_fd_minus1", "readv_fd_minus1", "lseek_fd_minus1",
                     "llseek_fd_minus1", "getdents64_fd_minus1", "fcntl64_fd_minus1", "dup2_fd_minus1",
                     "dup2_target_minus1", "dup2_target_100000", "dup2_target_max", "close_fd_minus1",
                     "close_fd_minus100", "close_fd_max", "close_fd_100000"), "EBADF"),
    **dict.fromkeys(("read_buf_unmapped", "read_buf_kernel", "write_buf_unmapped", "write_buf_kernel",
                     "pread_buf_unmapped", "writev_vector_unmapped", "writev_base_unmapped", "writev_base_kernel",
                     "readv_vector_unmapped", "readv_base_kernel", "llseek_result_unmapped",
                     "getrandom_buf_unmapped", "getdents64_buf_unmapped"), "EFAULT"),
    **dict.fromkeys(("lseek_whence_bad", "llseek_whence_bad"), "EINVAL"),
}


def test_hostile_args_get_the_errno_linux_gives(sandbox, tmp_path, allowance):
    """Every call answers (the program reaches its last line and exits 0),
    and where the harness claims Linux's answer it gives it, as qemu-user
    on the host's kernel does."""
    qemu_cwd = tmp_path / "qemu"
    qemu_cwd.mkdir()
    (qemu_cwd / "input.txt").write_bytes(INPUT)
    reference = qemu("hostile_args", ("input.txt",), qemu_cwd)
    assert reference.returncode == 0, reference.stderr
    linux = _lines(reference.stdout)
    assert {call: linux.get(call) for call in LINUX_ANSWERS} == LINUX_ANSWERS
    got = _lines(answered("hostile_args", sandbox, allowance))
    assert list(got) == list(linux), "a call missing or out of order"
    assert {call: got[call] for call in LINUX_ANSWERS} == LINUX_ANSWERS


# ------------------------------------------------------------------ privileged


@pytest.mark.parametrize("which", ["midr", "vbar", "sctlr"])
def test_privileged_coprocessor_access_is_sigill_under_qemu(which, tmp_path):
    """User mode may not touch cp15's system registers: SIGILL (-4)."""
    reference = qemu("privileged", (which,), tmp_path)
    assert (reference.returncode, reference.stdout) == (-4, "")


@pytest.mark.parametrize("which", ["cps", "msr"])
def test_cps_and_msr_are_no_ops_in_user_mode_under_qemu(which, tmp_path):
    """Not privileged: in User mode CPS is a NOP and MSR writes only the
    APSR's flags (the ARM ARM's CPS, and CPSRWriteByInstr, which leaves the
    mode and mask bits alone below PL1), so the program goes on in User mode
    (0x10) and the kernel has nothing to trap. The harness must do the same
    (test_a_hostile_guest_is_answered[privileged_cps/msr]), not fault."""
    reference = qemu("privileged", (which,), tmp_path)
    assert (reference.returncode, reference.stdout) == (0, f"executed {which} mode=0x10\n")


# ------------------------------------------------------------------ the programs under qemu


def test_programs_behave_under_qemu_as_they_claim(tmp_path):
    """What each program claims on the host's real kernel: qemu-user bounds
    nothing, so the classes that would hang are given a second, the one that
    would fill the disk a file size limit, and touch_memory 64 MiB."""
    (tmp_path / "input.txt").write_bytes(INPUT)
    for name, args in (("pipe_fill", ()), ("getrandom_loop", ()), ("syscall_loop", ()),
                       ("read_loop", ("input.txt",))):
        assert qemu(name, args, tmp_path, timeout=1) is None, f"{name} ended by itself"
    assert qemu("pipe_fill", ("nonblock",), tmp_path).stdout == "buffered=65536 errno=EAGAIN\n"
    assert qemu("many_maps", (), tmp_path).stdout == "maps=20000\n"  # Linux merges them into one area
    assert qemu("touch_memory", ("64",), tmp_path).stdout == "touched=64 MiB\n"
    opened = re.fullmatch(r"opened=(\d+) errno=EMFILE\n", qemu("many_opens", ("input.txt",), tmp_path).stdout)
    assert opened and 1015 <= int(opened[1]) <= 1021  # qemu-user holds a few descriptors of its own
    # A 4 MiB buffer written 2 MiB per iovec into a file limited to 8 MiB:
    # the loop adds up what it wrote until the kernel refuses.
    small = qemu("writev_huge", ("4", "2"), tmp_path, file_size=8 << 20)
    assert small.stdout == "errno=EFBIG total=8388608\n"
    # The real thing: iovecs of 1 GiB at a 512 MiB mapping run into the hole
    # after it, which Linux refuses before moving anything.
    assert qemu("writev_huge", (), tmp_path, file_size=8 << 20).stdout == "errno=EFAULT total=0\n"
    assert qemu("seek_far", (), tmp_path).stdout.startswith("size=3221225473\n")


# ------------------------------------------------------------------ the discovery run


DISCOVER = f"""
import json, sys, time
from harness.linux_verify.modules import discover
from harness.linux.process import LinuxRun
from harness.abi import Limits
from harness.emulation.guards import EmulationFault
program, cwd, *args = sys.argv[1:]
started = time.monotonic()
try:
    discover(LinuxRun(program, tuple(args), cwd=cwd), Limits(seconds={SECONDS}, memory_bytes={MEMORY_MIB} << 20))
    raised = None
except EmulationFault as fault:
    raised = str(fault)
print(json.dumps({{"raised": raised, "seconds": time.monotonic() - started}}))
"""


@pytest.mark.parametrize("name", ["getrandom_loop", "syscall_loop", "read_loop", "touch_memory"])
def test_the_discovery_run_is_bounded(name, sandbox, allowance):
    """The first run every worker makes to find the libraries stops at the
    same guards, and says so (in a child process: a discovery run without
    them would take the test process, and the machine, with it)."""
    case = FAULTS[name]
    before = sandbox.snapshot()
    run = measured([PYTHON, "-c", DISCOVER, program(case.program), str(sandbox.cwd), *case.args], sandbox.root)
    assert_host_unharmed(run, sandbox, before, allowance)
    assert run.exit == 0, run.describe()
    found = json.loads(run.stdout)
    assert found["raised"] is not None and case.cause in found["raised"], found
    assert found["seconds"] <= SECONDS + allowance, found
