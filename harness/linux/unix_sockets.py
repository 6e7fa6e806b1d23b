"""AF_UNIX sockets as Linux's net/unix/af_unix.c keeps them (made and
connected by harness.linux.calls_sockets, their bytes moved by
calls_messages): each socket queues what its peer sent it, as messages
that keep their bounds (a datagram or a SOCK_SEQPACKET record is read
whole, its excess cut: MSG_TRUNC) or that a SOCK_STREAM read joins, up to
the first that passes files (SCM_RIGHTS). A sender may have SNDBUF bytes
queued at its peer and waits (harness.linux.threads.Blocked) for the
reader beyond (Linux counts each buffer's overhead too, and blocks a
little sooner); a read of an empty queue waits for a send, EAGAIN under
O_NONBLOCK or MSG_DONTWAIT.

A socket lives while a descriptor or a message in flight holds its open
file (LinuxKernel.dropped tells it when neither does: `release`). Then
its connected peer is shut down both ways (a read ends, a write fails
with EPIPE, SIGPIPE for a stream without MSG_NOSIGNAL; ECONNRESET first
where it left bytes unread), the files still queued at it are dropped,
and a datagram sent to it is refused (ECONNREFUSED), as Linux's
unix_release_sock.
"""

from __future__ import annotations

import errno
from collections import deque
from dataclasses import dataclass, field

from harness.linux.files import Device, GuestError, OpenFile
from harness.linux.threads import Blocked, Wait

AF_UNIX = 1
SOCK_STREAM, SOCK_DGRAM, SOCK_SEQPACKET = 1, 2, 5
RCV_SHUTDOWN, SEND_SHUTDOWN, SHUTDOWN_MASK = 1, 2, 3
CLOSE, ESTABLISHED, LISTEN = "close", "established", "listen"  # sk_state
SNDBUF = 212992  # net.core.wmem_default: each socket's send buffer (SO_SNDBUF)
MSG_PEEK, MSG_CTRUNC, MSG_TRUNC, MSG_DONTWAIT, MSG_NOSIGNAL = 0x2, 0x8, 0x20, 0x40, 0x4000
POLLIN, POLLERR, POLLHUP, POLLRDHUP = 0x1, 0x8, 0x10, 0x2000
O_NONBLOCK = 0o4000
SIGPIPE = 13
UNBOUND = b"\x01\x00"  # the name of a socket bound to none: sun_family alone


@dataclass(eq=False)
class Message:
    """What one send queued at the receiver: its bytes (a stream reads
    them in parts: `consumed`), the files it passes, who sent it."""

    data: bytes
    files: list[OpenFile]
    sender: UnixSocket
    consumed: int = 0

    @property
    def left(self) -> int:
        return len(self.data) - self.consumed


@dataclass
class Received:
    """What a receive took: the bytes, the files passed with them (`taken`:
    out of the queue, else a MSG_PEEK's copies), the sender's name, the
    whole message's length and the msg_flags (MSG_TRUNC) it gives."""

    data: bytes = b""
    files: list[OpenFile] = field(default_factory=list)
    address: bytes = b""
    length: int = 0
    flags: int = 0
    taken: bool = True


class UnixSocket(Device):
    """One end: its type, state, peer, the messages queued for it, the
    connections waiting for accept (a listener's), its shutdown bits,
    pending error (sk_err), name, and the bytes it sent that its peer has
    not read (sk_wmem_alloc)."""

    def __init__(self, kind: int):
        self.kind = kind
        self.state = CLOSE
        self.peer: UnixSocket | None = None
        self.queue: deque[Message] = deque()
        self.pending: deque[UnixSocket] = deque()
        self.backlog = 0
        self.shutdown = 0
        self.error = 0
        self.address = b""  # its sockaddr_un as bound (b"": none)
        self.name: SocketName | None = None  # the file bind made
        self.queued = 0
        self.sndbuf = SNDBUF
        self.options: dict[int, int] = {}  # SOL_SOCKET options set that change nothing here
        self.opened: OpenFile | None = None
        self.in_flight = 0  # messages that pass its open file
        self.released = False

    def open(self, kernel) -> None:
        raise GuestError(errno.ENXIO)  # /proc/self/fd/N of a socket, as Linux

    def ready(self) -> tuple[bool, bool]:
        readable = bool(self.queue or self.pending or self.shutdown & RCV_SHUTDOWN)
        return readable, self.state != LISTEN and self.queued * 4 <= self.sndbuf  # unix_writable

    def hangup(self) -> int:
        """The events unix_poll adds: an error, a shutdown, an unconnected
        connection-based socket (POLLHUP)."""
        events = POLLERR if self.error else 0
        if self.shutdown == SHUTDOWN_MASK or (self.kind != SOCK_DGRAM and self.state == CLOSE):
            events |= POLLHUP
        if self.shutdown & RCV_SHUTDOWN:
            events |= POLLRDHUP | POLLIN
        return events

    def read(self, kernel, count: int) -> bytes:
        got = self.receive(kernel, count, 0)
        land(kernel, got.files, [False] * len(got.files), got.taken)  # no room for them: closed
        return got.data

    def write(self, kernel, data: bytes) -> int:
        return self.send(kernel, data, [], 0)

    def blocking(self, flags: int) -> bool:
        return not flags & MSG_DONTWAIT and not self.opened.flags & O_NONBLOCK

    # ---- sending

    def send(self, kernel, data: bytes, files: list[OpenFile], flags: int) -> int:
        if self.kind == SOCK_STREAM:
            if self.peer is None:
                raise GuestError(errno.ENOTCONN)
            if self.shutdown & SEND_SHUTDOWN:
                self._broken(kernel, flags)
            return self._stream(kernel, data, files, flags, 0)
        return self._packet(kernel, data, files, flags)

    def _broken(self, kernel, flags: int) -> None:
        if not flags & MSG_NOSIGNAL:
            kernel.signal_thread(kernel.threads.current, SIGPIPE, 0)
        raise GuestError(errno.EPIPE)

    def _queue(self, data: bytes, files: list[OpenFile]) -> None:
        for opened in files:
            if isinstance(opened.node.device, UnixSocket):
                opened.node.device.in_flight += 1
        self.peer.queue.append(Message(data, files, self))
        self.queued += len(data)

    def _stream(self, kernel, data: bytes, files: list[OpenFile], flags: int, done: int) -> int:
        """unix_stream_sendmsg: buffers of half the send buffer at most while
        it has room, the files with the first; then a wait for the rest."""
        peer = self.peer
        while data and self.queued < self.sndbuf:
            if peer.released or peer.shutdown & RCV_SHUTDOWN:
                if done:
                    return done
                self._broken(kernel, flags)
            chunk = data[: self.sndbuf // 2 - 64]
            self._queue(chunk, files)
            files, done, data = [], done + len(chunk), data[len(chunk):]
        if not data:
            return done
        if not self.blocking(flags):
            if done:
                return done
            raise GuestError(errno.EAGAIN)
        raise Blocked(Wait(files=f"send on a full socket ({self.queued} bytes unread by its peer)",
                           ready=lambda: self.queued < self.sndbuf or peer.released or bool(peer.shutdown & RCV_SHUTDOWN),
                           again=lambda: self._stream(kernel, data, files, flags, done),
                           interrupted=(lambda: done) if done else None))

    def _packet(self, kernel, data: bytes, files: list[OpenFile], flags: int) -> int:
        """unix_dgram_sendmsg to the connected peer: one message, whole."""
        peer = self.peer
        if peer is None or self.kind == SOCK_SEQPACKET and self.state != ESTABLISHED:
            raise GuestError(errno.ENOTCONN)
        if len(data) > self.sndbuf - 32:
            raise GuestError(errno.EMSGSIZE)
        if self.queued >= self.sndbuf:
            if not self.blocking(flags):
                raise GuestError(errno.EAGAIN)
            raise Blocked(Wait(files=f"send on a full socket ({self.queued} bytes unread by its peer)",
                               ready=lambda: self.queued < self.sndbuf or peer.released))
        if peer.released:
            if self.kind == SOCK_SEQPACKET:
                raise GuestError(errno.EPIPE)
            self.peer, self.state = None, CLOSE
            raise GuestError(errno.ECONNREFUSED)
        if peer.shutdown & RCV_SHUTDOWN:
            raise GuestError(errno.EPIPE)
        self._queue(data, files)
        return len(data)

    # ---- receiving

    def receive(self, kernel, size: int, flags: int) -> Received:
        if self.kind == SOCK_STREAM:
            if self.state != ESTABLISHED:
                raise GuestError(errno.EINVAL)
            return self._read_stream(size, flags) if self.queue else self._empty(flags)
        if self.kind == SOCK_SEQPACKET and self.state != ESTABLISHED:
            raise GuestError(errno.ENOTCONN)
        if self.error:
            self._raise_error()
        return self._read_packet(size, flags) if self.queue else self._empty(flags)

    def _raise_error(self) -> None:
        error, self.error = self.error, 0
        raise GuestError(error)

    def _empty(self, flags: int) -> Received:
        """Nothing queued: the error, the end (a shutdown), EAGAIN, or a wait."""
        if self.error:
            self._raise_error()
        if self.shutdown & RCV_SHUTDOWN and (self.blocking(flags) or self.kind != SOCK_DGRAM):
            return Received()
        if not self.blocking(flags):
            raise GuestError(errno.EAGAIN)
        raise Blocked(Wait(files="receive on an empty socket",
                           ready=lambda: bool(self.queue or self.error or self.shutdown & RCV_SHUTDOWN)))

    def _take(self, message: Message, count: int) -> None:
        message.consumed += count
        message.sender.queued -= count

    def _read_stream(self, size: int, flags: int) -> Received:
        """unix_stream_read_generic: the queued bytes in order, up to the
        end of the first message that passes files."""
        got = Received(address=self.queue[0].sender.address)
        data, peek = bytearray(), flags & MSG_PEEK
        for message in list(self.queue):
            if len(data) >= size:
                break
            count = min(message.left, size - len(data))
            data += message.data[message.consumed: message.consumed + count]
            if peek:
                got.files, got.taken = list(message.files), False
            else:
                self._take(message, count)
                got.files, message.files = message.files, []
                if message.left:
                    break
                self.queue.popleft()
            if got.files:
                break
        got.data = bytes(data)
        got.length = len(data)
        return got

    def _read_packet(self, size: int, flags: int) -> Received:
        """__unix_dgram_recvmsg: the first message, cut to `size` (MSG_TRUNC)."""
        message = self.queue[0]
        got = Received(message.data[:size], list(message.files), message.sender.address, len(message.data),
                       MSG_TRUNC if size < len(message.data) else 0, taken=not flags & MSG_PEEK)
        if got.taken:
            self.queue.popleft()
            self._take(message, len(message.data))
            message.files = []
        return got

    # ---- the end

    def release(self, kernel, embryo: bool = False) -> None:
        """No descriptor and no message holds it any more (unix_release_sock)."""
        if self.in_flight or self.released:
            return
        self.released, self.shutdown, self.state = True, SHUTDOWN_MASK, CLOSE
        if self.name is not None:
            self.name.socket = None  # its file stays, and refuses connections
        peer, self.peer = self.peer, None
        if peer is not None and self.kind != SOCK_DGRAM:
            peer.shutdown = SHUTDOWN_MASK
            if self.queue or embryo:
                peer.error = errno.ECONNRESET
        while self.queue:
            message = self.queue.popleft()
            message.sender.queued -= message.left
            land(kernel, message.files, [False] * len(message.files), True)
        while self.pending:
            self.pending.popleft().release(kernel, embryo=True)


class SocketName(Device):
    """The file a bind made: connect finds the socket through it; it
    opens for nothing (ENXIO), as a socket's file on Linux."""

    def __init__(self, socket: UnixSocket):
        self.socket: UnixSocket | None = socket

    def open(self, kernel) -> None:
        raise GuestError(errno.ENXIO)


def land(kernel, files: list[OpenFile], installed: list[bool], taken: bool) -> None:
    """Files a receive took out of flight: those not `installed` in a
    descriptor are closed (a socket among them may be released)."""
    for opened, kept in zip(files, installed):
        if taken and isinstance(opened.node.device, UnixSocket):
            opened.node.device.in_flight -= 1
        if not kept:
            kernel.dropped(opened)
