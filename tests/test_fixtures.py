"""Real compiler CFI through the encoder: the shapes the fixtures were built to show."""

import shutil
import subprocess
from pathlib import Path

import pytest

from harness.formats import ehabi
from harness.formats.chrome_v2 import encode
from harness.formats.dwarf_cfi import read_cfi
from harness.formats.elf import open_elf, text_base

FIXTURES = Path(__file__).resolve().parent.parent / "corpus" / "fixtures"


def runs(name: str, policy: str = "drop") -> dict[str, list[str]]:
    image = open_elf(str(FIXTURES / f"{name}.elf"))
    encoded = encode(read_cfi(image), text_base(image), policy)
    return {
        f.name: [ehabi.text(ehabi.decode(u.instructions)) for u in f.address_unwinds]
        for f in encoded.functions
    }


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("fp", ["fp", "nofp"])
def test_alloca_restores_sp_from_r7(compiler, fp):
    texts = [t for ts in runs(f"alloca-{compiler}-{fp}").values() for t in ts]
    assert any(t.startswith("vsp = r7;") for t in texts)


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
def test_vfp_saves_are_popped(compiler):
    texts = [t for ts in runs(f"vfp-{compiler}-nofp").values() for t in ts]
    assert any("pop {d8-d" in t for t in texts)


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
def test_big_frame_uses_the_uleb_form(compiler):
    image = open_elf(str(FIXTURES / f"bigframe-{compiler}-nofp.elf"))
    encoded = encode(read_cfi(image), text_base(image))
    blobs = [u.instructions for f in encoded.functions for u in f.address_unwinds]
    big = [b for b in blobs if b[0] == 0xB2]
    assert big, "no run uses 0xb2"
    assert all(ehabi.decode(b)[0].amount > 4096 for b in big)


def test_every_function_starts_with_finish():
    for path in sorted(FIXTURES.glob("*.elf")):
        for name, texts in runs(path.stem).items():
            assert texts[0] == "finish", (path.name, name)


TOOLS = ("arm-none-eabi-gcc", "clang", "ld.lld")


@pytest.mark.skipif(not all(shutil.which(t) for t in TOOLS),
                    reason="cross toolchains not installed (`make toolchains`)")
def test_rebuild_reproduces_the_committed_fixtures(tmp_path):
    subprocess.run(["bash", str(FIXTURES / "build.sh"), str(tmp_path)], check=True,
                   capture_output=True)
    for elf in sorted(FIXTURES.glob("*.elf")):
        assert (tmp_path / elf.name).read_bytes() == elf.read_bytes(), elf.name
    assert (tmp_path / "MANIFEST.txt").read_text() == (FIXTURES / "MANIFEST.txt").read_text()
