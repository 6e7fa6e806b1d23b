"""The floor on v2 bytes (harness.formats.chrome_v2.floor): never above any
table that gives the same runs, exact where there is nothing to choose."""

import random

import pytest

from generators.corpus import generate_program
from harness.formats.chrome_v2 import encode, encode_as_chrome
from harness.formats.chrome_v2.encoder import AddressUnwind, FunctionUnwind, cover_text
from harness.formats.chrome_v2.floor import function_boundaries, least_bytes, pattern_occurrences
from harness.formats.chrome_v2.grouping import segments
from harness.formats.chrome_v2.layout import serialize
from harness.formats.chrome_v2.tables import build_tables

BASE = 0x1000
# Runs as the encoder writes them: vsp += 4*k, then finish (0xb0).
RUNS = [bytes([0xB0]), bytes([0x00, 0xB0]), bytes([0x01, 0xB0]), bytes([0x02, 0xB0]), bytes([0x84, 0x00, 0xB0])]


def function(start: int, *pieces: tuple[int, int]) -> FunctionUnwind:
    """A function of `pieces`: (bytes, run number) in address order."""
    unwinds, offset = [], 0
    for size, run in pieces:
        unwinds.append(AddressUnwind(offset, RUNS[run]))
        offset += size
    return FunctionUnwind(start, start + offset, f"f{start:x}", tuple(unwinds))


def smallest_grouping(functions: list[FunctionUnwind]) -> int:
    """The smallest blob our table builder writes for `functions` over every
    cut of their segments into function table entries (gaps as the encoder
    fills them)."""
    covering = cover_text(functions, BASE)
    found = segments(covering)
    best = None
    for mask in range(1 << (len(found) - 1)):
        cuts = [0] + [i for i in range(1, len(found)) if mask >> (i - 1) & 1]
        pieces = []
        for low, high in zip(cuts, [*cuts[1:], len(found)]):
            start = found[low].address
            end = found[high].address if high < len(found) else covering[-1].end
            pieces.append(FunctionUnwind(start, end, "piece", tuple(
                AddressUnwind(s.address - start, s.run) for s in found[low:high])))
        size = len(serialize(build_tables(pieces, BASE), "chrome"))
        best = size if best is None else min(best, size)
    return best


def test_one_function_of_one_run_costs_exactly_its_floor():
    """Header (8 words), one page, one entry, one pair, a one-byte run:
    nothing to choose (the function fills its page, so the encoder adds no
    refusing filler after it)."""
    functions = [function(BASE, (0x20000, 0))]
    assert least_bytes(functions, BASE) == 32 + 4 + 4 + 2 + 1
    assert least_bytes(functions, BASE) == len(encode_like(functions))


def encode_like(functions: list[FunctionUnwind]) -> bytes:
    return serialize(build_tables(cover_text(functions, BASE), BASE), "chrome")


def test_pages_and_the_seed_layout_count():
    """A function reaching into a second 128 KiB page needs two page words;
    the seed header is ten words and adds a continuation byte."""
    one = [function(BASE, (0x20002, 0))]
    assert least_bytes(one, BASE) == 32 + 8 + 4 + 2 + 1
    assert least_bytes(one, BASE, "seed") == 40 + 8 + 1 + 4 + 2 + 1


@pytest.mark.parametrize("seed", range(30))
def test_no_cut_into_entries_beats_the_floor(seed):
    """Small maps with repeated shapes and gaps: every grouping our builder
    can write is at least the floor."""
    rng = random.Random(seed)
    shapes = [tuple((rng.choice((2, 4, 6)), rng.randrange(len(RUNS))) for _ in range(rng.randint(1, 3)))
              for _ in range(2)]
    functions, at = [], BASE
    for _ in range(rng.randint(1, 3)):  # at most 12 segments: 2,048 cuts
        made = function(at, *rng.choice(shapes))
        functions.append(made)
        at = made.end + rng.choice((0, 0, 2, 4))
    assert least_bytes(functions, BASE) <= smallest_grouping(functions)


def test_the_floor_is_below_every_encoder_on_generated_programs():
    """Every policy and grouping we build, and Chrome's own builder, for the
    same map of runs: none is below the floor of that map."""
    for index in range(6):
        program = generate_program(0, index)
        for policy in ("drop", "keep", "synthesize"):
            encoded = encode(program.cfi["tables"], program.text_base, policy, code_at=program.code,
                             layout="chrome")
            assert least_bytes(encoded.functions, program.text_base) <= len(encoded.blob())
        chrome = encode_as_chrome(program.cfi["tables"], program.text_base)
        assert least_bytes(chrome.functions, program.text_base) <= len(chrome.blob())


def test_a_gap_between_equal_runs_needs_no_boundary():
    """Padding runs no code: where the runs on both sides agree, the next
    function needs no boundary; where they differ, one boundary stays,
    free to lie anywhere in the gap."""
    same = [function(BASE, (8, 1)), function(BASE + 12, (8, 1))]
    assert [b.run for b in function_boundaries(cover_text(same, BASE))] == [0]
    differ = [function(BASE, (8, 1)), function(BASE + 12, (8, 2))]
    second = function_boundaries(cover_text(differ, BASE))[1]
    assert (second.earliest, second.address) == (BASE + 8, BASE + 12)


def test_patterns_are_counted_with_loose_steps_matching_any_distance():
    """Three functions of the same shape (runs 1, 2 at 4 bytes apart), the
    last after a gap: the pattern from each start occurs three times, and a
    step into the gap matches the exact ones."""
    functions = [function(BASE, (4, 1), (4, 2)), function(BASE + 8, (4, 1), (4, 2)),
                 function(BASE + 20, (4, 1), (4, 2))]
    boundaries = function_boundaries(cover_text(functions, BASE))
    assert [b.run for b in boundaries] == [0, 1, 0, 1, 0, 1]
    assert boundaries[4].earliest == BASE + 16  # the gap: anywhere from the end of the second function
    occurrences = pattern_occurrences(boundaries)
    assert [o.count for o in occurrences[0][:2]] == [3, 3]  # (run 1), then (run 1, 4 bytes, run 2)
    # Run 2, then run 1: exact from the first function's end, loose across
    # the gap from the second's; each counts the other.
    assert occurrences[1][1].key is not None and occurrences[3][1].key is None
    assert occurrences[1][1].count == occurrences[3][1].count == 2


def test_loose_steps_cannot_give_a_bound_above_a_real_table():
    """Brute force over every cut where gaps move a boundary."""
    for gap in (2, 4, 6):
        functions = [function(BASE, (4, 1), (6, 2)), function(BASE + 10 + gap, (4, 1), (6, 2)),
                     function(BASE + 20 + 2 * gap, (4, 3))]
        assert least_bytes(functions, BASE) <= smallest_grouping(functions)
