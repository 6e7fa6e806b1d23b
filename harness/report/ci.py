"""What a CI system reads of a run: JUnit XML (a test case per corpus,
build or program x unwinder x position, failing where the gate fails for
it) and a Markdown job summary (the verdict block and the regressions)."""

from __future__ import annotations

from xml.etree import ElementTree

from harness.classify import POSITIONS
from harness.report.baseline import Regression
from harness.report.data import ALL, index_rows
from harness.report.failing import by_function, new_failure_from_json
from harness.report.tables import not_verified, table_lines
from harness.report.verdict import corpus_tallies, own_tallies, verdict_cells

GENERATED = "generated"  # the generated corpus, gated as one section


def _sections(data: dict) -> list[tuple[str, list[dict], str]]:
    """(name, result rows, self-check) of each gated section."""
    checks = [p["self_check"] for p in data["programs"]]
    failed = next((check for check in checks if check != "ok"), "ok")
    return [(GENERATED, data["results"], failed),
            *((group["build"], group["results"], group["self_check"])
              for key in ("elf", "linux") for group in data.get(key, []))]


def junit_xml(data: dict) -> str:
    """JUnit XML of the run: one suite per section; a case per unwinder x
    position (failing with the rows of it that rose), and one for the
    program's own check (its result, exit status and output)."""
    by_case: dict[tuple[str, str, str], list[Regression]] = {}
    gate = data.get("gate") or {"regressions": [], "new_failures": []}
    news = [new_failure_from_json(f) for f in gate["new_failures"]]
    builds = {group["build"] for key in ("elf", "linux") for group in data.get(key, [])}
    for regression in (Regression(**row) for row in gate["regressions"]):
        by_case.setdefault((regression.section or GENERATED, regression.unwinder, regression.position),
                           []).append(regression)
    root = ElementTree.Element("testsuites", name="unwind-harness")
    total = failures = 0
    for name, rows, check in _sections(data):
        suite = ElementTree.SubElement(root, "testsuite", name=name)
        index = index_rows(rows)
        cases = failed = 0
        for unwinder in dict.fromkeys(row["unwinder"] for row in rows):
            for position in (*POSITIONS, ALL):
                row = index.get((unwinder, ALL, position))
                if row is None:
                    continue
                case = ElementTree.SubElement(suite, "testcase", classname=name, name=f"{unwinder} / {position}")
                ElementTree.SubElement(case, "system-out").text = (
                    f"failed {row['failed']} of {row['stops']} stops")
                cases += 1
                rose = by_case.get((name, unwinder, position))
                if rose:
                    failed += 1
                    failure = ElementTree.SubElement(case, "failure", message=f"{len(rose)} failure counts rose "
                                                     "above the baseline", type="regression")
                    new = [f for f in news if f.unwinder == unwinder and position in (ALL, f.position)
                           and (f.program == name or name == GENERATED and f.program not in builds)]
                    failure.text = "\n".join([*(r.line() for r in rose), *by_function(new)])
        case = ElementTree.SubElement(suite, "testcase", classname=name, name="self-check")
        cases += 1
        if check != "ok":
            failed += 1
            ElementTree.SubElement(case, "failure", message=check, type="self-check")
        suite.set("tests", str(cases))
        suite.set("failures", str(failed))
        total, failures = total + cases, failures + failed
    root.set("tests", str(total))
    root.set("failures", str(failures))
    ElementTree.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ElementTree.tostring(root, encoding="unicode") + "\n"


def verdict_markdown(data: dict) -> list[str]:
    """The verdict block in Markdown, the programs not verified, and every regression."""
    header, body = verdict_cells(data["verdict"], own_tallies(data), corpus_tallies(data))
    lines = table_lines(header)
    lines += ["| " + " | ".join(f"`{row[0]}`" if n == 0 else cell for n, cell in enumerate(row)) + " |"
              for row in body]
    lines += ["", *(f"- not verified: {line}" for line in not_verified(data))]
    gate = data.get("gate")
    if gate is None:
        return lines
    risen = [Regression(**row) for row in gate["regressions"]]
    if not risen:
        return lines + [f"**Gate: PASS**, no failure count rose above `{gate['baseline']}`."]
    lines.append(f"**Gate: FAIL**, {len(risen)} failure counts rose above `{gate['baseline']}`:")
    lines += ["", *(f"- {r.line()}" for r in risen)]
    new = by_function([new_failure_from_json(f) for f in gate["new_failures"]])
    if new:
        lines += ["", "Failing more than in the baseline, by function:", "", "```", *new, "```"]
    return lines


def summary_markdown(data: dict, title: str) -> str:
    return "\n".join([f"## {title}", "", *verdict_markdown(data)]) + "\n"
