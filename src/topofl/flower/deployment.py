"""A throwaway Flower deployment on the loopback interface, for tests and trials.

:class:`LocalDeployment` starts one ``flower-superlink`` and ``N`` ``flower-supernode``
processes on ``127.0.0.1`` (plain HTTP, ``--insecure``), waits until all of them are
up, runs Flower apps against them with ``flwr run ... --stream`` and stops every
process it started, by PID, including the ``flower-superexec`` and app processes that
Flower spawns underneath::

    from topofl.flower.deployment import LocalDeployment

    with LocalDeployment(3, log_dir="logs") as dep:
        result = dep.run("examples/flower-app",
                         {"method": "ptopofl", "num-server-rounds": 2,
                          "scenario-params": "n_clients=3,adversarial=(1,)"},
                         timeout=300)
        print(result.status)          # "finished:completed"

It only drives the Flower command-line tools (it does not import ``flwr``), so it
works with whatever Flower is installed next to the current interpreter (written for
and checked with flwr 1.41). POSIX only: processes are started in their own session
and signalled by process group.

Notes on Flower 1.41 that shape the defaults:

* The SuperLink installs an app's ``[project].dependencies`` with ``uv sync`` before
  it starts the ServerApp (needs a package index). The deployment passes
  ``--disable-runtime-dependency-installation`` unless
  ``runtime_dependency_installation=True``, so the apps run in the current
  environment (``topofl`` must be importable there) and nothing is fetched.
  SuperNodes never install dependencies unless asked to.
* A SuperNode reports a heartbeat every ~20 s and the SuperLink declares it dead
  after 2 x 30 s without one; there is no command-line option for this. With
  ``heartbeat_interval=`` the SuperNodes are launched through a small shim that
  lowers the interval they announce (the SuperLink accepts at least 10 s), so a
  killed node is reported ``NODE_UNAVAILABLE`` within ~20 s instead of ~60 s.
  That shim patches Flower internals and is meant for tests.
* Telemetry and the update check are switched off (``FLWR_TELEMETRY_ENABLED=0``,
  ``FLWR_DISABLE_UPDATE_CHECK=1``) and every process gets its own ``FLWR_HOME``.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

__all__ = [
    "FLOWER_QUIET_ENV",
    "MIN_HEARTBEAT_INTERVAL",
    "ConfigValue",
    "FlowerRun",
    "FlowerRunResult",
    "LocalDeployment",
    "ManagedProcess",
    "find_free_ports",
    "format_config",
    "toml_document",
]

log = logging.getLogger(__name__)

ConfigValue = Union[bool, int, float, str]
"""A value of a Flower run-config or node-config entry."""

FLOWER_QUIET_ENV: dict[str, str] = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
}
"""Environment that keeps Flower from phoning home; set for every process started."""

MIN_HEARTBEAT_INTERVAL = 10.0
"""Smallest heartbeat interval (s) the Flower 1.41 SuperLink accepts."""

_NODE_ID_RE = re.compile(r"SuperNode ID: (\d+)")
_RUN_ID_RE = re.compile(r"Successfully started run (\d+)")
_BARE_KEY_RE = re.compile(r"^[A-Za-z0-9_-]+$")
_POLL_S = 0.2

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


# --------------------------------------------------------------------------- config


def _toml_value(value: ConfigValue, *, inline: bool) -> str:
    """Render one scalar as TOML.

    ``inline=True`` renders strings so that Flower's ``k=v`` parser of
    ``--node-config``/``--run-config`` (a regex taking ``"..."`` or ``'...'``)
    keeps them in one piece.
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        if not inline or '"' not in value:
            return json.dumps(value)  # a valid TOML basic string
        if "'" not in value and "\n" not in value:
            return f"'{value}'"  # TOML literal string
        raise ValueError(
            f"cannot pass {value!r} on Flower's command line: it holds both quote kinds"
        )
    raise TypeError(f"unsupported config value {value!r} ({type(value).__name__})")


def _check_key(key: str) -> str:
    if not _BARE_KEY_RE.match(key):
        raise ValueError(f"config key {key!r} must match [A-Za-z0-9_-]+")
    return key


def format_config(config: Mapping[str, ConfigValue]) -> str:
    """Format a flat config as Flower's ``"k1=v1 k2=v2"`` command-line string.

    Values are TOML (strings quoted), as ``--node-config`` and ``--run-config``
    expect: ``format_config({"partition-id": 0, "data-path": "/d/a.npz"})`` gives
    ``'partition-id=0 data-path="/d/a.npz"'``.
    """
    return " ".join(
        f"{_check_key(k)}={_toml_value(v, inline=True)}" for k, v in config.items()
    )


def toml_document(config: Mapping[str, ConfigValue]) -> str:
    """Render a flat config as a TOML document (for ``flwr run --run-config x.toml``)."""
    return "".join(
        f"{_check_key(k)} = {_toml_value(v, inline=False)}\n" for k, v in config.items()
    )


def find_free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """Return ``count`` distinct TCP ports that were free on ``host``.

    Each port is found by binding port 0; all sockets are held until every port is
    chosen, so the ports differ. Another program may still grab one before Flower
    binds it (unlikely on a test machine).
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


# ------------------------------------------------------------------------ processes


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name, or ``None``."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    return raw[raw.rfind(")") + 2 :].split()


def _start_time(pid: int) -> str | None:
    """Kernel start time of ``pid`` (Linux), to tell a PID from a recycled one."""
    fields = _proc_stat(pid)
    return fields[19] if fields and len(fields) > 19 else None


def _children_map() -> dict[int, list[int]]:
    """Map each PID to the PIDs of its children."""
    children: dict[int, list[int]] = {}
    proc = Path("/proc")
    if proc.is_dir():
        for entry in proc.iterdir():
            if not entry.name.isdigit():
                continue
            fields = _proc_stat(int(entry.name))
            if fields and len(fields) > 1:
                children.setdefault(int(fields[1]), []).append(int(entry.name))
        return children
    out = subprocess.run(
        ["ps", "-A", "-o", "pid=,ppid="], capture_output=True, text=True, check=False
    ).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            children.setdefault(int(parts[1]), []).append(int(parts[0]))
    return children


def _descendants(pid: int, children: Mapping[int, list[int]]) -> list[int]:
    found: list[int] = []
    stack = list(children.get(pid, []))
    while stack:
        child = stack.pop()
        if child not in found:
            found.append(child)
            stack.extend(children.get(child, []))
    return found


_Identity = tuple[int, Union[str, None]]  # (pid, start time)


def _alive(ident: _Identity) -> bool:
    """Whether the process ``ident`` still runs (zombies and recycled PIDs: no)."""
    pid, started = ident
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    fields = _proc_stat(pid)
    if fields is None:
        return not Path("/proc").is_dir()
    if fields[0] == "Z":
        return False
    return started is None or _start_time(pid) == started


def _send(ident: _Identity, sig: int) -> None:
    if _alive(ident):
        try:
            os.kill(ident[0], sig)
        except ProcessLookupError:
            pass


@dataclass
class ManagedProcess:
    """One process started by :class:`LocalDeployment`."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    flwr_home: Path
    port: int | None = None
    started: str | None = None
    seen: set[_Identity] = field(default_factory=set)
    """Every process of this tree seen so far (the root and its descendants)."""

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def running(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of this process's log."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "<no log>"
        return "\n".join(text.splitlines()[-lines:])

    def collect(self) -> set[_Identity]:
        """Record the root and all its current descendants; return all ever seen.

        Descendants are looked up while the root lives, because orphans are
        re-parented (the SuperLink's ``flower-superexec`` runs in its own session,
        so the process group alone does not reach it).
        """
        self.seen.add((self.pid, self.started))
        if self.running:
            for pid in _descendants(self.pid, _children_map()):
                self.seen.add((pid, _start_time(pid)))
        return self.seen

    def signal_tree(self, sig: int) -> None:
        """Send ``sig`` to the process group and to every recorded descendant."""
        idents = self.collect()
        if self.running:
            try:
                os.killpg(self.pid, sig)  # start_new_session: pgid == pid
            except (ProcessLookupError, PermissionError):
                pass
        for ident in idents:
            _send(ident, sig)

    def alive(self) -> list[_Identity]:
        self.popen.poll()  # reap it if it is our exited child
        return [ident for ident in self.seen if _alive(ident)]


def _terminate(procs: Sequence[ManagedProcess], timeout: float) -> None:
    """SIGTERM every process tree, wait up to ``timeout`` s, then SIGKILL the rest."""
    for proc in procs:
        proc.signal_tree(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in procs:
            proc.collect()  # children started while shutting down
        if not any(proc.alive() for proc in procs):
            return
        time.sleep(_POLL_S)
    for proc in procs:
        left = proc.alive()
        if left:
            log.warning("%s: SIGKILL to %s", proc.name, sorted(p for p, _ in left))
            proc.signal_tree(signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(proc.alive() for proc in procs):
        time.sleep(_POLL_S)
    for proc in procs:
        left = proc.alive()
        if left:
            log.error("%s: still alive after SIGKILL: %s", proc.name, left)


# ----------------------------------------------------------------------------- runs


class FlowerRunResult(subprocess.CompletedProcess):
    """Outcome of ``flwr run --stream``: the CLI's exit status and output, plus the run.

    ``returncode`` is the CLI's; Flower 1.41 exits 0 even when the ServerApp fails,
    so look at ``status`` (``"finished:completed"``, ``"finished:failed"``, ...;
    ``None`` if it could not be read).
    """

    def __init__(
        self,
        args: list[str],
        returncode: int,
        stdout: str,
        *,
        run_id: int | None,
        status: str | None,
        log_path: Path,
    ) -> None:
        super().__init__(args, returncode, stdout=stdout, stderr="")
        self.run_id = run_id
        self.status = status
        self.log_path = log_path

    @property
    def ok(self) -> bool:
        """The CLI exited 0 and the run finished as completed."""
        return self.returncode == 0 and self.status == "finished:completed"


class FlowerRun:
    """A ``flwr run`` CLI process in flight; see :meth:`LocalDeployment.submit`."""

    def __init__(self, deployment: LocalDeployment, proc: ManagedProcess, args: list[str]):
        self._deployment = deployment
        self.process = proc
        self.args = args

    @property
    def run_id(self) -> int | None:
        """The run's ID once the SuperLink accepted it, else ``None``."""
        match = _RUN_ID_RE.search(self.output())
        return int(match.group(1)) if match else None

    def output(self) -> str:
        try:
            return self.process.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def done(self) -> bool:
        return not self.process.running

    def wait(self, timeout: float, *, check: bool = False) -> FlowerRunResult:
        """Wait until the run ends (the CLI stops streaming).

        Raises :class:`TimeoutError` (after stopping the CLI and the run) when it
        takes longer than ``timeout`` seconds, and :class:`RuntimeError` with
        ``check=True`` when the run did not complete.
        """
        try:
            returncode = self.process.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            run_id = self.run_id
            _terminate([self.process], 5.0)
            if run_id is not None:
                self._deployment.stop_run(run_id)
            raise TimeoutError(
                f"flwr run did not finish within {timeout:.0f} s "
                f"(run {run_id}); log {self.process.log_path}:\n"
                f"{self.process.log_tail()}"
            ) from None
        _terminate([self.process], 2.0)  # anything it left behind
        run_id = self.run_id
        status = self._deployment.run_status(run_id) if run_id is not None else None
        result = FlowerRunResult(
            self.args,
            returncode,
            self.output(),
            run_id=run_id,
            status=status,
            log_path=self.process.log_path,
        )
        log.info("run %s ended: exit %s, status %s", run_id, returncode, status)
        if check and not result.ok:
            raise RuntimeError(
                f"flwr run failed (exit {returncode}, status {status}); "
                f"log {self.process.log_path}:\n{self.process.log_tail()}"
            )
        return result


# ----------------------------------------------------------------------- deployment


class LocalDeployment:
    """One SuperLink and ``num_nodes`` SuperNodes on loopback, as a context manager.

    Parameters
    ----------
    num_nodes:
        Number of SuperNodes. Node ``i`` gets
        ``--node-config "partition-id=i num-partitions=num_nodes ..."``.
    log_dir:
        Directory for the logs (``superlink.log``, ``supernode-<i>.log``,
        ``flwr-run-<k>.log``), the run-config files and the private ``FLWR_HOME``
        directories (``flwr-home/``). A fresh temporary directory if ``None``; it is
        kept after :meth:`stop` for inspection.
    node_config:
        Extra node-config entries: one mapping for every node, or a sequence with
        one mapping per node (e.g. ``{"data-path": "/data/site3.npz"}``).
    host:
        IPv4 address to serve on.
    startup_timeout:
        Seconds to wait for the SuperLink and all SuperNodes to be up.
    stop_timeout:
        Seconds between SIGTERM and SIGKILL in :meth:`stop`.
    heartbeat_interval:
        If given (>= 10 s), SuperNodes announce this heartbeat interval instead of
        Flower's 30 s, so a dead node is declared after 2 x this interval. Patches
        Flower internals; for tests.
    runtime_dependency_installation:
        Let the SuperLink (and SuperNodes) ``uv sync`` the app's dependencies
        (needs a package index). Off: apps run in the current environment.
    env:
        Extra environment variables for every process.
    results_root:
        The results root of the ServerApp (``$TOPOFL_RESULTS_ROOT`` of every process): a run's
        ``out-dir`` must lie inside it. Default ``log_dir/results``.
    connection_name:
        Name of the SuperLink connection written to the CLI's ``config.toml``.
    """

    def __init__(
        self,
        num_nodes: int,
        log_dir: str | os.PathLike[str] | None = None,
        *,
        node_config: Mapping[str, ConfigValue]
        | Sequence[Mapping[str, ConfigValue]]
        | None = None,
        host: str = "127.0.0.1",
        startup_timeout: float = 60.0,
        stop_timeout: float = 10.0,
        heartbeat_interval: float | None = None,
        runtime_dependency_installation: bool = False,
        env: Mapping[str, str] | None = None,
        results_root: str | os.PathLike[str] | None = None,
        connection_name: str = "topofl-local",
    ) -> None:
        if num_nodes < 1:
            raise ValueError("num_nodes must be >= 1")
        if heartbeat_interval is not None and heartbeat_interval < MIN_HEARTBEAT_INTERVAL:
            raise ValueError(
                f"heartbeat_interval must be >= {MIN_HEARTBEAT_INTERVAL} s "
                "(the SuperLink rejects shorter ones)"
            )
        if isinstance(node_config, Mapping) or node_config is None:
            extras: list[Mapping[str, ConfigValue]] = [node_config or {}] * num_nodes
        else:
            extras = list(node_config)
            if len(extras) != num_nodes:
                raise ValueError("node_config needs one mapping per node")
        self.num_nodes = num_nodes
        self.log_dir = Path(
            log_dir if log_dir is not None else tempfile.mkdtemp(prefix="topofl-flower-")
        ).resolve()
        self.host = host
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.heartbeat_interval = heartbeat_interval
        self.runtime_dependency_installation = runtime_dependency_installation
        self.connection_name = _check_key(connection_name)
        self._extra_env = dict(env or {})
        self.results_root = Path(results_root if results_root is not None else self.log_dir / "results").resolve()
        self._extra_env.setdefault("TOPOFL_RESULTS_ROOT", str(self.results_root))
        self._node_extras = extras
        self.superlink: ManagedProcess | None = None
        self.nodes: list[ManagedProcess] = []
        self.node_ids: list[int | None] = []
        """Flower node ID of each SuperNode (from its log), by index."""
        self.runs: list[FlowerRun] = []
        self.killed: set[int] = set()
        self.superlink_port: int | None = None
        self._started = False
        self._stopped = False

    # ----------------------------------------------------------------- properties

    @property
    def address(self) -> str:
        """``host:port`` of the SuperLink (Fleet, Control and Runtime HTTP APIs)."""
        if self.superlink_port is None:
            raise RuntimeError("deployment not started")
        return f"{self.host}:{self.superlink_port}"

    @property
    def cli_home(self) -> Path:
        """``FLWR_HOME`` of the ``flwr`` CLI (holds ``config.toml``)."""
        return self.log_dir / "flwr-home" / "cli"

    @property
    def processes(self) -> list[ManagedProcess]:
        """Every process started: SuperLink, SuperNodes and ``flwr`` CLI runs."""
        procs = [self.superlink] if self.superlink is not None else []
        return procs + self.nodes + [run.process for run in self.runs]

    @property
    def pids(self) -> dict[str, int]:
        """PID of every process started, by name (``superlink``, ``supernode-0``...)."""
        return {proc.name: proc.pid for proc in self.processes}

    def all_pids(self) -> list[int]:
        """PIDs of the started processes and of all their descendants seen so far."""
        return sorted({pid for proc in self.processes for pid, _ in proc.collect()})

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> LocalDeployment:
        if not self._started:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> LocalDeployment:
        """Start the SuperLink and the SuperNodes and wait until all are up.

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
            ports = find_free_ports(1 + self.num_nodes, self.host)
            self.superlink_port = ports[0]
            self._start_superlink()
            self._wait_http(self.superlink, deadline)  # type: ignore[arg-type]
            log.info("SuperLink up on %s after %.1f s", self.address, time.monotonic() - t0)
            for i in range(self.num_nodes):
                self._start_supernode(i, ports[1 + i])
            self.node_ids = [self._wait_node_id(node, deadline) for node in self.nodes]
            self._write_cli_config()
        except BaseException:
            self.stop()
            raise
        log.info(
            "%d SuperNodes up after %.1f s; PIDs %s; logs in %s",
            self.num_nodes, time.monotonic() - t0, self.pids, self.log_dir,
        )
        return self

    def stop(self) -> None:
        """Stop every process started (SIGTERM, ``stop_timeout``, SIGKILL). Idempotent."""
        if self._stopped or not self._started:
            return
        self._stopped = True
        atexit.unregister(self.stop)
        procs = self.processes
        t0 = time.monotonic()
        _terminate(procs, self.stop_timeout)
        log.info("stopped %d processes in %.1f s", len(self.all_pids()), time.monotonic() - t0)

    def kill_node(self, index: int, sig: int = signal.SIGKILL) -> None:
        """Kill SuperNode ``index`` and its children (SIGKILL: no goodbye to the SuperLink)."""
        node = self.nodes[index]
        log.info("killing supernode-%d (pid %d, node id %s)", index, node.pid, self.node_ids[index])
        node.signal_tree(sig)
        deadline = time.monotonic() + 10.0
        while node.alive() and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        if node.alive():
            node.signal_tree(signal.SIGKILL)
        self.killed.add(index)

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
        if not self._started or self._stopped:
            raise RuntimeError("deployment not running")
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

    def run_status(self, run_id: int, timeout: float = 30.0) -> str | None:
        """Status of a run (``"running"``, ``"finished:completed"``...), via ``flwr list``.

        Waits (bounded by ``timeout``) for a finished status, as the SuperLink marks
        the run finished a moment after the log stream closes.
        """
        deadline = time.monotonic() + timeout
        status: str | None = None
        while True:
            status = self._query_status(run_id, max(deadline - time.monotonic(), 1.0))
            if (status or "").startswith("finished") or time.monotonic() > deadline:
                return status
            time.sleep(0.5)

    def stop_run(self, run_id: int, timeout: float = 30.0) -> None:
        """Ask the SuperLink to stop a run (``flwr stop``); errors are only logged."""
        try:
            out = self._cli(["stop", str(run_id), self.connection_name], timeout)
            log.info("flwr stop %d: exit %d", run_id, out.returncode)
        except (subprocess.TimeoutExpired, OSError) as exc:
            log.warning("flwr stop %d failed: %s", run_id, exc)

    # ---------------------------------------------------------------- internals

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
            env[var] = ",".join(hosts + [self.host, "localhost"])
        env.update(self._extra_env)
        env["FLWR_HOME"] = str(flwr_home)
        return env

    def _launch(
        self, name: str, args: list[str], flwr_home: Path, *, port: int | None
    ) -> ManagedProcess:
        flwr_home.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        with open(log_path, "ab") as log_file:
            log_file.write(f"$ {' '.join(args)}\n".encode())
            log_file.flush()
            popen = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=self._env(flwr_home),
                cwd=str(self.log_dir),
                start_new_session=True,
            )
        proc = ManagedProcess(name, popen, log_path, flwr_home, port, _start_time(popen.pid))
        proc.collect()
        log.debug("started %s: pid %d: %s", name, popen.pid, " ".join(args))
        return proc

    def _start_superlink(self) -> None:
        args = [
            self._exe("flower-superlink"), "--insecure",
            "--host", self.host, "--port", str(self.superlink_port),
        ]
        if not self.runtime_dependency_installation:
            args.append("--disable-runtime-dependency-installation")
        home = self.log_dir / "flwr-home" / "superlink"
        self.superlink = self._launch("superlink", args, home, port=self.superlink_port)

    def _start_supernode(self, index: int, port: int) -> None:
        config: dict[str, ConfigValue] = {
            "partition-id": index,
            "num-partitions": self.num_nodes,
        }
        config.update(self._node_extras[index])
        if self.heartbeat_interval is None:
            args = [self._exe("flower-supernode")]
        else:
            args = [sys.executable, "-c", _SUPERNODE_SHIM, str(float(self.heartbeat_interval))]
        args += [
            "--insecure", "--superlink", self.address,
            "--host", self.host, "--port", str(port),
            "--node-config", format_config(config),
        ]
        if self.runtime_dependency_installation:
            args.append("--allow-runtime-dependency-installation")
        home = self.log_dir / "flwr-home" / f"supernode-{index}"
        self.nodes.append(self._launch(f"supernode-{index}", args, home, port=port))

    def _wait_http(self, proc: ManagedProcess, deadline: float) -> None:
        url = f"http://{self.host}:{proc.port}/health"
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
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
                    f"{proc.name} not healthy at {url} within {self.startup_timeout:.0f} s; "
                    f"log {proc.log_path}:\n{proc.log_tail()}"
                )
            time.sleep(_POLL_S)

    def _wait_node_id(self, proc: ManagedProcess, deadline: float) -> int:
        """Wait for ``SuperNode ID: <id>`` in the log: the node is registered and active."""
        while True:
            match = _NODE_ID_RE.search(proc.log_tail(10_000))
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
                    f"{self.startup_timeout:.0f} s; log {proc.log_path}:\n{proc.log_tail()}"
                )
            time.sleep(_POLL_S)

    def _write_cli_config(self) -> None:
        self.cli_home.mkdir(parents=True, exist_ok=True)
        (self.cli_home / "config.toml").write_text(
            "[superlink]\n"
            f'default = "{self.connection_name}"\n\n'
            f"[superlink.{self.connection_name}]\n"
            f'address = "{self.address}"\n'
            "insecure = true\n"
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

    def _query_status(self, run_id: int, timeout: float) -> str | None:
        try:
            out = self._cli(
                ["list", self.connection_name, "--run-id", str(run_id), "--format", "json"],
                timeout,
            )
            text = out.stdout
            data = json.loads(text[text.index("{") :])
            for run in data.get("runs", []):
                if str(run.get("run-id")) == str(run_id):
                    return str(run.get("status"))
        except (subprocess.TimeoutExpired, OSError, ValueError) as exc:
            log.warning("flwr list --run-id %d failed: %s", run_id, exc)
        return None
