"""One of root's private files made readable by one more user: a POSIX access ACL ``user:<uid>:r``.

The job's tasks read the affinity plan as the job's user (the SPANK plugin, ``gpuperf-run``), and no
one else should: a group would do only where each user has a group of their own, and many sites give
every user ``users``. The ACL is written as the kernel's ``system.posix_acl_access`` attribute (no
``libacl``, no ``setfacl``): ``owner rw, user:<uid> r, group -, mask r, other -``; the file's mode then
reads 0640 (the group bits show the mask). Where the file system has no ACLs the file is given to the
user's primary group instead (0640), and the caller is told so.
"""

from __future__ import annotations

import errno
import os
import struct

_XATTR = "system.posix_acl_access"
_VERSION = 2
_UNDEFINED = 0xFFFFFFFF
_USER_OBJ, _USER, _GROUP_OBJ, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x10, 0x20


def user_read_acl(uid: int) -> bytes:
    """The attribute's bytes for owner rw, ``uid`` r, nobody else (entries in the kernel's order)."""
    entries = [(_USER_OBJ, 6, _UNDEFINED), (_USER, 4, uid), (_GROUP_OBJ, 0, _UNDEFINED), (_MASK, 4, _UNDEFINED),
               (_OTHER, 0, _UNDEFINED)]
    return struct.pack("<I", _VERSION) + b"".join(struct.pack("<HHI", t, p, i) for t, p, i in entries)


def grant_read(path: str | os.PathLike[str], uid: int | None) -> str:
    """Make root's 0600 ``path`` readable by ``uid`` too; how: "acl", "group", "owner" (uid is root/None),
    or "none: <why>" (then only root reads it: never wider than asked)."""
    if uid is None or uid == os.geteuid():
        return "owner"
    try:
        os.setxattr(path, _XATTR, user_read_acl(uid))
        return "acl"
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.ENOTSUP):
            return f"none: {e.strerror}"
    import pwd  # only on a file system without ACLs

    try:
        os.chown(path, -1, pwd.getpwuid(uid).pw_gid)
        os.chmod(path, 0o640)
    except (OSError, KeyError) as e:
        return f"none: {e}"
    return "group"
