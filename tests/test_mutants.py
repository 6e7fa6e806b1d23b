"""The mutation check: every mutant of the v2 tables that changes an unwind
at a stop the original tables get right is detected by the harness; a
mutant that changes nothing survives, and the oracle says so."""

from __future__ import annotations

import json
from functools import lru_cache

from generators.corpus import generate_program
from harness.cli import main
from harness.formats import ehabi
from harness.mutants import Mutant, check_mutant, check_program, original_tables, summary


@lru_cache(maxsize=None)
def setup():
    program = generate_program(5, 0)
    return (program, *original_tables(program))


def test_every_mutant_that_changes_an_unwind_is_detected():
    results = check_program(generate_program(5, 1), 25, seed=5)
    counts = summary(results)
    assert counts["mutants"] == 25
    assert counts["changed_an_unwind"] >= 10  # the sample is not vacuous
    assert counts["changed_but_missed"] == 0
    assert counts["detected"] >= counts["changed_an_unwind"]


def a_run_with(program, encoded, predicate):
    """(function, address unwind) of an executed function whose run satisfies predicate."""
    for function in encoded.functions:
        for unwind in function.address_unwinds:
            if predicate(list(ehabi.decode(unwind.instructions, run=True))):
                return function, unwind
    raise AssertionError("no such run")


def test_an_equivalent_mutant_survives_and_the_oracle_says_it_changed_nothing():
    # `vsp = vsp + 8` written as two `vsp = vsp + 4`: other bytes, same unwind.
    program, encoded, original = setup()
    function, unwind = a_run_with(program, encoded, lambda ops: any(
        isinstance(op, ehabi.VspAdd) and op.amount == 8 for op in ops))
    ops = list(ehabi.decode(unwind.instructions, run=True))
    at = next(i for i, op in enumerate(ops) if isinstance(op, ehabi.VspAdd) and op.amount == 8)
    same = ehabi.encode(ops[:at] + [ehabi.VspAdd(4), ehabi.VspAdd(4)] + ops[at + 1:])
    assert same != unwind.instructions
    verdict = check_mutant(program, encoded, original,
                           Mutant(function.name, unwind.offset, "split", unwind.instructions, same))
    assert (verdict.rejected, verdict.detected, verdict.changed) == (None, False, False)


def test_a_wrong_pop_is_changed_and_detected_at_the_first_changed_stop():
    program, encoded, original = setup()
    function, unwind = a_run_with(program, encoded, lambda ops: any(
        isinstance(op, ehabi.Pop) and 14 in op.regs for op in ops))
    ops = [ehabi.VspAdd(4) if isinstance(op, ehabi.Pop) and 14 in op.regs else op
           for op in ehabi.decode(unwind.instructions, run=True)]
    broken = ehabi.encode(ops)
    verdict = check_mutant(program, encoded, original,
                           Mutant(function.name, unwind.offset, "lr lost", unwind.instructions, broken))
    assert verdict.changed and verdict.detected and verdict.changed_at is not None


def test_cli_reports_counts_and_exits_0_when_nothing_is_missed(tmp_path, capsys):
    out = tmp_path / "mutants.json"
    assert main(["mutants", "--programs", "1", "--per-program", "6", "--seed", "3", "--json", str(out)]) == 0
    counts = json.loads(out.read_text())
    assert counts["mutants"] == 6 and counts["changed_but_missed"] == 0
