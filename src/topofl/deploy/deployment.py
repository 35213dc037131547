"""A throwaway Flower deployment on one machine, for tests and trials: :class:`LocalDeployment`.

A SuperLink with its ``flower-superexec``, by default a Fleet-only TLS proxy, and ``N`` SuperNodes,
started, driven with ``flwr run ... --stream`` and stopped by PID. It only drives Flower's command-line
tools (written for and checked with flwr 1.41); POSIX only. The layout, the recovery rules and the
Flower 1.41 notes behind the defaults are in ``docs/deployment.md``.
"""

from __future__ import annotations

import atexit
import ipaddress
import logging
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from topofl.deploy.config import ConfigValue, _check_key, toml_document
from topofl.deploy.credentials import Credentials, authorize_key, generate_credentials
from topofl.deploy.faults import _Faults
from topofl.deploy.processes import ManagedProcess, _terminate, find_free_ports
from topofl.deploy.runs import FlowerRun, FlowerRunResult

__all__ = ["MIN_HEARTBEAT_INTERVAL", "LocalDeployment"]

log = logging.getLogger(__name__)

MIN_HEARTBEAT_INTERVAL = 10.0
"""Smallest heartbeat interval (s) the Flower 1.41 SuperLink accepts."""

_REGISTERED_RE = re.compile(r"SuperNode (\d+) registered successfully")


class LocalDeployment(_Faults):
    """A SuperLink, its ServerApp executor and ``num_nodes`` SuperNodes, as a context manager.

    Parameters
    ----------
    num_nodes
        Number of SuperNodes (>= 1). Node ``i`` gets
        ``--node-config "partition-id=i num-partitions=num_nodes ..."``.
    log_dir
        Directory for the logs (``superlink.log``, ``superexec.log``,
        ``fleet-proxy.log``, ``supernode-<i>.log``, ``flwr-run-<k>.log``; a restarted
        process appends to its log), the SuperLink's database
        (``superlink/state.db``), the credentials (``certs/``), the run-config files and
        the private ``FLWR_HOME`` directories (``flwr-home/``). A fresh temporary
        directory if ``None``; it is kept after :meth:`stop` for inspection.
    node_config
        Extra node-config entries: one mapping for every node, or a sequence with
        one mapping per node (e.g. ``{"data-path": "/data/site3.npz"}``).
    host
        IPv4 address SuperNodes connect to: the Fleet proxy's (``secure=True``; the
        SuperLink itself stays on ``127.0.0.1``) or the SuperLink's (``secure=False``).
    secure
        TLS, SuperNode authentication with registered keys, the SuperLink on loopback
        and a Fleet-only proxy on ``host`` (default). ``False``: plain HTTP, any
        SuperNode may join, every API on ``host`` -- for quick local trials only.
    startup_timeout
        Seconds to wait for the SuperLink and all SuperNodes to be up (> 0).
    stop_timeout
        Seconds between SIGTERM and SIGKILL in :meth:`stop` (> 0).
    heartbeat_interval
        If given (>= 10 s), SuperNodes announce this heartbeat interval instead of
        Flower's 30 s, so a dead node is declared after 2 x this interval. Patches
        Flower internals; for tests.
    runtime_dependency_installation
        Let the SuperLink (and SuperNodes) ``uv sync`` the app's dependencies
        (needs a package index). Off: apps run in the current environment.
    env
        Extra environment variables for every process.
    results_root
        The results root of the ServerApp (``$TOPOFL_RESULTS_ROOT`` of every process): a
        run's ``out-dir`` must lie inside it. Default ``log_dir/results``.
    connection_name
        Name of the SuperLink connection written to the CLI's ``config.toml``.
    """

    def __init__(  # noqa: PLR0913 (public API: the keyword options of a local deployment)
        self,
        num_nodes: int,
        log_dir: str | os.PathLike[str] | None = None,
        *,
        node_config: Mapping[str, ConfigValue]
        | Sequence[Mapping[str, ConfigValue]]
        | None = None,
        host: str = "127.0.0.1",
        secure: bool = True,
        startup_timeout: float = 60.0,
        stop_timeout: float = 10.0,
        heartbeat_interval: float | None = None,
        runtime_dependency_installation: bool = False,
        env: Mapping[str, str] | None = None,
        results_root: str | os.PathLike[str] | None = None,
        connection_name: str = "topofl-local",
    ) -> None:
        if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1:
            raise ValueError(f"num_nodes must be an int >= 1; got {num_nodes!r}")
        if heartbeat_interval is not None and not heartbeat_interval >= MIN_HEARTBEAT_INTERVAL:
            raise ValueError(
                f"heartbeat_interval must be >= {MIN_HEARTBEAT_INTERVAL} s "
                f"(the SuperLink rejects shorter ones); got {heartbeat_interval!r}"
            )
        for name, value in (("startup_timeout", startup_timeout), ("stop_timeout", stop_timeout)):
            if not value > 0:
                raise ValueError(f"{name} must be > 0 s; got {value!r}")
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise ValueError(f"host must be an IPv4 address; got {host!r}") from None
        if isinstance(node_config, Mapping) or node_config is None:
            extras: list[Mapping[str, ConfigValue]] = [node_config or {}] * num_nodes
        else:
            extras = list(node_config)
            if len(extras) != num_nodes:
                raise ValueError(
                    f"node_config needs one mapping per node ({num_nodes}); got {len(extras)}"
                )
        self.num_nodes = num_nodes
        self.log_dir = Path(
            log_dir if log_dir is not None else tempfile.mkdtemp(prefix="topofl-flower-")
        ).resolve()
        self.host = host
        self.secure = bool(secure)
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.heartbeat_interval = heartbeat_interval
        self.runtime_dependency_installation = runtime_dependency_installation
        self.connection_name = _check_key(connection_name)
        self._extra_env = dict(env or {})
        self.results_root = Path(
            results_root if results_root is not None else self.log_dir / "results"
        ).resolve()
        self._extra_env.setdefault("TOPOFL_RESULTS_ROOT", str(self.results_root))
        self._node_extras = extras
        self.credentials: Credentials | None = None
        """TLS and SuperNode keys (``secure=True``), made in :meth:`start`."""
        self.superlink: ManagedProcess | None = None
        self.superexec: ManagedProcess | None = None
        """The ``flower-superexec`` that runs the ServerApps (``--isolation process``)."""
        self.proxy: ManagedProcess | None = None
        """The Fleet proxy (``secure=True``)."""
        self.nodes: list[ManagedProcess] = []
        self.node_ids: list[int | None] = []
        """Flower node ID of each SuperNode (from its log), by index."""
        self.runs: list[FlowerRun] = []
        self.killed: set[int] = set()
        self.superlink_port: int | None = None
        self.proxy_port: int | None = None
        self._node_ports: list[int] = []
        self._retired: list[ManagedProcess] = []  # earlier incarnations of restarted processes
        self._started = False
        self._stopped = False

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> LocalDeployment:
        if not self._started:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> LocalDeployment:
        """Start everything and wait until the SuperLink and all SuperNodes are up.

        Raises :class:`TimeoutError` (with the tail of the process log) when one
        is not up within ``startup_timeout`` and :class:`RuntimeError` when one
        exits; everything started is stopped first.
        """
        if self._started:
            raise RuntimeError("LocalDeployment.start() called twice")
        self._started = True
        atexit.register(self.stop)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        deadline = t0 + self.startup_timeout
        try:
            ports = find_free_ports(2 + self.num_nodes, self._superlink_host)
            self.superlink_port = ports[0]
            self._node_ports = ports[2:]
            if self.secure:
                self.proxy_port = find_free_ports(1, self.host)[0] if self.host != "127.0.0.1" else ports[1]
                hosts = dict.fromkeys([self.host, "127.0.0.1", "localhost"])
                self.credentials = generate_credentials(
                    self.log_dir / "certs", self.num_nodes, hosts=hosts
                )
            for stale in self.database.parent.glob(self.database.name + "*"):
                stale.unlink()  # a fresh deployment: no runs or nodes of an earlier one
            self._start_superlink()
            self._wait_healthy(self.superlink, self._health_url(self.address), deadline)  # type: ignore[arg-type]
            log.info("SuperLink up on %s after %.1f s", self.address, time.monotonic() - t0)
            self._start_superexec()
            self._write_cli_config()
            if self.secure:
                self._start_proxy()
                self._wait_healthy(self.proxy, self._health_url(self.fleet_address), deadline)  # type: ignore[arg-type]
                registered = [self.register_node_key(i) for i in range(self.num_nodes)]
            for i in range(self.num_nodes):
                self.nodes.append(self._start_supernode(i))
            self.node_ids = [self._wait_node_id(node, deadline) for node in self.nodes]
            if self.secure and self.node_ids != registered:
                raise RuntimeError(
                    f"SuperNodes activated as {self.node_ids}, registered as {registered}"
                )
        except BaseException:
            self.stop()
            raise
        log.info(
            "%d SuperNodes up after %.1f s (%s); PIDs %s; logs in %s",
            self.num_nodes, time.monotonic() - t0,
            "TLS, node auth, Fleet proxy" if self.secure else "insecure",
            self.pids, self.log_dir,
        )
        return self

    def stop(self) -> None:
        """Stop every process started (SIGTERM, ``stop_timeout``, SIGKILL). Idempotent.

        In stages: ``flwr`` runs and SuperNodes, then the SuperExec, the proxy, the
        SuperLink.
        """
        if self._stopped or not self._started:
            return
        self._stopped = True
        atexit.unregister(self.stop)
        t0 = time.monotonic()
        # outside in: SuperNodes say goodbye through the proxy, a ServerApp reports to
        # the SuperLink, and the SuperLink has no open proxy connection to wait for
        stages: list[list[ManagedProcess | None]] = [
            [*self._retired, *(run.process for run in self.runs), *self.nodes],
            [self.superexec], [self.proxy], [self.superlink],
        ]
        for stage in stages:
            _terminate([p for p in stage if p is not None], self.stop_timeout)
        log.info("stopped %d processes in %.1f s", len(self.all_pids()), time.monotonic() - t0)

    # ----------------------------------------------------------------------- keys

    def register_node_key(self, index: int, public_key: str | os.PathLike[str] | None = None) -> int:
        """``flwr supernode register`` a public key (default ``supernode-<index>.pub``), and list
        it in :attr:`authorized_keys` so that the Fleet proxy lets the node through.

        Returns the node ID Flower assigned. Needs ``secure=True`` (node auth).
        """
        if not self.secure or self.credentials is None:
            raise RuntimeError("register_node_key needs secure=True (SuperNode authentication)")
        key = Path(public_key) if public_key is not None else self.credentials.public_key(index)
        out = self._cli(["supernode", "register", str(key), self.connection_name], 60.0)
        match = _REGISTERED_RE.search(out.stdout)
        if out.returncode != 0 or match is None:
            raise RuntimeError(
                f"flwr supernode register {key} failed (exit {out.returncode}):\n"
                f"{out.stdout[-2000:]}{out.stderr[-2000:]}"
            )
        authorize_key(self.authorized_keys, key)  # the Fleet proxy lets through only the keys listed there
        return int(match.group(1))

    # ----------------------------------------------------------------------- runs

    def submit(
        self,
        app_dir: str | os.PathLike[str],
        run_config: Mapping[str, ConfigValue] | None = None,
        *,
        extra_args: Iterable[str] = (),
    ) -> FlowerRun:
        """Start ``flwr run <app_dir> <connection> --run-config <toml> --stream``.

        Returns at once; call :meth:`FlowerRun.wait`. ``run_config`` keys must be in
        the app's ``[tool.flwr.app.config]``.
        """
        self._require_running()
        k = len(self.runs)
        args = [self._exe("flwr"), "run", str(Path(app_dir).resolve()), self.connection_name]
        if run_config:
            config_path = self.log_dir / f"run-config-{k}.toml"
            config_path.write_text(toml_document(run_config))
            args += ["--run-config", str(config_path)]
        args += ["--stream", *extra_args]
        proc = self._launch(f"flwr-run-{k}", args, self.cli_home, port=None)
        run = FlowerRun(self, proc, args)
        self.runs.append(run)
        log.info("flwr run %s (pid %d), log %s", app_dir, proc.pid, proc.log_path)
        return run

    def run(
        self,
        app_dir: str | os.PathLike[str],
        run_config: Mapping[str, ConfigValue] | None = None,
        timeout: float = 600.0,
        *,
        check: bool = False,
    ) -> FlowerRunResult:
        """Run a Flower app to the end; see :meth:`submit` and :meth:`FlowerRun.wait`."""
        return self.submit(app_dir, run_config).wait(timeout, check=check)

    def run_info(self, run_id: int, timeout: float = 30.0) -> dict[str, Any]:
        """A run's entry of ``flwr list --run-id <id> --format json`` (``{}`` if unreadable).

        Keys include ``status`` (``"running"``, ``"finished:completed"``,
        ``"finished:failed"``...) and ``status-details``. Polls (bounded by ``timeout``)
        until the status is final, as the SuperLink marks a run finished a moment after
        its log stream closes.
        """
        deadline = time.monotonic() + timeout
        while True:
            info = self._query_run(run_id, max(min(deadline - time.monotonic(), 30.0), 5.0))
            if str(info.get("status", "")).startswith("finished") or time.monotonic() > deadline:
                return info
            time.sleep(1.0)

    def run_status(self, run_id: int, timeout: float = 30.0) -> str | None:
        """Status of a run (``"running"``, ``"finished:completed"``...), via ``flwr list``."""
        status = self.run_info(run_id, timeout).get("status")
        return None if status is None else str(status)

    def stop_run(self, run_id: int, timeout: float = 30.0) -> None:
        """Ask the SuperLink to stop a run (``flwr stop``); errors are only logged."""
        try:
            out = self._cli(["stop", str(run_id), self.connection_name], timeout)
            log.info("flwr stop %d: exit %d", run_id, out.returncode)
        except (subprocess.TimeoutExpired, OSError) as exc:
            log.warning("flwr stop %d failed: %s", run_id, exc)

    def serverapp_log_tail(self, run: FlowerRun, lines: int = 30) -> str:
        """The end of the run's ServerApp log (streamed by the CLI) and of the SuperExec's.

        ServerApp output also lands in ``superexec.log``: what is left when the stream broke.
        """
        text = run.process.log_tail(lines)
        if self.superexec is not None:
            text += f"\n--- {self.superexec.log_path.name} ---\n" + self.superexec.log_tail(lines // 2)
        return text
