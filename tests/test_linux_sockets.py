"""AF_UNIX sockets as Linux has them (harness.linux.unix_sockets,
calls_sockets, calls_messages), driven through their system calls on a
plain machine: pairs of every type, message bounds and MSG_TRUNC, files
passed with SCM_RIGHTS (MSG_CTRUNC where the control buffer is short, a
socket in flight kept alive), a closed peer (the end of the file, EPIPE
and SIGPIPE, ECONNRESET), shutdown, poll's view, waits ended by another
thread, and names: bind, listen, connect, accept. What is not emulated
ends as a fault that names it."""

from __future__ import annotations

import errno
import stat
import struct

import pytest
from linux_calls import SCRATCH, call, put_string
from test_linux_threads import MAIN, _spawn
from test_linux_waits import _pipe, _to

from harness.linux import signals
from harness.linux.call_table import SystemCallFault
from harness.linux.unix_sockets import SNDBUF

AF_UNIX, AF_INET = 1, 2
SOCK_STREAM, SOCK_DGRAM, SOCK_SEQPACKET = 1, 2, 5
MSG_PEEK, MSG_CTRUNC, MSG_TRUNC, MSG_DONTWAIT, MSG_NOSIGNAL = 0x2, 0x8, 0x20, 0x40, 0x4000
POLLIN, POLLOUT, POLLERR, POLLHUP = 0x1, 0x4, 0x8, 0x10
PAIR, DATA, HEADER, IOV, CONTROL, NAME = (SCRATCH + 0x1000 + 0x100 * i for i in range(6))
OUT = SCRATCH + 0x1800


def _pair(kernel, kind: int = SOCK_STREAM) -> tuple[int, int]:
    assert call(kernel, "socketpair", AF_UNIX, kind, 0, PAIR) == 0
    return struct.unpack("<ii", kernel.machine.read(PAIR, 8))


def _send(kernel, fd: int, data: bytes, flags: int = 0) -> int:
    kernel.machine.write(DATA, data)
    return call(kernel, "send", fd, DATA, len(data), flags)


def _recv(kernel, fd: int, size: int = 64, flags: int = 0) -> bytes | int:
    got = call(kernel, "recv", fd, OUT, size, flags)
    return got if got < 0 else kernel.machine.read(OUT, got)


def _sendmsg(kernel, fd: int, data: bytes, fds: tuple[int, ...] = (), flags: int = 0) -> int:
    kernel.machine.write(DATA, data)
    kernel.machine.write(IOV, struct.pack("<II", DATA, len(data)))
    control = struct.pack("<Iii", 12 + 4 * len(fds), 1, 1) + struct.pack(f"<{len(fds)}i", *fds)
    kernel.machine.write(CONTROL, control)
    header = struct.pack("<IiIIIIi", 0, 0, IOV, 1, CONTROL if fds else 0, len(control) if fds else 0, 0)
    kernel.machine.write(HEADER, header)
    return call(kernel, "sendmsg", fd, HEADER, flags)


def _recvmsg(kernel, fd: int, size: int = 64, room: int = 64, flags: int = 0):
    """(result, bytes, fds received, msg_flags, msg_controllen)."""
    kernel.machine.write(IOV, struct.pack("<II", OUT, size))
    kernel.machine.write(CONTROL, bytes(64))
    kernel.machine.write(HEADER, struct.pack("<IiIIIIi", 0, 0, IOV, 1, CONTROL, room, 0))
    result = call(kernel, "recvmsg", fd, HEADER, flags)
    *_, controllen, msg_flags = struct.unpack("<IiIIIIi", kernel.machine.read(HEADER, 28))
    length, _, _ = struct.unpack("<Iii", kernel.machine.read(CONTROL, 12))
    fds = struct.unpack(f"<{(length - 12) // 4}i", kernel.machine.read(CONTROL + 12, length - 12)) if controllen else ()
    return result, kernel.machine.read(OUT, min(max(result, 0), size)), fds, msg_flags, controllen


def _poll(kernel, fd: int, events: int = POLLIN | POLLOUT) -> int:
    kernel.machine.write(SCRATCH + 0x1f00, struct.pack("<ihh", fd, events, 0))
    call(kernel, "poll", SCRATCH + 0x1f00, 1, 0)
    return struct.unpack("<ihh", kernel.machine.read(SCRATCH + 0x1f00, 8))[2]


def test_a_stream_pair_carries_bytes_both_ways_and_joins_sends(kernel):
    one, two = _pair(kernel)
    assert _send(kernel, one, b"hello ") == 6 and _send(kernel, one, b"world") == 5
    assert _recv(kernel, two, 8) == b"hello wo" and _recv(kernel, two) == b"rld"
    assert _send(kernel, two, b"back") == 4 and _recv(kernel, one, 64, MSG_PEEK) == b"back"
    assert _recv(kernel, one) == b"back"
    assert _recv(kernel, one, 64, MSG_DONTWAIT) == -errno.EAGAIN
    assert stat.S_ISSOCK(kernel.fds[one].node.mode)
    assert call(kernel, "write", one, DATA, 3) == 3 and call(kernel, "read", two, OUT, 10) == 3


def test_packets_keep_their_bounds_and_say_what_was_cut(kernel):
    for kind in (SOCK_SEQPACKET, SOCK_DGRAM):
        one, two = _pair(kernel, kind)
        assert _send(kernel, one, b"first") == 5 and _send(kernel, one, b"second") == 6
        assert _recvmsg(kernel, two, size=3)[:4] == (3, b"fir", (), MSG_TRUNC)  # the rest of "first" is lost
        assert _recvmsg(kernel, two, size=3, flags=MSG_TRUNC)[:2] == (6, b"sec")  # the whole length
        assert call(kernel, "send", one, SCRATCH, SNDBUF - 31, 0) == -errno.EMSGSIZE  # before reading it


def test_files_pass_as_new_descriptors_of_the_same_open_files(kernel):
    one, two = _pair(kernel)
    read_end, write_end = _pipe(kernel)
    assert _sendmsg(kernel, one, b"fd", (write_end,)) == 2
    assert call(kernel, "close", write_end) == 0  # in flight: the pipe keeps a writer
    result, data, fds, flags, controllen = _recvmsg(kernel, two)
    assert (result, data, flags, controllen, len(fds)) == (2, b"fd", 0, 16, 1)
    assert fds[0] not in (one, two, read_end)
    kernel.machine.write(DATA, b"via")
    assert call(kernel, "write", fds[0], DATA, 3) == 3 and call(kernel, "read", read_end, OUT, 8) == 3


def test_a_short_control_buffer_truncates_and_closes_the_rest(kernel):
    one, two = _pair(kernel, SOCK_SEQPACKET)
    read_end, write_end = _pipe(kernel)
    assert _sendmsg(kernel, one, b"two", (read_end, write_end)) == 3
    open_before = len(kernel.fds)
    result, _, fds, flags, controllen = _recvmsg(kernel, two, room=16)  # room for one descriptor
    assert (result, len(fds), flags & MSG_CTRUNC, controllen) == (3, 1, MSG_CTRUNC, 16)
    assert len(kernel.fds) == open_before + 1
    assert _sendmsg(kernel, one, b"none", (read_end,)) == 4
    assert _recvmsg(kernel, two, room=12)[2:5] == ((), MSG_CTRUNC, 0)


def test_a_stream_read_stops_after_the_message_that_passes_files(kernel):
    one, two = _pair(kernel)
    assert _send(kernel, one, b"ab") == 2 and _sendmsg(kernel, one, b"cd", (one,)) == 2 and _send(kernel, one, b"ef") == 2
    result, data, fds, _, _ = _recvmsg(kernel, two)
    assert (result, data, len(fds)) == (4, b"abcd", 1)
    assert _recv(kernel, two) == b"ef"


def test_a_closed_peer_ends_reads_and_breaks_writes(kernel):
    one, two = _pair(kernel)
    assert _send(kernel, one, b"last") == 4 and call(kernel, "close", one) == 0
    assert _poll(kernel, two) & (POLLIN | POLLHUP) == POLLIN | POLLHUP
    assert _recv(kernel, two) == b"last" and _recv(kernel, two) == b""  # then the end of the file
    assert _send(kernel, two, b"x", MSG_NOSIGNAL) == -errno.EPIPE and not kernel.signals.pending
    assert _send(kernel, two, b"x") == -errno.EPIPE
    assert kernel.signals.pending == [signals.Pending(13, 0)]  # SIGPIPE
    three, four = _pair(kernel, SOCK_SEQPACKET)
    assert _send(kernel, four, b"unread") == 6 and call(kernel, "close", three) == 0
    assert _poll(kernel, four) & POLLERR and _recv(kernel, four) == -errno.ECONNRESET  # once
    assert _recv(kernel, four) == b"" and _send(kernel, four, b"x") == -errno.EPIPE


def test_a_socket_in_flight_stays_open_until_its_receiver_closes_it(kernel):
    one, two = _pair(kernel)
    three, four = _pair(kernel)
    assert _sendmsg(kernel, one, b"s", (four,)) == 1 and call(kernel, "close", four) == 0
    assert _poll(kernel, three) & POLLHUP == 0  # four is in a message, not closed
    _, _, fds, _, _ = _recvmsg(kernel, two)
    assert _poll(kernel, three) & POLLHUP == 0
    assert call(kernel, "close", fds[0]) == 0 and _poll(kernel, three) & POLLHUP == POLLHUP


def test_shutdown_ends_the_peers_reads_and_this_ends_writes(kernel):
    one, two = _pair(kernel, SOCK_SEQPACKET)
    assert call(kernel, "shutdown", one, 1) == 0  # SHUT_WR
    assert _recv(kernel, two) == b"" and _poll(kernel, two, POLLIN) == POLLIN
    assert _send(kernel, one, b"x") == -errno.EPIPE
    assert call(kernel, "shutdown", one, 3) == -errno.EINVAL
    assert call(kernel, "shutdown", 0, 0) == -errno.ENOTSOCK


def test_a_receive_waits_for_another_threads_send(kernel):
    one, two = _pair(kernel)
    tid = _spawn(kernel)
    assert call(kernel, "recv", two, OUT, 16, 0) == 0  # main waits: the thread runs
    assert kernel.threads.current.tid == tid and _poll(kernel, two) & POLLIN == 0
    assert _send(kernel, one, b"wake") == 4
    _to(kernel, MAIN)
    assert kernel.machine.registers.r[0] == 4 and kernel.machine.read(OUT, 4) == b"wake"


def test_a_send_waits_for_room_then_puts_in_the_rest(kernel):
    one, two = _pair(kernel)
    kernel.machine.map(0x100000, 0x60000)
    tid = _spawn(kernel)
    assert call(kernel, "send", one, 0x100000, 0x50000, 0) == 0  # more than the buffer: main waits
    assert kernel.threads.current.tid == tid and _poll(kernel, one, POLLOUT) == 0
    # buffers of half the send buffer go in while less than it is queued: three
    assert call(kernel, "recv", two, 0x100000, 0x50000, 0) == 3 * (SNDBUF // 2 - 64)
    _to(kernel, MAIN)
    assert kernel.machine.registers.r[0] == 0x50000


def test_bind_makes_a_socket_file_that_connect_finds(kernel):
    server = call(kernel, "socket", AF_UNIX, SOCK_STREAM | 0o4000, 0)  # SOCK_NONBLOCK
    name = struct.pack("<H", AF_UNIX) + b"/work/sock\0"
    kernel.machine.write(NAME, name)
    client = call(kernel, "socket", AF_UNIX, SOCK_STREAM, 0)
    assert call(kernel, "connect", client, NAME, len(name)) == -errno.ENOENT  # no file yet
    assert call(kernel, "bind", server, NAME, len(name)) == 0
    assert call(kernel, "bind", client, NAME, len(name)) == -errno.EADDRINUSE
    assert call(kernel, "stat64", put_string(kernel, "/work/sock", SCRATCH + 0x1e00), SCRATCH + 0x1c00) == 0
    assert stat.S_ISSOCK(struct.unpack_from("<I", kernel.machine.read(SCRATCH + 0x1c00 + 16, 4))[0])
    assert call(kernel, "connect", client, NAME, len(name)) == -errno.ECONNREFUSED  # nobody listens
    assert call(kernel, "accept4", server, 0, 0, 0) == -errno.EINVAL
    assert call(kernel, "listen", server, 5) == 0 and call(kernel, "accept4", server, 0, 0, 0) == -errno.EAGAIN
    assert call(kernel, "connect", client, NAME, len(name)) == 0
    kernel.machine.write(SCRATCH + 0x1d00, struct.pack("<i", 110))
    accepted = call(kernel, "accept4", server, SCRATCH + 0x1c00, SCRATCH + 0x1d00, 0)
    assert struct.unpack("<i", kernel.machine.read(SCRATCH + 0x1d00, 4))[0] == 2  # the client has no name
    assert _send(kernel, client, b"hi") == 2 and _recv(kernel, accepted) == b"hi"
    kernel.machine.write(SCRATCH + 0x1d00, struct.pack("<i", 110))
    assert call(kernel, "getpeername", client, SCRATCH + 0x1c00, SCRATCH + 0x1d00) == 0
    assert kernel.machine.read(SCRATCH + 0x1c00, len(name)) == name
    assert call(kernel, "close", server) == 0
    assert call(kernel, "connect", call(kernel, "socket", AF_UNIX, SOCK_STREAM, 0), NAME, len(name)) \
        == -errno.ECONNREFUSED  # the file stays, nobody behind it


def test_socket_options_and_what_is_refused(kernel):
    one, _ = _pair(kernel, SOCK_SEQPACKET)
    kernel.machine.write(SCRATCH + 0x1d00, struct.pack("<ii", 4, 1000))
    assert call(kernel, "getsockopt", one, 1, 3, SCRATCH + 0x1c00, SCRATCH + 0x1d00) == 0  # SO_TYPE
    assert struct.unpack("<i", kernel.machine.read(SCRATCH + 0x1c00, 4))[0] == SOCK_SEQPACKET
    assert call(kernel, "setsockopt", one, 1, 7, SCRATCH + 0x1d04, 4) == 0  # SO_SNDBUF 1000: doubled
    assert call(kernel, "getsockopt", one, 1, 7, SCRATCH + 0x1c00, SCRATCH + 0x1d00) == 0
    assert struct.unpack("<i", kernel.machine.read(SCRATCH + 0x1c00, 4))[0] == 4608  # at least SOCK_MIN_SNDBUF
    assert call(kernel, "setsockopt", one, 0, 11, SCRATCH + 0x1d04, 4) == -errno.EOPNOTSUPP  # not SOL_SOCKET
    assert call(kernel, "socket", AF_UNIX, 4, 0) == -errno.ESOCKTNOSUPPORT  # SOCK_RDM
    assert call(kernel, "socket", AF_UNIX, SOCK_STREAM, 6) == -errno.EPROTONOSUPPORT
    with pytest.raises(SystemCallFault, match="MSG_OOB"):
        _send(kernel, one, b"x", 1)
    with pytest.raises(SystemCallFault, match="SO_RCVTIMEO|option 20"):
        call(kernel, "setsockopt", one, 1, 20, SCRATCH + 0x1d04, 4)
    kernel.machine.write(NAME, struct.pack("<H", AF_UNIX) + b"\0abstract")
    with pytest.raises(SystemCallFault, match="abstract"):
        call(kernel, "bind", one, NAME, 11)
