""".ARM.exidx / .ARM.extab: parsing, the ELF's own tables as an unwinder, and
the generators' writer (generators.ehabi_writer) read back through the parser."""

import json
from collections import Counter
from pathlib import Path

import pytest

from generators.ehabi_writer import write_exidx
from harness.elf_program import program_from_elf
from harness.errors import EncodeError, InputError, TableOverflow, UnwindFailure
from harness.formats import ehabi
from harness.formats.arm_exidx import (
    ExidxEntry,
    ExidxError,
    decode_instructions,
    parse_exidx,
    parse_sections,
    read_exidx,
    require_exidx_sections,
)
from harness.registers import LR
from harness.unwind.exidx import ExidxUnwinder, exidx_unwinder, exidx_unwinder_for
from harness.unwind.frame import Stack, make_frame
from harness.verify.stops import verify_program

CORPUS = Path(__file__).resolve().parent.parent / "corpus"
ELFS = sorted(CORPUS.glob("fixtures/*.elf")) + sorted(CORPUS.glob("elf/*.elf"))

EXIDX_AT, EXTAB_AT = 0x1000, 0x2000


def prel31(target: int, at: int) -> int:
    return (target - at) & 0x7FFFFFFF


def word(value: int) -> bytes:
    return value.to_bytes(4, "little")


def exidx_entry(index: int, function: int, second: int | None = None,
                extab_offset: int | None = None) -> bytes:
    """Entry number `index` of a table at EXIDX_AT; the second word is given,
    or a prel31 pointer to EXTAB_AT + extab_offset."""
    at = EXIDX_AT + 8 * index
    if second is None:
        second = prel31(EXTAB_AT + extab_offset, at + 4)
    return word(prel31(function, at)) + word(second)


# Lu16 (index 1) with one extra word: b1 08 | 84 00 b0 b0; then a generic
# personality routine pointer (bit 31 clear) at extab offset 8.
EXTAB = word(0x8101B108) + word(0x8400B0B0) + word(prel31(0x9000, EXTAB_AT + 8))
EXIDX = (
    exidx_entry(0, 0x101, 0x80A8B0B0)  # inline Su16: pop {r4, lr}; finish (Thumb bit set)
    + exidx_entry(1, 0x200, extab_offset=0)
    + exidx_entry(2, 0x300, 1)  # EXIDX_CANTUNWIND
    + exidx_entry(3, 0x400, extab_offset=8)
    + exidx_entry(4, 0x500, 0x80A8B108)  # no finish: an implicit one follows
)


def test_each_entry_kind():
    entries = parse_exidx(EXIDX, EXIDX_AT, EXTAB, EXTAB_AT)
    assert [(e.start, e.kind) for e in entries] == [
        (0x100, "compact"), (0x200, "compact"), (0x300, "cantunwind"),
        (0x400, "unreadable"), (0x500, "compact"),
    ]
    inline, long, cant, generic, implicit = entries
    assert inline.instructions == bytes.fromhex("a8b0b0")
    assert inline.ops == (ehabi.Pop((4, LR)), ehabi.FINISH)
    assert long.instructions == bytes.fromhex("b1088400b0b0")
    assert long.ops == (ehabi.Pop((3,)), ehabi.Pop((LR,)), ehabi.FINISH)
    assert cant.instructions is None and cant.ops == ()
    assert generic.instructions is None and "truncated" in generic.problem  # its words end with the section
    assert implicit.ops == (ehabi.Pop((4, LR)), ehabi.Pop((3,)), ehabi.FINISH)


@pytest.mark.parametrize("exidx, section, offset, words", [
    (EXIDX + b"\0" * 4, ".ARM.exidx", 40, "multiple of 8"),
    (exidx_entry(0, 0x200, 1) + exidx_entry(1, 0x100, 1), ".ARM.exidx", 8, "sorted"),
    (word(0x80000100) + word(1), ".ARM.exidx", 0, "bit 31"),  # a function word that is not prel31
])
def test_a_broken_index_is_a_typed_error(exidx, section, offset, words):
    with pytest.raises(ExidxError) as caught:
        parse_exidx(exidx, EXIDX_AT, EXTAB, EXTAB_AT)
    error = caught.value
    assert isinstance(error, InputError)
    assert (error.section, error.offset) == (section, offset)
    assert words in str(error) and f"{section} at byte {offset}" in str(error)


@pytest.mark.parametrize("entry, extab, section, offset, words", [
    # extab pointer past the end of .ARM.extab
    (exidx_entry(0, 0x100, extab_offset=12), EXTAB, ".ARM.exidx", 4, "outside"),
    # ... and before its start
    (exidx_entry(0, 0x100, extab_offset=-4), EXTAB, ".ARM.exidx", 4, "outside"),
    # Lu16 announcing two extra words where .ARM.extab has one
    (exidx_entry(0, 0x100, extab_offset=0), word(0x8102B108) + word(0x8400B0B0), ".ARM.extab", 8, "truncated"),
    (exidx_entry(0, 0x100, 0x80B4B0B0), b"", ".ARM.exidx", 4, "undecodable"),  # spare 0xb4
    (exidx_entry(0, 0x100, 0x80A8A8B1), b"", ".ARM.exidx", 4, "undecodable"),  # b1 lacks operand
    (exidx_entry(0, 0x100, 0x8100B0B0), b"", ".ARM.exidx", 4, "index 1"),  # Lu16 inline
    (exidx_entry(0, 0x100, 0x83000000), b"", ".ARM.exidx", 4, "index 3"),  # reserved
    (exidx_entry(0, 0x100, 0xF0A8B0B0), b"", ".ARM.exidx", 4, "bits 28-30"),
])
def test_a_malformed_entry_refuses_its_own_function_only(entry, extab, section, offset, words):
    # The malformed entry first, then an inline pop {r4, lr} and a CANTUNWIND.
    exidx = entry + exidx_entry(1, 0x201, 0x80A8B0B0) + exidx_entry(2, 0x300, 1)
    bad, good, cant = parse_exidx(exidx, EXIDX_AT, extab, EXTAB_AT)
    assert (bad.start, bad.kind, bad.ops) == (0x100, "unreadable", ())
    assert words in bad.problem and f"{section} at byte {offset}" in bad.problem
    assert good.ops == (ehabi.Pop((4, LR)), ehabi.FINISH) and cant.kind == "cantunwind"
    unwinder = ExidxUnwinder((bad, good, cant), end=0x400)
    with pytest.raises(UnwindFailure) as caught:
        unwinder.step(make_frame(0x110, 0x8000), Stack(0x8000, bytes(8)), innermost=True)
    assert caught.value.kind == "corrupt_table" and f"{section} at byte {offset}" in caught.value.reason
    caller = unwinder.step(make_frame(0x210, 0x8000), Stack(0x8000, word(0x44) + word(0x1235)), innermost=True)
    assert (caller.pc, caller.sp, caller.r[4]) == (0x1234, 0x8008, 0x44)


def test_unwinder_on_crafted_entries():
    unwinder = ExidxUnwinder(parse_exidx(EXIDX, EXIDX_AT, EXTAB, EXTAB_AT), end=0x600)
    stack = Stack(0x8000, word(0x44) + word(0x1235) + bytes(8))
    caller = unwinder.step(make_frame(0x110, 0x8000), stack, innermost=True)
    assert (caller.pc, caller.sp, caller.r[4]) == (0x1234, 0x8008, 0x44)
    for pc, kind, reason in [(0x0FF, "no_info", "no .ARM.exidx"), (0x600, "no_info", "no .ARM.exidx"),
                             (0x310, "no_info", "EXIDX_CANTUNWIND"),
                             (0x410, "corrupt_table", "unreadable")]:
        with pytest.raises(UnwindFailure) as caught:
            unwinder.step(make_frame(pc, 0x8000), stack, innermost=True)
        assert caught.value.kind == kind and reason in caught.value.reason
    # Callers are looked up at pc - 1: a return address at 0x300 is still in 0x200's function.
    caller = unwinder.step(make_frame(0x300, 0x8000), Stack(0x8000, word(3) + word(0x1001)), False)
    assert (caller.pc, caller.sp, caller.r[3]) == (0x1000, 0x8008, 3)


# The GNU model of a generic personality (__gxx_personality_v0): the
# routine's prel31, then 01 | a8 b0 b0 (one more word; pop {r4, lr}, finish,
# padding), the extra word b0 b0 b0 b0, then the LSDA (here one word).
GNU_EXTAB = word(prel31(0x9000, EXTAB_AT)) + word(0x01A8B0B0) + word(0xB0B0B0B0) + word(0x12345678)
# The same whose count claims 255 more words than the section holds.
HOSTILE_EXTAB = GNU_EXTAB + word(prel31(0x9000, EXTAB_AT + 16)) + word(0xFFA8B0B0)


def test_the_gnu_model_of_a_generic_personality_is_decoded_and_run():
    exidx = exidx_entry(0, 0x100, extab_offset=0) + exidx_entry(1, 0x200, extab_offset=16) + exidx_entry(2, 0x300, 1)
    gnu, hostile, cant = parse_exidx(exidx, EXIDX_AT, HOSTILE_EXTAB, EXTAB_AT)
    assert gnu.kind == "generic" and gnu.problem is None
    assert gnu.instructions == bytes.fromhex("a8b0b0b0b0b0b0") and gnu.ops == (ehabi.Pop((4, LR)), ehabi.FINISH)
    assert hostile.kind == "unreadable" and hostile.ops == () and "at most 5" in hostile.problem
    assert cant.kind == "cantunwind"  # one entry that cannot be decoded spoils nothing else
    unwinder = ExidxUnwinder((gnu, hostile, cant), end=0x400)
    caller = unwinder.step(make_frame(0x110, 0x8000), Stack(0x8000, word(0x44) + word(0x1235)), innermost=True)
    assert (caller.pc, caller.sp, caller.r[4]) == (0x1234, 0x8008, 0x44)
    with pytest.raises(UnwindFailure) as caught:
        unwinder.step(make_frame(0x210, 0x8000), Stack(0x8000, bytes(8)), innermost=True)
    assert caught.value.kind == "corrupt_table" and ".ARM.extab at byte 20" in caught.value.reason


def test_cxx_programs_generic_entries_all_decode():
    """Every generic entry of a C++ program built by g++ (tests/linux_src)
    is GNU-model and decodes."""
    from test_linux_process import build

    entries = read_exidx(build("throw.cc", "-static"))
    generic = [e for e in entries if e.kind == "generic"]
    assert len(generic) > 50 and all(e.problem is None and e.ops[-1] in (ehabi.FINISH, ehabi.REFUSE)
                                     for e in generic)


@pytest.mark.parametrize("path", ELFS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_committed_elf_parses(path):
    entries = read_exidx(str(path))
    assert entries and all(isinstance(e, ExidxEntry) for e in entries)
    starts = [e.start for e in entries]
    assert starts == sorted(starts) and all(s % 2 == 0 for s in starts)
    for entry in entries:
        if entry.kind == "compact":
            assert isinstance(entry.ops[-1], (ehabi.Finish, ehabi.Refuse))


def test_every_committed_elf_is_covered():
    # The fixtures' MANIFEST.txt and corpus/elf/manifest.json list every committed ELF.
    root = Path(__file__).resolve().parent.parent / "corpus"
    fixtures = [line.split()[0] for line in (root / "fixtures" / "MANIFEST.txt").read_text().splitlines()
                if line.endswith(tuple("0123456789abcdef")) and not line.startswith("#")]
    builds = json.loads((root / "elf" / "manifest.json").read_text())["builds"]
    assert sorted(Path(p).name for p in ELFS) == sorted(fixtures + [b["file"] for b in builds])


@pytest.mark.parametrize("name", ["calls-clang-nofp", "calls-gcc-nofp"])
def test_exidx_is_right_in_bodies_only(name):
    """EXIDX describes the body state (what a throw from a call site needs):
    right at every body stop, wrong in prologues (and clang's epilogues)."""
    path = str(CORPUS / "fixtures" / f"{name}.elf")
    program = program_from_elf(path, "entry")
    unwinder = exidx_unwinder_for(program.exidx)
    result = verify_program(program, [unwinder])
    assert result.self_check_ok and result.stops > 100

    # A frame whose function has no .ARM.exidx entry of its own (a libgcc
    # helper linked without one) would be unwound with its neighbour's entry;
    # such failures say nothing about EXIDX, so they are left out. (Measured:
    # there are none in these two fixtures today.)
    own_entry = {e.start for e in unwinder.entries}
    starts = {f.name: f.start for f in program.functions}
    relevant = [f for f in result.failures if starts.get(f.culprit) in own_entry]
    by_position = Counter(f.position for f in relevant)

    assert by_position["body"] == 0
    assert by_position["prologue"] > 0
    assert set(by_position) <= {"prologue", "epilogue"}
    assert all(f.frame == 0 for f in relevant)  # callers are always at a body stop
    assert all(f.kind in ("wrong_pc", "wrong_sp", "wrong_register", "bad_read") for f in relevant)


# ----------------------------------------------------------------- writing
# The generators' own writer (generators.ehabi_writer.write_exidx), checked
# against the harness reader above.

# Instruction runs of each shape the writer meets: (name, bytes, how many of
# them remain once trailing finishes are dropped).
RUNS = [
    ("finish only", bytes.fromhex("b0"), 0),
    ("empty", b"", 0),
    ("inline", bytes.fromhex("a8b0"), 1),  # pop {r4, lr}
    ("inline, 3 bytes", bytes.fromhex("97a801b0"), 3),  # vsp = r7; pop {r4, lr}; vsp += 8
    ("operand 0xb0", bytes.fromhex("b3b0b0"), 2),  # pop {d11} (fstmfdx): its operand is 0xb0
    ("extab, 1 word, 2 bytes in it", bytes.fromhex("97a80103b0"), 4),
    ("extab, 1 word, full", bytes.fromhex("b1088400a801"), 6),  # no finish: implicit
    ("extab, 2 words", bytes.fromhex("97b1088400a80103b0b0"), 8),
    ("extab, several words", bytes(21) + b"\xb0", 21),  # 21 x vsp += 4: 2 bytes, then 5 words (the most)
    ("refuse", bytes.fromhex("8000"), 2),
]


@pytest.mark.parametrize("name, run, body", RUNS, ids=[n for n, _, _ in RUNS])
def test_write_then_parse_gives_the_same_ops(name, run, body):
    sections = write_exidx([(0x100, run), (0x180, None)], EXIDX_AT, EXTAB_AT, 0x200)
    entries = parse_sections(sections)
    assert [(e.start, e.kind) for e in entries] == [
        (0x100, "compact"), (0x180, "cantunwind"), (0x200, "cantunwind")]
    assert entries[0].ops == decode_instructions(run, "test", 0)
    assert entries[0].instructions[:body] == run[:body]
    assert set(entries[0].instructions[body:]) <= {0xB0}  # padding
    if body <= 3:
        assert sections.extab == b"" and sections.exidx[7] == 0x80  # inline Su16
    else:
        extra = -(-(body - 2) // 4)
        assert len(sections.extab) == 4 * (1 + extra + 1)  # Lu16 words, then a zero descriptor
        assert sections.extab[2:4] == bytes([extra, 0x81])
        assert sections.extab[-4:] == bytes(4)


def test_write_by_hand():
    """Words written from the EHABI rules: prel31 offsets, Su16 inline,
    Lu16 in .ARM.extab shared by two functions, the closing CANTUNWIND."""
    run = bytes.fromhex("97b1088400b0")  # vsp = r7; pop {r3}; pop {lr}; finish
    sections = write_exidx([(0x100, bytes.fromhex("a8b0")), (0x200, run), (0x300, None),
                            (0x400, run)], EXIDX_AT, EXTAB_AT, 0x500)
    assert sections.exidx == b"".join(map(word, [
        0x7FFFF100, 0x80A8B0B0,  # 0x1000: 0x100 - 0x1000 = -0xf00; pop {r4, lr}, finish x2
        0x7FFFF1F8, 0x00000FF4,  # 0x1008: -0xe08; 0x2000 - 0x100c
        0x7FFFF2F0, 0x00000001,  # 0x1010: -0xd10; EXIDX_CANTUNWIND
        0x7FFFF3E8, 0x00000FE4,  # 0x1018: -0xc18; 0x2000 - 0x101c, the same extab entry
        0x7FFFF4E0, 0x00000001,  # 0x1020: -0xb20 (end); EXIDX_CANTUNWIND
    ]))
    assert sections.extab == b"".join(map(word, [0x810197B1, 0x088400B0, 0]))
    assert (sections.exidx_address, sections.extab_address, sections.end) == (EXIDX_AT, EXTAB_AT, 0x500)


@pytest.mark.parametrize("functions, exidx_at, extab_at, error, words", [
    # function start 1 GiB below its entry
    ([(0x100, b"")], 0x4000_0200, EXTAB_AT, TableOverflow, ".ARM.exidx byte 0: prel31"),
    # .ARM.extab 1 GiB above the entry pointing at it
    ([(0x100, bytes(8))], EXIDX_AT, 0x4000_1004, TableOverflow, ".ARM.exidx byte 4: prel31"),
    ([(0x100, bytes(1100))], EXIDX_AT, EXTAB_AT, TableOverflow, "at most 255"),
    ([(0x100, b""), (0x100, b"")], EXIDX_AT, EXTAB_AT, EncodeError, "ascend"),
    ([(0x101, b"")], EXIDX_AT, EXTAB_AT, EncodeError, "odd"),
    ([(0x100, b"")], EXIDX_AT + 2, EXTAB_AT, EncodeError, "4-aligned"),
    ([(0x100, bytes.fromhex("b4"))], EXIDX_AT, EXTAB_AT, EncodeError, "undecodable"),
    ([(0x100, bytes(8))], EXIDX_AT, EXIDX_AT + 8, EncodeError, "overlap"),
])
def test_write_errors_are_typed(functions, exidx_at, extab_at, error, words):
    with pytest.raises(error) as caught:
        write_exidx(functions, exidx_at, extab_at, 0x1000)
    assert isinstance(caught.value, InputError) and words in str(caught.value)


@pytest.mark.parametrize("path", ELFS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_committed_elf_tables_write_back(path):
    """The writer reads what compilers write: re-encoding an ELF's entries
    (up to its closing CANTUNWIND) gives the same starts and ops."""
    entries = read_exidx(str(path))
    assert entries[-1].kind == "cantunwind"
    body = [(e.start, e.instructions) for e in entries[:-1]]
    at = require_exidx_sections(str(path)).exidx_address  # prel31 offsets reach only 1 GiB either way
    again = parse_sections(write_exidx(body, at, at + 8 * len(entries), entries[-1].start))
    assert [(e.start, e.kind, e.ops) for e in again] == [(e.start, e.kind, e.ops) for e in entries]


def test_compiled_program_carries_its_elf_tables():
    path = str(CORPUS / "fixtures" / "calls-clang-nofp.elf")
    program = program_from_elf(path, "entry")
    assert program.exidx == require_exidx_sections(path)
    assert parse_sections(program.exidx) == read_exidx(path)
    from_path, from_program = exidx_unwinder(path), exidx_unwinder_for(program.exidx)
    assert (from_path.entries, from_path.end) == (from_program.entries, from_program.end)
    # The linker's closing CANTUNWIND sits at the very end of .text, so no
    # executable section holds it and nothing bounds it (as before sections).
    assert from_program.entries[-1].kind == "cantunwind" and from_program.end == 1 << 32
