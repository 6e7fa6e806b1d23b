"""Property: for random functions, at every address, the run the reader finds
is exactly the run the encoder chose for that address."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.formats import ehabi
from harness.formats.chrome_v2 import LAYOUTS, V2Reader, encode
from harness.program import CfiRow, FunctionCfi

PAGE = 1 << 17
CORE = (4, 5, 6, 7, 8, 9, 10, 11, 14)


@st.composite
def row_states(draw):
    """A plausible frame: a push of some core registers, maybe vpush, locals."""
    pushed = sorted(draw(st.sets(st.sampled_from(CORE), max_size=9)))
    vfp = draw(st.integers(0, 8))
    locals_ = 4 * draw(st.one_of(st.integers(0, 80), st.integers(0, 1 << 18)))
    varargs = draw(st.sampled_from([0, 16]))
    saved, offset = [], -varargs
    for reg in reversed(pushed):
        offset -= 4
        saved.append((reg, offset))
    for d in reversed(range(8, 8 + vfp)):
        offset -= 8
        saved.append((256 + d, offset))
    cfa_offset = -offset + locals_
    if draw(st.booleans()) and 7 in pushed:
        # Frame pointer: r7 points at its own save slot.
        r7_slot = dict(saved)[7]
        return 7, -r7_slot, tuple(sorted(saved))
    return 13, cfa_offset, tuple(sorted(saved))


@st.composite
def programs(draw):
    count = draw(st.integers(1, 12))
    functions, address = [], 2 * draw(st.integers(0, 64))
    for i in range(count):
        address += 2 * draw(st.sampled_from([0, 0, 0, 1, 8]))  # occasional gaps
        size = 2 * draw(st.one_of(st.integers(1, 200), st.integers(1, PAGE)))
        offsets = sorted(draw(st.sets(st.integers(1, size - 1), max_size=6))) if size > 1 else []
        rows = [CfiRow(address)]
        for offset in offsets:
            reg, cfa, saved = draw(row_states())
            rows.append(CfiRow(address + 2 * offset, reg, cfa, saved))
        functions.append(FunctionCfi(f"f{i}", address, address + 2 * size, tuple(rows)))
        address += 2 * size
    return functions


def probe_addresses(function, unwinds):
    points = {function.start, function.end - 2}
    for unwind in unwinds:
        points |= {function.start + unwind.offset, function.start + unwind.offset - 2}
    page = (function.start // PAGE + 1) * PAGE
    while page < function.end:
        points |= {page - 2, page, page + 2}
        page += PAGE
    return sorted(p for p in points if function.start <= p < function.end)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.sampled_from(LAYOUTS), st.sampled_from(["drop", "keep"]), st.integers(0, 0x1000))
def test_reader_finds_the_encoded_run_at_every_address(functions, layout, policy, base_halfwords):
    text_base = functions[0].start - 2 * base_halfwords if functions[0].start >= 2 * base_halfwords else 0
    encoded = encode(functions, text_base, policy, layout=layout)
    reader = V2Reader.from_blob(encoded.blob(), layout)
    for function in encoded.covering:
        unwinds = function.address_unwinds
        for address in probe_addresses(function, unwinds):
            expected = [u for u in unwinds if u.offset <= address - function.start][-1]
            found = reader.lookup(address - text_base)
            assert found is not None, hex(address)
            assert found.function_start == function.start - text_base
            assert ehabi.encode(reader.run(found.instruction_index), layout == "chrome") == expected.instructions
