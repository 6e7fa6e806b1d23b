"""The CI gate as people and CI systems read it: the verdict block first
(alone with --quiet), tables that show every label and number whole at 80
and 120 columns, a baseline of another run refused before any work, and
JUnit XML and a Markdown job summary that name what rose."""

from __future__ import annotations

import io
import json
from pathlib import Path
from xml.etree import ElementTree

import pytest
from rich.console import Console

from harness.cli import main
from harness.report.baseline import identity_of
from harness.report.tables import elf_cells, linux_cells, size_cells, table_cells
from harness.report.terminal import column_chunks, fitted_tables, print_table, print_verdict
from harness.report.verdict import corpus_tallies, own_tallies, verdict_cells, verdicts

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "reports" / "baseline.json"  # a main-job report: generated, compiled and Linux sections


def run(reports: Path, *extra: str) -> int:
    return main(["run", "--programs", "2", "--seed", "5", "--no-elf", "--jobs", "1", "--reports", str(reports),
                 *extra])


@pytest.fixture(scope="module")
def main_job_report() -> dict:
    data = json.loads(BASELINE.read_text())
    data["verdict"] = [v._asdict() for v in verdicts(data, data, [])]
    return data


@pytest.mark.parametrize("width", [80, 120])
def test_every_label_and_number_is_shown_whole(main_job_report, width):
    """Rendered at 80 and 120 columns, no line is wider, nothing is cut
    (no ellipsis) and every cell of every table appears whole in the output."""
    out = io.StringIO()
    console = Console(width=width, file=out, color_system=None)
    print_verdict(main_job_report, console)
    print_table(main_job_report, console)
    text = out.getvalue()
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= width
    tables = [table_cells(main_job_report), verdict_cells(main_job_report["verdict"], own_tallies(main_job_report),
                                                           corpus_tallies(main_job_report)),
              elf_cells(main_job_report["elf"]), linux_cells(main_job_report["linux"]),
              size_cells(main_job_report["sizes"])[:2]]
    cells = {cell for header, body in tables for cell in (*header, *(c for row in body for c in row))}
    missing = sorted(cell for cell in cells if cell not in text)
    assert not missing, missing[:10]
    assert "corpus/elf/" not in text  # build labels stand without their directory


def test_a_report_of_no_generated_program_names_no_seed(main_job_report):
    """verify-elf's report (its seed None) says what it read, and no seed;
    the main job's names its seed."""
    from harness.report.markdown import markdown
    seeded = markdown(main_job_report, "t")
    assert f"seed: {main_job_report['seed']}." in seeded
    alone = {**main_job_report, "seed": None, "input": "corpus/elf/gcc-O2-fp.elf"}
    out = io.StringIO()
    print_table(alone, Console(width=120, file=out, color_system=None))
    said = next(line for line in markdown(alone, "t").splitlines() if "input:" in line)
    title = next(line for line in out.getvalue().splitlines() if "Unwind failures per category" in line)
    for line in (said, title):
        assert "corpus/elf/gcc-O2-fp.elf" in line and "seed" not in line and "None" not in line


def test_columns_are_split_into_tables_that_fit():
    """Label columns of widths 10 and 5 repeat in each part; a value column
    that fits nowhere beside them gets a part of its own."""
    assert column_chunks([10, 5, 20, 20, 20, 60], left=2, width=80) == [[2, 3], [4], [5]]
    assert column_chunks([10, 5, 20, 20], left=2, width=200) == [[2, 3]]


def test_cells_are_text_not_markup():
    """A process's modules include `[jit]` and `[vectors]`, which rich would
    take for markup tags and drop: every label, header and title is shown
    as it is."""
    out = io.StringIO()
    console = Console(file=out, width=120)
    for table in fitted_tables("per module [a]", ["module", "[x] stops"], [["[jit]", "4"], ["[vectors]", "1"]], 120):
        console.print(table)
    shown = out.getvalue()
    assert all(text in shown for text in ("per module [a]", "[x] stops", "[jit]", "[vectors]")), shown


def test_the_verdict_comes_first_and_alone_with_quiet(tmp_path, capsys):
    assert run(tmp_path) == 0
    full = capsys.readouterr().out
    assert full.index("Verdict") < full.index("Unwind failures per category")
    assert "verdict: every program verified" in full.splitlines()[-1]
    assert run(tmp_path, "--quiet") == 0
    quiet = capsys.readouterr().out
    assert "Verdict" in quiet and "Unwind failures per category" not in quiet
    data = json.loads((tmp_path / "latest.json").read_text())
    header, _ = verdict_cells(data["verdict"], own_tallies(data), corpus_tallies(data))
    assert header == ["unwinder", "own code", "every stop", "vs baseline", "worst category", "gate"]  # one corpus


def test_the_verdict_leads_with_the_programs_own_code_then_each_corpus():
    """A Linux program's stops are mostly ld.so's and the libraries': the
    verdict's first figure is the rate in its own code (category `own`),
    "-" where a run has none (bare-metal programs); then each corpus of a
    run of several, labelled, and every stop."""
    def rows(category, failed, stops):
        return [{"unwinder": "v2", "category": category, "position": "all", "failed": failed, "stops": stops}]

    data = {"input": "generated", "results": rows("all", 30, 200_000) + rows("own", 30, 3_000), "elf": [],
            "linux": [{"results": rows("all", 10, 1_000) + rows("own", 6, 100)}]}
    verdict = [{"unwinder": "v2", "failed": 40, "stops": 201_000, "baseline_failed": None, "baseline_stops": None,
                "worst": None, "worst_failed": 0, "worst_stops": 0, "gate": "-"}]
    header, body = verdict_cells(verdict, own_tallies(data), corpus_tallies(data))
    assert header == ["unwinder", "own code", "generated", "Linux", "every stop", "vs baseline", "worst category",
                      "gate"]
    assert body == [["v2", "1.16% of 3,100", "0.01% of 200,000", "1.00% of 1,000", "0.02% of 201,000", "-", "-",
                     "-"]]
    alone = {"input": "/bin/prog", "results": rows("all", 40, 201_000)}
    header, body = verdict_cells(verdict, own_tallies(alone), corpus_tallies(alone))
    assert header[1:3] == ["own code", "every stop"] and body[0][1] == "-"


@pytest.mark.parametrize("change, difference", [
    (["--programs", "3"], "programs: 3 vs 2"),
    (["--unwinder", "v2"], "unwinders: 1 (v2) vs"),
    (["--seed", "6"], "seed: 6 vs 5"),
])
def test_a_baseline_of_another_run_is_refused_before_any_work(tmp_path, capsys, change, difference):
    """Exit 2 naming what differs, before anything runs: no report written."""
    baseline = tmp_path / "elsewhere" / "baseline.json"
    baseline.parent.mkdir()
    assert run(tmp_path / "first", "--write-baseline", "--baseline", str(baseline)) == 0
    capsys.readouterr()
    arguments = ["run", "--programs", "2", "--seed", "5", "--no-elf", "--jobs", "1", *change]
    reports = tmp_path / "second"
    assert main([*arguments, "--reports", str(reports), "--check-baseline", "--baseline", str(baseline)]) == 2
    error = capsys.readouterr().err
    assert difference in error and str(baseline) in error
    assert not reports.exists()


def test_a_written_baseline_holds_no_verdict_and_identifies_its_run(tmp_path):
    assert run(tmp_path, "--write-baseline") == 0
    baseline = json.loads((tmp_path / "baseline.json").read_text())
    assert "verdict" not in baseline and "gate" not in baseline
    identity = identity_of(baseline)
    assert (identity.seed, identity.programs, identity.elf, identity.linux_every) == (5, 2, (), 1)


def lowered_baseline(tmp_path: Path) -> set[str]:
    """Write a baseline, then lower v2's leaf rows in it; the positions lowered."""
    assert run(tmp_path, "--write-baseline") == 0
    baseline = json.loads((tmp_path / "baseline.json").read_text())
    positions = set()
    for row in baseline["results"]:
        if row["unwinder"] == "v2" and row["category"] == "leaf" and row["failed"]:
            row["failed"] -= 1
            positions.add(row["position"])
    assert positions
    (tmp_path / "baseline.json").write_text(json.dumps(baseline))
    return positions


def test_junit_fails_the_cases_that_rose_and_only_those(tmp_path, capsys):
    positions = lowered_baseline(tmp_path)
    junit = tmp_path / "junit.xml"
    assert run(tmp_path, "--check-baseline", "--junit", str(junit)) == 1
    root = ElementTree.parse(junit).getroot()
    cases = root.findall("./testsuite/testcase")
    failing = {(case.get("classname"), case.get("name")) for case in cases if case.find("failure") is not None}
    assert failing == {("generated", f"v2 / {position}") for position in positions}
    assert int(root.get("failures")) == len(failing) and int(root.get("tests")) == len(cases)
    message = next(case for case in cases if case.find("failure") is not None).find("failure").text
    assert "v2 / leaf /" in message and "failed stops" in message


def test_the_job_summary_holds_the_verdict_and_every_regression(tmp_path, capsys):
    lowered_baseline(tmp_path)
    summary = tmp_path / "summary.md"
    assert run(tmp_path, "--check-baseline", "--summary", str(summary), "--quiet") == 1
    text = summary.read_text()
    assert text.startswith("## ") and "| `v2` |" in text
    assert "**Gate: FAIL**" in text and "- v2 / leaf /" in text
    assert "gate: FAIL" in capsys.readouterr().out
    latest = json.loads((tmp_path / "latest.json").read_text())
    assert latest["gate"]["passed"] is False and latest["gate"]["regressions"]
    assert "## Verdict" in (tmp_path / "latest.md").read_text()


def test_the_gate_passes_with_the_baseline_given_by_path(tmp_path):
    baseline = tmp_path / "kept.json"
    assert run(tmp_path / "a", "--write-baseline", "--baseline", str(baseline)) == 0
    junit = tmp_path / "junit.xml"
    assert run(tmp_path / "b", "--check-baseline", "--baseline", str(baseline), "--junit", str(junit)) == 0
    assert ElementTree.parse(junit).getroot().get("failures") == "0"
    assert json.loads((tmp_path / "b" / "latest.json").read_text())["gate"]["passed"] is True


def test_a_regression_names_the_failing_stops_that_are_new_by_function(tmp_path, capsys):
    """The baseline keeps a digest of failing stops per program (unwinder,
    function, position, kind: stops and pc ranges): a group failing more
    than it says is named with the pcs it did not list."""
    lowered_baseline(tmp_path)
    baseline = json.loads((tmp_path / "baseline.json").read_text())
    program, rows = next((p, d["v2"]) for p, d in baseline["failing"].items() if d.get("v2"))
    function, position, kind, stops, pcs = rows[0].split("\t")
    assert pcs != "?", "every failing walk of v2 is logged in a generated program"
    *kept, last = pcs.split()
    low, _, high = last.partition("-")
    low, high = int(low, 16), int(high or low, 16)
    stops = int(stops)
    rows[0] = "\t".join((function, position, kind, str(stops - 1), " ".join(kept)))
    (tmp_path / "baseline.json").write_text(json.dumps(baseline))
    capsys.readouterr()
    assert run(tmp_path, "--check-baseline") == 1
    gate = json.loads((tmp_path / "latest.json").read_text())["gate"]
    new = [f for f in gate["new_failures"] if (f["program"], f["function"]) == (program, function)]
    assert new == [{"program": program, "unwinder": "v2", "function": function, "position": position, "kind": kind,
                    "before": stops - 1, "now": stops, "new_pcs": [[low, high]]}]
    out = capsys.readouterr().out
    assert f"{function} ({program}):" in out and f"new at {low:#x}" in out


def test_a_partial_run_is_refused_against_the_main_jobs_baseline(tmp_path, capsys):
    """`run --programs 5 --no-elf --check-baseline` against the committed
    baseline (40 programs, the compiled builds, the Linux slice): refused
    at once, naming each difference."""
    assert main(["run", "--programs", "5", "--no-elf", "--check-baseline", "--baseline", str(BASELINE),
                 "--json", str(tmp_path / "latest.json")]) == 2
    error = capsys.readouterr().err
    assert not (tmp_path / "latest.json").exists()
    assert "programs: 5 vs 40" in error and "elf: 0 () vs 12" in error and "linux: 0 () vs" in error
