"""Extended attributes (harness.linux.call_table): no file has any, and none
can be kept, except an access ACL that says no more than the file's mode
(what sed -i and cp -p copy from file to file): a tmpfs with POSIX ACLs
keeps such an ACL as the mode alone, and so does the harness. Any other
attribute set ends the run as a fault naming it."""

from __future__ import annotations

import errno
import stat
import struct

from harness.emulation.machine import read_c_string
from harness.linux.call_table import SystemCallFault, handles
from harness.linux.calls_files import _path
from harness.linux.calls_fs import _chmod
from harness.linux.files import NAME_MAX, GuestError

ACL_ACCESS = b"system.posix_acl_access"
ACL_VERSION = 2
ACL_USER_OBJ, ACL_GROUP_OBJ, ACL_OTHER = 0x01, 0x04, 0x20
XATTR_CREATE, XATTR_REPLACE = 1, 2


def _no_attribute(kernel, name: int) -> int:
    """What getxattr says of a name on a file that has no attributes: ENODATA."""
    read_c_string(kernel.machine, name, NAME_MAX + 1)
    raise GuestError(errno.ENODATA)


@handles(229, "getxattr")
def sys_getxattr(kernel, path, name, value, size):
    kernel.files.lookup(kernel.files.guest_path(_path(kernel, path), kernel.cwd))
    return _no_attribute(kernel, name)


@handles(230, "lgetxattr")
def sys_lgetxattr(kernel, path, name, value, size):
    kernel.files.lookup(kernel.files.guest_path(_path(kernel, path), kernel.cwd), follow_last=False)
    return _no_attribute(kernel, name)


@handles(231, "fgetxattr")
def sys_fgetxattr(kernel, fd, name, value, size):
    kernel.file(fd)
    return _no_attribute(kernel, name)


@handles(232, "listxattr")
def sys_listxattr(kernel, path, names, size):
    kernel.files.lookup(kernel.files.guest_path(_path(kernel, path), kernel.cwd))
    return 0  # an empty list


@handles(233, "llistxattr")
def sys_llistxattr(kernel, path, names, size):
    kernel.files.lookup(kernel.files.guest_path(_path(kernel, path), kernel.cwd), follow_last=False)
    return 0


@handles(234, "flistxattr")
def sys_flistxattr(kernel, fd, names, size):
    kernel.file(fd)
    return 0


def _set(kernel, guest: str, node, name: int, value: int, size: int, flags: int) -> int:
    """setxattr: a minimal access ACL sets the mode (as chmod); anything
    else would be an attribute kept, which the harness does not keep."""
    label = read_c_string(kernel.machine, name, NAME_MAX + 1)
    if flags & ~(XATTR_CREATE | XATTR_REPLACE) or not label or len(label) > NAME_MAX:
        raise GuestError(errno.EINVAL if flags & ~(XATTR_CREATE | XATTR_REPLACE) else errno.ERANGE)
    data = kernel.machine.read(value, size) if size else b""
    if label != ACL_ACCESS:
        raise SystemCallFault(f"setxattr {label.decode('utf-8', 'replace')}: extended attributes are not kept")
    if len(data) < 4 or (len(data) - 4) % 8 or struct.unpack_from("<I", data)[0] != ACL_VERSION:
        raise GuestError(errno.EINVAL)
    entries = {tag: permissions for tag, permissions, _ in struct.iter_unpack("<HHI", data[4:])}
    if set(entries) != {ACL_USER_OBJ, ACL_GROUP_OBJ, ACL_OTHER} or len(data) != 4 + 8 * 3:
        raise SystemCallFault("setxattr system.posix_acl_access: an ACL beyond the mode is not kept")
    if flags & XATTR_REPLACE:
        raise GuestError(errno.ENODATA)  # a minimal ACL is no attribute: none to replace
    mode = entries[ACL_USER_OBJ] << 6 | entries[ACL_GROUP_OBJ] << 3 | entries[ACL_OTHER]
    return _chmod(kernel, guest, node, stat.S_IMODE(node.mode) & ~0o777 | mode & 0o777)


@handles(226, "setxattr")
def sys_setxattr(kernel, path, name, value, size, flags):
    guest, node = kernel.files.lookup(kernel.files.guest_path(_path(kernel, path), kernel.cwd))
    return _set(kernel, guest, node, name, value, size, flags)


@handles(227, "lsetxattr")
def sys_lsetxattr(kernel, path, name, value, size, flags):
    guest, node = kernel.files.lookup(kernel.files.guest_path(_path(kernel, path), kernel.cwd), follow_last=False)
    return _set(kernel, guest, node, name, value, size, flags)


@handles(228, "fsetxattr")
def sys_fsetxattr(kernel, fd, name, value, size, flags):
    opened = kernel.file(fd)
    return _set(kernel, opened.path, opened.node, name, value, size, flags)
