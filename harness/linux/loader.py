"""Starting an ARM Linux program as the kernel's ELF loader would: its
segments (at a chosen base when it is position-independent), the dynamic
linker its PT_INTERP names (from the sysroot), the initial stack (argc,
argv, envp, auxv) and the kuser helper page.

Bases are chosen where nothing else is (harness.linux.memory), so a
program linked anywhere starts in a consistent address space.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from harness.errors import ElfError
from harness.formats.elf import PARSE_ERRORS, ElfImage, load_segments, open_elf
from harness.linux.memory import AddressSpace, page_down, page_up

PIE_BASE = 0x00400000  # where a position-independent executable goes when free
ENVIRONMENT = ("PATH=/usr/bin:/bin", "HOME=/", "LANG=C")  # the fixed environment every program gets
PLATFORM = b"v7l"
RANDOM = bytes(range(0x41, 0x51))  # AT_RANDOM's 16 bytes: fixed, so that runs repeat
KUSER_PAGE = 0xFFFF0000
# Where the kernel's signal return trampolines go in that page (old kernels'
# KERN_SIGRETURN_CODE): `mov r7, #119; svc 0` (sigreturn) in ARM, then in
# Thumb, then the same for #173 (rt_sigreturn), 8 bytes each.
TRAMPOLINE_OFFSET = 0x500
TRAMPOLINE_CODE = (struct.pack("<II", 0xE3A07077, 0xEF000000) + struct.pack("<HHI", 0x2777, 0xDF00, 0)
                   + struct.pack("<II", 0xE3A070AD, 0xEF000000) + struct.pack("<HHI", 0x27AD, 0xDF00, 0))
# AT_HWCAP: what a Cortex-A15 (the emulated CPU) reports: half, thumb,
# fast_mult, vfp, edsp, neon, vfpv3, tls, vfpv4, idiva, idivt, vfpd32, lpae.
HWCAP = (1 << 1 | 1 << 2 | 1 << 4 | 1 << 6 | 1 << 7 | 1 << 12 | 1 << 13 | 1 << 15 | 1 << 16 | 1 << 17
         | 1 << 18 | 1 << 19 | 1 << 20)
AT = dict(NULL=0, PHDR=3, PHENT=4, PHNUM=5, PAGESZ=6, BASE=7, FLAGS=8, ENTRY=9, UID=11, EUID=12, GID=13, EGID=14,
          PLATFORM=15, HWCAP=16, CLKTCK=17, SECURE=23, RANDOM=25, HWCAP2=26, EXECFN=31)
ET_DYN = "ET_DYN"
EF_ARM_ABI_FLOAT_HARD = 0x400


@dataclass(frozen=True)
class LoadedElf:
    """An ELF as placed: its segments at their run addresses, and the
    addresses the loader hands on (entry with its Thumb bit, program headers)."""

    path: str
    base: int  # added to every link-time address (0 for a fixed-address executable)
    segments: tuple[tuple[int, bytes], ...]
    entry: int
    phdr: int
    phnum: int
    interpreter: str | None  # PT_INTERP, for the executable

    @property
    def end(self) -> int:
        return max(address + len(data) for address, data in self.segments)


def _interpreter(image: ElfImage) -> str | None:
    for segment in image.elf.iter_segments():
        if segment["p_type"] == "PT_INTERP":
            return segment.data().rstrip(b"\0").decode("utf-8", "replace")
    return None


def _phdr(image: ElfImage, segments) -> int:
    """Link-time address of the program headers: PT_PHDR's, else where the
    segment holding e_phoff maps it."""
    elf = image.elf
    offset = elf["e_phoff"]
    for segment in elf.iter_segments():
        if segment["p_type"] == "PT_PHDR":
            return segment["p_vaddr"]
    for segment in elf.iter_segments():
        if segment["p_type"] == "PT_LOAD" and segment["p_offset"] <= offset < segment["p_offset"] + segment["p_filesz"]:
            return segment["p_vaddr"] + offset - segment["p_offset"]
    return 0


def read_elf(image: ElfImage, choose_base) -> LoadedElf:
    """`image` placed: at its link addresses, or for ET_DYN at
    choose_base(span) (the bytes its segments span)."""
    try:
        segments = load_segments(image)
        elf = image.elf
        if elf["e_flags"] & 0xFF000000 != 0x05000000:
            raise ElfError(f"{image.path}: not an EABI version 5 ARM ELF (e_flags {elf['e_flags']:#x})")
        if not elf["e_flags"] & EF_ARM_ABI_FLOAT_HARD:
            raise ElfError(f"{image.path}: a soft-float ARM ELF; the harness runs hard-float (armhf) Linux programs")
        low = page_down(min(address for address, _ in segments))
        span = page_up(max(address + len(data) for address, data in segments)) - low
        base = choose_base(span) - low if elf["e_type"] == ET_DYN else 0
        return LoadedElf(image.path, base, tuple((address + base, data) for address, data in segments),
                         elf["e_entry"] + base, _phdr(image, segments) + base, elf["e_phnum"], _interpreter(image))
    except PARSE_ERRORS as error:
        raise ElfError(f"{image.path}: corrupt program headers: {error}") from None


def place_executable(path: str) -> LoadedElf:
    """The executable at its addresses, or at PIE_BASE."""
    return read_elf(open_elf(path), lambda span: PIE_BASE)


def place_interpreter(path: str, space: AddressSpace) -> LoadedElf:
    """The dynamic linker, placed top-down below the stack like an mmap."""

    def base(span: int) -> int:
        found = space.find(span)
        if found is None:
            raise ElfError(f"{path}: no room for the dynamic linker ({span:#x} bytes)")
        return found

    return read_elf(open_elf(path), base)


def auxv(executable: LoadedElf, interpreter: LoadedElf | None, strings: dict[str, int]) -> list[tuple[int, int]]:
    return [(AT["PHDR"], executable.phdr), (AT["PHENT"], 32), (AT["PHNUM"], executable.phnum),
            (AT["PAGESZ"], 0x1000), (AT["BASE"], interpreter.base if interpreter else 0), (AT["FLAGS"], 0),
            (AT["ENTRY"], executable.entry), (AT["UID"], 0), (AT["EUID"], 0), (AT["GID"], 0), (AT["EGID"], 0),
            (AT["PLATFORM"], strings["platform"]), (AT["HWCAP"], HWCAP), (AT["CLKTCK"], 100), (AT["SECURE"], 0),
            (AT["RANDOM"], strings["random"]), (AT["HWCAP2"], 0), (AT["EXECFN"], strings["execfn"]),
            (AT["NULL"], 0)]


def initial_stack(top: int, argv: list[str], environment: tuple[str, ...], executable: LoadedElf,
                  interpreter: LoadedElf | None) -> tuple[int, bytes]:
    """(sp, the bytes from sp to `top`): argc, argv, envp and auxv as the
    kernel lays them out, the strings they point to above them."""
    blob = bytearray()
    addresses: dict[str, int] = {}

    def put(name: str, data: bytes) -> int:
        blob[:0] = data  # built downwards from the top
        addresses[name] = len(blob)
        return len(blob)

    put("execfn", argv[0].encode() + b"\0")
    env_keys = [f"env{i}" for i in range(len(environment))]
    for key, value in reversed(list(zip(env_keys, environment))):
        put(key, value.encode() + b"\0")
    arg_keys = [f"arg{i}" for i in range(len(argv))]
    for key, value in reversed(list(zip(arg_keys, argv))):
        put(key, value.encode() + b"\0")
    put("platform", PLATFORM + b"\0")
    put("random", RANDOM)
    strings_start = top - len(blob)
    where = {name: top - offset for name, offset in addresses.items()}
    vector = [len(argv)] + [where[k] for k in arg_keys] + [0] + [where[k] for k in env_keys] + [0]
    for key, value in auxv(executable, interpreter, where):
        vector += [key, value]
    words = struct.pack(f"<{len(vector)}I", *vector)
    sp = (strings_start - len(words)) & ~0xF
    return sp, words + bytes(strings_start - sp - len(words)) + bytes(blob)


def kuser_page() -> bytes:
    """The 4 KiB at KUSER_PAGE with the helpers at their fixed addresses
    (Linux's Documentation/arm/kernel_user_helpers), in ARM state:
    0xffff0fa0 memory barrier, 0xffff0fc0 cmpxchg, 0xffff0fe0 get_tls, and
    the helper count at 0xffff0ffc; and the signal return trampolines."""
    page = bytearray(0x1000)
    bx_lr = 0xE12FFF1E
    helpers = {
        0xFA0: (0xF57FF05B, bx_lr),  # dmb ish
        # ldr r3, [r2]; subs r3, r3, r0; streq r1, [r2]; rsbs r0, r3, #0: 0 and C set when stored
        0xFC0: (0xE5923000, 0xE0533000, 0x05821000, 0xE2730000, bx_lr),
        0xFE0: (0xEE1D0F70, bx_lr),  # mrc p15, 0, r0, c13, c0, 3 (TPIDRURO)
        0xFFC: (3,),
    }
    for offset, words in helpers.items():
        page[offset : offset + 4 * len(words)] = struct.pack(f"<{len(words)}I", *words)
    page[TRAMPOLINE_OFFSET : TRAMPOLINE_OFFSET + len(TRAMPOLINE_CODE)] = TRAMPOLINE_CODE
    return bytes(page)
