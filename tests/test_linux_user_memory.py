"""System calls reach the program's memory as its protections let them
(harness.linux.user_memory): EFAULT for a write to a read-only page or a
read of a PROT_NONE one, nothing changed (tests/linux_src/user_copy.c,
against qemu-user); the harness's own copies (a file mapped) unbound."""

from __future__ import annotations

from test_linux_process import runs_as_under_qemu

from harness.linux.maps import Vma, Vmas

EXPECTED = (b"getrlimit into a writable page: ok\ngetrlimit into a read-only page: EFAULT\nunchanged 1\n"
            b"getrlimit across into it: EFAULT\nwrite from a read-only page: ok\n"
            b"write from a PROT_NONE page: EFAULT\nread into a read-only page: EFAULT\n"
            b"read into a writable page: ok\ngetrlimit once writable again: ok\n")


def test_calls_fault_on_pages_the_program_protected_as_under_qemu(compiled):
    runs_as_under_qemu("user_copy.c", EXPECTED, compiled)


def test_what_a_mapping_refuses():
    vmas = Vmas()
    vmas.set(Vma(0x1000, 0x3000, "r--"))
    vmas.set(Vma(0x3000, 0x4000, "---"))
    vmas.set(Vma(0x5000, 0x6000, "--x"))
    assert vmas.refuses(0x1000, 0x1004, "w") and not vmas.refuses(0x1000, 0x1004, "r")
    assert vmas.refuses(0x0FFC, 0x1004, "w") and not vmas.refuses(0x0000, 0x1000, "w")  # no mapping: anonymous
    assert vmas.refuses(0x2FFC, 0x3004, "r") and not vmas.refuses(0x5000, 0x5004, "r")  # executable: readable
    assert not vmas.refuses(0x4000, 0x5000, "w")
