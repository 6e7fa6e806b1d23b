"""ARM Linux programs run as processes: the loader, the system calls, the
kuser helpers and the dynamic linker give the same output and exit status
as qemu-user; the shadow stack stays true through longjmp and C++
exceptions (decided from execution: tests/linux_src); both hooks agree.

The programs are built here with the cross toolchain (`make toolchains`
installs it) into the cache; dynamic ones run against the Debian armhf
sysroot `make linux-sysroot` unpacks there.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from bisect import bisect_right
from functools import cache
from pathlib import Path

import pytest

from harness.cli import main
from harness.elf_program import elf_functions
from harness.formats.data_pointers import code_pointers
from harness.formats.elf import executable_ranges, function_symbols, open_elf, thumb_functions
from harness.linux.process import LinuxRun, LinuxSystem
from harness.linux_verify.modules import process_program
from harness.report.data import without_seconds
from harness.unwind.registry import build_unwinders
from harness.verify.stops import Verify, verify_program

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "tests" / "linux_src"
CACHE = Path(os.environ.get("UNWIND_HARNESS_CACHE", Path.home() / ".cache" / "unwind-harness"))
SYSROOT = CACHE / "linux" / "sysroot"
FLAGS = ("-O2", "-g", "-mthumb", "-march=armv7-a", "-mfpu=vfpv3-d16", "-mfloat-abi=hard",
         "-fasynchronous-unwind-tables")
QEMU_ENVIRONMENT = {"PATH": "/usr/bin:/bin", "HOME": "/", "LANG": "C"}


@cache
def build(source: str | Path, *extra: str) -> str:
    """`source` (a name in tests/linux_src, or a path) built for armhf with
    FLAGS + extra, cached by content."""
    path = source if isinstance(source, Path) else SOURCES / source
    compiler = "arm-linux-gnueabihf-g++" if path.suffix == ".cc" else "arm-linux-gnueabihf-gcc"
    key = hashlib.sha256(path.read_bytes() + " ".join((compiler,) + FLAGS + extra).encode()).hexdigest()[:12]
    output = CACHE / "tests" / f"{path.stem}-{key}"
    if not output.exists():
        output.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([compiler, *FLAGS, *extra, "-o", str(output), str(path)], check=True)
    return str(output)


def sysroot() -> str:
    assert (SYSROOT / "lib" / "ld-linux-armhf.so.3").exists(), \
        f"no armhf sysroot in {SYSROOT}: run `make linux-sysroot` (make test does)"
    return str(SYSROOT)


def qemu(program: str, args=(), stdin: bytes = b"", root: str | None = None) -> tuple[int, bytes]:
    """(exit status, stdout) of `program` under qemu-user: the reference."""
    command = ["qemu-arm", *(["-L", root] if root else []), program, *args]
    done = subprocess.run(command, input=stdin, capture_output=True, env=QEMU_ENVIRONMENT, timeout=120)
    return done.returncode, done.stdout


def run_process(program: str, args=(), stdin_path: str | None = None, root: str | None = None,
                unwinders=(), compiled=True, observe=None, lazy=False):
    """(result, the system) of one verified run."""
    system = LinuxSystem(LinuxRun(program, tuple(args), root, ".", stdin_path, lazy))
    built = process_program(system)
    result = verify_program(built, build_unwinders(built, list(unwinders)),
                            how=Verify(compiled=compiled), observe=observe, system=system)
    return result, system


def runs_as_under_qemu(source: str, expected: bytes, compiled: bool) -> None:
    """tests/linux_src/`source`, built static, exits 0 printing `expected`
    under qemu-user and in a verified run (no fault) alike."""
    program = build(source, "-static")
    assert qemu(program) == (0, expected)
    system = LinuxSystem(LinuxRun(program))
    result = verify_program(process_program(system), [], how=Verify(compiled=compiled), system=system)
    assert result.fault is None
    assert (system.outcome().exit_status, system.outcome().stdout) == (0, expected)


class Names:
    """pc -> function name, from the executable's symbols where it was loaded."""

    def __init__(self, system: LinuxSystem):
        base = system.executable.base
        found = function_symbols(open_elf(system.run.program))
        self._spans = [(address + base, address + base + max(size, 2), name) for address, size, name in found]
        self._starts = [start for start, _, _ in self._spans]

    def __call__(self, pc: int) -> str | None:
        index = bisect_right(self._starts, pc) - 1
        if index >= 0 and pc < self._spans[index][1]:
            return self._spans[index][2]
        return None


# ------------------------------------------------------------- like qemu


@pytest.mark.parametrize("link", ["static", "dynamic"])
def test_a_c_program_runs_as_under_qemu(tmp_path, link):
    program = build("calls.c", *(["-static"] if link == "static" else ["-Wl,-z,now"]))
    root = None if link == "static" else sysroot()
    stdin = tmp_path / "in.txt"
    stdin.write_bytes(b"one\ntwo\nthree\n")
    status, stdout = qemu(program, ["x", "yz"], stdin.read_bytes(), root)
    result, system = run_process(program, ["x", "yz"], str(stdin), root)
    outcome = system.outcome()
    assert result.fault is None
    assert (outcome.exit_status, outcome.stdout) == (status, stdout) == (5, outcome.stdout)
    assert b"longjmp returned 42\n3 lines of stdin, 2 arguments: x yz\n" in stdout


def test_a_cxx_program_runs_as_under_qemu():
    program = build("throw.cc", "-Wl,-z,now")
    status, stdout = qemu(program, root=sysroot())
    result, system = run_process(program, root=sysroot())
    assert result.fault is None and stdout == b"caught 3\n"
    assert (system.outcome().exit_status, system.outcome().stdout) == (status, stdout)


def test_kuser_helpers_answer_as_the_kernel_does():
    program = build("kuser.c", "-static")
    status, stdout = qemu(program)
    result, system = run_process(program)
    assert stdout == b"tls set, swap 0 -> 9, refused yes -> 9, helpers 1\n"
    assert (system.outcome().exit_status, system.outcome().stdout) == (status, stdout)


def _linker_called_from_main(program: str, lazy: bool) -> int:
    """Stops in the dynamic linker's code whose caller is main itself: the
    PLT jumps (no call) into ld.so's resolver trampoline, which therefore
    runs as if main had called it."""
    system = LinuxSystem(LinuxRun(program, (), sysroot(), ".", None, lazy))
    names = Names(system)
    linker = [(address, address + len(data)) for address, data in system.interpreter.segments]
    found = []

    def observe(stop):
        if stop.expected and names(stop.expected[0].pc - 1) == "main" and any(lo <= stop.pc < hi for lo, hi in linker):
            found.append(stop.pc)

    result = verify_program(process_program(system), [], observe=observe, system=system)
    assert result.fault is None
    return len(found)


def test_lazy_binding_runs_through_the_resolver():
    """Lazily bound, main's first call of each function goes through its
    PLT entry into the resolver trampoline; bound now, never."""
    program = build("calls.c", "-Wl,-z,lazy")
    status, stdout = qemu(program, root=sysroot())
    assert _linker_called_from_main(program, lazy=True) > 0
    assert _linker_called_from_main(program, lazy=False) == 0
    result, system = run_process(program, root=sysroot(), lazy=True)
    assert result.fault is None and (system.outcome().exit_status, system.outcome().stdout) == (status, stdout)


def test_verify_elf_reports_the_process(tmp_path):
    program = build("calls.c", "-static")
    status, stdout = qemu(program, ["a"])
    report = tmp_path / "out.json"
    code = main(["verify-elf", program, "--unwinder", "dwarf", "--jobs", "1", "--json", str(report),
                 "--expect-exit", str(status), "--expect-stdout-sha256", hashlib.sha256(stdout).hexdigest(),
                 "--", "a"])
    entry = json.loads(report.read_text())["programs"][0]
    assert code == 0 and entry["self_check"] == "ok"
    assert entry["exit_status"] == 5 and entry["stdout_sha256"] == hashlib.sha256(stdout).hexdigest()
    assert main(["verify-elf", program, "--unwinder", "dwarf", "--jobs", "1", "--expect-exit", "7"]) == 1  # it exits 0


def test_an_unknown_system_call_ends_the_run_as_a_fault(capsys):
    program = build("unknown.c", "-static")
    assert main(["verify-elf", program, "--unwinder", "dwarf", "--jobs", "1"]) == 1
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "unknown system call 987 (0x3db) at pc 0x" in error


# ------------------------------------------------------------- ground truth


def _chains(program: str, root=None, compiled=False):
    """(names of the function at pc and its expected callers) at each stop."""
    seen = []
    system_box = []

    def observe(stop):
        names = system_box[0]
        seen.append((names(stop.pc), [names(frame.pc - 1) for frame in stop.expected],
                     [frame.sp for frame in stop.expected], stop.frame.r[13]))

    system = LinuxSystem(LinuxRun(program, (), root))
    system_box.append(Names(system))
    built = process_program(system)
    result = verify_program(built, [], how=Verify(compiled=compiled), observe=observe, system=system)
    assert result.fault is None
    return seen


def _live(chains) -> None:
    """Every expected frame lies at or above the current sp, outer ones higher."""
    for _, _, sps, sp in chains:
        assert all(frame_sp >= sp for frame_sp in sps)
        assert sps == sorted(sps)


def test_longjmp_drops_the_frames_it_leaves():
    chains = _chains(build("calls.c", "-static"))
    _live(chains)
    dives = [callers for name, callers, _, _ in chains if name == "dive"]
    assert max(callers.count("dive") for callers in dives) == 6  # dive(6) .. dive(0): six callers were dive
    after = [callers for name, callers, _, _ in chains if name == "marker"]
    assert after and all(callers[0] == "main" and "dive" not in callers for callers in after)


THROWER, DESTRUCTORS = "_Z7throweri", ("_ZN5GuardD1Ev", "_ZN5GuardD2Ev")  # thrower(int), Guard::~Guard()


def test_an_exception_drops_the_frames_it_unwinds():
    chains = _chains(build("throw.cc", "-static"))
    _live(chains)
    in_catch = [callers for name, callers, _, _ in chains if name == "marker" and callers[0] == "main"]
    assert len({tuple(c) for c in in_catch}) == 1 and THROWER not in in_catch[0]  # marker(1), in the catch
    destructors = [callers for name, callers, _, _ in chains if name in DESTRUCTORS]
    assert destructors, "the destructors ran while unwinding"
    for callers in destructors:
        # Called from a landing pad in thrower: thrower and its callers below
        # it, nothing of the unwinder that found the landing pad above it.
        assert callers[0] == THROWER and "main" in callers
        assert not any(name and "Unwind" in name for name in callers)
    depths = {callers.count(THROWER) for callers in destructors}
    assert depths == {1, 2, 3, 4, 5}  # thrower(0)'s guard first, thrower(4)'s last: each level's own frames


def test_pthread_exit_in_the_main_thread_unwinds_to_the_start_and_never_returns():
    program = build("pexit.c", "-fexceptions", "-Wl,-z,now")
    result, system = run_process(program, root=sysroot())
    assert result.fault is None
    assert (system.outcome().exit_status, system.outcome().stdout) == qemu(program, root=sysroot()) == \
        (0, b"leaving\ncleanup inner\ncleanup inner\ncleanup inner\natexit ran\n")
    chains = _chains(program, sysroot())
    _live(chains)
    cleanups = [callers for name, callers, _, _ in chains if name and name.startswith("cleanup")]  # .constprop.0
    # Each handler runs from a landing pad in its own frame of leave: the
    # forced unwind has dropped the deeper leave frames and its own frames
    # are not callers (cleanup is called from the pad, not from libgcc).
    depths = [callers.count("leave") for callers in cleanups if callers[0] == "leave"]
    assert sorted(set(depths)) == [1, 2, 3] and len(depths) == len(cleanups)
    after = [callers for name, callers, _, _ in chains if name == "after"]
    # atexit's handler runs from exit, called by __libc_start_call_main once
    # the longjmp landed there: main and leave are gone from the stack.
    assert after and all("leave" not in callers and "main" not in callers for callers in after)


@pytest.mark.parametrize("source, link", [("calls.c", "-static"), ("throw.cc", "-static"),
                                          ("calls.c", "-Wl,-z,now")])
def test_both_hooks_record_the_same_shadow_stack(source, link):
    program = build(source, link)
    root = None if link == "-static" else sysroot()
    assert _chains(program, root, compiled=True) == _chains(program, root, compiled=False)


def test_process_shards_merge_into_the_whole_run(tmp_path):
    program = build("calls.c", "-static")
    common = ["verify-elf", program, "--unwinder", "dwarf", "--jobs", "1"]
    for index in range(2):
        assert main([*common, "--shard", f"{index}/2", "--json", str(tmp_path / f"s{index}.json"), "--", "a"]) == 0
    assert main(["merge", str(tmp_path / "s0.json"), str(tmp_path / "s1.json"), "--json",
                 str(tmp_path / "merged.json")]) == 0
    assert main([*common, "--json", str(tmp_path / "whole.json"), "--", "a"]) == 0
    merged, whole = (json.loads((tmp_path / f"{name}.json").read_text()) for name in ("merged", "whole"))
    assert without_seconds(merged) == without_seconds(whole)  # harness.report.data: all but wall-clock time


def test_tables_from_code_follow_a_computed_goto_and_an_alloca_join(tmp_path):
    """dispatch.c: `goto *dispatch[op]` (bx r3 with the frame set up: to the
    labels its data holds, not a tail call) and an alloca on one path that
    meets the other with sp apart (the CFA through r7 from there). v2-code
    must unwind every stop of the program's own code, and go on through
    Debian's libc (stripped: functions from .dynsym, calls and pointers)."""
    program = build("dispatch.c", "-fno-omit-frame-pointer", "-Wl,-z,now")
    report = tmp_path / "report.json"
    assert main(["verify-elf", program, "--sysroot", sysroot(), "--unwinder", "v2-code", "--unwinder", "v2",
                 "--jobs", "1", "--json", str(report)]) == 0
    rows = {(row["unwinder"], row["category"], row["position"]): row
            for row in json.loads(report.read_text())["results"]}
    own, libc = rows["v2-code", "own", "all"], rows["v2-code", "libc", "all"]
    assert own["stops"] > 300 and own["failed"] == 0
    assert rows["v2-code", "own", "prologue"]["stops"] and rows["v2-code", "own", "epilogue"]["stops"]
    # libc has no CFI: v2 stops in it at nearly every stop there, v2-code goes on
    assert libc["failed"] == 0 and libc["stopped_in"]["libc"] < rows["v2", "libc", "all"]["stopped_in"]["libc"] * 0.8


def test_the_data_points_at_the_labels_of_a_computed_goto_and_at_functions():
    """formats.data_pointers.code_pointers: in a position-independent module only the
    words the dynamic linker relocates are addresses (dispatch.c's table of
    four labels; .init_array's and .fini_array's Thumb functions)."""
    image = open_elf(build("dispatch.c", "-fno-omit-frame-pointer", "-Wl,-z,now"))
    spans = {name: (start, end) for start, end, name in thumb_functions(image)}
    pointers = code_pointers(image, executable_ranges(image))
    start, end = spans["interpret"]
    assert len({word & ~1 for word in pointers.words if start <= word < end}) == 4
    assert {word & ~1 for word in pointers.tabled if start <= word < end} == \
        {word & ~1 for word in pointers.words if start <= word < end}  # one table of them
    assert {spans["frame_dummy"][0] | 1, spans["__do_global_dtors_aux"][0] | 1} <= set(pointers.words)


def test_a_table_of_labels_in_the_codes_segment_is_read_and_a_lone_word_is_no_label():
    """Linked where it runs with .rodata in the code's segment (as Debian's
    python3.11 is: no -z separate-code), every word is an address or an
    integer: the computed goto's three labels come in a table (.rodata,
    read by section), `stray` (an integer 8 bytes into `run`, in .data)
    alone, so it is no label; `run` is analysed whole."""
    image = open_elf(build("goto_table.c", "-no-pie", "-Wl,-z,noseparate-code"))
    assert any(segment["p_flags"] & 1 and segment["p_vaddr"] <= image.elf.get_section_by_name(".rodata")["sh_addr"]
               < segment["p_vaddr"] + segment["p_memsz"] for segment in image.elf.iter_segments())
    start, end = next((start, end) for start, end, name in thumb_functions(image) if name == "run")
    pointers = code_pointers(image, executable_ranges(image))
    stray = start + 1 + 8
    assert stray in pointers.words and stray not in pointers.tabled
    assert len([word for word in pointers.tabled if start <= word < end]) == 3
    run = next(f for f in elf_functions(image, True) if f.name == "run")
    assert not run.problems


def test_the_clock_moves_with_the_instructions_alike_in_every_kind_of_run(tmp_path):
    """A clock loop, a busy loop and a sleep print what they print under
    qemu-user, and the program's runs (every stop, samples, the Python
    hook) see the same clock: it counts the instructions run."""
    program = build("clock.c", "-static")
    expected = b"waited yes, busy loop took time yes, slept at least 250 ms yes\n"
    assert qemu(program) == (0, expected)
    outputs = set()
    for every, compiled in ((1, True), (1000, True), (1, False)):
        system = LinuxSystem(LinuxRun(program))
        built = process_program(system)
        result = verify_program(built, [], how=Verify(compiled=compiled, every=every), system=system)
        assert result.fault is None
        outputs.add((system.outcome().stdout, result.instructions))
    assert len(outputs) == 1 and next(iter(outputs))[0] == expected  # the same output after as many instructions
