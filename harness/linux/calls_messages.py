"""What AF_UNIX sockets send and receive (harness.linux.call_table): send,
sendto, sendmsg, sendmmsg, recv, recvfrom and recvmsg, their buffers
gathered and scattered, the files a message passes (SCM_RIGHTS: the
receiver gets new descriptors of the same open files, as many as its
control buffer holds, MSG_CTRUNC and the rest closed where it is short),
the sender's name, and msg_flags. The sockets' own rules (message bounds,
waits, EPIPE) are harness.linux.unix_sockets'.

MSG_NOSIGNAL, MSG_DONTWAIT, MSG_PEEK, MSG_TRUNC and MSG_CMSG_CLOEXEC are
emulated (no descriptor flag outlives an exec here: the harness runs no
other program), and MSG_EOR and MSG_MORE, which AF_UNIX ignores; another
flag, SCM_CREDENTIALS, and a name given to a datagram socket's send end
the run as a fault that names them.
"""

from __future__ import annotations

import errno
import struct
from typing import NamedTuple

from harness.linux.call_table import SystemCallFault, handles
from harness.linux.calls_io import MAX_TRANSFER, io_vector
from harness.linux.calls_sockets import SOL_SOCKET, give_address, socket_of
from harness.linux.files import GuestError, OpenFile
from harness.linux.threads import Blocked
from harness.linux.unix_sockets import (
    ESTABLISHED,
    MSG_CTRUNC,
    MSG_DONTWAIT,
    MSG_NOSIGNAL,
    MSG_PEEK,
    MSG_TRUNC,
    SOCK_DGRAM,
    SOCK_STREAM,
    Received,
    land,
)

MSG_EOR, MSG_MORE, MSG_CMSG_CLOEXEC = 0x80, 0x8000, 0x40000000
SEND_FLAGS = MSG_DONTWAIT | MSG_NOSIGNAL | MSG_EOR | MSG_MORE
RECEIVE_FLAGS = MSG_DONTWAIT | MSG_PEEK | MSG_TRUNC | MSG_CMSG_CLOEXEC
FLAG_NAMES = {0x1: "MSG_OOB", 0x100: "MSG_WAITALL", 0x2000: "MSG_ERRQUEUE", 0x10000: "MSG_WAITFORONE",
              0x4000000: "MSG_ZEROCOPY", 0x20000000: "MSG_FASTOPEN"}
MSGHDR = struct.Struct("<IiIIIIi")  # struct msghdr of ARM EABI: name, namelen, iov, iovlen, control, controllen, flags
MMSGHDR_SIZE = MSGHDR.size + 4  # and msg_len
CMSGHDR = struct.Struct("<Iii")  # cmsg_len, cmsg_level, cmsg_type (4-byte aligned)
SCM_RIGHTS, SCM_CREDENTIALS = 1, 2
SCM_MAX_FD = 253  # descriptors one message may pass
UIO_MAXIOV = 1024


class Header(NamedTuple):
    """A struct msghdr as the program gave it."""

    name: int
    namelen: int
    iov: int
    iovlen: int
    control: int
    controllen: int
    flags: int


def _flags(flags: int, known: int, call: str) -> None:
    unknown = flags & ~known
    if unknown:
        names = [FLAG_NAMES.get(1 << bit, hex(1 << bit)) for bit in range(32) if unknown >> bit & 1]
        raise SystemCallFault(f"{call} with {' | '.join(names)}: not emulated for an AF_UNIX socket")


def _buffers(kernel, vector: int, count: int) -> list[tuple[int, int]]:
    if count > UIO_MAXIOV:
        raise GuestError(errno.EMSGSIZE)
    return io_vector(kernel, vector, count)


def _rights(kernel, address: int, length: int) -> list[OpenFile]:
    """The files the control messages at `address` pass (__scm_send)."""
    files, offset = [], 0
    while length - offset >= CMSGHDR.size:
        size, level, kind = CMSGHDR.unpack(kernel.machine.read(address + offset, CMSGHDR.size))
        if size < CMSGHDR.size or size > length - offset:
            raise GuestError(errno.EINVAL)
        if level == SOL_SOCKET:
            if kind == SCM_CREDENTIALS:
                raise SystemCallFault("sendmsg with SCM_CREDENTIALS: credentials messages are not emulated")
            count = (size - CMSGHDR.size) // 4
            if kind != SCM_RIGHTS or len(files) + count > SCM_MAX_FD:
                raise GuestError(errno.EINVAL)
            fds = struct.unpack(f"<{count}i", kernel.machine.read(address + offset + CMSGHDR.size, 4 * count))
            files += [kernel.file(fd) for fd in fds]
        offset += (size + 3) & ~3
    return files


def _send(kernel, fd: int, header: Header, buffers: list[tuple[int, int]], flags: int) -> int:
    """One message sent: its buffers gathered, its files."""
    socket = socket_of(kernel, fd)
    _flags(flags, SEND_FLAGS, "send")
    files = _rights(kernel, header.control, header.controllen) if header.controllen else []
    if header.namelen:
        if socket.kind == SOCK_STREAM:
            raise GuestError(errno.EISCONN if socket.state == ESTABLISHED else errno.EOPNOTSUPP)
        if socket.kind == SOCK_DGRAM:
            raise SystemCallFault("sendto a name from an AF_UNIX datagram socket is not emulated")
    if socket.kind != SOCK_STREAM and sum(length for _, length in buffers) > socket.sndbuf - 32:
        raise GuestError(errno.EMSGSIZE)  # before its bytes are read, as unix_dgram_sendmsg
    data = bytearray()
    for base, length in buffers:
        length = min(length, MAX_TRANSFER - len(data))
        data += kernel.machine.read(base, length) if length else b""
    return socket.send(kernel, bytes(data), files, flags)


def _header(kernel, address: int) -> Header:
    return Header(*MSGHDR.unpack(kernel.machine.read(address, MSGHDR.size)))


@handles(289, "send")
def sys_send(kernel, fd, buffer, length, flags):
    return _send(kernel, fd, Header(0, 0, 0, 1, 0, 0, 0), [(buffer, length)], flags)


@handles(290, "sendto")
def sys_sendto(kernel, fd, buffer, length, flags, address, size):
    return _send(kernel, fd, Header(address, size if address else 0, 0, 1, 0, 0, 0), [(buffer, length)], flags)


@handles(296, "sendmsg")
def sys_sendmsg(kernel, fd, message, flags):
    header = _header(kernel, message)
    return _send(kernel, fd, header, _buffers(kernel, header.iov, header.iovlen), flags)


@handles(374, "sendmmsg")
def sys_sendmmsg(kernel, fd, vector, count, flags):
    """Each message in turn, its length written to msg_len; the count sent,
    or the first's error (a later one's ends the call with those sent)."""
    sent = 0
    for index in range(min(count, UIO_MAXIOV)):
        entry = vector + index * MMSGHDR_SIZE
        try:
            length = sys_sendmsg(kernel, fd, entry, flags)
        except (GuestError, Blocked):
            if not sent:
                raise
            break
        kernel.machine.write(entry + MSGHDR.size, struct.pack("<I", length))
        sent += 1
    return sent


# ---- receiving


def _install(kernel, got: Received, header: Header) -> tuple[int, int]:
    """The files received given descriptors, as many as the control buffer
    holds (scm_detach_fds); (the control bytes written, MSG_CTRUNC or 0)."""
    if not got.files:
        return 0, 0
    room = (header.controllen - CMSGHDR.size) // 4 if header.controllen > CMSGHDR.size else 0
    fds: list[int] = []
    for opened in got.files[:room]:
        try:
            fds.append(kernel.new_fd(opened))
        except GuestError:  # EMFILE: the rest are closed, as Linux
            break
    land(kernel, got.files, [index < len(fds) for index in range(len(got.files))], got.taken)
    written = 0
    if fds:
        record = CMSGHDR.pack(CMSGHDR.size + 4 * len(fds), SOL_SOCKET, SCM_RIGHTS) + struct.pack(f"<{len(fds)}i", *fds)
        kernel.machine.write(header.control, record)
        written = min(len(record), header.controllen)
    return written, MSG_CTRUNC if len(fds) < len(got.files) else 0


class Delivered(NamedTuple):
    """A receive's outcome: the call's result, the sender's name, the
    msg_flags, and the bytes of control messages written."""

    result: int
    address: bytes
    flags: int
    control: int


def _receive(kernel, fd: int, header: Header, buffers: list[tuple[int, int]], flags: int) -> Delivered:
    """One receive into the buffers, the files given descriptors. A
    datagram's whole length is the result under MSG_TRUNC, as Linux."""
    socket = socket_of(kernel, fd)
    _flags(flags, RECEIVE_FLAGS, "recv")
    got = socket.receive(kernel, min(sum(length for _, length in buffers), MAX_TRANSFER), flags)
    at = 0
    for base, length in buffers:
        piece = got.data[at: at + length]
        if piece:
            kernel.machine.write(base, piece)
        at += len(piece)
    written, truncated = _install(kernel, got, header)
    whole = flags & MSG_TRUNC and socket.kind != SOCK_STREAM
    return Delivered(got.length if whole else len(got.data), got.address, got.flags | truncated, written)


@handles(291, "recv")
def sys_recv(kernel, fd, buffer, length, flags):
    return _receive(kernel, fd, Header(0, 0, 0, 1, 0, 0, 0), [(buffer, length)], flags).result


@handles(292, "recvfrom")
def sys_recvfrom(kernel, fd, buffer, length, flags, address, size):
    got = _receive(kernel, fd, Header(0, 0, 0, 1, 0, 0, 0), [(buffer, length)], flags)
    if address:
        give_address(kernel, got.address, address, size)
    return got.result


@handles(297, "recvmsg")
def sys_recvmsg(kernel, fd, message, flags):
    """recvmsg: the buffers filled, then msg_namelen (where a name buffer
    was given), msg_flags and msg_controllen written back."""
    header = _header(kernel, message)
    got = _receive(kernel, fd, header, _buffers(kernel, header.iov, header.iovlen), flags)
    if header.name:
        give_address(kernel, got.address, header.name, message + 4)
    kernel.machine.write(message + 24, struct.pack("<i", got.flags))
    kernel.machine.write(message + 20, struct.pack("<I", got.control))
    return got.result
