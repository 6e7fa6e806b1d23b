"""The synthesis fuzz (`make synth-fuzz`, harness.synth_fuzz) on a seeded
slice: two csmith programs, each built by gcc and clang at -O0 and -O2
with a frame pointer, compared at every instruction and run where the
rows disagree. csmith (apt: csmith, libcsmith-dev; `make toolchains`
installs both), the cross compilers and the armhf sysroot are needed:
without them these tests fail, naming what is missing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import ToolMissing
from harness.synth_fuzz import COMPILERS, VOLUME, Generated, compile_program, csmith_source, flags_of, fuzz
from harness.synth_fuzz_judge import BUDGET_FAULT, Build, reason_key, window
from harness.synth_fuzz_report import VERDICTS, grouped_findings, markdown, report_json

ROOT = Path(__file__).resolve().parent.parent

# Seed 1 ends after some 330,000 instructions; seed 2 loops for ever, so its
# runs end at the budget (its disagreements still judged up to there).
SLICE = {"seed": 1, "count": 2, "compilers": ("gcc", "clang"), "flag_sets": ("O0", "O2-fp"), "budget": 2_000_000}
COUNTED = ("functions", "instructions", "agree", "disagree", "disagree_run", "disagree_data", "refused", "stops")


def _fuzzed(jobs: int) -> dict:
    s = SLICE
    return fuzz(s["seed"], s["count"], s["compilers"], s["flag_sets"], s["budget"], jobs=jobs)


@pytest.fixture(scope="module")
def report() -> dict:
    return _fuzzed(jobs=2)


def test_every_build_of_the_slice_is_compared_and_its_counts_add_up(report):
    builds = report["builds"]
    assert [(b["seed"], b["compiler"], b["flags"]) for b in builds] == [
        (seed, compiler, flags) for seed in (1, 2) for compiler in ("gcc", "clang") for flags in ("O0", "O2-fp")]
    for b in builds:
        assert "error" not in b, b
        assert b["functions"] > 0 and b["instructions"] == b["agree"] + b["disagree"] + b["refused"], b
        assert b["disagree_run"] + b["disagree_data"] <= b["disagree"], b  # no run executes a literal pool
        assert sum(b["outcomes"].values()) == b["stops"], b
        assert sum(b["refusals"].values()) == b["refused"], b
    for group in report["groups"]:
        mine = [b for b in builds if (b["compiler"], b["flags"]) == (group["compiler"], group["flags"])]
        assert group["builds"] == len(mine) == 2
        assert all(group[key] == sum(b[key] for b in mine) for key in COUNTED), group
        assert sum(group["verdicts"].values()) == group["stops"]
    assert all(report["totals"][key] == sum(g[key] for g in report["groups"]) for key in COUNTED)
    # -O0 keeps csmith's safe-math wrappers as functions of their own
    assert all(b["functions"] >= 30 for b in builds if b["flags"] == "O0")


def test_disagreements_are_judged_by_running_the_program(report):
    """clang's epilogues differ from its CFI (which leaves them
    undescribed): the program runs, and at every stop there the rows
    from code are right and the compiler's wrong."""
    clang = [b for b in report["builds"] if b["compiler"] == "clang" and b["stops"]]
    assert clang, "no clang build ran a disagreeing instruction"
    for b in clang:
        assert b["outcomes"].get("code right", 0) > 0, b
    verdicts = report["totals"]["verdicts"]
    assert set(verdicts) == set(VERDICTS) and verdicts["code right"] > 0
    wrong = [f for f in report["findings"] if f["kind"] != "refusal"]
    assert verdicts["compiler right"] == 0 and not wrong, json.dumps(wrong, indent=1)


def test_a_program_that_never_ends_is_judged_up_to_its_budget(report):
    ended = [b for b in report["builds"] if b["seed"] == 2 and b["disagree"]]
    assert ended and all(b["fault"] == BUDGET_FAULT for b in ended)
    assert any(b["stops"] for b in ended)  # the stops before the budget ran out are judged
    assert all(b["fault"] is None for b in report["builds"] if b["seed"] == 1)
    assert report["totals"]["runs"][BUDGET_FAULT] == len(ended)


def test_the_report_repeats_byte_for_byte(report):
    again = _fuzzed(jobs=1)
    assert again["timing"]["seconds"] > 0
    strip = lambda r: report_json({k: v for k, v in r.items() if k != "timing"})  # noqa: E731
    assert strip(again) == strip(report)
    assert markdown(again).rsplit("\n(", 1)[0] == markdown(report).rsplit("\n(", 1)[0]


def test_the_summary_names_the_settings_and_every_group(report):
    text = markdown(report)
    assert "csmith 2.3" in text and "--no-packed-struct" in text
    for compiler in SLICE["compilers"]:
        for flag_set in SLICE["flag_sets"]:
            assert f"| {compiler} | {' '.join(flags_of(compiler, flag_set))} | 2 |" in text
    assert report["flag_sets"]["clang"]["O2-fp"] == ["-O2", "-fno-omit-frame-pointer"]
    assert set(report["versions"]) == {"csmith", *COMPILERS}
    assert not Path("platform.info").exists()  # csmith writes it where it runs: never here


def test_the_volume_run_keeps_each_function_out_of_line(tmp_path):
    """`make synth-fuzz`'s programs (VOLUME): csmith's func_N lose their
    `static` (its globals keep theirs), and gcc -O2 keeps a copy of each
    where most of them would inline away."""
    kept = {}
    for generated in (VOLUME, VOLUME._replace(out_of_line=False)):
        directory = tmp_path / str(generated.out_of_line)
        directory.mkdir()
        source = directory / "program.c"
        source.write_text(csmith_source("csmith", 1, str(directory), generated))
        text = source.read_text()
        assert ("static uint32_t  func_1(void);" in text) != generated.out_of_line
        assert re.search(r"^static .*\bg_\d+", text, re.MULTILINE)  # its globals stay static
        build = Build(1, "gcc", "O2", str(directory / "program"))
        assert compile_program(build, source, str(directory)) is None
        symbols = subprocess.run(["arm-linux-gnueabihf-nm", build.path], capture_output=True, text=True).stdout
        kept[generated.out_of_line] = len(re.findall(r" [Tt] func_\d+$", symbols, re.MULTILINE))
    assert kept[True] == VOLUME.max_funcs > 3 * kept[False]  # every one of its functions besides main


def test_a_missing_csmith_is_named():
    error = pytest.raises(ToolMissing, fuzz, 0, 1, ("gcc",), ("O0",),
                          generated=Generated(csmith="/nonexistent/csmith")).value
    assert "/nonexistent/csmith" in str(error) and "apt-get install csmith" in str(error)


def test_refusal_reasons_are_keyed_without_their_addresses():
    assert reason_key("'bl #0x10448' calls with lr saved nowhere") == "'bl' calls with lr saved nowhere"
    assert reason_key("more than 200000 states; the analysis gave up") == "more than N states; the analysis gave up"
    assert reason_key("'mov sp, r3' sets sp in a way the analysis does not model") == \
        "'mov' sets sp in a way the analysis does not model"


def test_a_finding_keeps_its_smallest_example_and_the_code_around_it():
    code = bytes.fromhex("80b5" "00af" "0020" "80bd")  # push {r7, lr}; add r7, sp, #0; movs r0, #0; pop {r7, pc}
    shown = window(lambda address, size: code[address - 0x100:address - 0x100 + size], 0x100, 0x104, 0x108)
    assert shown[2].startswith("=> 0x104: movs") and len(shown) == 4 and "push" in shown[0]

    def finding(seed, size):
        return {"kind": "refusal", "key": "k", "seed": seed, "compiler": "clang", "flags": "O0", "pc": "0x10",
                "function_bytes": size, "refused": 3}
    builds = [{"findings": [finding(1, 40)]}, {"findings": [finding(2, 12), finding(2, 12)]},
              {"findings": [finding(3, 12)]}]
    found, = grouped_findings(builds, {"clang": 1, "O0": 0})
    assert found["example"]["seed"] == 2 and found["occurrences"] == 4 and found["programs"] == 3
    assert found["refused"] == 12


# A register dump creduce left of a larger program (make synth-reduce): the
# analysis refuses the push of sp's copy, the compiler's CFI knows no push.
DUMP = 'void a(void) { __asm__ volatile("mov r0, sp\\n\\tpush {r0, lr}\\n\\tpop {r0, lr}" ::: "r0"); }\n' \
    "int main(void) { a(); return 0; }\n"
DUMP_KEY = "'push' stores sp's value: a register dump a callee may rewrite"


def test_creduces_test_finds_a_finding_by_its_key_and_nothing_else(tmp_path, capsys):
    """`synth_fuzz_reduce --check`, the test creduce runs on each candidate:
    0 where the build has a finding of that key, 1 where it has none, or
    does not build."""
    from harness.synth_fuzz_reduce import main as reduce_main
    source = tmp_path / "program.c"
    source.write_text(DUMP)
    check = ["--check", str(source), "--compiler", "gcc", "--flags", "O2", "--key"]
    assert reduce_main([*check, DUMP_KEY]) == 0
    assert reduce_main([*check, "paths meet with different frames"]) == 1
    source.write_text(DUMP.replace('"mov r0, sp\\n\\t', '"'))  # push {r0, lr} of r0 alone: a save, no dump
    assert reduce_main([*check, DUMP_KEY]) == 1
    source.write_text("int main(void) { return undeclared; }\n")
    assert reduce_main([*check, DUMP_KEY]) == 1


def test_a_reduction_asked_for_a_finding_the_program_has_not_says_so(tmp_path):
    from harness.errors import InputError
    from harness.synth_fuzz_reduce import reduced
    with pytest.raises(InputError, match="has no finding 'paths meet with different frames'.*register dump"):
        reduced(DUMP, "clang", "O2", "paths meet with different frames")


def test_a_run_started_again_takes_each_program_an_earlier_run_kept(report, monkeypatch):
    """`make synth-fuzz` keeps each program's records (kept_program_records):
    run again with the same harness and tools, it judges none of them anew,
    and its report is the one a fresh run makes."""
    import harness.synth_fuzz as driver
    s = SLICE
    fuzz(s["seed"], s["count"], s["compilers"], s["flag_sets"], s["budget"], jobs=2, kept=True)

    def judged_anew(job):
        raise AssertionError(f"seed {job.seed} judged again")
    monkeypatch.setattr(driver, "program_records", judged_anew)
    again = fuzz(s["seed"], s["count"], s["compilers"], s["flag_sets"], s["budget"], jobs=1, kept=True)
    strip = lambda r: report_json({k: v for k, v in r.items() if k != "timing"})  # noqa: E731
    assert strip(again) == strip(report)


def test_a_run_past_its_budget_stops_even_while_it_writes_where_code_was_translated(tmp_path):
    """csmith seed 81 built by clang -O2 reaches the 10,000,000-instruction
    budget in a loop whose stores invalidate translated code: the engine
    lost the tracer's stop request there and ran on for ever (an hour in a
    300-program run) until the hook asked again each time it was called.
    Run in a process of its own, so that a hang fails the test."""
    command = [sys.executable, "-m", "harness.synth_fuzz", "--seed", "81", "--count", "1", "--compilers", "clang",
               "--flag-sets", "O2", "--jobs", "1", "--afresh", "--json", str(tmp_path / "r.json"),
               "--markdown", str(tmp_path / "r.md")]
    done = subprocess.run(command, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-500:]
    build, = json.loads((tmp_path / "r.json").read_text())["builds"]
    assert build["fault"] == BUDGET_FAULT
