"""Where an executable's code comes from (harness.code_origin): its DWARF compile
units and function symbols tell the program's own code apart from the
runtime libraries linked into it, in bare-metal ELFs and static Linux
programs alike."""

from __future__ import annotations

from pathlib import Path

from test_linux_process import build, sysroot

from harness.abi import Limits
from harness.classify import NO_INFO, OWN
from harness.code_origin import OTHER, _pieces, compile_units, origin_spans, source_label, symbol_label
from harness.elf_program import program_from_elf
from harness.formats.elf import executable_ranges, function_symbols, open_elf
from harness.linux.process import LinuxRun, LinuxSystem
from harness.linux_verify.modules import discover, module_program, process_image, runtime_exports
from harness.linux_verify.verify import verify_process
from harness.unwind.registry import build_unwinders
from harness.verify.stops import Verify

CORPUS = Path(__file__).resolve().parent.parent / "corpus"
BARE_METAL = CORPUS / "elf" / "gcc-O2-fp.elf"  # our sources and libgcc's lib1funcs.S, both with DWARF
FIXTURE = CORPUS / "fixtures" / "alloca-gcc-fp.elf"  # our sources only


def test_a_compile_unit_from_a_runtime_librarys_source_tree_is_that_library():
    assert source_label("../../../../../../libgcc/config/arm/lib1funcs.S") == "libgcc"
    assert source_label("/build/gcc-12/libstdc++-v3/libsupc++/eh_throw.cc") == "libstdcxx"
    assert source_label("../sysdeps/arm/memcpy.S") == "libc"
    assert source_label("corpus/linux/src/cjmp.c") == OWN
    assert source_label("libgcc.c") == OWN  # a file named so, not a directory of libgcc's tree


def test_a_symbol_outside_every_unit_is_named_by_exports_then_libgccs_names():
    exported = {"memcpy": "libc", "__cxa_throw": "libstdcxx"}
    assert symbol_label("memcpy", exported) == "libc" and symbol_label("__cxa_throw", exported) == "libstdcxx"
    for name in ("__aeabi_uidiv", "__aeabi_ldivmod", "__udivsi3", "__divdi3", "_Unwind_Resume", "__clzsi2",
                 "__gnu_unwind_frame", "__aeabi_dadd"):
        assert symbol_label(name, {}) == "libgcc", name
    for name in ("main", "__libc_start_call_main", "__udiv", "start", "_start_"):
        assert symbol_label(name, {}) is None, name


def test_the_start_files_are_the_libraries_that_ship_them():
    assert symbol_label("_start", {}) == "libc" and symbol_label("_init", {}) == "libc"  # crt1.o, crti.o
    for name in ("frame_dummy", "register_tm_clones", "__do_global_dtors_aux"):  # crtbegin.o
        assert symbol_label(name, {}) == "libgcc", name
    assert symbol_label("_start", {"_start": "lib"}) == "lib"  # what a library exports comes first


def test_pieces_follow_units_then_symbols_and_padding_joins_the_code_before():
    units = [(0x100, 0x180, OWN), (0x300, 0x340, "libgcc")]
    symbols = [(0x80, 0x20, "_start"), (0x100, 0x80, "main"), (0x200, 0x40, "memcpy"), (0x260, 0x10, "helper"),
               (0x280, 0x20, "strlen")]
    pieces = _pieces(units, symbols, 0x80, 0x400, {"memcpy": "libc", "strlen": "libc"})
    assert pieces == [[0x80, 0x100, "libc"], [0x100, 0x200, OWN], [0x200, 0x260, "libc"], [0x260, 0x280, None],
                      [0x280, 0x300, "libc"], [0x300, 0x400, "libgcc"]]  # no symbol past 0x340: padding


def test_a_bare_metal_elf_keeps_libgcc_apart_from_its_own_code():
    image = open_elf(str(BARE_METAL))
    program = program_from_elf(str(BARE_METAL), "entry")
    labels = {span.label for span in program.modules}
    assert labels == {OWN, "libgcc"}
    symbols = {name: address for address, _size, name in function_symbols(image)}
    assert program.module_at(symbols["__udivsi3"])[0] == "libgcc"
    for function in program.functions:  # every function compiled from our sources (those with CFI)
        if not function.name.startswith("__"):
            assert program.module_at(function.start)[0] == OWN, function.name
    units = compile_units(image)
    assert {label for *_, label in units} == {OWN, "libgcc"}
    assert all(low < high for low, high, _ in units)


def test_an_elf_of_our_sources_only_has_no_modules():
    assert program_from_elf(str(FIXTURE), "entry").modules == ()


def test_an_executable_without_compile_units_is_its_own_throughout(tmp_path):
    stripped = tmp_path / "stripped.elf"
    data = bytearray(BARE_METAL.read_bytes())
    image = open_elf(str(BARE_METAL))
    section = image.elf.get_section_by_name(".debug_info")
    name_offset = image.elf.get_section_by_name(".shstrtab")["sh_offset"] + section["sh_name"]
    data[name_offset:name_offset + len(".debug_info")] = b".debug_xxxx"  # the units are gone
    stripped.write_bytes(bytes(data))
    low, high = executable_ranges(image)[0]
    spans = origin_spans(open_elf(str(stripped)), low, high, 0x1000, "stripped.elf")
    assert [(s.start, s.end, s.label) for s in spans] == [(low + 0x1000, high + 0x1000, OWN)]


def test_a_static_linux_program_counts_its_c_library_as_libc():
    run = LinuxRun(build("calls.c", "-static"), (), sysroot())
    modules = discover(run, Limits()).modules
    assert [m.label for m in modules] == [OWN]  # one ELF: the origins are inside it
    exported = runtime_exports(LinuxSystem(run), modules)
    assert exported["memcpy"] == "libc" and exported["_Unwind_RaiseException"] == "libgcc"
    image = process_image(modules, [module_program(m) for m in modules], exported)
    symbols = {name: address for address, _size, name in function_symbols(open_elf(run.program))}
    assert image.module_at(symbols["main"])[0] == OWN
    assert image.module_at(symbols["__libc_start_main"])[0] == "libc"
    assert image.module_at(symbols["_start"])[0] == "libc"  # crt1.o's: glibc's start file
    assert image.module_at(symbols["frame_dummy"])[0] == "libgcc"  # crtbegin.o's
    # dwarf has CFI for our code only: its walks stop honestly in libc, never fail there.
    result = verify_process(run, ["dwarf"], lambda program: build_unwinders(program, ["dwarf"]), how=Verify(every=7))
    assert result.fault is None and result.result == 0
    kinds = {}
    for (_unwinder, traits, position, kind), stops in result.counts.items():
        module = next(t for t in traits if t in (OWN, "libc", "libgcc", OTHER))
        kinds.setdefault(module, set()).add(kind)
        if module == OWN and NO_INFO not in traits and position == "body":
            assert kind is None or kind.startswith("stopped:"), (traits, kind)
    assert "stopped:libc" in {k for ks in kinds.values() for k in ks}
