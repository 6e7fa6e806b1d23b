"""`unwind-harness sysroot add`: a Debian package's armhf libraries (and
those of the packages it depends on) fetched into the sysroot, in a cache
of the test's own (the .debs already fetched are shared), kept when the
sysroot is made again; bad names and unknown packages refused in one line,
the sysroot untouched."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from harness.cli import main
from harness.filesystem import cache_root
from harness.sysroot import SCRIPT

ADDED = "libzstd1"  # small, and not among sysroot.sh's PACKAGES
LIBRARY = "usr/lib/arm-linux-gnueabihf/libzstd.so.1"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    shared = cache_root() / "linux" / "debs"
    shared.mkdir(parents=True, exist_ok=True)
    root = tmp_path_factory.mktemp("cache")
    (root / "linux").mkdir()
    (root / "linux" / "debs").symlink_to(shared)
    return root


def sysroot(cache: Path, monkeypatch, *args: str) -> int:
    monkeypatch.setenv("UNWIND_HARNESS_CACHE", str(cache))
    return main(["sysroot", *args])


def make_sysroot(cache: Path) -> None:
    """What make linux-sysroot does, in the test's cache."""
    done = subprocess.run(["bash", str(SCRIPT)], env={**os.environ, "UNWIND_HARNESS_CACHE": str(cache)},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr


def test_a_package_is_added_with_its_libraries_and_kept_on_rebuild(cache, monkeypatch, capsys):
    make_sysroot(cache)
    made = cache / "linux" / "sysroot"
    assert not (made / LIBRARY).exists()
    assert sysroot(cache, monkeypatch, "add", ADDED) == 0
    assert capsys.readouterr().out.endswith(": 1 new shared library: libzstd.so.1\n")  # it needs only libc6
    assert (made / LIBRARY).exists()
    assert (cache / "linux" / "extra-packages").read_text() == f"{ADDED}\n"
    assert any(line.startswith(f"{ADDED} ") for line in (made / "VERSIONS").read_text().splitlines())
    (made / ".layout").write_text("0\n")  # as after a change to sysroot.sh: made again from the .debs
    make_sysroot(cache)
    assert (made / ".layout").read_text() != "0\n"
    assert (made / LIBRARY).exists()
    assert sysroot(cache, monkeypatch) == 0
    assert f"added with `sysroot add`: {ADDED}" in capsys.readouterr().out


@pytest.mark.parametrize("name, words", [("no-such-package-zz", ("no armhf package named no-such-package-zz",)),
                                         ("Bad;name", ("not a Debian package name", "'Bad;name'"))])
def test_a_bad_or_unknown_package_is_refused_in_one_line(cache, monkeypatch, capsys, name, words):
    before = sorted(p.name for p in (cache / "linux").iterdir())
    assert sysroot(cache, monkeypatch, "add", name) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("unwind-harness: error: "), lines
    for word in words:
        assert word in lines[0]
    assert sorted(p.name for p in (cache / "linux").iterdir()) == before
