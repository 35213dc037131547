"""Faults and recovery of a local Flower deployment: kill or restart a SuperNode, the SuperLink, a ServerApp."""

from __future__ import annotations

import logging
import signal
import time

import psutil

from topofl.deploy.launch import _Launcher
from topofl.deploy.processes import _identity, _wait_gone, _wait_idents

log = logging.getLogger(__name__)


class _Faults(_Launcher):
    """The fault-injection methods of :class:`~topofl.deploy.deployment.LocalDeployment`."""

    def kill_node(self, index: int, sig: int = signal.SIGKILL) -> None:
        """Kill SuperNode ``index`` and its children (SIGKILL: no goodbye to the SuperLink).

        With SIGTERM or SIGINT the SuperNode deactivates itself first (Flower marks it
        ``offline`` at once) and exits within about a second.
        """
        self._require_running()
        node = self.nodes[self._check_index(index)]
        log.info("signal %d to supernode-%d (pid %d, node id %s)", sig, index, node.pid,
                 self.node_ids[index])
        node.signal_tree(sig)
        if _wait_gone([node], 10.0):
            node.signal_tree(signal.SIGKILL)
            _wait_gone([node], 5.0)
        self.killed.add(index)

    def restart_node(
        self, index: int, *, sig: int = signal.SIGKILL, timeout: float = 180.0
    ) -> float:
        """Kill SuperNode ``index`` (unless already dead) and start it again with the same key.

        With SuperNode authentication (``secure``) the node comes back with the same node
        ID, and Flower 1.41 refuses to activate a node the SuperLink still lists as
        ``online`` (``[code: 2004] Failed to activate SuperNode``, exit 1). After a SIGKILL
        that lasts until the SuperLink marks it ``offline``: 2 heartbeat intervals after
        its last heartbeat, up to ~60 s (``2 x heartbeat_interval`` with the shim). This
        method polls ``flwr supernode ls`` until the node is no longer ``online`` (it does
        not sleep a fixed time), then starts it. After a SIGTERM the node has already
        said goodbye and rejoins at once. Without authentication a new key, hence a new
        node ID, is used and there is nothing to wait for.

        Returns the seconds from the signal until the node was active again; raises
        :class:`TimeoutError` after ``timeout`` s and :class:`RuntimeError` if the new
        process exits.
        """
        self._require_running()
        self._check_index(index)
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 s; got {timeout!r}")
        t0 = time.monotonic()
        deadline = t0 + timeout
        old = self.nodes[index]
        if old.alive():
            self.kill_node(index, sig)
        old_id = self.node_ids[index]
        waited = 0.0
        if self.secure and old_id is not None:
            t_wait = time.monotonic()
            self._wait_node_not_online(old_id, deadline)
            waited = time.monotonic() - t_wait
        self._retired.append(old)
        self.nodes[index] = self._start_supernode(index)
        new_id = self._wait_node_id(self.nodes[index], deadline, timeout)
        if self.secure and new_id != old_id:
            raise RuntimeError(f"supernode-{index} came back as {new_id}, not {old_id}")
        self.node_ids[index] = new_id
        self.killed.discard(index)
        took = time.monotonic() - t0
        log.info("supernode-%d back as node %d after %.1f s (%.1f s waiting for 'offline')",
                 index, new_id, took, waited)
        return took

    def restart_superlink(self, down_for: float = 0.0, sig: int = signal.SIGKILL,
                          timeout: float | None = None) -> float:
        """Kill the SuperLink only and start it again on the same port with the same database.

        The ServerApp executor, a running ServerApp, the Fleet proxy and the SuperNodes
        are left alone: they retry until the SuperLink is back. With ``--database`` and
        ``--isolation process`` a running ServerApp carries on with its run, provided the
        SuperLink is back within about 60 s (Flower's task-token TTL, 2 x 30 s; after
        longer the run ends ``finished:failed``). SuperNodes keep their node IDs.

        Parameters
        ----------
        down_for
            Seconds (>= 0) from the signal until the new SuperLink is started.
        sig
            Signal for the old SuperLink (SIGKILL: a crash; SIGTERM: a clean stop).
        timeout
            Seconds to wait for the new SuperLink to be healthy (default
            ``startup_timeout``).

        Returns
        -------
        float
            The outage: seconds from the signal until the new SuperLink is healthy.
        """
        self._require_running()
        if not down_for >= 0:
            raise ValueError(f"down_for must be >= 0 s; got {down_for!r}")
        old = self.superlink
        assert old is not None
        t0 = time.monotonic()
        log.info("signal %d to the SuperLink (pid %d)", sig, old.pid)
        old.signal_tree(sig)
        if _wait_gone([old], 10.0):
            old.signal_tree(signal.SIGKILL)
            _wait_gone([old], 5.0)
        self._retired.append(old)
        time.sleep(max(0.0, down_for - (time.monotonic() - t0)))
        self._start_superlink()
        wait = self.startup_timeout if timeout is None else timeout
        self._wait_healthy(self.superlink, self._health_url(self.address),  # type: ignore[arg-type]
                           time.monotonic() + wait)
        outage = time.monotonic() - t0
        log.info("SuperLink back on %s after %.1f s", self.address, outage)
        return outage

    def serverapps(self) -> list[psutil.Process]:
        """The running ``flwr-serverapp`` processes (children of :attr:`superexec`)."""
        self._require_running()
        assert self.superexec is not None
        found = []
        for proc in self.superexec.descendants():
            try:
                if proc.status() != psutil.STATUS_ZOMBIE and any(
                    "flwr-serverapp" in part for part in proc.cmdline()[:2]
                ):
                    found.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return found

    def kill_serverapp(self, sig: int = signal.SIGKILL) -> list[int]:
        """Send ``sig`` to every running ``flwr-serverapp``; return their PIDs.

        SIGKILL is a crash: the run stays ``running`` in the SuperLink until its task
        token expires (~60 s) and then ends ``finished:failed``; :meth:`stop_run` ends it
        at once. Continue it with a new run whose run config has ``resume-dir``.
        """
        procs = self.serverapps()
        idents = [ident for ident in map(_identity, procs) if ident is not None]
        for proc in procs:
            try:
                proc.send_signal(sig)
            except psutil.NoSuchProcess:
                pass
        left = _wait_idents(idents, 10.0)
        log.info("signal %d to flwr-serverapp %s%s", sig, [p.pid for p in procs],
                 f"; still running: {left}" if left else "")
        return [p.pid for p in procs]
