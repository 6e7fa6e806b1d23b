"""Private mappings of files (mmap2 with MAP_PRIVATE, and the ELFs exec
loads): each page holds the file's bytes as they were when it was mapped,
or when madvise(MADV_DONTNEED) dropped it, and the program's own stores.

On Linux a private page the program has not written is the page cache's
own, so a later change of the file shows through it; the harness cannot
tell those pages from the ones the program wrote. Where a file changes
under a private mapping of the same bytes (a write, a truncation, a hole
punched, or a shared writable mapping of it beside a private one) the run
ends as a fault naming it. Pages wholly past the file's end (Linux:
SIGBUS on their access) are not filled here: a fault names them."""

from __future__ import annotations

from harness.linux.call_table import SystemCallFault
from harness.linux.maps import Vma
from harness.linux.memory import PAGE, page_up


def changed(kernel, node, low: int, high: int, what: str) -> None:
    """`what` changes the bytes [low, high) of the file `node`."""
    for vma in kernel.vmas.of_node(node):
        if low < vma.offset + (vma.end - vma.start) and vma.offset < high:
            raise SystemCallFault(f"{what} of {vma.name} while MAP_PRIVATE mapped at {vma.start:#x}: pages the "
                                  "program has not written would show the change, which is not emulated")


def truncated(kernel, node, size: int) -> None:
    """The file `node` about to be `size` bytes long: what a shrinking takes away changes."""
    if size < len(node.data):
        changed(kernel, node, size, len(node.data), f"a truncation to {size} bytes")


def file_bytes(kernel, vma: Vma, start: int, end: int) -> bytes:
    """The file's bytes now under [start, end) of the private mapping `vma`,
    zeros past its end within its last page."""
    offset = vma.offset + start - vma.start
    if vma.node is not None:
        size = len(vma.node.data)
        data = vma.node.data.read(offset, end - start)
    else:  # an ELF exec loaded: Linux refuses writes to it while it runs (ETXTBSY)
        with open(vma.host, "rb") as file:
            size = file.seek(0, 2)
            file.seek(offset)
            data = file.read(end - start)
    if offset + (end - start) > page_up(size):
        raise SystemCallFault(f"the pages of {vma.name} mapped MAP_PRIVATE at {vma.start:#x} past its end "
                              f"({size} bytes, mapped to {vma.offset + vma.end - vma.start:#x}): their SIGBUS "
                              "is not emulated")
    return data.ljust(end - start, b"\0")


def refill(kernel, vma: Vma) -> None:
    """The pages of `vma` (a private file mapping's part) read the file again."""
    for start in range(vma.start, vma.end, PAGE * 256):
        end = min(vma.end, start + PAGE * 256)
        kernel.machine.raw.write(start, file_bytes(kernel, vma, start, end))
