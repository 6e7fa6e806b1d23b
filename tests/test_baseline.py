"""The committed baseline (the default run, measured) shows what the design
predicts; CI's `run --check-baseline` keeps every later run at or below it."""

import json
from pathlib import Path

import pytest

from harness.classify import POSITIONS, TRAITS
from harness.report.sizes import chrome_reference
from harness.unwind.registry import SIZE_COLUMNS

BASELINE = json.loads((Path(__file__).resolve().parent.parent / "reports" / "baseline.json").read_text())
ROWS = {(r["unwinder"], r["category"], r["position"]): r for r in BASELINE["results"]}


def test_baseline_is_the_default_run():
    assert (BASELINE["input"], BASELINE["seed"]) == ("generated", 0)
    assert all(p["self_check"] == "ok" for p in BASELINE["programs"])


@pytest.mark.parametrize("category", ["all", *TRAITS])
@pytest.mark.parametrize("position", ["prologue", "body"])
def test_v2_never_fails_outside_epilogues(category, position):
    assert ROWS[("v2", category, position)]["failed"] == 0


def test_v2_fails_in_epilogues():
    assert ROWS[("v2", "all", "epilogue")]["failed"] > 0


@pytest.mark.parametrize("unwinder", ["v2+epilogue", "v2-synth", "v2-gcc", "dwarf"])
def test_epilogue_aware_unwinders_never_fail(unwinder):
    assert ROWS[(unwinder, "all", "all")]["failed"] == 0
    assert ROWS[(unwinder, "all", "epilogue")]["stops"] > 0


def test_sizes_cover_every_format_for_every_input():
    generated, *builds, chrome = BASELINE["sizes"]["rows"]
    assert generated["input"].startswith("generated corpus")
    assert [r["input"] for r in builds] == [g["input"] for g in BASELINE["elf"]]
    assert chrome == chrome_reference()
    for row in (generated, *builds):
        size = row["bytes"]
        assert set(size) == set(SIZE_COLUMNS)
        # keep and synthesize describe at least drop's rows, yet may take fewer
        # bytes: their tables may be cut at each epilogue (split_at_epilogues),
        # which lets far more offset lists be shared (GCC -O0: 1,945 -> 1,506)
        assert min(size["v2 drop"], size["v2 keep"], size["v2 synthesize"]) > 0
        assert size["exidx+extab"] > 0 and size["v1"] > 0 and row["addresses"] >= row["functions"] > 0
    # Generated programs carry no DWARF sections; every compiled build does.
    assert generated["bytes"][".debug_frame"] is None
    assert all(row["bytes"][".debug_frame"] > 0 for row in builds)
    # Epilogue rows (gcc-style) cost at most a fifth more than dropping them
    # (issue 17's bound; grouping entries at excursions makes them cheaper).
    assert generated["bytes"]["v2 keep"] <= 1.2 * generated["bytes"]["v2 drop"]
    assert generated["v1_refused"] > 0


@pytest.mark.parametrize("category", ["all", *TRAITS])
def test_exidx_is_exact_in_bodies_and_like_v2_in_epilogues(category):
    # The generator emits each function's body state, as a compiler does.
    assert ROWS[("exidx", category, "body")]["failed"] == 0
    # In an epilogue both still describe the body.
    assert ROWS[("exidx", category, "epilogue")]["failed"] == ROWS[("v2", category, "epilogue")]["failed"]


def test_exidx_fails_in_most_prologue_stops():
    row = ROWS[("exidx", "all", "prologue")]
    assert row["failed"] > row["stops"] / 2


def test_v1_fails_for_the_functions_its_widths_cannot_hold():
    # Blamed on the first wrong frame's function: r7-based CFAs (alloca,
    # frame pointer), frames over 64 KiB, leaves whose return address stays in lr.
    blame = BASELINE["culprits"]["v1"]["traits"]
    assert {"alloca", "frame_pointer", "huge_frame", "leaf"} <= set(blame)
    assert 0 < ROWS[("v1", "all", "all")]["failed"] < ROWS[("v1", "all", "all")]["stops"]


def test_comparators_are_judged_on_what_they_restore():
    assert BASELINE["checked"]["v1"] == "pc, sp"
    assert BASELINE["checked"]["framepointer"] == "pc, sp, r7"
    assert BASELINE["checked"]["v2"] == BASELINE["checked"]["exidx"] == "pc, sp, r4-r11, d8-d15"


def test_comparators_run_on_every_compiled_build():
    for group in BASELINE["elf"]:
        names = {r["unwinder"] for r in group["results"]}
        assert {"v1", "exidx", "framepointer"} <= names, group["build"]


@pytest.mark.parametrize("category", ["all", *TRAITS])
def test_every_trait_has_stops(category):
    assert ROWS[("v2", category, "all")]["stops"] > 0


@pytest.mark.parametrize("position", POSITIONS)
def test_every_position_has_stops(position):
    assert ROWS[("v2", "all", position)]["stops"] > 0


def test_baseline_depends_on_no_checkout():
    # Paths in reports are repository-relative, so any clone reproduces them byte for byte.
    text = json.dumps(BASELINE)
    assert '": "/' not in text
    assert {g["input"] for g in BASELINE["elf"]} == {f"corpus/elf/{g['build']}.elf" for g in BASELINE["elf"]}


def test_frame_pointer_walking_needs_clangs_frame_records():
    for group in BASELINE["elf"]:
        row = next(r for r in group["results"]
                   if (r["unwinder"], r["category"], r["position"]) == ("framepointer", "all", "all"))
        if group["build"].startswith("clang") and group["build"].endswith("-fp"):
            assert row["failed"] < row["stops"] / 2, group["build"]
        else:  # GCC's r7 is the frame's bottom; in nofp builds r7 is a general register
            assert row["failed"] > 0.99 * row["stops"], group["build"]
