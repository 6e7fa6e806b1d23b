"""Chrome's v1 format: hand-checked bytes, each refusal rule, the reader's
checks, the unwinder step, and behaviour on compiled fixtures."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.elf_program import program_from_elf
from harness.errors import CorruptTable, UnwindFailure
from harness.formats.chrome_v1 import CANT_UNWIND, V1Table, encode_v1
from harness.program import CfiRow, FunctionCfi
from harness.registers import LR, SP
from harness.unwind.frame import Stack, make_frame
from harness.unwind.v1 import V1Unwinder
from harness.verify.stops import verify_program

BASE = 0x1000
R7 = 7
FIXTURES = Path(__file__).resolve().parent.parent / "corpus" / "fixtures"


def pushed(address: int, cfa: int, lr_at: int | None = -4, reg: int = SP) -> CfiRow:
    saved = ((4, -8), (LR, lr_at)) if lr_at is not None else ((4, -4),)
    return CfiRow(address, reg, cfa, saved)


def framed(name: str, start: int, end: int, *extra: CfiRow) -> FunctionCfi:
    """push {r4, lr} at `start`, then `sub sp, #16`."""
    rows = (CfiRow(start), pushed(start + 2, 8), pushed(start + 4, 24), *extra)
    return FunctionCfi(name, start, end, rows)


def example() -> list[FunctionCfi]:
    return [
        framed("f", 0x1000, 0x1010),
        FunctionCfi("g", 0x1010, 0x1014, (CfiRow(0x1010),)),  # frameless
        framed("h", 0x1014, 0x1024),  # the same data as f
        FunctionCfi("k", 0x1024, 0x1030, (CfiRow(0x1024), pushed(0x1026, 8, reg=R7))),
    ]


def test_example_bytes_by_hand():
    encoded = encode_v1(example(), BASE)
    expected = bytes.fromhex(
        "03000000"  # 3 index entries
        "00000000" "14000000" "26000000"  # f, h (4 bytes after f: no gap entry), end of h + 2
        "0000" "0000" "ffff"  # f and h share data at half-word 0
        "0200"  # two rows
        "0200" "0900"  # +2: CFA 8, RA 4 (8 | 4/4)
        "0400" "1800"  # +4: CFA 24, RA as before (24 | 0)
    )
    assert encoded.blob == expected
    assert [f.name for f in encoded.functions] == ["f", "h"]
    assert encoded.frameless == ("g",)
    assert [name for name, _ in encoded.refused] == ["k"]
    assert encoded.addresses == 4 and encoded.index_entries == 3


@pytest.mark.parametrize("offset, expected", [
    (0x0, None),  # a function's first instruction: nothing (Chrome's rule)
    (0x2, (8, 4)), (0x3, (8, 4)), (0x4, (24, 4)), (0xF, (24, 4)),
    (0x10, (24, 4)), (0x12, (24, 4)),  # g, frameless, 4 bytes: f's rows go on over it
    (0x14, None), (0x16, (8, 4)), (0x25, (24, 4)),  # h's rows reach 2 bytes past its end
    (0x26, None), (0x2F, None), (0x5000, None),  # k (refused) and past the end
])
def test_example_lookups(offset, expected):
    assert V1Table.from_blob(encode_v1(example(), BASE).blob).lookup(offset) == expected


def test_before_first_row_is_chromes_zero_row():
    late = FunctionCfi("late", 0x1000, 0x1010, (CfiRow(0x1000), pushed(0x1006, 8)))
    table = V1Table.from_blob(encode_v1([late], BASE).blob)
    assert table.lookup(0x2) == (0, 0)  # Chrome reads pc from [sp]


def test_return_address_offset_carries_forward():
    # A later row that says nothing about lr keeps the last RA offset.
    function = FunctionCfi("f", 0x1000, 0x1010, (
        CfiRow(0x1000), pushed(0x1002, 8, lr_at=-8), CfiRow(0x1004, SP, 16, ((LR, -8),))))
    table = V1Table.from_blob(encode_v1([function], BASE).blob)
    assert table.lookup(0x4) == (16, 8)


@pytest.mark.parametrize("function, reason", [
    (FunctionCfi("fp", 0x1000, 0x1010, (CfiRow(0x1000), pushed(0x1002, 8, reg=R7))), "CFA through r7"),
    (framed("big", 0x1000, 0x1000 + 70 * 1024), "71680 bytes of code"),
    (framed("deep", 0x1000, 0x1010, pushed(0x1006, 0x10000)), "multiples of 4 up to 65532"),
    (FunctionCfi("va", 0x1000, 0x1010, (CfiRow(0x1000), pushed(0x1002, 24, lr_at=-20))), "CFA-20"),
    (framed("back", 0x1000, 0x1010, CfiRow(0x1008, SP, 0)), "an epilogue"),
    (framed("lr", 0x1000, 0x1010, CfiRow(0x1008, SP, 16, ((4, -8),))), "back in lr"),
    (framed("r5", 0x1000, 0x1010, CfiRow(0x1008, SP, 24, ((4, -8), (5, -12), (LR, -4)))), "changes no CFA"),
    (FunctionCfi("odd", 0x1000, 0x1010, (CfiRow(0x1000), CfiRow(0x1002, SP, 6))), "multiples of 4"),
    (FunctionCfi("expr", 0x1000, 0x1010, (CfiRow(0x1000), CfiRow(0x1002, problem="DWARF expression"))),
     "DWARF expression"),
])
def test_refusals(function, reason):
    """Each of Chrome's reasons to drop a whole function (one row it does
    not take is enough; no earlier rule stays in force)."""
    encoded = encode_v1([function], BASE)
    assert [name for name, _ in encoded.refused] == [function.name]
    assert reason in encoded.refused[0][1]
    assert V1Table.from_blob(encoded.blob).lookup(0x4) is None


def test_70_kib_function_is_refused_but_64_kib_is_not():
    assert encode_v1([framed("ok", 0x1000, 0x1000 + 0xFFFF - 1)], BASE).functions
    assert not encode_v1([framed("big", 0x1000, 0x1000 + 70 * 1024)], BASE).functions


def test_cfa_offset_at_the_14_bit_limit():
    edge = framed("edge", 0x1000, 0x1010, pushed(0x1006, 0xFFFC))
    table = V1Table.from_blob(encode_v1([edge], BASE).blob)
    assert table.lookup(0x6) == (0xFFFC, 4)


def test_functions_up_to_4_bytes_apart_need_no_gap_entry():
    functions = [framed("a", 0x1000, 0x1010), framed("b", 0x1014, 0x1020), framed("c", 0x1026, 0x1030)]
    encoded = encode_v1(functions, BASE)
    assert encoded.index_entries == 5  # a, b, CANT_UNWIND at b's end + 2, c, end
    assert V1Table.from_blob(encoded.blob).starts == [0, 0x14, 0x22, 0x26, 0x32]


# --- the reader -----------------------------------------------------------------

def good_blob() -> bytes:
    return encode_v1(example(), BASE).blob


@pytest.mark.parametrize("mutate, field", [
    (lambda b: b[:3], "header"),
    (lambda b: (100).to_bytes(4, "little") + b[4:], "header"),  # entries past the blob
    (lambda b: b + b"\x00", "UNW_DATA"),  # odd data size
    (lambda b: b[:4] + (0x20).to_bytes(4, "little") + b[8:], "UNW_INDEX"),  # starts do not ascend
    (lambda b: b[:16] + (40).to_bytes(2, "little") + b[18:], "UNW_DATA for entry 0"),  # index past data
    (lambda b: b[:22] + (9).to_bytes(2, "little") + b[24:], "UNW_DATA for entry 0"),  # rows past data
    (lambda b: b[:28] + (1).to_bytes(2, "little") + b[30:], "UNW_DATA for entry 0"),  # offsets descend
])
def test_corrupt_blobs_name_the_field(mutate, field):
    with pytest.raises(CorruptTable) as caught:
        V1Table.from_blob(mutate(good_blob()))
    assert caught.value.field == field
    assert str(caught.value).startswith("corrupt v1 table")


def test_empty_table_knows_nothing():
    table = V1Table.from_blob(encode_v1([], BASE).blob)
    assert table.lookup(0) is None and table.lookup(0x1234) is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.lists(st.integers(1, 200), min_size=0, max_size=5),
                          st.integers(0, 3)), min_size=1, max_size=8))
def test_round_trip_against_the_rows(shapes):
    """Every offset of every function looks up the CFI row in force there."""
    functions, start = [], BASE
    for size, growths, gap in shapes:
        end = start + 2 * (size + len(growths))
        rows, cfa = [CfiRow(start)], 0
        for number, growth in enumerate(growths):
            cfa += 4 * growth
            rows.append(CfiRow(start + 2 * (number + 1), SP, cfa, ((LR, -4),)))
        functions.append(FunctionCfi(f"f{len(functions)}", start, end, tuple(rows)))
        start = end + 2 * gap
    encoded = encode_v1(functions, BASE)
    table = V1Table.from_blob(encoded.blob)
    kept = [f for f in functions if len(f.rows) > 1 and f.name not in {name for name, _ in encoded.refused}]
    for address in range(BASE, functions[-1].end + 4):
        owner = next((f for f in reversed(kept) if f.start <= address), None)
        following = next((f.start for f in kept if f.start > address), None)
        covered = owner is not None and address > owner.start and (
            address < owner.end + 2 or following is not None and following - owner.end <= 4)
        row = owner.row_at(min(address, owner.end - 1)) if covered else None
        expected = (row.cfa_offset, 4 if row.cfa_offset else 0) if covered else None  # (0, 0) before its first row
        assert table.lookup(address - BASE) == expected, hex(address)


# --- the unwinder step ------------------------------------------------------------

LOW = 0x7000


def stack_with(words: dict[int, int]) -> Stack:
    data = bytearray(0x100)
    for address, value in words.items():
        data[address - LOW : address - LOW + 4] = value.to_bytes(4, "little")
    return Stack(LOW, bytes(data))


def unwinder() -> V1Unwinder:
    return V1Unwinder(V1Table.from_blob(good_blob()), BASE)


def test_step_reads_the_return_address_below_the_cfa():
    # In f after `sub sp, #16`: CFA = sp + 24, return address at CFA - 4.
    stack = stack_with({0x7010 + 24 - 4: 0x2001})
    frame = make_frame(pc=0x1006, sp=0x7010, lr=0x5555, r4=0x44)
    caller = unwinder().step(frame, stack, innermost=True)
    assert (caller.pc, caller.sp) == (0x2000, 0x7028)
    assert caller.r[4] == 0x44  # v1 restores no callee-saved register


def test_innermost_without_info_takes_lr():
    frame = make_frame(pc=0x1028, sp=0x7010, lr=0x3001)  # in k (refused: CANT_UNWIND)
    caller = unwinder().step(frame, stack_with({}), innermost=True)
    assert (caller.pc, caller.sp) == (0x3000, 0x7010)


def test_caller_without_info_is_no_info():
    frame = make_frame(pc=0x1029, sp=0x7010, lr=0x3001)  # return address into k
    with pytest.raises(UnwindFailure) as caught:
        unwinder().step(frame, stack_with({}), innermost=False)
    assert caught.value.kind == "no_info"


def test_cant_unwind_constant_is_chromes():
    assert CANT_UNWIND == 0xFFFF


# --- compiled code ------------------------------------------------------------------

@lru_cache(maxsize=None)
def verified(name: str):
    program = program_from_elf(str(FIXTURES / f"{name}.elf"), "entry")
    encoded = encode_v1(program.cfi["tables"], program.text_base)
    result = verify_program(program, [V1Unwinder(V1Table.from_blob(encoded.blob), program.text_base)])
    assert result.self_check_ok
    return program, encoded, result


@pytest.mark.parametrize("name", ["fpchain-clang-nofp", "fpchain-gcc-nofp"])
def test_v1_unwinds_simple_code_without_frame_pointers(name):
    # sp-based CFA everywhere, small frames: every stop's trace is right.
    _, encoded, result = verified(name)
    assert not encoded.refused
    assert result.stops > 20 and not result.failures


def test_v1_refuses_clang_frame_pointer_code():
    # clang -fno-omit-frame-pointer moves the CFA to r7: every function that
    # sets r7 up is refused, and only the innermost frame of a stop at a
    # function's entry or in a frameless leaf can be unwound (pc = lr).
    program, encoded, result = verified("calls-clang-fp")
    refused = {name for name, _ in encoded.refused}
    assert {"many_regs", "level1", "level2", "level3", "entry"} <= refused
    assert all("CFA through r7" in why for _, why in encoded.refused)
    kinds = {f.kind for f in result.failures}
    assert "no_info" in kinds
    assert len(result.failures) > 0.9 * result.stops


def test_v1_fails_only_where_its_format_says_it_must():
    # Generated code: every failing stop is explained by the format. The
    # first wrong frame is in a function v1 refused, or in one whose return
    # address never leaves lr (RA offset 0 reads the caller's stack), or it
    # is the innermost frame in a prologue or epilogue (no row yet / rows
    # dropped). Where v1 holds a function's rows, its bodies unwind exactly.
    from generators.corpus import generate_program
    from harness.unwind.registry import build_unwinders

    program = generate_program(0, 1)
    encoded = encode_v1(program.cfi["tables"], program.text_base)
    refused = {name for name, _ in encoded.refused}
    lr_only = {f.name for f in encoded.functions if not any(r.ra_offset for r in f.rows)}
    result = verify_program(program, build_unwinders(program, ["v1"]))
    assert result.failures and refused and lr_only
    reasons = set()
    for failure in result.failures:
        if failure.culprit in refused:
            reasons.add("refused")
        elif failure.culprit in lr_only:
            reasons.add("return address in lr")
        else:
            assert failure.frame == 0 and failure.position in ("prologue", "epilogue"), failure
            reasons.add(failure.position)
    assert {"refused", "return address in lr", "epilogue"} <= reasons
    passed = sum(n for (_, _, _, kind), n in result.counts.items() if kind is None)
    assert passed > 0
