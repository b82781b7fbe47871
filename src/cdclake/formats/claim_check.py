"""Claim-check files: the only way a location named in a message becomes a file that is read.

A TiCDC claim-check location (``ccl``) is message content. As TiCDC's own consumer does, only its last path
element is used, and only to name a file in the configured claim-check directory; the name must be a plain
file name, the file a regular file (not a symlink, FIFO, device or directory) no larger than the limit, and it
is read in bounded form.
"""

from __future__ import annotations

import errno
import os
import stat

from cdclake.formats.base import DecodeError

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
_CHUNK = 1 << 20


def claim_check_name(location: str) -> str:
    """The file name a location stands for in the claim-check storage (its last ``/``-separated element),
    refused unless it is a plain file name."""
    name = location.rsplit("/", 1)[-1]
    if name in ("", ".", "..") or "\\" in name or "\0" in name:
        raise DecodeError(f"claim-check location {location!r} does not end in a plain file name")
    return name


def read_claim_check(directory: str, location: str, max_bytes: int) -> bytes | None:
    """The bytes of the claim-check file ``location`` names in ``directory``; None when there is no such
    file. Anything else that is not a regular file of at most ``max_bytes`` bytes is a :class:`DecodeError`."""
    name = claim_check_name(location)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        folder = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as exc:
        raise DecodeError(f"claim-check-dir {directory} cannot be opened: {exc.strerror}") from None
    try:
        try:
            fd = os.open(name, flags, dir_fd=folder)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return None
            if exc.errno == errno.ELOOP:
                raise DecodeError(f"claim-check file {name} is a symbolic link; only regular files are read") \
                    from None
            raise DecodeError(f"claim-check file {name} cannot be opened: {exc.strerror}") from None
    finally:
        os.close(folder)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise DecodeError(f"claim-check file {name} is not a regular file")
        if info.st_size > max_bytes:
            raise DecodeError(f"claim-check file {name} has {info.st_size} bytes, more than the limit "
                              f"claim-check-max-bytes={max_bytes}")
        chunks: list[bytes] = []
        size = 0
        while size <= max_bytes:  # the file may grow after fstat: never read more than the limit
            chunk = os.read(fd, min(_CHUNK, max_bytes + 1 - size))
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)
        raise DecodeError(f"claim-check file {name} grew beyond the limit claim-check-max-bytes={max_bytes}")
    finally:
        os.close(fd)
