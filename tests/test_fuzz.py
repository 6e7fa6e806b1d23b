"""Fuzzing, bounded: readers fed mutated tables and unwinders fed random
states either work or raise their typed error, within a time limit.

In CI each property runs the default number of examples; `make fuzz` runs
the same properties with the `fuzz` profile (many more examples, see
conftest.py and the README).
"""

from __future__ import annotations

import json
import signal
import struct
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from generators.corpus import generate_program
from harness.elf_program import program_from_elf
from harness.errors import InputError, UnwindFailure
from harness.formats import chrome_v2
from harness.formats.arm_exidx import parse_exidx
from harness.formats.chrome_v1 import V1Table, encode_v1
from harness.formats.dwarf_cfi import read_cfi
from harness.formats.elf import open_elf
from harness.formats.qut import QutTable, encode_from_cfi
from harness.formats.vmkunwind import VmkTable, encode_vmkunwind
from harness.manifest import elf_builds
from harness.report.markdown import markdown
from harness.runner import Shard, Unit, assemble, run_unit
from harness.shards import partial, read_partials
from harness.unwind.exidx import ExidxUnwinder
from harness.unwind.frame import Frame, Stack
from harness.unwind.qut import QutUnwinder
from harness.unwind.registry import UNWINDER_NAMES, build_unwinders
from harness.unwind.v2 import V2Unwinder
from harness.unwind.vmkunwind import VmkunwindUnwinder
from harness.unwind.walk import walk

ROOT = Path(__file__).resolve().parent.parent
ELF = ROOT / "corpus" / "fixtures" / "calls-gcc-fp.elf"
SECONDS = 5  # no single input may take longer: a hang fails the test


class TooSlow(Exception):
    pass


@contextmanager
def bounded(seconds: float = SECONDS):
    """Fail, rather than hang, if the body runs longer than `seconds`."""
    def expire(signum, frame):
        raise TooSlow(f"took more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@lru_cache(maxsize=None)
def program():
    return generate_program(0, 3)


@lru_cache(maxsize=None)
def v2_blob(layout: str) -> bytes:
    p = program()
    return chrome_v2.encode(p.cfi["tables"], p.text_base, "drop", layout=layout).blob()


@lru_cache(maxsize=None)
def v1_blob() -> bytes:
    return encode_v1(program().cfi["tables"], program().text_base).blob


@lru_cache(maxsize=None)
def comparator_blobs() -> dict[str, bytes]:
    p = program()
    return {"vmkunwind": encode_vmkunwind(p.cfi["reference"], p.text_base).blob,
            "qut": encode_from_cfi(p.cfi["reference"], p.text_base).blob}


# --- mutations ---------------------------------------------------------------------

@st.composite
def mutated(draw, blob: bytes) -> bytes:
    """A valid blob with some of: bit flips, an inflated count or offset
    (a 16- or 32-bit field overwritten with a large value), a truncation,
    inserted or deleted bytes. Often just one change, so that mutants that
    still load are common too."""
    data = bytearray(blob)
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 4]))):
        kind = draw(st.sampled_from(["flip", "inflate16", "inflate32", "truncate", "insert", "delete"]))
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "inflate16" and at + 2 <= len(data):
            data[at : at + 2] = struct.pack("<H", draw(st.sampled_from([0x7FFF, 0xFFFE, 0xFFFF, 0x8000])))
        elif kind == "inflate32" and at + 4 <= len(data):
            value = draw(st.sampled_from([0x7FFFFFFF, 0xFFFFFFFF, 0x10000, 1 << 20, len(data) + 1]))
            data[at : at + 4] = struct.pack("<I", value)
        elif kind == "truncate":
            del data[at:]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del data[at : at + draw(st.integers(1, 8))]
    return bytes(data)


registers = st.lists(st.integers(0, 0xFFFFFFFF), min_size=16, max_size=16)


def random_frame(regs: list[int], pc_in_text: int | None = None) -> Frame:
    if pc_in_text is not None:
        regs = list(regs)
        regs[15] = pc_in_text
    return Frame(r=tuple(regs))


def step_or_fail(unwinder, frame: Frame, stack, innermost: bool):
    """A frame or a typed failure; anything else propagates (a defect)."""
    try:
        return unwinder.step(frame, stack, innermost)
    except UnwindFailure as failure:
        return failure


# No max_examples here: the profile decides (100 in CI, 5,000 under `make fuzz`).
FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def rejected(error: InputError) -> None:
    event(f"rejected: {type(error).__name__}")


# --- readers --------------------------------------------------------------------------

@pytest.mark.parametrize("layout", chrome_v2.LAYOUTS)
@FUZZ
@given(data=st.data())
def test_v2_reader_on_mutated_blobs(layout, data):
    blob = data.draw(mutated(v2_blob(layout)))
    p = program()
    with bounded():
        try:
            reader = chrome_v2.V2Reader.from_blob(blob, layout)
        except InputError as error:
            return rejected(error)
        event("accepted")
        unwinder = V2Unwinder(reader, p.text_base)
        stack = Stack(0x7000, data.draw(st.binary(min_size=64, max_size=256)))
        for _ in range(8):
            pc = data.draw(st.integers(p.text_base - 64, p.text_base + 0x30000)) & ~1
            reader.lookup(pc - p.text_base)
            frame = random_frame(data.draw(registers), pc)
            step_or_fail(unwinder, frame, stack, data.draw(st.booleans()))


@FUZZ
@given(data=st.data())
def test_v1_reader_on_mutated_blobs(data):
    blob = data.draw(mutated(v1_blob()))
    with bounded():
        try:
            table = V1Table.from_blob(blob)
        except InputError as error:
            return rejected(error)
        event("accepted")
        for _ in range(8):
            table.lookup(data.draw(st.integers(0, 0x40000)))


@pytest.mark.parametrize("fmt", ["vmkunwind", "qut"])
@FUZZ
@given(data=st.data())
def test_comparator_readers_on_mutated_blobs(fmt, data):
    """vmkunwind and QUT blobs: read or refused with a typed error, and
    each step on what was read gives a frame or a typed failure."""
    blob = data.draw(mutated(comparator_blobs()[fmt]))
    p = program()
    with bounded():
        try:
            table = (VmkTable if fmt == "vmkunwind" else QutTable).from_blob(blob)
        except InputError as error:
            return rejected(error)
        event("accepted")
        unwinder = (VmkunwindUnwinder(table, p.text_base) if fmt == "vmkunwind"
                    else QutUnwinder(table, p.text_base, "CFI"))
        stack = Stack(0x7000, data.draw(st.binary(min_size=64, max_size=256)))
        for _ in range(8):
            pc = data.draw(st.integers(p.text_base - 64, p.text_base + 0x30000)) & ~1
            step_or_fail(unwinder, random_frame(data.draw(registers), pc), stack, data.draw(st.booleans()))


@FUZZ
@given(data=st.data())
def test_exidx_parser_on_mutated_sections(data):
    sections = program().exidx
    exidx = data.draw(mutated(sections.exidx))
    extab = data.draw(mutated(sections.extab)) if sections.extab and data.draw(st.booleans()) else sections.extab
    with bounded():
        try:
            entries = parse_exidx(exidx, sections.exidx_address, extab, sections.extab_address)
        except InputError as error:
            return rejected(error)
        event("accepted")
        unwinder = ExidxUnwinder(entries, "exidx", sections.end)
        stack = Stack(0x7000, data.draw(st.binary(min_size=64, max_size=256)))
        for _ in range(4):
            frame = random_frame(data.draw(registers))
            step_or_fail(unwinder, frame, stack, data.draw(st.booleans()))


@lru_cache(maxsize=None)
def elf_layout() -> tuple[bytes, int, int]:
    """The fixture's bytes and the file offset and size of its .debug_frame."""
    raw = ELF.read_bytes()
    section = open_elf(str(ELF)).elf.get_section_by_name(".debug_frame")
    return raw, section["sh_offset"], section["sh_size"]


@settings(max_examples=max(60, settings.default.max_examples // 3), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_cfi_reader_on_mutated_debug_frame(data, tmp_path):
    raw, offset, size = elf_layout()
    section = data.draw(mutated(raw[offset : offset + size]))
    # Same size in the file (the section header stays valid); the mutation is in the bytes.
    section = (section + bytes(size))[:size]
    path = tmp_path / "mutated.elf"
    path.write_bytes(raw[:offset] + section + raw[offset + size :])
    with bounded():
        try:
            functions = read_cfi(open_elf(str(path)))
        except InputError as error:
            return rejected(error)
        event("accepted" if not any(f.problems for f in functions) else "accepted, with problems listed")


@lru_cache(maxsize=None)
def elf_regions() -> tuple[bytes, tuple[tuple[str, int, int], ...]]:
    """The fixture's bytes and where its headers and unwind sections lie:
    what a corrupt or hostile ELF changes."""
    raw = ELF.read_bytes()
    elf = open_elf(str(ELF)).elf
    regions = [("ELF header", 0, 0x34), ("program headers", elf["e_phoff"], elf["e_phnum"] * elf["e_phentsize"]),
               ("section headers", elf["e_shoff"], elf["e_shnum"] * elf["e_shentsize"])]
    for name in (".debug_frame", ".ARM.exidx", ".symtab"):
        section = elf.get_section_by_name(name)
        if section is not None:
            regions.append((name, section["sh_offset"], section["sh_size"]))
    return raw, tuple(regions)


@settings(max_examples=max(60, settings.default.max_examples // 3), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_elfs_load_or_are_refused(data, tmp_path):
    """Headers and unwind sections mutated: the ELF becomes a Program with
    unwinders, or is refused with a typed error, within the time bound (the
    hostile classes of tests/test_hostile.py, at volume)."""
    raw, regions = elf_regions()
    name, offset, size = data.draw(st.sampled_from(regions))
    part = data.draw(mutated(raw[offset : offset + size]))
    path = tmp_path / "mutated.elf"
    path.write_bytes(raw[:offset] + (part + bytes(size))[:size] + raw[offset + size :])
    with bounded():
        try:
            build_unwinders(program_from_elf(str(path), "entry"))
        except InputError as error:
            return rejected(error)
        event(f"accepted, {name} mutated")


def test_an_index_entry_outside_the_code_starts_no_function(tmp_path):
    """An .ARM.exidx entry whose address lies outside the code (the last
    entry's prel31 0x7f000100: 0xff010304, as a mutation found) is no
    function start to look for (the finder read the code there: KeyError)."""
    raw, regions = elf_regions()
    _, offset, size = next(region for region in regions if region[0] == ".ARM.exidx")
    at = offset + size - 8
    path = tmp_path / "far.elf"
    path.write_bytes(raw[:at] + (0x7F00_0100).to_bytes(4, "little") + raw[at + 4 :])
    with bounded():
        assert build_unwinders(program_from_elf(str(path), "entry"))


# --- shard reports and manifests -----------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 70), 1 << 70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12)


@lru_cache(maxsize=None)
def genuine_shards() -> tuple[dict, dict]:
    """The two shard reports of `run --programs 2 --no-elf --shard I/2`."""
    shards = []
    for index in range(2):
        config = {"seed": 0, "programs": 2, "unwinders": list(UNWINDER_NAMES), "elf": False, "units": 2}
        records = [run_unit(Unit(index, tuple(UNWINDER_NAMES), 0, index))]
        shards.append(partial("run", config, Shard(index, 2), records, 1.0))
    return tuple(shards)


def _paths(value, where=()):
    """Every JSON path in `value`, as tuples of keys and indices."""
    yield where
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        yield from _paths(child, (*where, key))


@st.composite
def tampered(draw, document: dict) -> dict:
    """`document` with one to three places replaced by random JSON, deleted, or duplicated."""
    document = json.loads(json.dumps(document))
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(list(_paths(document))))
        if not where:
            continue
        *parents, key = where
        parent = document
        for step in parents:
            parent = parent[step]
        action = draw(st.sampled_from(["replace", "delete", "duplicate"]))
        if action == "delete":
            del parent[key]
        elif action == "duplicate" and isinstance(parent, list):
            parent.insert(key, parent[key])
        else:
            parent[key] = draw(json_values)
    return document


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_tampered_shards_merge_or_are_refused(data, tmp_path):
    """Shard reports changed at random: merge refuses them with a typed
    error, or what it accepts assembles and renders (no traceback)."""
    shards = list(genuine_shards())
    which = data.draw(st.integers(0, 1))
    shards[which] = data.draw(tampered(shards[which]))
    paths = []
    for index, shard in enumerate(shards):
        paths.append(tmp_path / f"s{index}.json")
        paths[-1].write_text(json.dumps(shard))
    with bounded():
        try:
            command, config, records, seconds = read_partials([str(p) for p in paths])
        except InputError as error:
            return rejected(error)
        markdown(assemble(records, config["unwinders"], config["seed"], seconds), "merged")
        event("accepted")


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(manifest=json_values)
def test_random_manifests_are_read_or_refused(manifest, tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with bounded():
        try:
            builds = elf_builds(tmp_path)
        except InputError as error:
            return rejected(error)
        assert all(isinstance(b["file"], str) for b in builds)


# --- unwinders --------------------------------------------------------------------------

@lru_cache(maxsize=None)
def all_unwinders():
    return build_unwinders(program(), UNWINDER_NAMES)


@FUZZ
@given(regs=registers, stack_bytes=st.binary(min_size=0, max_size=512),
       low=st.integers(0, 0xFFFFF000), innermost=st.booleans(), in_text=st.booleans(),
       sp_in_stack=st.booleans(), offset=st.integers(0, 0x40000))
def test_every_unwinder_on_random_states(regs, stack_bytes, low, innermost, in_text, sp_in_stack, offset):
    low &= ~3
    if sp_in_stack:  # most real states: sp inside the stack, anything above it
        regs = list(regs)
        regs[13] = (low + regs[13] % max(len(stack_bytes), 4)) & ~3
    frame = random_frame(regs, (program().text_base + offset) & ~1 if in_text else None)
    stack = Stack(low, stack_bytes)
    with bounded():
        for unwinder in all_unwinders():
            result = step_or_fail(unwinder, frame, stack, innermost)
            assert isinstance(result, (Frame, UnwindFailure)), unwinder.name
            event(f"{unwinder.name}: {result.kind if isinstance(result, UnwindFailure) else 'frame'}")
            if isinstance(result, Frame):
                assert all(0 <= value <= 0xFFFFFFFF for value in result.r), unwinder.name


@FUZZ
@given(regs=registers, words=st.lists(st.integers(0, 0xFFFFFFFF), min_size=16, max_size=128),
       offset=st.integers(0, 0x40000))
def test_walks_give_frames_then_at_most_one_typed_failure(regs, words, offset):
    """A stack of random words, with sp inside it: every walk gives frames
    and, if a step fails, one typed failure that ends it; none hangs."""
    low = 0x7000
    regs = list(regs)
    regs[13] = low + 4 * (regs[13] % 8)
    frame = random_frame(regs, (program().text_base + offset) & ~1)
    stack = Stack(low, struct.pack(f"<{len(words)}I", *words))
    with bounded():
        for unwinder in all_unwinders():
            walked = list(walk(unwinder, frame, stack, 64))
            assert len(walked) <= 64
            assert all(isinstance(got, Frame) for got in walked[:-1])
            assert walked == [] or isinstance(walked[-1], (Frame, UnwindFailure))
