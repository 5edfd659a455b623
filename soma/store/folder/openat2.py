"""A path below a folder opened in one call, no symbolic link followed on the way (Linux 5.6+).

Why a module of its own: the folder store opens every name file and folder of names folder
by folder from its own, with O_NOFOLLOW (soma.store.folder.safe_open): a name seven folders deep
costs eight opens and seven closes, ~30 us, and a round of ten clients reads and binds
~100 names. The kernel's openat2(2) with RESOLVE_NO_SYMLINKS walks the same way in one call
and refuses a link anywhere on it (ELOOP), so the same rule costs one open.

`open_beneath` is only ever a shortcut: it answers an fd, or FileNotFoundError (a part of
the way is missing: the walk would say the same), or None. None means "walk": the kernel
has no openat2 (before 5.6; a seccomp filter that refuses it), or the call failed for any
other reason (a link on the way, a file where a folder should be, a rename meanwhile). The
walk then opens the same way and raises its own refusal naming the culprit, so every error
the store gives is the walk's.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import sys
from collections.abc import Callable

_SYS_OPENAT2 = 437  # in the table every architecture below shares (alpha, MIPS differ)
_MACHINES = {"x86_64", "i386", "i686", "aarch64", "armv7l", "armv6l", "ppc64le", "ppc64"}
_MACHINES |= {"s390x", "riscv64", "loongarch64"}
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _syscall() -> Callable[..., int] | None:
    """libc's syscall(2), where the kernel numbers openat2 as 437; else None (walk)."""
    if not sys.platform.startswith("linux") or platform.machine() not in _MACHINES:
        return None
    try:
        call = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    call.restype = ctypes.c_long
    return call


_call = _syscall()
_UNSUPPORTED = (errno.ENOSYS, errno.EPERM, errno.EINVAL, errno.E2BIG)


def open_beneath(folder_fd: int, path: str, flags: int) -> int | None:
    """`path` (relative, '/'-separated) below the folder `folder_fd`, opened with `flags`,
    no link followed anywhere on the way and nothing outside the folder reached: its fd;
    FileNotFoundError when a part of it is missing; None to walk instead (see the module)."""
    global _call
    if _call is None:
        return None
    how = _OpenHow(flags | os.O_CLOEXEC, 0, _RESOLVE_NO_SYMLINKS | _RESOLVE_BENEATH)
    fd = _call(
        ctypes.c_long(_SYS_OPENAT2),
        ctypes.c_long(folder_fd),
        ctypes.c_char_p(os.fsencode(path)),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd >= 0:
        return fd
    code = ctypes.get_errno()
    if code == errno.ENOENT:
        raise FileNotFoundError(code, os.strerror(code), path)
    if code in _UNSUPPORTED:  # no openat2 here (or refused by a filter): walk from now on
        _call = None
    return None
