"""Reading a file of the job's (a job file, the SDK's, requirements.txt, an entry script) that someone else wrote:
only a regular file, and only up to a bound. A FIFO would block the read forever and a device (/dev/zero) would fill
the memory, so neither is ever read: the file is opened without blocking and checked before a byte is read."""

from __future__ import annotations

import os
import stat

from .not_started import BadInput

MiB = 2**20


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder, not a file"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_regular(path: str, where: str, limit: int, what: str) -> bytes:
    """The bytes of the regular file at `path` (a link to one is followed). BadInput naming `where` and saying it
    must hold `what` when it is something else (a folder, a FIFO, a device), cannot be read, or holds more than
    `limit` bytes. FileNotFoundError is left to the caller, for whom a missing file may be fine."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise BadInput(f"{where} cannot be opened ({type(e).__name__}: {e.strerror}): it must be a regular file "
                       f"the job can read, holding {what}.") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise BadInput(f"{where} is {_kind(mode)}: it must be a regular file holding {what}.")
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(limit + 1)
        except OSError as e:
            raise BadInput(f"{where} cannot be read ({type(e).__name__}: {e.strerror}): it must be a regular file "
                           f"the job can read, holding {what}.") from None
    if len(data) > limit:
        raise BadInput(f"{where} is larger than {_size(limit)}, the most read of it: it must hold {what}.")
    return data


def _size(limit: int) -> str:
    return f"{limit // MiB} MiB" if limit % MiB == 0 else f"{limit:,} bytes"
