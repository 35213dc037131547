"""Where a local Flower deployment's processes listen and keep their files, and how each is launched.

:class:`_Launcher` is the base of :class:`~topofl.deploy.deployment.LocalDeployment`: its addresses and
paths, the command line of every Flower process, the waits until one is up, and short ``flwr`` CLI calls.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from topofl.deploy.config import ConfigValue, format_config
from topofl.deploy.credentials import Credentials, write_authorized_keys
from topofl.deploy.processes import _POLL_S, FLOWER_QUIET_ENV, ManagedProcess
from topofl.deploy.runs import FlowerRun

log = logging.getLogger(__name__)

_NODE_ID_RE = re.compile(r"SuperNode ID: (\d+)")
_STATUS_POLL_S = 2.0  # between `flwr supernode ls` calls (each starts a Python process)

# Runs `flower-supernode` after lowering the heartbeat interval it announces and
# sends. Only the two modules of the SuperNode's own Fleet connection are patched:
# patching `flwr.common.constant` would also shorten the time-to-live of ClientApp
# tasks inside the SuperNode and kill long-running ClientApps.
_SUPERNODE_SHIM = """\
import sys
interval = float(sys.argv.pop(1))
try:
    import flwr.supercore.heartbeat as _hb
    import flwr.supernode.fleet_http_connection as _conn
except ImportError as exc:
    print(f"topofl: heartbeat shim not applied ({exc})", file=sys.stderr)
else:
    if hasattr(_hb, "HEARTBEAT_DEFAULT_INTERVAL") and hasattr(
        _conn, "HEARTBEAT_DEFAULT_INTERVAL"
    ):
        _hb.HEARTBEAT_DEFAULT_INTERVAL = interval
        _conn.HEARTBEAT_DEFAULT_INTERVAL = interval
        print(f"topofl: SuperNode heartbeat interval {interval} s", file=sys.stderr)
    else:
        print("topofl: heartbeat shim not applied (Flower changed)", file=sys.stderr)
from flwr.supernode.cli import flower_supernode
sys.argv[0] = "flower-supernode"
sys.exit(flower_supernode())
"""


class _Launcher:
    """The state, addresses, paths and process launching of :class:`~topofl.deploy.deployment.LocalDeployment`.

    The attributes are set (and documented) by ``LocalDeployment.__init__``.
    """

    num_nodes: int
    log_dir: Path
    host: str
    secure: bool
    startup_timeout: float
    stop_timeout: float
    heartbeat_interval: float | None
    runtime_dependency_installation: bool
    connection_name: str
    results_root: Path
    credentials: Credentials | None
    superlink: ManagedProcess | None
    superexec: ManagedProcess | None
    proxy: ManagedProcess | None
    nodes: list[ManagedProcess]
    node_ids: list[int | None]
    runs: list[FlowerRun]
    killed: set[int]
    superlink_port: int | None
    proxy_port: int | None
    _extra_env: dict[str, str]
    _node_extras: list[Mapping[str, ConfigValue]]
    _node_ports: list[int]
    _retired: list[ManagedProcess]  # earlier incarnations of restarted processes
    _started: bool
    _stopped: bool

    # ----------------------------------------------------------------- properties

    @property
    def address(self) -> str:
        """``host:port`` of the SuperLink: the Control (``flwr`` CLI) and Runtime APIs.

        ``127.0.0.1:<port>`` when ``secure``; SuperNodes use :attr:`fleet_address`.
        """
        if self.superlink_port is None:
            raise RuntimeError("deployment not started")
        return f"{self._superlink_host}:{self.superlink_port}"

    @property
    def fleet_address(self) -> str:
        """``host:port`` SuperNodes connect to (the Fleet proxy when ``secure``)."""
        if not self.secure:
            return self.address
        if self.proxy_port is None:
            raise RuntimeError("deployment not started")
        return f"{self.host}:{self.proxy_port}"

    @property
    def database(self) -> Path:
        """The SuperLink's SQLite state (``--database``): runs, nodes, registered keys."""
        return self.log_dir / "superlink" / "state.db"

    @property
    def cli_home(self) -> Path:
        """``FLWR_HOME`` of the ``flwr`` CLI (holds ``config.toml``)."""
        return self.log_dir / "flwr-home" / "cli"

    @property
    def processes(self) -> list[ManagedProcess]:
        """The current processes: SuperLink, SuperExec, proxy, SuperNodes, ``flwr`` runs."""
        procs = [p for p in (self.superlink, self.superexec, self.proxy) if p is not None]
        return procs + self.nodes + [run.process for run in self.runs]

    @property
    def pids(self) -> dict[str, int]:
        """PID of every current process, by name (``superlink``, ``supernode-0``...)."""
        return {proc.name: proc.pid for proc in self.processes}

    def all_pids(self) -> list[int]:
        """PIDs of every process started (restarted ones too) and all descendants seen."""
        procs = self._retired + self.processes
        return sorted({pid for proc in procs for pid, _ in proc.collect()})

    @property
    def _superlink_host(self) -> str:
        return "127.0.0.1" if self.secure else self.host

    def _require_running(self) -> None:
        if not self._started or self._stopped:
            raise RuntimeError("deployment not running")

    def node_status(self, timeout: float = 30.0) -> dict[int, str]:
        """Status of every node the SuperLink knows (``flwr supernode ls``), by node ID.

        ``"online"``, ``"offline"``, ``"registered"`` (key registered, never active) or
        ``"unregistered"``.
        """
        out = self._cli(["supernode", "ls", self.connection_name, "--format", "json"], timeout)
        text = out.stdout
        try:
            data = json.loads(text[text.index("{"):])
        except ValueError:
            raise RuntimeError(
                f"flwr supernode ls failed (exit {out.returncode}): {text[-2000:]}{out.stderr[-2000:]}"
            ) from None
        return {int(n["node-id"]): str(n["status"]) for n in data.get("nodes", [])}

    # ---------------------------------------------------------------- internals

    def _check_index(self, index: int) -> int:
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self.nodes):
            raise ValueError(f"index must be a SuperNode index in 0..{len(self.nodes) - 1}; got {index!r}")
        return index

    def _exe(self, name: str) -> str:
        """A Flower executable next to the current interpreter, else from PATH."""
        bindir = os.path.dirname(sys.executable)
        found = shutil.which(name, path=bindir + os.pathsep + os.environ.get("PATH", ""))
        if found is None:
            raise FileNotFoundError(f"{name} not found: is flwr installed?")
        return found

    def _env(self, flwr_home: Path) -> dict[str, str]:
        env = dict(os.environ)
        env.update(FLOWER_QUIET_ENV)
        env["PYTHONUNBUFFERED"] = "1"
        # Flower spawns flower-superexec / flwr-serverapp / flwr-clientapp from PATH.
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        if not self.runtime_dependency_installation:
            env["FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION"] = "1"
        for var in ("NO_PROXY", "no_proxy"):  # loopback must never go through a proxy
            hosts = [h for h in env.get(var, "").split(",") if h]
            env[var] = ",".join(hosts + [self.host, "127.0.0.1", "localhost"])
        env.update(self._extra_env)
        env["FLWR_HOME"] = str(flwr_home)
        return env

    def _node_thread_env(self) -> dict[str, str]:
        """The thread variables of each SuperNode (:data:`topofl.threads.THREAD_VARIABLES`): the number
        :func:`topofl.threads.set_threads` gave this process (``--threads``), else
        :func:`topofl.threads.default_threads` ``(num_nodes)``: the nodes share the machine. None
        when ``env`` sets ``OMP_NUM_THREADS`` (the user's own number stands); the node's ClientApp
        applies the number at its first message (:func:`topofl.threads.node_threads`).
        """
        from topofl.threads import THREAD_VARIABLES, run_threads

        if "OMP_NUM_THREADS" in self._extra_env:
            return {}
        return dict.fromkeys(THREAD_VARIABLES, str(run_threads(self.num_nodes)))

    def _launch(
        self, name: str, args: list[str], flwr_home: Path, *, port: int | None,
        env: Mapping[str, str] | None = None,
    ) -> ManagedProcess:
        flwr_home.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        with open(log_path, "ab") as log_file:
            offset = log_file.tell()
            log_file.write(f"$ {' '.join(args)}\n".encode())
            log_file.flush()
            popen = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env={**self._env(flwr_home), **(env or {})},
                cwd=str(self.log_dir),
                start_new_session=True,
            )
        proc = ManagedProcess(name, popen, log_path, flwr_home, port, offset)
        log.debug("started %s: pid %d: %s", name, popen.pid, " ".join(args))
        return proc

    def _start_superlink(self) -> None:
        args = [self._exe("flower-superlink")]
        if self.secure:
            creds = self.credentials
            assert creds is not None
            args += [
                "--ssl-certfile", str(creds.server_cert), "--ssl-keyfile", str(creds.server_key),
                "--ssl-ca-certfile", str(creds.ca), "--enable-supernode-auth",
            ]
        else:
            args.append("--insecure")
        self.database.parent.mkdir(parents=True, exist_ok=True)
        args += [
            "--host", self._superlink_host, "--port", str(self.superlink_port),
            "--database", str(self.database), "--isolation", "process",
        ]
        if not self.runtime_dependency_installation:
            args.append("--disable-runtime-dependency-installation")
        home = self.log_dir / "flwr-home" / "superlink"
        self.superlink = self._launch("superlink", args, home, port=self.superlink_port)

    def _start_superexec(self) -> None:
        """Start the ServerApp executor.

        Long-lived and without ``--parent-pid``, so it (and a running ServerApp) outlives
        a SuperLink restart.
        """
        args = [self._exe("flower-superexec"), "--runtime-api-address", self.address]
        args += ["--root-certificates", str(self.credentials.ca)] if self.credentials else ["--insecure"]
        if self.runtime_dependency_installation:
            args.append("--allow-runtime-dependency-installation")
        home = self.log_dir / "flwr-home" / "superexec"
        self.superexec = self._launch("superexec", args, home, port=None)

    @property
    def authorized_keys(self) -> Path:
        """``certs/authorized-keys``: the SuperNode public keys the Fleet proxy lets through.

        Every ``supernode-<i>.pub``, written before the proxy starts; the proxy re-reads the
        file when it changes, so a key registered later must be appended here too.
        """
        if self.credentials is None:
            raise RuntimeError("authorized_keys needs secure=True (SuperNode authentication)")
        return self.credentials.directory / "authorized-keys"

    def _start_proxy(self) -> None:
        """Start the Fleet proxy: only requests signed by a node key get through, each body at
        most the proxy's default cap (Flower sends arrays in 5 MiB chunks, one per request, so
        the cap does not grow with the model), and all SuperNodes share ``host``'s address,
        so the per-address connection cap grows with ``num_nodes`` (a SuperNode holds up to ~6).
        """
        creds = self.credentials
        assert creds is not None
        keys = self.authorized_keys
        write_authorized_keys(keys, (creds.public_key(i) for i in range(self.num_nodes)))
        per_ip = max(64, 8 * self.num_nodes)
        args = [
            sys.executable, "-m", "topofl.deploy.proxy",
            "--listen", f"{self.host}:{self.proxy_port}", "--superlink", self.address,
            "--superlink-root-certificates", str(creds.ca),
            "--certfile", str(creds.server_cert), "--keyfile", str(creds.server_key),
            "--authorized-keys", str(keys),
            "--max-connections-per-ip", str(per_ip), "--max-connections", str(max(256, 2 * per_ip)),
        ]
        home = self.log_dir / "flwr-home" / "fleet-proxy"
        self.proxy = self._launch("fleet-proxy", args, home, port=self.proxy_port)

    def _start_supernode(self, index: int) -> ManagedProcess:
        config: dict[str, ConfigValue] = {
            "partition-id": index,
            "num-partitions": self.num_nodes,
            # client state on the node's disk: a resumed run (a new Flower run) finds it
            "state-dir": str(self.log_dir / "node-state" / f"supernode-{index}"),
        }
        config.update(self._node_extras[index])
        if self.heartbeat_interval is None:
            args = [self._exe("flower-supernode")]
        else:
            args = [sys.executable, "-c", _SUPERNODE_SHIM, str(float(self.heartbeat_interval))]
        if self.credentials is not None:
            args += [
                "--root-certificates", str(self.credentials.ca),
                "--auth-supernode-private-key", str(self.credentials.node_keys[index]),
            ]
        else:
            args.append("--insecure")
        args += [
            "--superlink", self.fleet_address,
            "--host", "127.0.0.1", "--port", str(self._node_ports[index]),  # its local Runtime API
            "--node-config", format_config(config),
        ]
        if self.runtime_dependency_installation:
            args.append("--allow-runtime-dependency-installation")
        home = self.log_dir / "flwr-home" / f"supernode-{index}"
        return self._launch(f"supernode-{index}", args, home, port=self._node_ports[index],
                            env=self._node_thread_env())

    def _health_url(self, address: str) -> str:
        return f"{'https' if self.secure else 'http'}://{address}/health"

    def _wait_healthy(self, proc: ManagedProcess, url: str, deadline: float) -> None:
        handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
        if self.credentials is not None:
            context = ssl.create_default_context(cafile=str(self.credentials.ca))
            handlers.append(urllib.request.HTTPSHandler(context=context))
        opener = urllib.request.build_opener(*handlers)
        while True:
            if not proc.running:
                raise RuntimeError(
                    f"{proc.name} exited with {proc.popen.returncode}; "
                    f"log {proc.log_path}:\n{proc.log_tail()}"
                )
            try:
                with opener.open(url, timeout=1.0) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{proc.name} not healthy at {url} in time; "
                    f"log {proc.log_path}:\n{proc.log_tail()}"
                )
            time.sleep(_POLL_S)

    def _wait_node_id(self, proc: ManagedProcess, deadline: float, timeout: float | None = None) -> int:
        """Wait for ``SuperNode ID: <id>`` in the log: the node is registered and active."""
        while True:
            match = _NODE_ID_RE.search(proc.log_text())
            if match:
                return int(match.group(1))
            if not proc.running:
                raise RuntimeError(
                    f"{proc.name} exited with {proc.popen.returncode}; "
                    f"log {proc.log_path}:\n{proc.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{proc.name} did not connect to the SuperLink within "
                    f"{timeout or self.startup_timeout:.0f} s; log {proc.log_path}:\n{proc.log_tail()}"
                )
            time.sleep(_POLL_S)

    def _wait_node_not_online(self, node_id: int, deadline: float) -> None:
        """Poll ``flwr supernode ls`` until the SuperLink no longer lists ``node_id`` online."""
        while True:
            try:
                status = self.node_status().get(node_id)
            except (RuntimeError, subprocess.TimeoutExpired, OSError) as exc:
                log.warning("flwr supernode ls: %s", exc)
                status = "unknown"
            if status not in ("online", "unknown"):
                log.info("node %d is %s: it may activate again", node_id, status)
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"node {node_id} still {status} at the SuperLink")
            time.sleep(_STATUS_POLL_S)

    def _write_cli_config(self) -> None:
        self.cli_home.mkdir(parents=True, exist_ok=True)
        if self.credentials is not None:
            auth = f"root-certificates = {json.dumps(str(self.credentials.ca))}\n"
        else:
            auth = "insecure = true\n"
        (self.cli_home / "config.toml").write_text(
            "[superlink]\n"
            f'default = "{self.connection_name}"\n\n'
            f"[superlink.{self.connection_name}]\n"
            f'address = "{self.address}"\n' + auth
        )

    def _cli(self, args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        """Run a short ``flwr`` command (in its own session, killed on timeout)."""
        proc = subprocess.Popen(
            [self._exe("flwr"), *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self._env(self.cli_home),
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def _query_run(self, run_id: int, timeout: float) -> dict[str, Any]:
        try:
            out = self._cli(
                ["list", self.connection_name, "--run-id", str(run_id), "--format", "json"],
                timeout,
            )
            text = out.stdout
            data = json.loads(text[text.index("{"):])
            for run in data.get("runs", []):
                if str(run.get("run-id")) == str(run_id):
                    return dict(run)
        except (subprocess.TimeoutExpired, OSError, ValueError) as exc:
            log.warning("flwr list --run-id %d failed: %s", run_id, exc)
        return {}
