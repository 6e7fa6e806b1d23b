"""`encode` and `dump` on the committed compiler-built fixtures, and bad input."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main
from harness.formats.chrome_v1 import V1Table
from harness.formats.chrome_v2 import LAYOUTS, V2Reader
from harness.formats.elf import open_elf, text_base

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted((ROOT / "corpus" / "fixtures").glob("*.elf"))


def test_fixtures_are_committed():
    names = {p.name for p in FIXTURES}
    for program in ("calls", "alloca", "bigframe", "vfp"):
        for compiler in ("gcc", "clang"):
            for fp in ("fp", "nofp"):
                assert f"{program}-{compiler}-{fp}.elf" in names


@pytest.mark.parametrize("elf", FIXTURES, ids=lambda p: p.stem)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_encode_then_dump(elf, layout, tmp_path, capsys):
    blob = tmp_path / "unwind.bin"
    base = text_base(open_elf(str(elf)))  # 0x10000 but for the placement fixtures
    assert main(["encode", str(elf), "-o", str(blob), "--layout", layout]) == 0
    summary = capsys.readouterr().out
    assert f"text base: {base:#x}" in summary
    assert f"table bytes ({layout} layout)" in summary
    V2Reader.from_blob(blob.read_bytes(), layout)
    assert main(["dump", str(blob), "--layout", layout, "--text-start", hex(base)]) == 0
    listing = capsys.readouterr().out
    assert f"function 0 at {base:#x}" in listing
    assert "finish" in listing
    entries = re.search(r"function table entries: (\d+), as dump lists them", summary).group(1)
    assert f"function table entries: {entries}\n" in listing  # encode and dump count alike
    assert len(re.findall(r"^  function \d+ at ", listing, re.MULTILINE)) == int(entries)


@pytest.mark.parametrize("format_name, options, refused", [
    ("v1", ["--layout", "chrome", "--epilogue", "keep"], "--layout, --epilogue (of encode's options it takes --from-code)"),
    ("qut", ["--from-code"], "--from-code (of encode's options it takes none of them)"),
    ("call-sites", ["--builder", "chrome"], "--builder (of encode's options it takes none of them)")])
def test_encode_refuses_the_options_a_format_does_not_take(format_name, options, refused, tmp_path, capsys):
    """An option a format would ignore is refused, naming it, and no file is written."""
    blob = tmp_path / "table.bin"
    assert main(["encode", str(FIXTURES[0]), "--format", format_name, *options, "-o", str(blob)]) == 2
    assert f"--format {format_name} does not take {refused}" in capsys.readouterr().err
    assert not blob.exists()


def test_encode_of_an_elf_without_cfi_names_it_and_points_at_from_code(tmp_path, capsys):
    """A shipped binary has no .debug_frame or .eh_frame: the error names
    the file and the option that makes rows without them."""
    data = bytearray(FIXTURES[0].read_bytes())
    elf = open_elf(str(FIXTURES[0])).elf
    names = elf.get_section(elf["e_shstrndx"])["sh_offset"]
    for section in elf.iter_sections():
        if section.name in (".debug_frame", ".eh_frame"):
            data[names + section["sh_name"] + 1] = ord("x")  # .xebug_frame: no CFI section by that name
    stripped = tmp_path / "shipped.elf"
    stripped.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["encode", str(stripped), "-o", str(tmp_path / "out.bin")]) == 2
    error = capsys.readouterr().err.strip()
    assert f"{stripped}: no .debug_frame or .eh_frame describes a function" in error and "--from-code" in error
    assert "\n" not in error and not (tmp_path / "out.bin").exists()
    assert main(["encode", str(stripped), "--from-code", "-o", str(tmp_path / "out.bin")]) == 0


@pytest.mark.parametrize("name, refused", [("calls-clang-nofp", 0), ("calls-clang-fp", 7)])
def test_encode_v1(name, refused, tmp_path, capsys):
    blob = tmp_path / "unwind.v1"
    assert main(["encode", str(ROOT / "corpus" / "fixtures" / f"{name}.elf"), "--format", "v1", "-o", str(blob)]) == 0
    summary = capsys.readouterr().out
    assert f"refused: {refused}" in summary
    assert sum(line.startswith("  refused ") for line in summary.splitlines()) == refused
    table = V1Table.from_blob(blob.read_bytes())
    # After many_regs' push (0x10012): a row without frame pointers, refused with them.
    assert (table.lookup(0x14) is None) == (refused > 0)


def test_dump_is_stable(tmp_path, capsys):
    blob = tmp_path / "unwind.bin"
    main(["encode", str(FIXTURES[0]), "-o", str(blob)])
    capsys.readouterr()
    main(["dump", str(blob)])
    first = capsys.readouterr().out
    main(["dump", str(blob)])
    assert capsys.readouterr().out == first


def test_text_start_override(tmp_path, capsys):
    blob = tmp_path / "unwind.bin"
    assert main(["encode", str(FIXTURES[0]), "-o", str(blob), "--text-start", "0xff00"]) == 0
    assert "text base: 0xff00" in capsys.readouterr().out
    reader = V2Reader.from_blob(blob.read_bytes())
    assert reader.lookup(0).instruction_index is not None  # refuse entry before .text


def test_epilogue_policies_differ_only_for_gcc(tmp_path, capsys):
    dropped = {}
    for elf in FIXTURES:
        main(["encode", str(elf), "-o", str(tmp_path / "x.bin"), "--epilogue", "drop"])
        line = next(l for l in capsys.readouterr().out.splitlines() if "rows dropped" in l)
        dropped[elf.stem] = int(line.rsplit(":", 1)[1])
    # clang emits no epilogue CFI on arm32; GCC does (with -fno-omit-frame-pointer always).
    assert all(n == 0 for name, n in dropped.items() if "-clang-" in name)
    assert all(n > 0 for name, n in dropped.items() if "-gcc-fp" in name)


def bad_input_exit(argv, capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("unwind-harness: error: ") and "\n" not in err
    return err


def test_missing_elf(tmp_path, capsys):
    assert "cannot read" in bad_input_exit(["encode", str(tmp_path / "none.elf"), "-o", "x"], capsys)


def test_not_an_elf(tmp_path, capsys):
    path = tmp_path / "text.elf"
    path.write_text("hello")
    assert "not an ELF" in bad_input_exit(["encode", str(path), "-o", str(tmp_path / "x")], capsys)


def test_truncated_elf(tmp_path, capsys):
    path = tmp_path / "cut.elf"
    path.write_bytes(FIXTURES[0].read_bytes()[:200])
    err = bad_input_exit(["encode", str(path), "-o", str(tmp_path / "x")], capsys)
    assert "cut.elf" in err


def test_corrupt_blob(tmp_path, capsys):
    path = tmp_path / "bad.bin"
    path.write_bytes(b"\x28\x00\x00\x00" + b"\xff" * 40)
    assert "corrupt v2 table" in bad_input_exit(["dump", str(path)], capsys)


def test_python_dash_m_reports_errors_without_traceback(tmp_path):
    path = tmp_path / "bad.bin"
    path.write_bytes(b"\x00")
    result = subprocess.run(
        [sys.executable, "-m", "harness", "dump", str(path), "--layout", "chrome"],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "header" in result.stderr


def test_dump_v1_lists_entries_and_rows(tmp_path, capsys):
    blob = tmp_path / "calls.v1"
    assert main(["encode", str(ROOT / "corpus" / "fixtures" / "calls-clang-nofp.elf"), "--format", "v1",
                 "-o", str(blob)]) == 0
    capsys.readouterr()
    assert main(["dump", str(blob), "--format", "v1", "--text-start", "0x10000"]) == 0
    listing = capsys.readouterr().out.splitlines()
    table = V1Table.from_blob(blob.read_bytes())
    assert listing[1] == f"index entries: {len(table.starts)}"
    assert "  entry 0 at 0x10012: 2 rows" in listing  # many_regs: push, then sub sp
    assert "    +0x4: CFA = sp + 36, return address at CFA - 4" in listing
    assert listing[-1].endswith("CANT_UNWIND")  # the end of the last function
    (tmp_path / "short.v1").write_bytes(blob.read_bytes()[:10])
    assert main(["dump", str(tmp_path / "short.v1"), "--format", "v1"]) == 2
    assert capsys.readouterr().err.startswith(f"unwind-harness: error: {tmp_path / 'short.v1'}: corrupt v1 table")


@pytest.mark.parametrize("fmt, summary, first_entry", [
    ("vmkunwind", "vmkunwind: ", "  0x10000: CFA = sp + 0, r7 unchanged, pc = lr"),
    ("qut", "qut: ", "  0x10000: end"),
    ("call-sites", "call sites: ", None),
])
def test_the_comparators_tables_encode_dump_and_refuse_a_short_blob(tmp_path, capsys, fmt, summary, first_entry):
    """`encode --format` and `dump --format` for vmkunwind, QUT and a scan's
    call sites; a cut blob is one typed line, exit 2."""
    blob = tmp_path / f"calls.{fmt}"
    assert main(["encode", str(ROOT / "corpus" / "fixtures" / "calls-clang-nofp.elf"), "--format", fmt,
                 "-o", str(blob)]) == 0
    assert capsys.readouterr().out.startswith(summary)
    assert main(["dump", str(blob), "--format", fmt, "--text-start", "0x10000"]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert len(listing) > 3 and (first_entry is None or listing[2] == first_entry)
    (tmp_path / "short").write_bytes(blob.read_bytes()[:5])
    assert main(["dump", str(tmp_path / "short"), "--format", fmt]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"unwind-harness: error: {tmp_path / 'short'}: corrupt ") and error.count("\n") == 1


def test_every_option_and_argument_has_help():
    """`--help` explains every option and positional argument of every command."""
    import argparse

    from harness.cli import build_parser

    silent = []
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command, parser in action.choices.items():
                silent += [f"{command} {a.option_strings or a.dest}" for a in parser._actions
                           if not a.help and a.dest != "help"]
    assert not silent


def test_dump_finds_the_layout_and_says_the_text_base_is_not_in_the_blob(tmp_path, capsys):
    """A chrome-layout blob dumps without --layout; without --text-start the
    listing says its addresses are offsets from the text base."""
    blob = tmp_path / "chrome.v2"
    assert main(["encode", str(FIXTURES[0]), "-o", str(blob), "--layout", "chrome"]) == 0
    capsys.readouterr()
    assert main(["dump", str(blob)]) == 0
    listing = capsys.readouterr().out
    assert listing.startswith("v2 unwind info (chrome layout), addresses are offsets from the text base")
    assert "function 0 at 0x0 " in listing


def test_the_top_level_help_says_what_run_verifies(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "run the main job: every unwinder verified at every stop of the generated programs, the compiled " \
           "corpus and (--linux) the Linux corpus" in said


def test_verify_elf_ends_saying_whether_the_run_ended_as_expected(capsys):
    """Its last line: what the run returned (a process: its exit status and
    output) and whether that was expected, or that nothing was."""
    elf = str(ROOT / "corpus" / "elf" / "gcc-O2-fp.elf")
    assert main(["verify-elf", elf, "--entry", "entry", "--unwinder", "v2"]) == 0
    last = " ".join(capsys.readouterr().out.split()).rsplit("stops x 1 unwinders", 1)[1]
    assert re.search(rf"{re.escape(elf)}: returned 0x[0-9a-f]+: as expected$", last), last
