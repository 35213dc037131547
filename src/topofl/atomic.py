"""Atomic file writes — a reader sees the old file or the new one, never half of one — and the
lock of a directory that one process at a time may write (:func:`directory_lock`).
"""
from __future__ import annotations

import fcntl
import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_UMASK_LOCK = threading.Lock()


def file_mode() -> int:
    """The mode a new file gets under the process's umask (``0o666 & ~umask``: 0o644 under the usual 022),
    read from ``/proc/self/status`` where Linux reports it, else by setting and restoring the umask.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return 0o666 & ~mask


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes, *, private: bool = False) -> None:
    """Replace ``path`` by ``data`` atomically (temporary file in the same directory, fsync, rename).

    The file gets the mode any new file would get under the user's umask (results and models a
    colleague on a shared project directory can read), or 0o600 when ``private`` (a node's client
    state, which holds its secrets).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        if not private:
            os.fchmod(fd, file_mode())   # mkstemp creates 0o600
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Replace ``path`` by ``text`` (UTF-8) atomically."""
    write_bytes_atomic(path, text.encode())


#: the file in a directory whose ``flock`` says a process is writing there (:func:`directory_lock`)
LOCK_NAME = ".lock"

# the directories this process holds re-entrantly, by (the lock file's real path, thread): [descriptor, depth]
_held: dict[tuple[str, int], list[int]] = {}
_held_guard = threading.Lock()


class DirectoryLockedError(ValueError):
    """The lock of a directory is held by another process, or by another block of this one
    (:func:`directory_lock`).

    A :class:`ValueError`, so the command line prints it as one line and exits with code 2.
    """


@contextmanager
def directory_lock(
    path: str | os.PathLike[str],
    what: str,
    *,
    busy: str = "another topofl process is still writing there",
    hint: str = "wait for it to finish (or stop it), or use another directory",
    reentrant: bool = False,
) -> Iterator[Path]:
    """Hold the lock of directory ``path`` for the duration of the block: one writer at a time.

    The lock is an exclusive, non-blocking ``flock`` on ``path/.lock`` (created if need be; the
    file stays, holding the last holder's process id). Any other holder is refused at once; the
    lock goes when the block ends, and with the process if it dies (the kernel drops an ``flock``
    with the last descriptor that holds it — worker processes forked inside the block share it,
    so the directory stays locked while they run). ``flock`` locks are advisory and local to a
    host: a writer that does not take the lock, or one on another host of a network file system,
    is not stopped.

    Parameters
    ----------
    path : str or os.PathLike
        The directory (created, with its parents, if missing).
    what : str
        What the directory is to the user, named in the error before it: ``"experiment directory"``
        gives ``experiment directory '/x': ...``; a ``what`` ending in ``=`` (``"out-dir="``) is
        joined without a space (``out-dir='/x': ...``).
    busy : str
        What a refused caller is told about the holder.
    hint : str
        What the refused caller's user can do about it.
    reentrant : bool
        Whether a block inside another ``reentrant`` block on the same directory, in the same
        thread, shares its lock (an experiment's driver locks its directory, then its executor
        does) rather than being refused; only the outermost block takes and releases it.
        Without it, even the same thread is refused (a second Flower ServerApp in one process).

    Yields
    ------
    Path
        The lock file.

    Raises
    ------
    DirectoryLockedError
        When another holder has the lock (a ``ValueError`` naming the directory and the lock
        file, with the holder's process id when it is known).
    ValueError
        When the lock file cannot be opened (e.g. ``path/.lock`` is a symbolic link).
    """
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    lock = directory / LOCK_NAME
    key = (os.path.realpath(lock), threading.get_ident())
    with _held_guard:
        entry = _held.get(key) if reentrant else None
        if entry is not None:
            entry[1] += 1
            fd = entry[0]
        else:
            fd = _acquire(lock, directory, what, busy, hint)
            if reentrant:
                _held[key] = [fd, 1]
    try:
        yield lock
    finally:
        with _held_guard:
            if reentrant:
                entry = _held[key]
                entry[1] -= 1
                if entry[1] == 0:
                    del _held[key]
                    os.close(fd)  # the last descriptor of this process: the flock goes
            else:
                os.close(fd)


def _acquire(lock: Path, directory: Path, what: str, busy: str, hint: str) -> int:
    """Open ``lock`` (refusing a symbolic link), take its flock without waiting and write this
    process's id into it; the open descriptor holds the lock.
    """
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise ValueError(f"{_named(what, directory)}: cannot open its lock file {lock} ({exc.strerror or exc}; "
                         "a symbolic link there is refused)") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise DirectoryLockedError(f"{_named(what, directory)}: {busy} (process {holder or '?'} holds {lock}); "
                                   f"{hint}") from None
    except BaseException:
        os.close(fd)
        raise
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:  # the id is a courtesy to whoever is refused; the lock holds without it
        pass
    return fd


def _named(what: str, directory: Path) -> str:
    return f"{what}{'' if what.endswith('=') else ' '}{str(directory)!r}"


def _holder(fd: int) -> str:
    """The process id a lock's holder wrote into the lock file ("" when unreadable)."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return text if text.isdigit() else ""
