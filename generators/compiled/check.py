#!/usr/bin/env python3
"""Run every ELF of the compiled corpus in Unicorn and check its checksums.

For each build listed in manifest.json: load the PT_LOAD segments (zero-filled
up to p_memsz), map a 16 MiB stack below 0x7F000000, enable VFP, then call
`entry` and every `entry_<name>` (Thumb, lr = sentinel 0xF001) and compare r0
with the manifest's expected checksum (computed by a native host build).
Counts executed instructions with a UC_HOOK_CODE hook.

Usage: check.py [ELF_DIR] [--max-entry N] [--max-program N]
Exit status 0 when every checksum matches and the limits hold, else 1.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import struct
import sys
from pathlib import Path

from unicorn import UC_ARCH_ARM, UC_HOOK_CODE, UC_MODE_THUMB, UC_PROT_ALL, Uc, UcError
from unicorn import arm_const as arm

PAGE = 0x1000
SENTINEL = 0xF000
STACK_TOP = 0x7F000000
STACK_SIZE = 16 << 20
DEFAULT_DIR = Path(__file__).resolve().parents[2] / "corpus" / "elf"


def read_elf(data: bytes):
    """(PT_LOAD segments as (vaddr, bytes of p_memsz)), {symbol: address})."""
    if data[:4] != b"\x7fELF" or data[4] != 1 or data[5] != 1:
        raise ValueError("not a little-endian ELF32 file")
    (e_phoff, e_shoff) = struct.unpack_from("<II", data, 28)
    (e_phentsize, e_phnum, e_shentsize, e_shnum) = struct.unpack_from("<HHHH", data, 42)
    segments = []
    for i in range(e_phnum):
        p_type, p_offset, p_vaddr, _, p_filesz, p_memsz, _, _ = struct.unpack_from(
            "<8I", data, e_phoff + i * e_phentsize)
        if p_type == 1 and p_memsz:
            body = data[p_offset:p_offset + p_filesz]
            segments.append((p_vaddr, body + bytes(p_memsz - p_filesz)))
    sections = [struct.unpack_from("<10I", data, e_shoff + i * e_shentsize) for i in range(e_shnum)]
    symbols = {}
    for sh in sections:
        if sh[1] != 2:  # SHT_SYMTAB
            continue
        strtab = sections[sh[6]]
        for off in range(sh[4], sh[4] + sh[5], 16):
            st_name, st_value, _, st_info, _, _ = struct.unpack_from("<IIIBBH", data, off)
            if st_info & 0xF != 2:  # STT_FUNC
                continue
            start = strtab[4] + st_name
            name = data[start:data.index(b"\0", start)].decode()
            symbols[name] = st_value
    return segments, symbols


def make_emulator(segments) -> Uc:
    uc = Uc(UC_ARCH_ARM, UC_MODE_THUMB)
    uc.ctl_set_cpu_model(arm.UC_CPU_ARM_CORTEX_A15)
    uc.reg_write(arm.UC_ARM_REG_C1_C0_2, uc.reg_read(arm.UC_ARM_REG_C1_C0_2) | (0xF << 20))
    uc.reg_write(arm.UC_ARM_REG_FPEXC, 0x40000000)
    spans = sorted((a & ~(PAGE - 1), (a + len(d) + PAGE - 1) & ~(PAGE - 1)) for a, d in segments)
    merged: list[list[int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(end, merged[-1][1])
        else:
            merged.append([start, end])
    for start, end in merged:
        uc.mem_map(start, end - start, UC_PROT_ALL)
    for address, body in segments:
        uc.mem_write(address, body)
    uc.mem_map(SENTINEL, PAGE, UC_PROT_ALL)
    uc.mem_map(STACK_TOP - STACK_SIZE, STACK_SIZE, UC_PROT_ALL)
    return uc


def call(uc: Uc, address: int, budget: int = 1_000_000) -> tuple[int, int]:
    """Run the Thumb function at `address` to the sentinel; (r0, instructions)."""
    count = [0]

    def hook(uc_, _address, _size, _user):
        count[0] += 1
        if count[0] > budget:
            uc_.emu_stop()

    uc.reg_write(arm.UC_ARM_REG_SP, STACK_TOP)
    uc.reg_write(arm.UC_ARM_REG_LR, SENTINEL | 1)
    handle = uc.hook_add(UC_HOOK_CODE, hook)
    try:
        uc.emu_start(address | 1, SENTINEL)
    finally:
        uc.hook_del(handle)
    pc = uc.reg_read(arm.UC_ARM_REG_PC)
    if pc != SENTINEL:
        raise RuntimeError(f"stopped at {pc:#x} after {count[0]} instructions")
    return uc.reg_read(arm.UC_ARM_REG_R0), count[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("elf_dir", nargs="?", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--max-entry", type=int, default=60_000,
                        help="instruction limit for `entry` of every build")
    parser.add_argument("--max-program", type=int, default=4_500,
                        help="instruction limit for each entry_<name>")
    args = parser.parse_args()
    manifest = json.loads((args.elf_dir / "manifest.json").read_text())

    failures = 0
    print(f"{'file':<20} {'program':<14} {'instructions':>12}  checksum")
    for build in manifest["builds"]:
        path = args.elf_dir / build["file"]
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != build["sha256"]:
            print(f"{build['file']:<20} sha256 differs from the manifest")
            failures += 1
        segments, symbols = read_elf(data)
        uc = make_emulator(segments)
        runs = [("entry", "entry", build["expected_checksum"], args.max_entry)]
        runs += [(p["name"], p["entry_symbol"], p["expected_checksum"], args.max_program)
                 for p in build["programs"]]
        for label, symbol, expected, limit in runs:
            if symbol not in symbols:
                print(f"{build['file']:<20} {label:<14} {'-':>12}  MISSING SYMBOL {symbol}")
                failures += 1
                continue
            try:
                value, count = call(uc, symbols[symbol] & ~1)
            except (UcError, RuntimeError) as error:
                print(f"{build['file']:<20} {label:<14} {'-':>12}  FAULT {error}")
                failures += 1
                continue
            ok = value == expected
            status = "ok" if ok else f"MISMATCH got {value:#010x} want {expected:#010x}"
            if count > limit:
                status += f"  OVER LIMIT ({limit})"
                ok = False
            failures += not ok
            print(f"{build['file']:<20} {label:<14} {count:>12}  {status}")
    print("all ok" if not failures else f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
