"""CFI row -> instruction run, epilogue policies, and covering the text."""

from dataclasses import replace

import pytest

from generators.ehabi_writer import Inexpressible, frame_instructions
from harness.errors import EncodeError
from harness.formats import ehabi
from harness.formats.chrome_v2 import V2Reader, encode
from harness.formats.chrome_v2.encoder import (
    FINISH_ONLY,
    REFUSE_RUN,
    InexpressibleState,
    cover_text,
    function_unwind,
    state_instructions,
)
from harness.formats.chrome_v2.grouping import epilogues_inside, group_at_excursions, segments
from harness.formats.chrome_v2.layout import serialize
from harness.formats.chrome_v2.tables import build_tables
from harness.program import CfiRow, FunctionCfi
from harness.registers import DWARF_D0, SP

D8 = DWARF_D0 + 8


def text_of(row: CfiRow) -> str:
    return ehabi.text(ehabi.decode(state_instructions(row)))


@pytest.mark.parametrize(
    "row, expected",
    [
        (CfiRow(0), "finish"),
        (CfiRow(0, 13, 16, ((4, -16), (5, -12), (6, -8), (14, -4))), "pop {r4-r6, r14}; finish"),
        # Saved registers are not contiguous from r4: the mask form.
        (CfiRow(0, 13, 12, ((5, -12), (7, -8), (14, -4))), "pop {r5, r7, r14}; finish"),
        # GCC's `push {r3, lr}`: r3 is padding, not recorded, so it is skipped.
        (CfiRow(0, 13, 8, ((14, -4),)), "vsp = vsp + 4; pop {r14}; finish"),
        # A leaf that pushes without lr: pc comes from the live lr.
        (CfiRow(0, 13, 8, ((4, -8), (5, -4))), "pop {r4-r5}; finish"),
        # Locals below the saves.
        (CfiRow(0, 13, 40, ((4, -16), (5, -12), (6, -8), (14, -4))),
         "vsp = vsp + 24; pop {r4-r6, r14}; finish"),
        # Varargs: push {r0-r3} above the frame is just more CFA offset.
        (CfiRow(0, 13, 24, ((4, -24), (14, -20))), "pop {r4, r14}; vsp = vsp + 16; finish"),
        # Frame pointer: clang's push {r4-r7, lr}; add r7, sp, #12 -> CFA = r7 + 8.
        (CfiRow(0, 7, 8, ((4, -20), (5, -16), (6, -12), (7, -8), (14, -4))),
         "vsp = r7; vsp = vsp - 12; pop {r4-r7, r14}; finish"),
        # GCC's frame pointer at the bottom of the frame: CFA = r7 + 24.
        (CfiRow(0, 7, 24, ((4, -12), (7, -8), (14, -4))),
         "vsp = r7; vsp = vsp + 12; pop {r4, r7, r14}; finish"),
        # VFP saves below the core saves (vpush after push).
        (CfiRow(0, 13, 24, ((4, -8), (14, -4), (D8, -24), (D8 + 1, -16))),
         "pop {d8-d9}; pop {r4, r14}; finish"),
        (CfiRow(0, 13, 8, ((D8 + 2, -8),)), "pop {d10}; finish"),
        # Registers saved in descending order cannot share one pop.
        (CfiRow(0, 13, 8, ((4, -4), (5, -8))), "pop {r5}; pop {r4}; finish"),
    ],
)
def test_state_instructions(row, expected):
    assert text_of(row) == expected


@pytest.mark.parametrize(
    "cfa_offset, expected_hex",
    [(4, "00b0"), (0x100, "3fb0"), (0x104, "3f00b0"), (0x200, "3f3fb0"), (0x204, "b200b0"),
     (0x10004, "b2807fb0"), (0x100000 + 8, "b281ff0fb0")],
)
def test_large_frames_use_every_vsp_form(cfa_offset, expected_hex):
    assert state_instructions(CfiRow(0, 13, cfa_offset)).hex() == expected_hex


@pytest.mark.parametrize(
    "row",
    [
        CfiRow(0, 13, 8, ((4, -6),)),  # unaligned save
        CfiRow(0, 13, 8, ((4, -8), (5, -8))),  # two registers in one slot
        CfiRow(0, 13, 16, ((D8, -16), (4, -12))),  # core register inside a d-register slot
        CfiRow(0, 13, 6),  # CFA offset not a multiple of 4
        CfiRow(0, 15, 0),  # CFA through pc
    ],
)
def test_inexpressible_layouts_raise(row):
    with pytest.raises(InexpressibleState):
        state_instructions(row)


def test_inexpressible_row_is_reported_and_refused():
    bad = CfiRow(4, 13, 8, ((4, -8), (5, -8)))
    function = FunctionCfi("f", 0, 0x20, (CfiRow(0), bad))
    unwind = function_unwind(function, "keep")
    assert unwind.address_unwinds[-1].instructions == REFUSE_RUN
    assert len(unwind.problems) == 1 and "0x4" in unwind.problems[0]


def test_row_with_problem_from_the_reader_is_refused():
    function = FunctionCfi("f", 0, 0x20, (CfiRow(0), CfiRow(4, problem="CFA is a DWARF expression")))
    assert function_unwind(function, "drop").address_unwinds[-1].instructions == REFUSE_RUN


SAVES = ((4, -8), (14, -4))
GCC_STYLE = FunctionCfi(
    "gcc",
    0,
    0x40,
    (
        CfiRow(0),
        CfiRow(2, 13, 8, SAVES),  # push {r4, lr}
        CfiRow(4, 13, 24, SAVES),  # sub sp, #16
        CfiRow(0x10, 13, 8, SAVES),  # add sp, #16 (early epilogue)
        CfiRow(0x12, 13, 24, SAVES),  # restore_state after pop {r4, pc}
        CfiRow(0x30, 13, 8, SAVES),  # add sp, #16 (final epilogue)
    ),
)


def test_policy_keep_encodes_epilogue_rows_and_restore_state():
    unwind = function_unwind(GCC_STYLE, "keep")
    assert [u.offset for u in unwind.address_unwinds] == [0, 2, 4, 0x10, 0x12, 0x30]
    assert unwind.dropped_rows == 0


def test_policy_drop_keeps_the_body_state_through_epilogues():
    unwind = function_unwind(GCC_STYLE, "drop")
    # The restore_state row repeats the body state, so it adds no entry.
    assert [u.offset for u in unwind.address_unwinds] == [0, 2, 4]
    assert unwind.dropped_rows == 2


def test_policy_drop_keeps_a_switch_back_from_the_frame_pointer():
    # mov sp, r7 changes the CFA register, not through an sp decrease: kept.
    rows = (CfiRow(0), CfiRow(2, 13, 8, SAVES), CfiRow(4, 7, 8, SAVES), CfiRow(0x20, 13, 8, SAVES),
            CfiRow(0x22, 13, 0))
    unwind = function_unwind(FunctionCfi("fp", 0, 0x30, rows), "drop")
    assert [u.offset for u in unwind.address_unwinds] == [0, 2, 4, 0x20]
    assert unwind.dropped_rows == 1


def test_identical_consecutive_states_share_one_entry():
    rows = (CfiRow(0), CfiRow(2, 13, 8), CfiRow(6, 13, 8), CfiRow(8, 13, 16))
    unwind = function_unwind(FunctionCfi("f", 0, 0x10, rows), "keep")
    assert [u.offset for u in unwind.address_unwinds] == [0, 2, 8]


def test_cover_text_fills_edges_and_gaps():
    a = function_unwind(FunctionCfi("a", 0x10, 0x20, (CfiRow(0x10),)), "drop")
    b = function_unwind(FunctionCfi("b", 0x30, 0x40, (CfiRow(0x30),)), "drop")
    covered = cover_text([b, a], 0)
    assert [(f.name, f.start) for f in covered] == [
        ("<before first function>", 0), ("a", 0x10), ("<gap>", 0x20), ("b", 0x30),
        ("<after last function>", 0x40),
    ]
    assert covered[0].address_unwinds[0].instructions == REFUSE_RUN
    assert covered[2].address_unwinds[0].instructions == FINISH_ONLY
    assert covered[4].address_unwinds[0].instructions == REFUSE_RUN


@pytest.mark.parametrize(
    "spans, message",
    [
        ([(0x10, 0x30), (0x20, 0x40)], "overlap"),
        ([(0x11, 0x20)], "misaligned"),
        ([(0x10, 0x10)], "empty"),
        ([(0x0, 0x10)], "below the text base"),
    ],
)
def test_cover_text_rejects_bad_functions(spans, message):
    functions = [
        function_unwind(FunctionCfi(f"f{i}", s, e, (CfiRow(s),)), "drop") for i, (s, e) in enumerate(spans)
    ]
    with pytest.raises(EncodeError, match=message):
        cover_text(functions, 0x4 if message == "below the text base" else 0)


@pytest.mark.parametrize("row, words", [
    (CfiRow(0, SP, 8, ((4, -(1 << 30)),)), "vsp would move -1073741816 bytes"),  # a save 1 GiB below sp
    (CfiRow(0, SP, 8, ((4, 1 << 33),)), "vsp would move +8589934600 bytes"),  # far above the CFA
])
def test_states_no_frame_has_are_refused_at_once(row, words):
    """A hostile CFI row does not make the encoder write gigabytes of vsp
    adjustments (0x7f subtracts 0x100 a byte): it is inexpressible, and the
    generators' writer agrees."""
    with pytest.raises(InexpressibleState, match=words.replace("+", r"\+")):
        state_instructions(row)
    with pytest.raises(Inexpressible, match=words.replace("+", r"\+")):
        frame_instructions(row)


def runs_at_every_address(tables, end: int, base: int = 0x1000) -> list[bytes]:
    reader = V2Reader.from_blob(serialize(tables, "seed"), "seed")
    return [reader.run(reader.lookup(offset).instruction_index) for offset in range(0, end - base, 2)]


def test_entries_start_at_excursions_with_the_same_run_everywhere():
    """group_at_excursions: an entry starts where the code leaves its
    function's body (each epilogue; a last epilogue runs on through the
    padding into the next function's prologue), so each list holds small
    offsets and excursions of the same shape share it; every address still
    finds the run it found with entries at function starts."""
    body = ((4, -8), (14, -4))
    rows = (CfiRow(0x1000), CfiRow(0x1002, 13, 8, body), CfiRow(0x1004, 13, 16, body),
            CfiRow(0x1010, 13, 8, body), CfiRow(0x1012, 13, 16, body),  # add sp, #8; pop {r4, pc}; body again
            CfiRow(0x1020, 13, 8, body))  # a last epilogue, then 2 bytes of padding
    later = rows[:3] + tuple(replace(r, address=r.address + 0x10) for r in rows[3:])  # g: its epilogues later
    functions = [FunctionCfi("f", 0x1000, 0x1022, rows),
                 FunctionCfi("g", 0x1024, 0x1058, tuple(replace(r, address=r.address + 0x24) for r in later))]
    covering = cover_text([function_unwind(f, "keep") for f in functions], 0x1000)
    grouped = group_at_excursions(covering)
    assert [(p.name, p.start, p.end, [u.offset for u in p.address_unwinds]) for p in grouped] == [
        ("f", 0x1000, 0x1010, [0, 2, 4]),  # f's prologue and body: drop's list
        ("f", 0x1010, 0x1020, [0, 2]),  # pop {r4, pc}, then the body again
        ("f", 0x1020, 0x1044, [0, 2, 6, 8]),  # pop; padding and g's entry (both finish); push; body
        ("g", 0x1044, 0x1054, [0, 2]),  # g's epilogue: f's list
        ("g", 0x1054, 0x1058, [0, 4])]  # its last, then refuse-to-unwind after the text
    assert grouped[3].address_unwinds == grouped[1].address_unwinds
    assert runs_at_every_address(build_tables(grouped, 0x1000), 0x1058) == \
        runs_at_every_address(build_tables(covering, 0x1000), 0x1058)
    # encode keeps whichever is smaller
    assert len(encode(functions, 0x1000, "keep", layout="chrome").blob()) == \
        min(len(serialize(build_tables(pieces, 0x1000), "chrome")) for pieces in (grouped, covering))

def test_lists_no_other_group_shares_are_joined():
    """The local search after cutting at excursions: five functions whose
    frames all differ give five lists stored once each, so joining them
    saves an entry for a few pairs; the runs at every address stay."""
    functions = []
    for number in range(5):
        start = 0x1000 + 0x40 * number
        body = ((4, -8), (14, -4))
        functions.append(FunctionCfi(f"f{number}", start, start + 0x40, (
            CfiRow(start), CfiRow(start + 2, 13, 8, body), CfiRow(start + 4, 13, 16 + 8 * number, body),
            CfiRow(start + 0x3C, 13, 8, body))))  # add sp; pop {r4, pc} at the end
    covering = cover_text([function_unwind(f, "keep") for f in functions], 0x1000)
    excursions = [s for before, s in zip(segments(covering), segments(covering)[1:]) if before.in_body and not s.in_body]
    grouped = group_at_excursions(covering)
    assert len(excursions) == 5 and len(grouped) < 1 + len(excursions)
    end = 0x1000 + 0x40 * 5
    assert runs_at_every_address(build_tables(grouped, 0x1000), end) == \
        runs_at_every_address(build_tables(covering, 0x1000), end)


def test_epilogues_inside_count_returns_to_the_body():
    body = ((4, -8), (14, -4))
    rows = (CfiRow(0x1000), CfiRow(0x1002, 13, 16, body), CfiRow(0x1010, 13, 8, body),
            CfiRow(0x1012, 13, 16, body), CfiRow(0x1020, 13, 8, body))  # one inside, one last
    assert epilogues_inside(function_unwind(FunctionCfi("f", 0x1000, 0x1022, rows), "keep")) == 1
