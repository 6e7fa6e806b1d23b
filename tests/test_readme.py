"""The README stays short and true: its set-up commands are the two make
targets CI and users run, its figures are those of the committed reports,
and the documents it points to exist."""

from __future__ import annotations

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
