"""The processes of a local Flower deployment: started in their own session, tracked by PID, stopped by tree.

POSIX only: processes are signalled by process group and tracked with :mod:`psutil`, which tells a PID
from a recycled one by its creation time.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

__all__ = ["FLOWER_QUIET_ENV", "ManagedProcess", "find_free_ports"]

log = logging.getLogger(__name__)

FLOWER_QUIET_ENV: dict[str, str] = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
}
"""Environment that keeps Flower from phoning home; set for every process started."""

_POLL_S = 0.2


def find_free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """Return ``count`` distinct TCP ports that were free on ``host``.

    Each port is found by binding port 0; all sockets are held until every port is
    chosen, so the ports differ. Another program may still grab one before Flower
    binds it (unlikely on a test machine).

    Parameters
    ----------
    count
        Number of ports.
    host
        Address to bind them on.

    Returns
    -------
    list of int
        The ports.
    """
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


_Identity = tuple[int, float]  # (pid, psutil create_time): tells a PID from a recycled one


def _process(ident: _Identity) -> psutil.Process | None:
    """The running process ``ident`` (``None`` if gone, a zombie, or its PID was reused)."""
    pid, created = ident
    try:
        proc = psutil.Process(pid)
        if proc.create_time() != created or proc.status() == psutil.STATUS_ZOMBIE:
            return None
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    return proc


def _alive(ident: _Identity) -> bool:
    """Whether the process ``ident`` still runs (zombies and recycled PIDs: no)."""
    return _process(ident) is not None


def _identity(proc: psutil.Process) -> _Identity | None:
    try:
        return (proc.pid, proc.create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


@dataclass
class ManagedProcess:
    """One process started by :class:`~topofl.deploy.deployment.LocalDeployment`, and the processes it spawned."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    flwr_home: Path
    port: int | None = None
    log_offset: int = 0
    """Size of ``log_path`` when this process started (a restart appends to the same log)."""
    seen: dict[_Identity, psutil.Process] = field(default_factory=dict)
    """Every process of this tree seen so far (the root and its descendants)."""

    def __post_init__(self) -> None:
        self.collect()

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def running(self) -> bool:
        return self.popen.poll() is None

    def log_text(self) -> str:
        """What this process wrote to its log (not earlier incarnations')."""
        try:
            with self.log_path.open("rb") as fh:
                fh.seek(self.log_offset)
                return fh.read().decode(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of this process's log."""
        text = self.log_text()
        return "\n".join(text.splitlines()[-lines:]) if text else "<no log>"

    def collect(self) -> set[_Identity]:
        """Record the root and all its current descendants; return all ever seen.

        Descendants are looked up while the root lives, because orphans are
        re-parented (the SuperLink's ``flower-superexec`` runs in its own session,
        so the process group alone does not reach it).
        """
        if not self.seen:
            try:
                root = psutil.Process(self.pid)
                self.seen[(root.pid, root.create_time())] = root
            except psutil.NoSuchProcess:
                pass
        self.descendants()
        return set(self.seen)

    def descendants(self) -> list[psutil.Process]:
        """The root's living descendants, recorded too (empty once the root has exited)."""
        if not self.running:
            return []
        try:
            children = psutil.Process(self.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        for child in children:
            ident = _identity(child)
            if ident is not None:
                self.seen.setdefault(ident, child)
        return children

    def signal_tree(self, sig: int) -> None:
        """Send ``sig`` once to each process of the tree still alive.

        The process group gets it (``start_new_session``: its id is the root's PID), then
        each recorded process outside that group. Nothing gets it twice: a second SIGTERM
        would cut short a SuperNode's goodbye to the SuperLink.
        """
        idents = self.collect()
        group_signalled = False
        if self.running:
            try:
                os.killpg(self.pid, sig)
                group_signalled = True
            except (ProcessLookupError, PermissionError):
                pass
        for ident in idents:
            proc = _process(ident)  # checks the create time: never a recycled PID
            if proc is None:
                continue
            try:
                if group_signalled and os.getpgid(proc.pid) == self.pid:
                    continue
                proc.send_signal(sig)
            except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
                pass

    def alive(self) -> list[_Identity]:
        """Recorded processes of this tree that still run."""
        self.popen.poll()  # reap the root if it exited (keeps its real exit status)
        return [ident for ident in self.seen if _alive(ident)]


def _wait_idents(idents: Iterable[_Identity], timeout: float) -> list[_Identity]:
    """Wait up to ``timeout`` s until none of ``idents`` runs; return those that still do.

    Zombies count as gone: a child of another process (a ``flwr-serverapp`` of the
    SuperExec) stays ``<defunct>`` until its parent reaps it.
    """
    deadline = time.monotonic() + timeout
    left = list(idents)
    while True:
        procs = [p for p in map(_process, left) if p is not None]
        left = [(p.pid, p.create_time()) for p in procs]
        remaining = deadline - time.monotonic()
        if not left or remaining <= 0:
            return left
        psutil.wait_procs(procs, timeout=min(_POLL_S, remaining))  # reaps our own children


def _wait_gone(procs: Sequence[ManagedProcess], timeout: float) -> list[_Identity]:
    """Wait up to ``timeout`` s for every tree to exit; return what still runs.

    Trees are re-collected while waiting, so children started while shutting down are
    seen (and get the SIGKILL that follows).
    """
    deadline = time.monotonic() + timeout
    while True:
        for proc in procs:
            proc.collect()
        left = [ident for proc in procs for ident in proc.alive()]
        remaining = deadline - time.monotonic()
        if not left or remaining <= 0:
            return left
        _wait_idents(left, min(_POLL_S, remaining))


def _terminate(procs: Sequence[ManagedProcess], timeout: float) -> None:
    """SIGTERM every process tree, wait up to ``timeout`` s, then SIGKILL the rest."""
    for proc in procs:
        proc.signal_tree(signal.SIGTERM)
    if not _wait_gone(procs, timeout):
        return
    for proc in procs:
        left = proc.alive()
        if left:
            log.warning("%s: SIGKILL to %s", proc.name, sorted(p for p, _ in left))
            proc.signal_tree(signal.SIGKILL)
    _wait_gone(procs, 5.0)
    for proc in procs:
        left = proc.alive()
        if left:
            log.error("%s: still alive after SIGKILL: %s", proc.name, left)
