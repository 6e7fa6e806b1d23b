"""Careless and hostile input, class by class (issue 15): every case ends
with exit 2 (bad input) or 1 (a program that failed), one line on stderr
naming the file and what is wrong, in bounded time and memory, and no file
of the user's overwritten. All inputs are generated here from the committed
fixtures, so the repository holds no bad files. (Shard reports: see
tests/test_shards.py; runaway programs: tests/test_runaway.py; where the
harness places its stack: tests/test_placement.py.)"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.cli import main
from harness.filesystem import CAPS
from harness.formats import uleb128
from harness.formats.elf import open_elf

ROOT = Path(__file__).resolve().parent.parent
ELF = ROOT / "corpus" / "fixtures" / "calls-clang-nofp.elf"
PYTHON = [sys.executable, "-m", "harness"]


def one_line_error(capsys, status: int, expected_status: int = 2, *words: str) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not line.startswith("unwind-harness: note:")]
    assert status == expected_status, err
    assert len(lines) == 1 and lines[0].startswith("unwind-harness: error:"), err
    assert "Traceback" not in err
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ----------------------------------------------------------- input files


def _special(kind: str, tmp_path: Path, cap_kind: str) -> Path:
    """A path that is not a usable input file of `cap_kind`."""
    path = tmp_path / f"input-{kind}"
    if kind == "missing":
        return path
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)  # no writer: opening it would hang
    elif kind == "device":
        return Path("/dev/zero")  # reading it would never end
    elif kind == "oversized":
        with open(path, "wb") as file:
            file.truncate(CAPS[cap_kind] + 1)  # sparse: costs no disk
    elif kind == "empty":
        path.write_bytes(b"")
    return path


FILE_KINDS = ("missing", "directory", "fifo", "device", "oversized", "empty")
# (command line with {} for the bad input, the cap kind, exit status for an empty file)
READERS = {
    "encode ELF": (["encode", "{}", "-o", "{out}"], "ELF"),
    "verify-elf ELF": (["verify-elf", "{}", "--entry", "entry", "--jobs", "1"], "ELF"),
    "verify-elf --v2-table": (["verify-elf", str(ELF), "--entry", "entry", "--v2-table", "{}", "--jobs", "1"],
                              "v2 blob"),
    "dump v2": (["dump", "{}"], "v2 blob"),
    "dump v1": (["dump", "{}", "--format", "v1"], "v1 blob"),
}


@pytest.mark.parametrize("kind", FILE_KINDS)
@pytest.mark.parametrize("reader", READERS)
def test_unusable_input_files_are_refused_before_they_are_read(reader, kind, tmp_path, capsys):
    argv, cap_kind = READERS[reader]
    bad = _special(kind, tmp_path, cap_kind)
    out = tmp_path / "out.bin"
    status = main([a.format(bad, out=out) if "{" in a else a for a in argv])
    line = one_line_error(capsys, status, 2, str(bad))
    assert not out.exists()
    if kind in ("directory", "fifo", "device"):
        assert "not a regular file" in line
    if kind == "oversized":
        assert "more than the" in line


@pytest.mark.parametrize("kind", FILE_KINDS)
def test_an_unusable_baseline_is_refused(kind, tmp_path, capsys):
    reports = tmp_path / "reports"
    reports.mkdir()
    bad = _special(kind, tmp_path, "baseline")
    if kind != "missing":
        os.replace(bad, reports / "baseline.json") if bad.parent == tmp_path else os.symlink(bad, reports / "baseline.json")
    status = main(["run", "--programs", "1", "--no-elf", "--unwinder", "v2", "--jobs", "1", "--reports", str(reports),
                   "--check-baseline"])
    one_line_error(capsys, status, 2, "baseline.json")


# ----------------------------------------------------------- outputs


def test_no_command_writes_over_its_input(tmp_path, capsys):
    elf = tmp_path / "program.elf"
    elf.write_bytes(ELF.read_bytes())
    blob = tmp_path / "tables.v2"
    assert main(["encode", str(elf), "-o", str(blob)]) == 0
    kept = {path: digest(path) for path in (elf, blob)}
    cases = [
        ["encode", str(elf), "-o", str(elf)],
        ["encode", str(elf), "-o", str(tmp_path / "." / "program.elf")],
        ["verify-elf", str(elf), "--entry", "entry", "--json", str(elf), "--jobs", "1"],
        ["verify-elf", str(elf), "--entry", "entry", "--v2-table", str(blob), "--json", str(blob), "--jobs", "1"],
    ]
    for argv in cases:
        capsys.readouterr()
        one_line_error(capsys, main(argv), 2, "is also an input")
    assert {path: digest(path) for path in kept} == kept


def _limited(limit: int):
    def set_limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return set_limit


@pytest.mark.parametrize("argv, output", [
    (["encode", str(ELF), "-o", "{out}"], "good.v2"),
    (["verify-elf", str(ELF), "--entry", "entry", "--jobs", "1", "--json", "{out}"], "good.json"),
])
def test_a_write_that_fails_leaves_the_previous_file_whole(argv, output, tmp_path):
    """With a file-size limit (a full disk), the command fails with one
    line naming the file, and the previous good file is untouched."""
    out = tmp_path / output
    out.write_bytes(b"the previous good file")
    result = subprocess.run([*PYTHON, *(a.format(out=out) for a in argv)], capture_output=True, text=True,
                            cwd=ROOT, preexec_fn=_limited(100), timeout=120)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and str(out) in result.stderr.splitlines()[-1]
    assert out.read_bytes() == b"the previous good file"
    assert sorted(p.name for p in tmp_path.iterdir()) == [output]  # no temporary file left behind


def test_run_writes_only_what_was_asked(tmp_path):
    result = subprocess.run([*PYTHON, "run", "--programs", "1", "--no-elf", "--unwinder", "v2", "--jobs", "1",
                             "--json", str(tmp_path / "only.json")], capture_output=True, text=True,
                            cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["only.json"]


# ----------------------------------------------------------- corrupt ELFs


def _program_headers(data: bytearray):
    phoff, = struct.unpack_from("<I", data, 0x1C)
    size, count = struct.unpack_from("<HH", data, 0x2A)
    return [phoff + size * n for n in range(count)]


def _first_load(data: bytearray) -> int:
    return next(at for at in _program_headers(data) if struct.unpack_from("<I", data, at)[0] == 1)


def _with(field: int, value: int, width: str = "<I"):
    def change(data: bytearray) -> None:
        struct.pack_into(width, data, _first_load(data) + field, value)
    return change


def _symbol_table(field: int, value: int):
    """Set a field of the .symtab section header (sh_link 0x18, sh_entsize 0x24)."""
    def change(data: bytearray) -> None:
        shoff, = struct.unpack_from("<I", data, 0x20)
        size, count = struct.unpack_from("<HH", data, 0x2E)
        header = next(shoff + size * n for n in range(count)
                      if struct.unpack_from("<I", data, shoff + size * n + 4)[0] == 2)  # SHT_SYMTAB
        struct.pack_into("<I", data, header + field, value)
    return change


ELF_CORRUPTIONS = {  # name -> (change, words of the one line)
    "symbol entries of 4 bytes": (_symbol_table(0x24, 4), "corrupt symbol table .symtab: entries of 4 bytes"),
    "symbol names in no section": (_symbol_table(0x18, 0xFFFF), "truncated or corrupt ELF"),
    "p_memsz 0xffff0000": (_with(0x14, 0xFFFF0000), "MiB of memory"),
    "p_memsz past 4 GiB": (_with(0x14, 0xFFFFFFF0), "runs past the 32-bit address space"),
    "p_memsz 1 GiB": (_with(0x14, 1 << 30), "MiB of memory"),
    "p_filesz over p_memsz": (_with(0x10, 0x100000), ""),
    "p_vaddr at the top": (_with(0x08, 0xFFFFFF00), "32-bit address space"),
    "text moved off its code": (_with(0x08, 0x20000000), "no PT_LOAD segment holds its code"),
    "e_phoff past the end": (lambda d: struct.pack_into("<I", d, 0x1C, 0x7FFFFFF0), ""),
    "e_phnum 0xffff": (lambda d: struct.pack_into("<H", d, 0x2C, 0xFFFF), ""),
    "e_shoff past the end": (lambda d: struct.pack_into("<I", d, 0x20, 0x7FFFFFF0), ""),
    "e_machine x86": (lambda d: struct.pack_into("<H", d, 0x12, 3), "not a 32-bit ARM ELF"),
    "cut in half": (lambda d: d.__delitem__(slice(len(d) // 2, None)), ""),
}


@pytest.mark.parametrize("name", ELF_CORRUPTIONS)
def test_corrupt_elfs_are_refused_in_bounded_memory(name, tmp_path):
    change, words = ELF_CORRUPTIONS[name]
    data = bytearray(ELF.read_bytes())
    change(data)
    path = tmp_path / "corrupt.elf"
    path.write_bytes(bytes(data))
    returncode, stderr, peak_kb = _run_measured([*PYTHON, "verify-elf", str(path), "--entry", "entry", "--jobs", "1"],
                                                tmp_path, seconds=120)
    assert returncode == 2, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and words in lines[0], stderr
    assert peak_kb < 1 << 20  # under 1 GiB


def _run_measured(command: list[str], directory, seconds: float) -> tuple[int, str, int]:
    """The command's exit status, stderr and its own peak resident memory
    in KB (wait4's: not the largest of every child this process has had)."""
    with open(directory / "stdout", "wb") as out, open(directory / "stderr", "wb") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, cwd=ROOT)
    deadline = time.monotonic() + seconds
    while (waited := os.wait4(process.pid, os.WNOHANG))[0] == 0:
        if time.monotonic() > deadline:
            process.kill()
            os.wait4(process.pid, 0)
            pytest.fail(f"{command}: still running after {seconds} s")
        time.sleep(0.05)
    _, status, usage = waited
    process.returncode = os.waitstatus_to_exitcode(status)  # (reaped here: Popen must not wait again)
    return process.returncode, (directory / "stderr").read_text(), usage.ru_maxrss


def test_symbols_are_read_as_pyelftools_reads_them():
    """formats.elf.symbols unpacks symbol tables itself, for speed: the same
    names, values, sizes, types and sections as pyelftools' own parse."""
    from elftools.elf.sections import SymbolTableSection

    from harness.formats.elf import symbols
    image = open_elf(str(ELF))
    theirs = [(section.name, sym.name, sym["st_value"], sym["st_size"], sym["st_info"]["type"], sym["st_shndx"])
              for section in image.elf.iter_sections() if isinstance(section, SymbolTableSection)
              for sym in section.iter_symbols()]
    types = {"STT_NOTYPE": 0, "STT_OBJECT": 1, "STT_FUNC": 2, "STT_SECTION": 3, "STT_FILE": 4}
    indices = {"SHN_UNDEF": 0, "SHN_ABS": 0xFFF1}
    assert len(theirs) > 10 and [tuple(s) for s in symbols(image)] == [
        (table, name, value, size, types[kind], indices.get(index, index)) for table, name, value, size, kind, index
        in theirs]


# ----------------------------------------------------------- corrupt blobs


def _v2_blob(tmp_path: Path) -> tuple[Path, bytes]:
    blob = tmp_path / "good.v2"
    assert main(["encode", str(ELF), "-o", str(blob)]) == 0
    return blob, blob.read_bytes()


def _header(blob: bytes) -> list[int]:
    return list(struct.unpack_from("<10I", blob))


@pytest.mark.parametrize("where", ["function offset table", "unwind instruction table"])
def test_a_ten_thousand_byte_uleb128_is_refused_at_once(where, tmp_path, capsys):
    blob, data = _v2_blob(tmp_path)
    header = _header(data)
    long_value = b"\x80" * 10_000 + b"\x01"
    if where == "function offset table":  # every offset list starts with a ULEB128 offset
        start, size = header[6], header[7]
        table = long_value + data[start:start + size]
        new = data[:start] + table + data[start + size:]
        header[7] += len(long_value)
        header[8] += len(long_value)
    else:  # a vsp adjustment of 0x204 + (2**280 << 2): b2 and a long ULEB128
        start = header[8]
        new = data[:start] + b"\xb2" + b"\x80" * 40 + b"\x01\xb0" + data[start:]
        header[9] += 43
    bad = tmp_path / "bad.v2"
    bad.write_bytes(struct.pack("<10I", *header) + new[40:])
    capsys.readouterr()
    one_line_error(capsys, main(["dump", str(bad)]), 2, str(bad), "longer than 5 bytes")
    one_line_error(capsys, main(["verify-elf", str(ELF), "--entry", "entry", "--v2-table", str(bad), "--jobs", "1"]),
                   2, str(bad))


def test_uleb128_decoding_stops_at_its_limit():
    with pytest.raises(ValueError):
        uleb128.decode(b"\xff" * 100_000 + b"\x01", 0)


# ----------------------------------------------------------- manifests


MANIFESTS = {
    "not JSON": "{builds: [",
    "not a manifest": "[1, 2, 3]",
    "a build without a file": json.dumps({"builds": [{"entry": "entry"}]}),
    "checksum as a string": json.dumps({"builds": [{"file": ELF.name, "entry": "entry", "expected_checksum": "12"}]}),
    "checksum as a float": json.dumps({"builds": [{"file": ELF.name, "entry": "entry", "expected_checksum": 1.5}]}),
    "checksum as a bool": json.dumps({"builds": [{"file": ELF.name, "entry": "entry", "expected_checksum": True}]}),
    "checksum negative": json.dumps({"builds": [{"file": ELF.name, "entry": "entry", "expected_checksum": -1}]}),
    "checksum past 32 bits": json.dumps({"builds": [{"file": ELF.name, "entry": "entry",
                                                     "expected_checksum": 1 << 40}]}),
    "programs not a list": json.dumps({"builds": [{"file": ELF.name, "programs": 5}]}),
    "deep nesting": "[" * 100_000 + "]" * 100_000,
}


@pytest.mark.parametrize("name", MANIFESTS)
def test_a_malformed_manifest_beside_the_elf_is_an_error(name, tmp_path, capsys):
    elf = tmp_path / ELF.name
    elf.write_bytes(ELF.read_bytes())
    (tmp_path / "manifest.json").write_text(MANIFESTS[name])
    one_line_error(capsys, main(["verify-elf", str(elf), "--entry", "entry", "--jobs", "1"]), 2, "manifest.json")


def test_a_wrong_checksum_in_a_good_manifest_fails_the_run(tmp_path, capsys):
    elf = tmp_path / ELF.name
    elf.write_bytes(ELF.read_bytes())
    (tmp_path / "manifest.json").write_text(json.dumps(
        {"builds": [{"file": ELF.name, "entry": "entry", "expected_checksum": 12345}]}))
    assert main(["verify-elf", str(elf), "--entry", "entry", "--jobs", "1"]) == 1
    assert "expected 0x3039" in capsys.readouterr().err


# ----------------------------------------------------------- the command line


USAGE_ERRORS = [
    [], ["nope"], ["run", "--jobs", "0"], ["run", "--jobs", "x"], ["run", "--unwinder", "v3"],
    ["run", "--shard", "3/2"], ["encode", str(ELF)], ["dump"],
    ["verify-elf", str(ELF), "--entry", "entry", "--every", "-1"], ["dump", "x", "--text-start", "0x1ffffffff"],
    ["merge"], ["bench", "--quick", "--nope"],
]


@pytest.mark.parametrize("argv", USAGE_ERRORS, ids=lambda argv: " ".join(argv) or "nothing")
def test_usage_errors_take_one_line(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert len(err.splitlines()) == 1 and err.startswith("unwind-harness: error:") and "--help" in err


def test_dump_with_standard_output_closed_says_so(tmp_path):
    blob, _ = _v2_blob(tmp_path)
    result = subprocess.run([*PYTHON, "dump", str(blob)], capture_output=False, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, preexec_fn=lambda: os.close(1), timeout=60)
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["unwind-harness: error: standard output is closed: nowhere to write "
                                          "the listing"]


def test_jobs_beyond_the_cores_are_clamped_with_a_note(tmp_path, capsys):
    assert main(["verify-elf", str(ELF), "--entry", "entry", "--every", "50", "--jobs", "100000"]) == 0
    err = capsys.readouterr().err
    assert f"--jobs 100000 is more than the {os.cpu_count()} cores here" in err
    assert "Traceback" not in err


def test_the_elf_is_read_once_and_only_within_its_cap():
    """open_elf reads through harness.filesystem (regular files, capped)."""
    assert open_elf(str(ELF)).path == str(ELF)
    assert CAPS["ELF"] >= 64 << 20


def test_where_no_process_can_start_the_work_runs_in_this_one(monkeypatch, capsys):
    """Under a process limit (`can't start new thread`), the pool's work is
    done here, with a note, not lost in a traceback."""
    from harness import runner

    def no_pool(*args, **kwargs):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(runner, "ProcessPoolExecutor", no_pool)
    assert runner.in_processes(abs, [-3, 1, -2], 2) == [3, 1, 2]
    assert "cannot start 2 processes (can't start new thread); verifying in one" in capsys.readouterr().err


def test_merge_does_not_write_over_a_shard(tmp_path, capsys):
    shards = [tmp_path / f"s{index}.json" for index in range(2)]
    for index, shard in enumerate(shards):
        assert main(["run", "--programs", "2", "--no-elf", "--unwinder", "v2", "--jobs", "1",
                     "--shard", f"{index}/2", "--json", str(shard)]) == 0
    kept = {shard: digest(shard) for shard in shards}
    capsys.readouterr()
    one_line_error(capsys, main(["merge", *map(str, shards), "--json", str(shards[0])]), 2, "is also an input")
    (tmp_path / "reports").mkdir()
    os.replace(shards[1], tmp_path / "reports" / "latest.json")
    moved = tmp_path / "reports" / "latest.json"
    one_line_error(capsys, main(["merge", str(shards[0]), str(moved), "--reports", str(tmp_path / "reports")]), 2,
                   "is also an input")
    assert digest(shards[0]) == kept[shards[0]] and digest(moved) == kept[shards[1]]
