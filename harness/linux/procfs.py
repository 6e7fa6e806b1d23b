"""The text of /proc/self's files and of the /proc/sys settings programs
read, as Linux 6.1 writes them (fs/proc/array.c, task_mmu.c, base.c), from
the emulated process (a LinuxKernel): one single-threaded process, pid
4242, running, as root, without a terminal."""

from __future__ import annotations

from harness.linux.calls_process import PID
from harness.linux.calls_tasks import SESSION
from harness.linux.maps import Vma, line
from harness.linux.memory import page_up
from harness.linux.signals import SIG_DFL, SIG_IGN

PAGE = 0x1000
# /proc/sys files programs read (glibc, Debian's tools), with the values of
# a default Debian 6.1 kernel. A file not here does not exist (ENOENT).
SYSCTLS: dict[tuple[str, ...], str] = {
    ("kernel", "ngroups_max"): "65536\n",
    ("kernel", "pid_max"): "4194304\n",
    ("vm", "overcommit_memory"): "0\n",
}
WRITABLE = frozenset({"comm"})  # /proc/self files procfs lets a process write


def vmas(kernel) -> list[Vma]:
    """The process's mappings in address order: what the address space
    holds, less the harness's own pages, with the stack and the vectors
    page (which are both the harness's and the program's)."""
    image = kernel.image
    ranges = []
    for low, high in kernel.space.ranges:
        pieces = [(low, high)]
        for owned_low, owned_high in kernel.space.owned:
            pieces = [part for start, end in pieces
                      for part in ((start, min(end, owned_low)), (max(start, owned_high), end)) if part[0] < part[1]]
        ranges += pieces
    ranges = sorted(ranges + list(image.live))
    return kernel.vmas.lines(ranges, (kernel.brk_start, page_up(kernel.brk)))


def maps(kernel) -> bytes:
    return "".join(line(vma) for vma in vmas(kernel)).encode("utf-8", "surrogateescape")


def _signal_sets(kernel) -> tuple[int, int]:
    """(ignored, caught): bit n-1 for signal n whose action ignores or
    handles it (rt_sigaction's records)."""
    ignored = caught = 0
    for signal, action in kernel.signals.actions.items():
        handler = action.handler
        if handler == SIG_IGN:
            ignored |= 1 << (signal - 1)
        elif handler != SIG_DFL:
            caught |= 1 << (signal - 1)
    return ignored, caught


def stat_text(kernel) -> bytes:
    """/proc/self/stat: do_task_stat's 52 fields."""
    image = kernel.image
    size = sum(vma.end - vma.start for vma in vmas(kernel))
    ignored, caught = _signal_sets(kernel)
    fields = [PID, f"({kernel.comm})", "R", 1, PID, SESSION, 0, -1, 0, 0, 0, 0, 0, kernel.ticks, 0, 0, 0, 20, 0, 1, 0, 0,
              size, size // PAGE, 0xFFFFFFFF, *image.code, image.start_stack, 0, 0, 0, 0, ignored, caught, 0, 0,
              0, 17, 0, 0, 0, 0, 0, 0, *image.data, kernel.brk_start, *image.args, *image.environment, 0]
    return (" ".join(str(field) for field in fields) + "\n").encode("utf-8", "surrogateescape")


def status(kernel) -> bytes:
    """/proc/self/status: proc_pid_status's lines for this process."""
    areas = vmas(kernel)
    size = sum(vma.end - vma.start for vma in areas) >> 10
    stack = sum(vma.end - vma.start for vma in areas if vma.name == "[stack]") >> 10
    files = sum(vma.end - vma.start for vma in areas if vma.is_file) >> 10
    ignored, caught = _signal_sets(kernel)
    pending = sum(1 << (signal - 1) for signal in {entry.signal for entry in kernel.signals.pending})
    fd_size = 32 if max(kernel.fds, default=0) < 32 else max(256, 1 << max(kernel.fds).bit_length())
    rows = [("Name", kernel.comm), ("Umask", "0022"), ("State", "R (running)"), ("Tgid", PID), ("Ngid", 0),
            ("Pid", PID), ("PPid", 1), ("TracerPid", 0), ("Uid", "0\t0\t0\t0"), ("Gid", "0\t0\t0\t0"),
            ("FDSize", fd_size), ("Groups", ""), ("NStgid", PID), ("NSpid", PID), ("NSpgid", PID), ("NSsid", SESSION),
            ("VmPeak", f"{size:8} kB"), ("VmSize", f"{size:8} kB"), ("VmLck", f"{0:8} kB"), ("VmPin", f"{0:8} kB"),
            ("VmHWM", f"{size:8} kB"), ("VmRSS", f"{size:8} kB"), ("RssAnon", f"{size - files:8} kB"),
            ("RssFile", f"{files:8} kB"), ("RssShmem", f"{0:8} kB"), ("VmData", f"{size - files - stack:8} kB"),
            ("VmStk", f"{stack:8} kB"), ("VmExe", f"{(kernel.image.code[1] - kernel.image.code[0]) >> 10:8} kB"),
            ("VmLib", f"{files:8} kB"), ("VmPTE", f"{0:8} kB"), ("VmSwap", f"{0:8} kB"),
            ("HugetlbPages", f"{0:8} kB"), ("CoreDumping", 0), ("THP_enabled", 1), ("Threads", 1), ("SigQ", "0/0"),
            ("SigPnd", f"{pending:016x}"), ("ShdPnd", f"{pending:016x}"), ("SigBlk", f"{kernel.signals.blocked:016x}"),
            ("SigIgn", f"{ignored:016x}"), ("SigCgt", f"{caught:016x}"), ("CapInh", f"{0:016x}"),
            ("CapPrm", f"{(1 << 41) - 1:016x}"), ("CapEff", f"{(1 << 41) - 1:016x}"),
            ("CapBnd", f"{(1 << 41) - 1:016x}"), ("CapAmb", f"{0:016x}"), ("NoNewPrivs", 0), ("Seccomp", 0),
            ("Seccomp_filters", 0), ("Speculation_Store_Bypass", "unknown"),
            ("SpeculationIndirectBranch", "unknown"), ("Cpus_allowed", "1"), ("Cpus_allowed_list", "0"),
            ("Mems_allowed", "1"), ("Mems_allowed_list", "0"), ("voluntary_ctxt_switches", 0),
            ("nonvoluntary_ctxt_switches", 0)]
    return "".join(f"{name}:\t{value}\n" for name, value in rows).encode("utf-8", "surrogateescape")


def _memory(kernel, span: tuple[int, int]) -> bytes:
    """The bytes of [start, end) as the process's memory holds them now (as
    Linux reads cmdline and environ)."""
    start, end = span
    return kernel.machine.read(start, end - start) if end > start else b""


PROC_TEXTS = {
    "maps": maps,
    "stat": stat_text,
    "status": status,
    "cmdline": lambda kernel: _memory(kernel, kernel.image.args),
    "environ": lambda kernel: _memory(kernel, kernel.image.environment),
    "auxv": lambda kernel: kernel.image.auxv,
    "comm": lambda kernel: kernel.comm.encode("utf-8", "surrogateescape") + b"\n",
}
