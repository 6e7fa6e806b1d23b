"""verify-elf: compiled programs through the same harness."""

import itertools
import json
from dataclasses import replace
from pathlib import Path

from harness.bench.overhead import emulation_alone
from harness.cli import main
from harness.commands import elf_unwinders, expected_checksum
from harness.elf_program import program_from_elf, prologue_end
from harness.formats import chrome_v2, ehabi
from harness.formats.chrome_v2.encoder import AddressUnwind, cover_text
from harness.formats.chrome_v2.layout import serialize
from harness.formats.chrome_v2.tables import build_tables
from harness.unwind import has_epilogue_cfi
from harness.verify.sampling import sampled_stops
from harness.verify.stops import verify_program

FIXTURES = Path(__file__).resolve().parent.parent / "corpus" / "fixtures"
CALLS = str(FIXTURES / "calls-clang-nofp.elf")


def test_verify_elf_reports_like_run(tmp_path):
    out = tmp_path / "report.json"
    assert main(["verify-elf", CALLS, "--entry", "entry", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["schema"] == 1 and data["input"] == CALLS
    unwinders = {r["unwinder"] for r in data["results"]}
    # clang describes no epilogues: no v2-gcc (its input would be v2's)
    assert unwinders == {"v2", "v2+epilogue", "v2-synth", "v2-code", "v2-chrome", "dwarf", "v1", "exidx",
                         "framepointer", "vmkunwind", "qut", "scan", "chain"}
    rows = {(r["unwinder"], r["category"], r["position"]): r for r in data["results"]}
    assert rows[("v2", "all", "all")]["stops"] > 100


def test_every_nth_stop(tmp_path):
    full, sampled = tmp_path / "full.json", tmp_path / "sampled.json"
    main(["verify-elf", CALLS, "--entry", "entry", "--json", str(full)])
    main(["verify-elf", CALLS, "--entry", "entry", "--every", "3", "--json", str(sampled)])
    stops = lambda p: json.loads(p.read_text())["programs"][0]["stops"]
    # strides of mean 3 (harness.verify.sampling), numbered as the full run's stops
    assert stops(sampled) == sum(1 for _ in itertools.takewhile(lambda n: n < stops(full), sampled_stops(3)))
    assert abs(stops(sampled) - stops(full) / 3) < 0.1 * stops(full) / 3


def test_timing_counts_the_instructions_run_and_the_stops_verified(tmp_path):
    """The JSON's timing: the instructions an independent counting hook sees
    the program run (sampled or not), the stops verified, the seconds taken."""
    program = program_from_elf(CALLS, "entry", expected_checksum(CALLS, "entry"))
    ran = emulation_alone(program)[0]
    for every in (1, 7):
        out = tmp_path / f"every-{every}.json"
        assert main(["verify-elf", CALLS, "--entry", "entry", "--every", str(every), "--json", str(out)]) == 0
        data = json.loads(out.read_text())
        assert data["timing"]["instructions"] == ran > 100
        verified = data["timing"]["stops_verified"]
        assert verified == data["programs"][0]["stops"]
        assert verified == ran if every == 1 else 0 < verified < ran / 3
        assert 0 < data["timing"]["seconds"] < 600


def test_gcc_describes_epilogues_and_clang_does_not():
    assert has_epilogue_cfi(program_from_elf(str(FIXTURES / "calls-gcc-fp.elf"), "entry"))
    assert not has_epilogue_cfi(program_from_elf(CALLS, "entry"))


def test_prologue_ends_where_the_frame_stops_growing():
    program = program_from_elf(str(FIXTURES / "bigframe-clang-nofp.elf"), "entry")
    for function in program.cfi["tables"]:
        end = prologue_end(function)
        assert end == function.rows[-1].address  # clang: every row is a prologue row


def corrupted_blob(program, name: str, tmp_path: Path) -> Path:
    encoded = chrome_v2.encode(program.cfi["tables"], program.text_base, "drop")
    functions = []
    for f in encoded.functions:
        if f.name == name:
            last = f.address_unwinds[-1]
            broken = ehabi.encode([ehabi.VspAdd(8)] + ehabi.decode(last.instructions))
            f = replace(f, address_unwinds=f.address_unwinds[:-1] + (AddressUnwind(last.offset, broken),))
        functions.append(f)
    path = tmp_path / "corrupt.bin"
    path.write_bytes(serialize(build_tables(cover_text(functions, program.text_base), program.text_base), "chrome"))
    return path


def test_v2_table_with_one_corrupted_function_fails_that_function(tmp_path):
    program = program_from_elf(CALLS, "entry")
    blob = corrupted_blob(program, "many_regs", tmp_path)
    clean = verify_program(program, elf_unwinders(program, ["v2"], None, "auto"))
    broken = verify_program(program, elf_unwinders(program, ["v2"], str(blob), "auto"))
    new = [f for f in broken.failures if (f.stop, f.kind) not in {(g.stop, g.kind) for g in clean.failures}]
    assert new and {f.culprit for f in new} == {"many_regs"}
    assert main(["verify-elf", CALLS, "--entry", "entry", "--v2-table", str(blob), "--layout", "chrome"]) == 0
    # a chrome-layout blob is run as Chrome runs it too: the same function fails there
    chrome = verify_program(program, elf_unwinders(program, ["v2-chrome"], str(blob), "auto"))
    assert "many_regs" in {f.culprit for f in chrome.failures}


def bad(argv, capsys, fragment):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and fragment in err, err


def test_not_arm(capsys):
    bad(["verify-elf", "/bin/ls", "--entry", "main"], capsys, "not a 32-bit ARM ELF")


def test_no_such_symbol(capsys):
    bad(["verify-elf", CALLS, "--entry", "nowhere"], capsys, "no function symbol 'nowhere'")


def test_truncated(tmp_path, capsys):
    path = tmp_path / "cut.elf"
    path.write_bytes(Path(CALLS).read_bytes()[:3000])
    bad(["verify-elf", str(path), "--entry", "entry"], capsys, "cut.elf")


def test_no_cfi(tmp_path, capsys):
    data = bytearray(Path(CALLS).read_bytes())
    data = data.replace(b".debug_frame", b".debug_xxxxx")
    path = tmp_path / "nocfi.elf"
    path.write_bytes(bytes(data))
    bad(["verify-elf", str(path), "--entry", "entry"], capsys, "no .debug_frame or .eh_frame")


def test_bad_table(tmp_path, capsys):
    path = tmp_path / "junk.bin"
    path.write_bytes(b"\x01" * 10)
    bad(["verify-elf", CALLS, "--entry", "entry", "--v2-table", str(path)], capsys, "not a v2 blob in either layout")


def test_wrong_checksum_fails(capsys):
    assert main(["verify-elf", CALLS, "--entry", "entry", "--expect", "0x1234"]) == 1
    assert "expected 0x1234" in capsys.readouterr().err
