"""The committed baseline (the default run, measured) shows what the design
predicts; CI's `run --check-baseline` keeps every later run at or below it."""

import json
from pathlib import Path

import pytest

from harness.program import POSITIONS, TRAITS

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


def test_size_per_epilogue_policy_is_reported():
    sizes = BASELINE["sizes"]
    assert set(sizes["bytes"]) == {"drop", "keep", "synthesize"}
    assert sizes["bytes"]["drop"] < sizes["bytes"]["keep"]
    drop = sizes["bytes"]["drop"]
    for policy in ("keep", "synthesize"):
        expected = round(100 * (sizes["bytes"][policy] - drop) / drop, 2)
        assert sizes["increase_over_drop_percent"][policy] == expected


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
