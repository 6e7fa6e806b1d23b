"""Defaults that fit real workloads: the instruction budget lets a billion-
instruction program run to its end, the clock is scaled to each run's work
(a runaway still ends), and verify-elf's stride is chosen from the first
run's instruction count and said in the report (`make long-run` runs such a
program to its end; these check the choice itself)."""

from __future__ import annotations

import json

import pytest

from harness import abi, commands
from harness.cli import build_parser, main
from harness.commands import limits_of
from harness.emulation.guards import (
    CLOCK_BASE,
    CLOCK_PER_INSTRUCTION,
    CLOCK_PER_SAMPLE,
    CLOCK_PER_STOP,
    as_limits,
    clocked,
    scaled_seconds,
)
from harness.linux_verify.corpus import linux_entries, linux_run
from harness.linux_verify.verify import sampling_of
from harness.report.data import without_seconds
from harness.verify.sampling import AUTO, AutoStride
from harness.verify.stops import DEFAULT_LIMITS

BILLION = 1_000_000_000


def test_the_default_budget_lets_a_billion_instructions_run():
    assert DEFAULT_LIMITS.instructions >= 4 * BILLION
    assert DEFAULT_LIMITS.seconds is None  # scaled to the work


@pytest.mark.parametrize("instructions, every", [
    (1, 1), (3_000_000, 1), (64_000_000, 1),  # every stop, up to the limit
    (64_000_001, 17),  # past it: the smallest stride giving no more than 4 M samples
    (91_000_000, 23), (BILLION, 250), (4 * BILLION, 1000)])
def test_the_automatic_stride(instructions, every):
    assert AUTO.every(instructions) == every
    assert instructions // every <= AUTO.samples or every == 1
    if every > 1:  # the smallest such stride: one less gives more samples than the target
        assert instructions / (every - 1) > AUTO.samples


def test_the_automatic_stride_is_said_with_its_reason():
    assert AUTO.describe(BILLION) == ("samples of mean stride 250: the first run counted 1,000,000,000 "
                                      "instructions, more than 64,000,000: about 4,000,000 samples")
    assert AUTO.describe(1_000) == "every stop: the first run counted 1,000 instructions, no more than 64,000,000"
    small = AutoStride(every_stop=10, samples=4)
    assert (small.every(10), small.every(11), small.every(12), small.every(13)) == (1, 3, 3, 4)
    assert sampling_of(small, 13) == {"every": 4, "chosen": "auto", "first_run_instructions": 13,
                                      "every_stop_up_to": 10, "samples": 4, "why": small.describe(13)}
    assert sampling_of(7, 13) == {"every": 7, "chosen": "given"} and sampling_of(1, 13) is None


def test_the_clock_is_scaled_to_the_work():
    assert scaled_seconds(0) == CLOCK_BASE
    # a billion instructions: every stop, at samples of stride 250, not verified (a first run)
    assert scaled_seconds(BILLION) == pytest.approx(CLOCK_BASE + BILLION * (CLOCK_PER_INSTRUCTION + CLOCK_PER_STOP),
                                                    abs=1)
    assert scaled_seconds(BILLION, 250) == pytest.approx(
        CLOCK_BASE + BILLION * CLOCK_PER_INSTRUCTION + 4_000_000 * CLOCK_PER_SAMPLE, abs=1)
    assert scaled_seconds(BILLION, None) == pytest.approx(CLOCK_BASE + BILLION * CLOCK_PER_INSTRUCTION, abs=1)
    assert scaled_seconds(1_234_567, 3) == float(int(scaled_seconds(1_234_567, 3)))  # whole seconds
    assert clocked(abi.Limits(seconds=5.0), BILLION).seconds == 5.0  # given: as given
    assert clocked(abi.Limits(), BILLION, 250).seconds == scaled_seconds(BILLION, 250)
    budget = abi.Limits(instructions=1000)
    assert clocked(budget, BILLION).seconds == scaled_seconds(1000)  # never past the budget's work
    assert as_limits(abi.Limits()).seconds == scaled_seconds(DEFAULT_LIMITS.instructions, None)
    assert as_limits(5000).seconds == scaled_seconds(5000, None)
    with pytest.raises(ValueError):
        as_limits(abi.Limits(instructions=0))


def test_the_command_line_defaults():
    args = build_parser().parse_args(["verify-elf", "x.elf"])
    assert args.every == "auto" and limits_of(args) == DEFAULT_LIMITS
    given = build_parser().parse_args(["verify-elf", "x.elf", "--every", "9", "--max-seconds", "30"])
    assert given.every == 9 and limits_of(given).seconds == 30.0


def test_every_must_be_auto_or_positive(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["verify-elf", "x.elf", "--every", "often"])
    assert stopped.value.code == 2 and "not auto or a positive integer: 'often'" in capsys.readouterr().err


@pytest.fixture(scope="module")
def small_program():
    """A slice program (make linux-slice): its command line (verify-elf's
    options, the program's arguments)."""
    entry = next(e for e in linux_entries("slice") if e["name"] == "cwc-clang-Os-nofp")
    run = linux_run(entry)
    argv = [run.program, "--sysroot", run.sysroot, "--cwd", run.cwd, *(["--stdin", run.stdin] if run.stdin else []),
            "--expect-exit", str(entry["exit_status"]), "--expect-stdout-sha256", entry["stdout_sha256"],
            "--unwinder", "dwarf", "--unwinder", "framepointer"]
    return argv, list(run.args)


def _verify(small_program, tmp_path, capsys, *options) -> tuple[dict, str]:
    argv, arguments = small_program
    out = tmp_path / "report.json"
    assert main(["verify-elf", *argv, *options, "--json", str(out), "--", *arguments]) == 0
    return json.loads(out.read_text()), capsys.readouterr().out


def test_a_short_program_is_verified_at_every_stop_and_the_report_says_why(small_program, tmp_path, capsys):
    data, printed = _verify(small_program, tmp_path, capsys, "--jobs", "1")
    program, instructions = data["programs"][0], data["timing"]["instructions"]
    assert program["stops"] == instructions and program["self_check"] == "ok"
    assert program["sampling"] == sampling_of(AUTO, instructions) and program["sampling"]["every"] == 1
    assert "every stop: the first run counted" in printed and "chosen automatically" in printed


def test_a_lowered_target_samples_and_the_report_says_so(small_program, tmp_path, capsys, monkeypatch):
    """With the targets lowered below the program's length, verify-elf
    samples it at the stride they give, as a billion-instruction program is
    sampled by the defaults; the JSON and the terminal say so, and the
    report is the same byte for byte whatever --jobs (its seconds apart)."""
    lowered = AutoStride(every_stop=100_000, samples=5_000)
    monkeypatch.setattr(commands, "AUTO", lowered)
    data, printed = _verify(small_program, tmp_path, capsys, "--jobs", "1")
    program, instructions = data["programs"][0], data["timing"]["instructions"]
    every = lowered.every(instructions)
    assert every > 100  # the program is longer than the lowered targets (some 660,000 instructions)
    assert program["sampling"] == sampling_of(lowered, instructions) and program["sampling"]["every"] == every
    assert abs(program["stops"] - instructions / every) < 0.05 * instructions / every  # about 5,000 samples
    assert program["self_check"] == "ok" and data["timing"]["instructions"] == instructions
    assert f"samples of mean stride {every}: the first run counted {instructions:,}" in printed.replace("\n", " ")
    again, _ = _verify(small_program, tmp_path, capsys, "--jobs", "2")
    assert json.dumps(without_seconds(again)) == json.dumps(without_seconds(data))


def test_a_given_stride_wins(small_program, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(commands, "AUTO", AutoStride(every_stop=100_000, samples=5_000))
    data, printed = _verify(small_program, tmp_path, capsys, "--jobs", "1", "--every", "1000")
    assert data["programs"][0]["sampling"] == {"every": 1000, "chosen": "given"}
    assert "(samples of mean stride 1000)" in printed and "automatically" not in printed
