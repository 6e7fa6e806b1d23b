"""A process's system calls without Unicorn: a machine over a dict of
pages (PageMachine), a sysroot and working directory to confine it to, and
calls by name. The `roots` and `kernel` fixtures (tests/conftest.py) make
them for a test."""

from __future__ import annotations

from dataclasses import replace

from harness.emulation.machine import BadAddress, Context
from harness.linux.call_table import CALLS
from harness.linux.files import GuestFiles
from harness.linux.kernel import LinuxKernel
from harness.linux.memory import AddressSpace

PAGE = 0x1000
SCRATCH = 0x20000  # a mapped page the tests pass buffers in


class PageMachine:
    """harness.emulation.machine.Machine over a dict of pages."""

    def __init__(self):
        self.pages: dict[int, bytearray] = {}
        self.tls = None
        self.protections: dict[int, int] = {}  # page -> what mprotect or mmap last set
        self.stopped = False
        self.registers = Context((0,) * 16, 0x10, (0,) * 32, 0)  # what a signal interrupts
        self.executed = 0  # instructions "run" so far: tests move the clock with it

    def _page(self, address: int) -> bytearray:
        page = self.pages.get(address & ~(PAGE - 1))
        if page is None:
            raise BadAddress(f"{address:#x} is not mapped")
        return page

    def read(self, address, size):
        return bytes(self._page(a)[a & (PAGE - 1)] for a in range(address, address + size))

    def write(self, address, data):
        for offset, byte in enumerate(data):
            self._page(address + offset)[(address + offset) & (PAGE - 1)] = byte

    def map(self, address, size):
        for page in range(address, address + size, PAGE):
            assert page not in self.pages, f"{page:#x} mapped twice"
            self.pages[page] = bytearray(PAGE)

    def map_shared(self, address, size, buffer, offset):
        view = memoryview(buffer)
        for page in range(0, size, PAGE):
            assert address + page not in self.pages, f"{address + page:#x} mapped twice"
            self.pages[address + page] = view[offset + page : offset + page + PAGE]

    def unmap(self, address, size):
        for page in range(address, address + size, PAGE):
            del self.pages[page]

    def protect(self, address, size, protection):
        for page in range(address, address + size, PAGE):
            assert page in self.pages, f"{page:#x} protected but not mapped"
            self.protections[page] = protection

    def set_tls(self, value):
        self.tls = value

    def stop(self):
        self.stopped = True

    def instructions(self):
        return self.executed

    def context(self):
        return self.registers

    def resume(self, context):
        self.registers = context


NUMBERS = {handler.name: number for number, handler in CALLS.items()}


def made_roots(tmp_path):
    """A sysroot, a working directory and a folder outside both, with a few files."""
    sysroot, work, outside = tmp_path / "sysroot", tmp_path / "work", tmp_path / "outside"
    for directory in (sysroot / "lib", work / "sub", outside):
        directory.mkdir(parents=True)
    (sysroot / "lib" / "libc.so.6").write_bytes(b"LIBC")
    (sysroot / "lib" / "abs-link").symlink_to("/lib/libc.so.6")  # absolute: means the sysroot's /lib
    (sysroot / "lib" / "out-link").symlink_to(str(outside / "secret"))
    (work / "input.txt").write_bytes(b"hello\nworld\n")
    (work / "up-link").symlink_to("../outside/secret")
    (outside / "secret").write_bytes(b"SECRET")
    return sysroot, work, outside


def made_kernel(roots) -> LinuxKernel:
    """A process over a PageMachine with four scratch pages mapped at SCRATCH."""
    sysroot, work, _ = roots
    machine = PageMachine()
    machine.map(SCRATCH, 4 * PAGE)
    space = AddressSpace([(SCRATCH, SCRATCH + 4 * PAGE)], ceiling=0x40000000)
    return LinuxKernel(machine, GuestFiles(str(sysroot), str(work)), space, brk=0x100000, stdin=b"typed in",
                       executable="/bin/prog")


def call(kernel, name, *args):
    """Call `name` as the emulator does: r0 set, then the scheduler's turn;
    what the calling thread gets in r0 (signed), where it runs on (a call
    that waited: once it woke), else what the call returned."""
    caller = kernel.threads.current
    result = kernel.system_call(NUMBERS[name], tuple(args) + (0,) * (6 - len(args)), pc=0x1234)
    if kernel.exit_status is None:
        machine = kernel.machine
        machine.registers = replace(machine.registers, r=(result,) + machine.registers.r[1:])
        kernel.reschedule()
        if kernel.threads.current is caller:
            result = machine.registers.r[0]
    return result - (1 << 32) if result & 0x80000000 else result


def put_string(kernel, text: str, address: int = SCRATCH) -> int:
    kernel.machine.write(address, text.encode() + b"\0")
    return address


def open_path(kernel, path: str, flags: int = 0) -> int:
    return call(kernel, "openat", (-100) & 0xFFFFFFFF, put_string(kernel, path), flags)
