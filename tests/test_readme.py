"""The README stays short and true: its set-up commands are the two make
targets CI and users run, its figures are those of the committed reports,
and the documents it points to exist."""

from __future__ import annotations

import json
import re
from pathlib import Path

from harness.report import figures

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_the_readme_is_under_16_kb():
    assert len(README.encode()) < 16 * 1024


def test_the_first_screen_gives_the_two_set_up_commands():
    first_screen = "\n".join(README.splitlines()[:20])
    commands = re.findall(r"^make (\w+)", first_screen, re.M)
    assert commands == ["run", "test"]
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_the_figures_are_those_of_the_committed_reports():
    assert figures.main(["--check"]) == 0, "run `make readme`"
    assert sorted(m[1] for m in figures.BLOCK.findall(README)) == sorted(figures.BLOCKS)
    for document, blocks in figures.DOC_BLOCKS.items():
        text = (ROOT / "docs" / document).read_text()
        assert sorted(m[1] for m in figures.BLOCK.findall(text)) == sorted(blocks), document


def test_the_documents_it_points_to_exist():
    for name in re.findall(r"`(?:docs/)?(\w+\.md)`", README):
        if name not in ("latest.md",):
            assert (ROOT / "docs" / name).exists() or (ROOT / name).exists(), name


def test_the_bench_page_is_its_method_and_generated_figures():
    """docs/bench.md says how each figure is measured and gives the figures
    of reports/bench.json in generated blocks (checked above), one a
    section; no figure of the last run is typed by hand beside them."""
    text = (ROOT / "docs" / "bench.md").read_text()
    bench = json.loads((ROOT / "reports" / "bench.json").read_text())
    prose = figures.BLOCK.sub("", text)
    typed = [f"{bench['verifier_overhead_ratio']:.3f}", f"{bench['sampled_over_bare']:.3f}",
             f"{bench['encoder']['blob_bytes']:,}"]
    assert not [figure for figure in typed if figure in prose]
    assert {m[1] for m in figures.BLOCK.findall(text)} == set(figures.DOC_BLOCKS["bench.md"])
