"""An ARM Linux program as a process the verifier can run
(harness.verify.stops.verify_program(..., system=LinuxSystem(...))).

The loader (harness.linux.loader) places the executable and its dynamic
linker; `attach` maps the kuser helper page and writes the initial stack
once the emulator exists; from then on the program's system calls go to a
LinuxKernel, and the run ends when it exits.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
from dataclasses import dataclass

from harness.emulation.machine import Context, Machine, Switch
from harness.emulation.placement import PAGE, Placement, pages_of, place
from harness.errors import InputError
from harness.filesystem import read_input
from harness.formats.elf import open_elf
from harness.linux import signals
from harness.linux.files import WORKDIR, GuestError, GuestFiles
from harness.linux.kernel import LinuxKernel
from harness.linux.loader import (
    ENVIRONMENT,
    KUSER_PAGE,
    LoadedElf,
    initial_stack,
    kuser_page,
    place_executable,
    place_interpreter,
)
from harness.linux.maps import VECTORS, Vma, loaded
from harness.linux.memory import AddressSpace, page_up
from harness.linux.signals import deliver_pending
from harness.linux.special_files import Image, exec_image

KUSER_SIZE = 0x1000  # the vectors page; the rest above it is the kernel's (placement.RESERVED): never mapped


@dataclass(frozen=True)
class LinuxRun:
    """What to run: the executable (a host path), its arguments, and the two
    directories it may read (the sysroot for absolute paths, `cwd` for
    relative ones)."""

    program: str
    args: tuple[str, ...] = ()
    sysroot: str | None = None
    cwd: str = "."
    stdin: str | None = None
    lazy_binding: bool = False
    argv0: str | None = None  # what the process is told it is (default: its path in the sysroot, else `program`)

    @property
    def environment(self) -> tuple[str, ...]:
        # Bind-now unless asked (Android links every executable with -z now).
        return ENVIRONMENT + (() if self.lazy_binding else ("LD_BIND_NOW=1",))


@dataclass(frozen=True)
class ProcessOutcome:
    """How the process ended: its exit status (negative: killed by that
    signal), and what it wrote."""

    exit_status: int | None
    stdout: bytes
    stderr: bytes

    @property
    def stdout_sha256(self) -> str:
        return hashlib.sha256(self.stdout).hexdigest()


class LinuxSystem:
    """One run of `run`: where everything goes, and the process once attached."""

    def __init__(self, run: LinuxRun):
        self.run = run
        self.files = GuestFiles(run.sysroot, run.cwd)
        self.executable: LoadedElf = place_executable(run.program)
        self.placement: Placement = place(self.executable.segments)
        where = self.placement
        owned = [(where.stack_bottom - PAGE, where.stack_top + PAGE), (where.sentinel, where.sentinel + PAGE)]
        self.space = AddressSpace(pages_of(self.executable.segments), ceiling=where.stack_bottom - PAGE, owned=owned)
        self.interpreter: LoadedElf | None = None
        if self.executable.interpreter:
            self.interpreter = place_interpreter(self._interpreter_path(self.executable.interpreter), self.space)
            for start, end in pages_of(self.interpreter.segments):
                self.space.take(start, end)
        self.stdin = None if run.stdin is None else read_input(run.stdin, "stdin")
        self.kernel: LinuxKernel | None = None

    def rerun(self) -> "LinuxSystem":
        """A fresh system for the same run (runs are deterministic: the
        verified run repeats one made before it)."""
        return LinuxSystem(self.run)

    def _interpreter_path(self, name: str) -> str:
        if self.run.sysroot is None:
            raise InputError(f"{self.run.program}: a dynamically linked program (interpreter {name}): "
                             "give --sysroot DIR with its dynamic linker and libraries")
        try:
            return self.files.resolve(name)[1]
        except GuestError:
            raise InputError(f"{self.run.program}: its interpreter {name} is not in the sysroot "
                             f"{self.run.sysroot}") from None

    @property
    def segments(self) -> tuple[tuple[int, bytes], ...]:
        return self.executable.segments + (self.interpreter.segments if self.interpreter else ())

    @property
    def entry(self) -> int:
        """Where the process starts (bit 0: Thumb): the dynamic linker's entry, or the program's."""
        return (self.interpreter or self.executable).entry

    @property
    def argv(self) -> list[str]:
        return [self.run.argv0 or self._guest_path(), *self.run.args]

    def _guest_path(self) -> str:
        """The program as the process is told it is by default: where it lies
        in the sysroot, as the guest sees it (Chromium finds its ICU data
        beside /proc/self/exe: a host path would name nothing in the guest's
        files), else its path as given."""
        if self.run.sysroot:
            inside = os.path.relpath(os.path.realpath(self.run.program), os.path.realpath(self.run.sysroot))
            if not inside.startswith(os.pardir):
                return "/" + inside.replace(os.sep, "/")
        return self.run.program

    def attach(self, machine: Machine, placement: Placement) -> int:
        """Map the helper page, write the initial stack; the initial sp."""
        machine.map(KUSER_PAGE, KUSER_SIZE)
        machine.write(KUSER_PAGE, kuser_page())
        sp, image = initial_stack(placement.stack_top, self.argv, self.run.environment, self.executable,
                                  self.interpreter)
        machine.write(sp, image)
        # /proc/self/exe names what argv[0] names: not the host path, which
        # differs from machine to machine (static glibc reads it at start-up),
        # made absolute as the kernel's is (glibc's _dl_get_origin aborts on a
        # relative one): a relative argv[0] is a file in the working directory.
        executable = posixpath.normpath(posixpath.join(WORKDIR, self.argv[0]))
        self.kernel = LinuxKernel(machine, self.files, self.space, page_up(self.executable.end), self.stdin,
                                  executable, self._image(machine, sp, placement, executable))
        for loaded_elf in (self.executable, self.interpreter):
            if loaded_elf is not None:
                self.kernel.note_mapped(loaded_elf.path, os.path.getsize(loaded_elf.path))
        return sp

    def mapped_file_bytes(self) -> int:
        """The bytes of the distinct files the process has mapped (exec's, and its own mmaps)."""
        return 0 if self.kernel is None else self.kernel.mapped_file_bytes

    def _image(self, machine: Machine, sp: int, placement: Placement, executable: str) -> Image:
        """What exec left that /proc shows (harness.linux.special_files.Image)."""
        program = loaded(self.executable.path, self.executable.base, executable)
        vmas = program.vmas
        if self.interpreter is not None:
            vmas += loaded(self.interpreter.path, self.interpreter.base,
                           self.files.resolve(self.executable.interpreter)[0]).vmas
        stack = (placement.stack_bottom, placement.stack_top)
        vmas += (Vma(*stack, "rw-", name="[stack]"), Vma(*VECTORS, name="[vectors]"))
        return exec_image(machine, sp, vmas=vmas, live=(stack, VECTORS[:2]), code=program.code, data=program.data,
                          host_executable=self.run.program)

    def system_call(self, number: int, args: tuple[int, ...], pc: int) -> int:
        return self.kernel.system_call(number, args, pc)

    def reschedule(self) -> Switch | None:
        """After a system call: the thread switched to, if another runs now."""
        return self.kernel.reschedule()

    def expire_timers(self) -> bool:
        """The timers whose time has come send their signals (harness.linux.timers)."""
        return self.kernel.expire_timers()

    def deadline(self) -> int | None:
        """The instruction count before which the run must stop next: a
        timer expires, or the running thread's time slice ends while
        another is ready (None: no such stop)."""
        return self.kernel.deadline()

    def preempt(self) -> Switch | None:
        """At a deadline: the thread switched to, where the running one's time slice is over."""
        return self.kernel.preempt()

    def fault(self, kind: str, address: int) -> Context | None:
        """A faulting instruction (signals.FAULTS[kind], at `address`): the
        context its handler interrupts, or None (the process ended)."""
        return signals.fault(self.kernel, *signals.FAULTS[kind], address)

    def deliver_pending(self) -> Context | None:
        """After a system call: a pending signal delivered (signals.deliver_pending)."""
        return deliver_pending(self.kernel)

    @property
    def exit_status(self) -> int | None:
        return None if self.kernel is None else self.kernel.exit_status

    def outcome(self) -> ProcessOutcome:
        if self.kernel is None:
            return ProcessOutcome(None, b"", b"")
        return ProcessOutcome(self.kernel.exit_status, bytes(self.kernel.stdout.data), bytes(self.kernel.stderr.data))


def is_linux_program(path: str) -> bool:
    """Does `path` look like a Linux program (a PT_INTERP, or an executable
    whose ELF OS/ABI or notes say Linux) rather than bare-metal firmware?"""
    image = open_elf(path)
    elf = image.elf
    if any(segment["p_type"] == "PT_INTERP" for segment in elf.iter_segments()):
        return True
    return any(section.name == ".note.ABI-tag" for section in elf.iter_sections())
