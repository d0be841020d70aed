"""Filesystem steps that never overwrite and never leave half a change: move, copy, new file."""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
import uuid
from pathlib import Path
from typing import Any, Literal

_CHUNK = 1 << 20

_LINK_FALLBACK_ERRNOS = frozenset(
    {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS, errno.EINVAL}
)
"""os.link errors that may just mean "this filesystem has no hard links": rename instead."""


class CrossDeviceFolderError(OSError):
    """A folder cannot be moved to another filesystem in one safe step."""


class VerifyError(OSError):
    """A copy did not match its source byte for byte."""


def sha256_of(path: Path) -> str:
    """The SHA-256 of a regular file's bytes, read without following a final symlink."""
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def identity(path: Path) -> dict[str, Any]:
    """What identifies an entry later: device, inode, kind, size and modification time."""
    st = os.lstat(path)
    return {
        "dev": st.st_dev,
        "ino": st.st_ino,
        "folder": stat.S_ISDIR(st.st_mode),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
    }


def same_entry(path: Path, recorded: dict[str, Any]) -> bool:
    """Whether ``path`` is still the entry ``identity`` recorded (same device and inode)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return st.st_dev == recorded.get("dev") and st.st_ino == recorded.get("ino")


def _refuse_existing(dst: Path) -> None:
    if os.path.lexists(dst):
        raise FileExistsError(errno.EEXIST, "already exists", str(dst))


def _place(src: Path, dst: Path) -> None:
    """Give ``src`` the name ``dst`` on the same filesystem, never replacing anything there.

    A regular file is hard-linked to the new name (which fails if the name exists, atomically)
    and then unlinked from the old one; if that unlink fails the new link is removed again.
    Folders, and filesystems without hard links, are renamed after checking the name is free.
    """
    _refuse_existing(dst)
    if stat.S_ISREG(os.lstat(src).st_mode):
        try:
            os.link(src, dst)
        except FileExistsError:
            raise
        except OSError as exc:
            if exc.errno not in _LINK_FALLBACK_ERRNOS:
                raise
        else:
            try:
                os.unlink(src)
            except OSError:
                os.unlink(dst)
                raise
            return
    _refuse_existing(dst)
    os.rename(src, dst)


def move(src: Path, dst: Path) -> Literal["renamed", "copied"]:
    """Move ``src`` to the free name ``dst``: atomically on one filesystem, else copy a file,
    verify it and only then remove the original. Raises OSError with nothing changed."""
    try:
        _place(src, dst)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    else:
        return "renamed"
    if not stat.S_ISREG(os.lstat(src).st_mode):
        raise CrossDeviceFolderError(
            errno.EXDEV, "a folder cannot be moved to another drive in one safe step", str(src)
        )
    _copy_across(src, dst)
    return "copied"


def _copy_across(src: Path, dst: Path) -> None:
    """Copy a file to another filesystem, verify it, place it, then remove the original."""
    partial = dst.parent / f".{dst.name}.botpsy-partial-{uuid.uuid4().hex[:8]}"
    try:
        source_fd = os.open(
            src, os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0)
        )
        with os.fdopen(source_fd, "rb") as source:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
            with os.fdopen(os.open(partial, flags, 0o600), "wb") as target:
                shutil.copyfileobj(source, target, _CHUNK)
                target.flush()
                os.fsync(target.fileno())
        shutil.copystat(src, partial, follow_symlinks=False)
        if os.path.getsize(partial) != os.path.getsize(src) or sha256_of(partial) != sha256_of(src):
            raise VerifyError(errno.EIO, "the copy does not match the original", str(dst))
        _place(partial, dst)
    except BaseException:
        if os.path.lexists(partial):
            os.unlink(partial)
        raise
    try:
        os.unlink(src)
    except OSError:
        os.unlink(dst)
        raise


def write_new_file(path: Path, data: bytes) -> None:
    """Create ``path`` with ``data``; fails if it exists. A failed write leaves no file behind."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o644)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        os.unlink(path)
        raise
