"""The compiled frame analysis (harness/thumb/csrc) gives what the Python
gives: every function discovery analyses, in the compiled corpus, the Linux
slice's programs and Debian's libc, ld.so and libstdc++, is analysed both
ways and the two Analysed records compared field for field (rows, callees,
landing pads...), and the whole program's functions analysed with the
compiled analysis set beside those of the Python alone. Where the compiled
analysis gives a function to the Python (a rule not ported, a refusal), the
Python's result stands; it must answer most of them, or it is not doing its
work."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from harness.elf_program import code_map, code_reader
from harness.formats.arm_exidx import read_exidx_sections
from harness.formats.elf import open_elf
from harness.linux_verify.corpus import cache as linux_cache
from harness.thumb import discovery, frame_analysis
from harness.thumb import native
from harness.thumb.native import ProgramCode

ROOT = Path(__file__).resolve().parent.parent
COMPILED = sorted((ROOT / "corpus" / "elf").glob("*.elf"))
SLICE = (ROOT / "corpus" / "linux" / "ci-slice.txt").read_text().split()
LIBRARIES = ("lib/arm-linux-gnueabihf/libc.so.6", "lib/arm-linux-gnueabihf/ld-linux-armhf.so.3",
             "usr/lib/arm-linux-gnueabihf/libstdc++.so.6")


def analysed_both_ways(path: Path, monkeypatch) -> tuple[dict[bool, list[int]], list[str]]:
    """(functions analysed and those the compiled analysis answered, by
    whether they are ARM code; the differences): every function discovery
    analyses, analysed both ways (the Python's result goes on), then the
    whole program with the compiled analysis, whose functions must be the
    Python's."""
    python_analysis = frame_analysis.analyse_calling
    counts, differ = {False: [0, 0], True: [0, 0]}, []

    def both(name, start, end, code_at, facts=frame_analysis.ProgramFacts(), bounded=True, arm=False, rows=True):
        assert isinstance(code_at, ProgramCode) and code_at.native is not None
        python = python_analysis(name, start, end, lambda address, size: code_at(address, size), facts, bounded, arm,
                                 rows)
        compiled = python_analysis(name, start, end, code_at, facts, bounded, arm, rows)
        counts[arm][0] += 1
        counts[arm][1] += native.compiled_analysis(name, start, end, code_at, facts, bounded, arm, rows) is not None
        # A refused landing pad's trial is dropped; the Python follows it to
        # its end, asking noreturn more: what the compiled analysis asked
        # (all its result depends on) is part of that.
        if compiled._replace(asked=python.asked) != python or not compiled.asked <= python.asked:
            differ.append(f"{name} {start:#x}")
        return python

    image = open_elf(str(path))
    with monkeypatch.context() as patched:
        patched.setattr(discovery, "analyse_calling", both)
        by_python = list(discovery.analyse_all(code_map(image, read_exidx_sections(image)), code_reader(image)))
    compiled = list(discovery.analyse_all(code_map(image, read_exidx_sections(image)), code_reader(image)))
    if compiled != by_python:
        differ.append("the program's functions")
    return counts, differ


ARM_FLAGS = ("-marm", "-march=armv7-a", "-mfpu=vfpv3-d16", "-mfloat-abi=hard", "-g", "-fasynchronous-unwind-tables")
COMPILERS = {"gcc": ("arm-linux-gnueabihf-gcc",), "g++": ("arm-linux-gnueabihf-g++",),
             "clang": ("clang-14", "--target=armv7a-linux-gnueabihf", "-fuse-ld=lld")}  # as corpus/linux/build.sh


def build_arm(source: str, compiler: str, flags: tuple[str, ...]) -> Path:
    """tests/linux_src's `source` built as ARM code (clang++ and g++ for C++), cached by content."""
    path = ROOT / "tests" / "linux_src" / source
    command = [*COMPILERS["g++" if compiler == "gcc" and path.suffix == ".cc" else compiler], *ARM_FLAGS, *flags]
    if compiler == "clang" and path.suffix == ".cc":
        command[0] = "clang++-14"
    key = hashlib.sha256(path.read_bytes() + " ".join(command).encode()).hexdigest()[:12]
    output = linux_cache().parent / "tests" / f"{path.stem}-arm-{key}"
    if not output.exists():
        output.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([*command, "-o", str(output), str(path)], check=True)
    return output


def binaries() -> list[Path]:
    sysroot = linux_cache() / "sysroot"
    return [*COMPILED, *(linux_cache() / "bin" / name for name in SLICE), *(sysroot / name for name in LIBRARIES)]


@pytest.mark.parametrize("path", binaries(), ids=lambda path: path.name)
def test_the_compiled_analysis_gives_the_pythons_result(path, monkeypatch):
    assert path.exists(), f"{path}: not built (make linux-slice)"
    counts, differ = analysed_both_ways(path, monkeypatch)
    assert not differ, differ[:5]
    analysed, answered = counts[False]
    assert analysed > 0 and answered / analysed > 0.5, counts


# ARM-mode builds (Chromium's Rust is ARM code; so is GCC's -marm): C,
# computed gotos, C++ exceptions; with and without frame pointers, GCC and clang.
ARM_BUILDS = [(source, compiler, flags) for source in ("shapes.c", "goto_table.c", "throw.cc")
              for compiler in ("gcc", "clang") for flags in (("-O2",), ("-O2", "-fno-omit-frame-pointer"), ("-O0",))]


@pytest.mark.parametrize("source, compiler, flags", ARM_BUILDS,
                         ids=lambda part: "".join(part) if isinstance(part, tuple) else part)
def test_arm_code_is_analysed_alike(source, compiler, flags, monkeypatch):
    """Programs built as ARM code: every function both ways, the same
    result; the compiled analysis answers most of the ARM functions."""
    counts, differ = analysed_both_ways(Path(build_arm(source, compiler, flags)), monkeypatch)
    assert not differ, differ[:5]
    analysed, answered = counts[True]
    assert analysed > 5 and answered / analysed > 0.5, counts


def test_what_it_does_not_take_is_the_pythons(tmp_path):
    """A span it does not take (odd, empty) and a rule not ported (a Thumb
    `bx pc` into ARM code inside the function) are given to the Python,
    whose result stands; a refusal (a push of a copy of sp: a register
    dump) is the compiled analysis's own, problem for problem."""
    # mov ip, sp; push {ip, lr}; pop {ip, lr}; bx lr
    code = ProgramCode([(0x1000, bytes.fromhex("ec46" "2de90050" "bde80050" "7047"))])
    assert code.native.analyse(0x1001, 0x100c, frozenset(), (), (), True, False, True) is None
    assert code.native.analyse(0x1000, 0x1000, frozenset(), (), (), True, False, True) is None
    assert code.native.analyse(0x1000, 0x100c, frozenset(), (), (), True, False, True) is not None
    python = frame_analysis.analyse_calling("dump", 0x1000, 0x100c, lambda a, s: code(a, s))
    assert frame_analysis.analyse_calling("dump", 0x1000, 0x100c, code) == python
    assert python.function.problems == ("0x1002: 'push.w {ip, lr}' stores sp's value: a register dump a callee may rewrite",)
    # bx pc; nop; (ARM) bx lr
    veneer = ProgramCode([(0x2000, bytes.fromhex("7847" "00bf" "1eff2fe1"))])
    assert veneer.native.analyse(0x2000, 0x2008, frozenset(), (), (), True, False, True) is None
    python = frame_analysis.analyse_calling("veneer", 0x2000, 0x2008, lambda a, s: veneer(a, s))
    assert frame_analysis.analyse_calling("veneer", 0x2000, 0x2008, veneer) == python and python.returns


@pytest.mark.parametrize("path, arm", [*((path, False) for path in (*COMPILED[:2], linux_cache() / "bin" / "cjmp-gcc-O2-fp-static")),
                                       ("shapes-arm", True), ("throw-arm", True)],
                         ids=lambda part: part.name if isinstance(part, Path) else str(part))
def test_the_compiled_start_shape_is_the_pythons(path, arm):
    """start_shapes.pushes_lr (a prologue among a start's first
    instructions: discovery asks it after every call of a function found
    without a symbol) at every halfword (word, in ARM state) of the code,
    in C and in Python."""
    from harness.formats.elf import executable_ranges
    from harness.thumb.start_shapes import pushes_lr

    if not isinstance(path, Path):
        path = build_arm(f"{path.split('-')[0]}.{'cc' if path.startswith('throw') else 'c'}", "gcc", ("-O2",))
    image = open_elf(str(path))
    code = code_reader(image)
    python = lambda address, size: code(address, size)  # noqa: E731 (not a ProgramCode: the Python's reading)
    prologues = 0
    for low, high in executable_ranges(image):
        answers = [(address, pushes_lr(code, address, high, arm), pushes_lr(python, address, high, arm))
                   for address in range(low, high, 4 if arm else 2)]
        differ = [address for address, compiled, by_python in answers if compiled != by_python]
        assert not differ, [hex(address) for address in differ[:5]]
        prologues += sum(compiled for _, compiled, _ in answers)
    assert prologues > 5


@pytest.mark.parametrize("text", [
    # csmith seed 278's func_1 (gcc -Os) up to its return, and its literal pool: r4-r6 pushed to make room
    ("7fb5" "4df28371" "04a8" "fff77cfe" "07b0" "5df804fb" "04660000"),
    # push {r4, r5, r6, lr}; mrc p15, 0, r5, c13, c0, 3 (capstone: r5 read); pop {r4, r5, r6, pc}
    ("70b5" "1dee705f" "70bd"),
    # the same with r4-r6 named only in code no path reaches (after the return)
    ("70b5" "70bd" "2646" "0000")])
def test_saves_of_registers_never_written_are_dropped_alike(text):
    """untouched.kept_saves in C and in Python: the same rows."""
    code = ProgramCode([(0x1000, bytes.fromhex(text))])
    end = 0x1000 + len(bytes.fromhex(text))
    compiled = code.native.analyse(0x1000, end, frozenset(), (), (), True, False, True)
    assert compiled is not None  # the C's own answer
    python = frame_analysis.analyse_calling("f", 0x1000, end, lambda a, s: code(a, s))
    assert frame_analysis.analyse_calling("f", 0x1000, end, code) == python


GAWK_DUFF = ("10b586460846002956d0073100f0070c0cf1ff3cc908bcf1060f64d8dfe80cf055575a5c5f61040000200ee03f24c0f2"
             "01040ef1010e04fb00fc1ef8010b3f24c0f20104604404fb00f01ef8014b4ff03f0cc0f2010c04440cfb04f41ef8010b4ff0"
             "3f0cc0f2010c20440cfb00f01ef801cb3f24c0f20104844404fb0cfc1ef8010b3f24c0f20104604404fb00f01ef801cb3f24"
             "c0f20104844404fb0cfc1ef8010b3f24c0f20104604404fb00f09ef800c001396044b9d103b11860904203d3114611f017f9"
             "084610bd0020efe74ff0000ce4e70020dae74ff0000ccfe70020c5e70024bae74ff0000ca6e7")


def test_a_table_branch_indexed_by_ip_takes_its_guards_bound_alike():
    """Debian's gawk (a hash, Duff's device): `and ip, r0, #7; add.w ip,
    ip, #-1; cmp.w ip, #6; bhi; tbb [pc, ip]`. Capstone names r12 `ip`: the
    guard's bound was missed, the table read on to the first case, and its
    alignment byte (0, a case at the table itself) ran the table's bytes as
    code, which left no single frame over the whole loop (1,514 of gawk's
    sampled stops refused in make linux-sampled). Seven cases, in C and in
    Python; the table is data, the loop one frame."""
    text = bytes.fromhex(GAWK_DUFF)
    code = ProgramCode([(0x1000, text)])
    end = 0x1000 + len(text)
    assert code.native.analyse(0x1000, end, frozenset(), (), (), True, False, True) is not None  # the C's own answer
    compiled = frame_analysis.analyse_calling("f", 0x1000, end, code)
    assert compiled == frame_analysis.analyse_calling("f", 0x1000, end, lambda a, s: code(a, s))
    rows = [(row.address - 0x1000, row.problem or row.cfa_offset) for row in compiled.function.rows]
    assert rows == [(0, 0), (2, 8), (0x20, "no path reaches this code"), (0x28, 8)]


# Chromium 150's fn_1d37c9c (armhf, clang): `push {r4, r6, r7, lr}` ... a tail call, then `bmi` back into the body
# (two bytes after the function's code no path reaches)
CHROMIUM_TRIAL = ("d0b502af80ed2e0a80ef10000446c0f8a41000208c46c4e926202146c4f8c430002284f8c8006346c4e92f00204601f0"
                  "b1ffd4f8c42004f16000d4f8a410b7ee000b531c2064a2eb930201ebc20321462246bde8d04001f0e4bed4d4")


def test_what_a_dropped_landing_pad_trial_decoded_counts_alike():
    """A landing pad's trial from the two bytes after the tail call runs
    into the middle of the function's code and is dropped; the Python
    keeps what it decoded there (it names r6), so r6's save stays in the
    rows. The compiled analysis once forgot a dropped trial's instructions
    and dropped the save: 22 of Chromium's functions differed so."""
    start = 0x1D37C9C
    code = ProgramCode([(start, bytes.fromhex(CHROMIUM_TRIAL))])
    end = start + len(bytes.fromhex(CHROMIUM_TRIAL))
    python = frame_analysis.analyse_calling("f", start, end, lambda a, s: code(a, s))
    compiled = native.compiled_analysis("f", start, end, code, frame_analysis.ProgramFacts(), True, False)
    assert compiled == python
    assert (6, -12) in python.function.rows[1].saved
