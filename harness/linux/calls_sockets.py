"""Sockets (harness.linux.call_table): AF_UNIX ones
(harness.linux.unix_sockets) made alone or in connected pairs, bound to a
file in the guest's file system (in memory, as every file the guest
makes), listened on, connected to by name, accepted, named, shut down,
and their SOL_SOCKET options; their messages are harness.linux.calls_messages'.

The kernel has no other family: no network (AF_INET, AF_INET6) and no
netlink, refused as Linux refuses a family it was built without
(EAFNOSUPPORT). Abstract names, automatic binds, datagram sockets that
connect by name, and the options that would change what a socket does
(time-outs, credentials, filters) are not emulated: a fault names them.
"""

from __future__ import annotations

import errno
import stat
import struct

from harness.linux.call_table import SystemCallFault, handles, signed
from harness.linux.calls_process import PID
from harness.linux.files import GuestError, Node, OpenFile, inode_of
from harness.linux.unix_sockets import (
    AF_UNIX,
    CLOSE,
    ESTABLISHED,
    LISTEN,
    RCV_SHUTDOWN,
    SEND_SHUTDOWN,
    SOCK_DGRAM,
    SOCK_SEQPACKET,
    SOCK_STREAM,
    UNBOUND,
    SocketName,
    UnixSocket,
)
from harness.linux.threads import Blocked, Wait

O_RDWR, O_NONBLOCK, O_CLOEXEC = 2, 0o4000, 0o2000000  # ARM's values (SOCK_NONBLOCK, SOCK_CLOEXEC)
SOCK_RAW = 3
SOCK_MAX, SOCK_TYPE_MASK, NPROTO = 11, 0xF, 46  # socket types and families Linux knows, the type's bits
SOCKADDR_STORAGE = 128  # the most of an address a call reads (EINVAL past it)
SOCKADDR_UN = 110  # sun_family and sun_path[108]
SOCKET_MODE = 0o755  # a bound socket's file: 0777 under the process's umask (022)


def socket_of(kernel, fd: int) -> UnixSocket:
    """The socket behind `fd`: EBADF, or ENOTSOCK for another file."""
    device = kernel.file(fd).node.device
    if not isinstance(device, UnixSocket):
        raise GuestError(errno.ENOTSOCK)
    return device


def _new_fd(kernel, socket: UnixSocket, flags: int) -> int:
    node = Node(stat.S_IFSOCK | 0o777, device=socket)
    socket.opened = OpenFile(node, "socket:", readable=True, writable=True, flags=O_RDWR | flags & O_NONBLOCK)
    fd = kernel.new_fd(socket.opened)
    node.inode = inode_of(f"socket {kernel.now_ns()} {fd}")  # the same every run
    socket.opened.path = f"socket:[{node.inode}]"
    return fd


def _kind(family: int, kind: int, protocol: int) -> int:
    """socket's checks in Linux's order, then the AF_UNIX type it makes."""
    if kind & ~(SOCK_TYPE_MASK | O_NONBLOCK | O_CLOEXEC):
        raise GuestError(errno.EINVAL)
    if not 0 <= signed(family) < NPROTO:
        raise GuestError(errno.EAFNOSUPPORT)
    if kind & SOCK_TYPE_MASK >= SOCK_MAX:
        raise GuestError(errno.EINVAL)
    if family != AF_UNIX:
        raise GuestError(errno.EAFNOSUPPORT)
    if protocol not in (0, AF_UNIX):
        raise GuestError(errno.EPROTONOSUPPORT)
    kind &= SOCK_TYPE_MASK
    if kind == SOCK_RAW:
        return SOCK_DGRAM  # as unix_create: BSD's AF_UNIX SOCK_RAW is a datagram socket
    if kind not in (SOCK_STREAM, SOCK_DGRAM, SOCK_SEQPACKET):
        raise GuestError(errno.ESOCKTNOSUPPORT)
    return kind


@handles(281, "socket")
def sys_socket(kernel, family, kind, protocol):
    return _new_fd(kernel, UnixSocket(_kind(family, kind, protocol)), kind)


@handles(288, "socketpair")
def sys_socketpair(kernel, family, kind, protocol, pair):
    """Two AF_UNIX sockets connected to each other (unix_socketpair)."""
    made = _kind(family, kind, protocol)
    kernel.machine.read(pair, 8)  # EFAULT before any descriptor is taken
    first, second = UnixSocket(made), UnixSocket(made)
    first.peer, second.peer = second, first
    first.state = second.state = ESTABLISHED
    fds = [_new_fd(kernel, first, kind)]
    try:
        fds.append(_new_fd(kernel, second, kind))
    except GuestError:
        kernel.close_fd(fds[0])
        raise
    kernel.machine.write(pair, struct.pack("<ii", *fds))
    return 0


# ---- names


def read_address(kernel, address: int, length: int) -> bytes:
    """The sockaddr a call passes (move_addr_to_kernel)."""
    if not 0 <= signed(length) <= SOCKADDR_STORAGE:
        raise GuestError(errno.EINVAL)
    return kernel.machine.read(address, length) if length else b""


def _path(kernel, raw: bytes, what: str) -> str:
    """The file an AF_UNIX name names (unix_validate_addr, unix_mkname_bsd)."""
    if not 2 < len(raw) <= SOCKADDR_UN or struct.unpack_from("<H", raw)[0] != AF_UNIX:
        raise GuestError(errno.EINVAL)
    if raw[2] == 0:
        raise SystemCallFault(f"{what} to an abstract AF_UNIX name: abstract names are not emulated")
    name = raw[2:].split(b"\0", 1)[0]
    return kernel.files.guest_path(name.decode("utf-8", "surrogateescape"), kernel.cwd)


@handles(282, "bind")
def sys_bind(kernel, fd, address, length):
    """A file of type socket made at the name (EADDRINUSE where one is)."""
    socket = socket_of(kernel, fd)
    raw = read_address(kernel, address, length)
    if len(raw) == 2 and struct.unpack("<H", raw)[0] == AF_UNIX:
        raise SystemCallFault("bind to an automatic AF_UNIX name (autobind) is not emulated")
    path = _path(kernel, raw, "bind")
    kernel.files.refuse_existing(path, errno.EADDRINUSE)
    if socket.address:
        raise GuestError(errno.EINVAL)
    guest, node = kernel.files.create(path)
    socket.name = SocketName(socket)
    node.mode, node.device = stat.S_IFSOCK | SOCKET_MODE, socket.name
    socket.address = raw[:2] + raw[2:].split(b"\0", 1)[0] + b"\0"
    return 0


def _listener(kernel, raw: bytes, kind: int) -> UnixSocket:
    """The socket a name names (unix_find_bsd): ENOENT where no file is,
    ECONNREFUSED where the file is no socket or one no longer open,
    EPROTOTYPE for a socket of another type."""
    _, node = kernel.files.lookup(_path(kernel, raw, "connect"))
    if not stat.S_ISSOCK(node.mode) or not isinstance(node.device, SocketName) or node.device.socket is None:
        raise GuestError(errno.ECONNREFUSED)
    if node.device.socket.kind != kind:
        raise GuestError(errno.EPROTOTYPE)
    return node.device.socket


@handles(283, "connect")
def sys_connect(kernel, fd, address, length):
    """unix_stream_connect: a new socket joined to this one waits in the
    listener's queue for accept; a full queue waits (EAGAIN under O_NONBLOCK)."""
    socket = socket_of(kernel, fd)
    raw = read_address(kernel, address, length)
    if socket.kind == SOCK_DGRAM:
        raise SystemCallFault("connect of an AF_UNIX datagram socket is not emulated")
    listener = _listener(kernel, raw, socket.kind)
    if listener.state != LISTEN or listener.shutdown & RCV_SHUTDOWN:
        raise GuestError(errno.ECONNREFUSED)
    if len(listener.pending) > listener.backlog:
        if socket.opened.flags & O_NONBLOCK:
            raise GuestError(errno.EAGAIN)
        raise Blocked(Wait(files="connect to a socket whose backlog is full",
                           ready=lambda: len(listener.pending) <= listener.backlog or listener.released))
    if socket.state != CLOSE:
        raise GuestError(errno.EISCONN if socket.state == ESTABLISHED else errno.EINVAL)
    accepted = UnixSocket(socket.kind)
    accepted.peer, accepted.state, accepted.address = socket, ESTABLISHED, listener.address
    socket.peer, socket.state = accepted, ESTABLISHED
    listener.pending.append(accepted)
    return 0


@handles(284, "listen")
def sys_listen(kernel, fd, backlog):
    socket = socket_of(kernel, fd)
    if socket.kind == SOCK_DGRAM:
        raise GuestError(errno.EOPNOTSUPP)
    if not socket.address or socket.state not in (CLOSE, LISTEN):
        raise GuestError(errno.EINVAL)
    socket.state, socket.backlog = LISTEN, min(max(signed(backlog), 0), 4096)  # net.core.somaxconn
    return 0


def _accept(kernel, fd: int, address: int, size: int, flags: int) -> int:
    if flags & ~(O_NONBLOCK | O_CLOEXEC):
        raise GuestError(errno.EINVAL)
    socket = socket_of(kernel, fd)
    if socket.kind == SOCK_DGRAM:
        raise GuestError(errno.EOPNOTSUPP)
    if socket.state != LISTEN:
        raise GuestError(errno.EINVAL)
    if not socket.pending:
        if socket.shutdown & RCV_SHUTDOWN:
            raise GuestError(errno.EINVAL)
        if socket.opened.flags & O_NONBLOCK:
            raise GuestError(errno.EAGAIN)
        raise Blocked(Wait(files="accept with no connection waiting",
                           ready=lambda: bool(socket.pending or socket.shutdown & RCV_SHUTDOWN)))
    accepted = socket.pending.popleft()
    new = _new_fd(kernel, accepted, flags)
    if address:
        give_address(kernel, accepted.peer.address or UNBOUND if accepted.peer else UNBOUND, address, size)
    return new


@handles(285, "accept")
def sys_accept(kernel, fd, address, size):
    return _accept(kernel, fd, address, size, 0)


@handles(366, "accept4")
def sys_accept4(kernel, fd, address, size, flags):
    return _accept(kernel, fd, address, size, flags)


def give_address(kernel, name: bytes, address: int, size: int) -> None:
    """A name written as move_addr_to_user: as much as the caller's
    length allows, and its whole length at `size`."""
    room = struct.unpack("<i", kernel.machine.read(size, 4))[0]
    if room < 0:
        raise GuestError(errno.EINVAL)
    if room and name:
        kernel.machine.write(address, name[:room])
    kernel.machine.write(size, struct.pack("<i", len(name)))


@handles(286, "getsockname")
def sys_getsockname(kernel, fd, address, size):
    give_address(kernel, socket_of(kernel, fd).address or UNBOUND, address, size)
    return 0


@handles(287, "getpeername")
def sys_getpeername(kernel, fd, address, size):
    peer = socket_of(kernel, fd).peer
    if peer is None:
        raise GuestError(errno.ENOTCONN)
    give_address(kernel, peer.address or UNBOUND, address, size)
    return 0


@handles(293, "shutdown")
def sys_shutdown(kernel, fd, how):
    """unix_shutdown: this end's bits, and the mirror bits of a connected peer's."""
    socket = socket_of(kernel, fd)
    if how > 2:
        raise GuestError(errno.EINVAL)
    mode = how + 1  # SHUT_RD, SHUT_WR, SHUT_RDWR: RCV_SHUTDOWN, SEND_SHUTDOWN, both
    socket.shutdown |= mode
    peer = socket.peer
    if peer is not None and socket.kind != SOCK_DGRAM:
        peer.shutdown |= (SEND_SHUTDOWN if mode & RCV_SHUTDOWN else 0) | (RCV_SHUTDOWN if mode & SEND_SHUTDOWN else 0)
    return 0


# ---- options


SOL_SOCKET = 1
SO_REUSEADDR, SO_TYPE, SO_ERROR, SO_SNDBUF, SO_RCVBUF, SO_KEEPALIVE = 2, 3, 4, 7, 8, 9
SO_PRIORITY, SO_PASSCRED, SO_PEERCRED, SO_ACCEPTCONN = 12, 16, 17, 30
SO_SNDBUFFORCE, SO_RCVBUFFORCE, SO_PROTOCOL, SO_DOMAIN = 32, 33, 38, 39
WMEM_MAX = 212992  # net.core.wmem_max and rmem_max: the most SO_SNDBUF and SO_RCVBUF give
SOCK_MIN_SNDBUF, SOCK_MIN_RCVBUF = 4608, 2304
OVERFLOW_ID = 65534  # the uid and gid SO_PEERCRED gives for a socket without a peer
# Options kept as set that change nothing an AF_UNIX socket does here.
PLAIN = {SO_REUSEADDR: "SO_REUSEADDR", SO_KEEPALIVE: "SO_KEEPALIVE", SO_PRIORITY: "SO_PRIORITY"}


@handles(294, "setsockopt")
def sys_setsockopt(kernel, fd, level, name, value, length):
    """SOL_SOCKET's options that mean something for AF_UNIX (sock_setsockopt);
    AF_UNIX has no option of another level (EOPNOTSUPP)."""
    socket = socket_of(kernel, fd)
    if level != SOL_SOCKET:
        raise GuestError(errno.EOPNOTSUPP)
    if signed(length) < 4:
        raise GuestError(errno.EINVAL)
    number = struct.unpack("<i", kernel.machine.read(value, 4))[0]
    if name in (SO_SNDBUF, SO_RCVBUF, SO_SNDBUFFORCE, SO_RCVBUFFORCE):
        least = SOCK_MIN_SNDBUF if name in (SO_SNDBUF, SO_SNDBUFFORCE) else SOCK_MIN_RCVBUF
        size = max(2 * (min(number & 0xFFFFFFFF, WMEM_MAX) if name < SO_SNDBUFFORCE else max(number, 0)), least)
        if name in (SO_SNDBUF, SO_SNDBUFFORCE):
            socket.sndbuf = size
        else:
            socket.options[SO_RCVBUF] = size
    elif name == SO_PASSCRED and not number or name in PLAIN:
        socket.options[name] = number if name == SO_PRIORITY else int(bool(number))
    else:
        raise SystemCallFault(f"setsockopt SOL_SOCKET option {name} = {number} of an AF_UNIX socket is not emulated")
    return 0


def _option(socket: UnixSocket, name: int) -> bytes:
    """getsockopt's answer for SOL_SOCKET option `name` (sk_getsockopt)."""
    if name == SO_PEERCRED:
        has = socket.peer is not None or socket.state == LISTEN
        return struct.pack("<iII", PID if has else 0, 0 if has else OVERFLOW_ID, 0 if has else OVERFLOW_ID)
    if name == SO_ERROR:
        error, socket.error = socket.error, 0
        return struct.pack("<i", error)
    values = {SO_TYPE: socket.kind, SO_SNDBUF: socket.sndbuf, SO_RCVBUF: socket.options.get(SO_RCVBUF, WMEM_MAX),
              SO_DOMAIN: AF_UNIX, SO_PROTOCOL: 0, SO_ACCEPTCONN: int(socket.state == LISTEN),
              SO_PASSCRED: socket.options.get(SO_PASSCRED, 0)}
    values.update({option: socket.options.get(option, 0) for option in PLAIN})
    if name not in values:
        raise SystemCallFault(f"getsockopt SOL_SOCKET option {name} of an AF_UNIX socket is not emulated")
    return struct.pack("<i", values[name])


@handles(295, "getsockopt")
def sys_getsockopt(kernel, fd, level, name, value, size):
    socket = socket_of(kernel, fd)
    if level != SOL_SOCKET:
        raise GuestError(errno.EOPNOTSUPP)
    room = struct.unpack("<i", kernel.machine.read(size, 4))[0]
    if room < 0:
        raise GuestError(errno.EINVAL)
    answer = _option(socket, name)
    given = answer[:room] if name == SO_PEERCRED else answer[:min(room, 4)]
    kernel.machine.write(value, given)
    kernel.machine.write(size, struct.pack("<i", len(given)))
    return 0
