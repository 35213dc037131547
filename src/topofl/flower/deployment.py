"""A throwaway Flower deployment on one machine, for tests and trials.

:class:`LocalDeployment` starts one ``flower-superlink`` with its own ``flower-superexec``
(the ServerApp executor), by default a Fleet-only TLS proxy, and ``N``
``flower-supernode`` processes, waits until all of them are up, runs Flower apps against
them with ``flwr run ... --stream`` and stops every process it started, by PID, including
the ``flower-superexec``, ``flwr-serverapp`` and ``flwr-clientapp`` processes Flower spawns
underneath::

    from topofl.flower.deployment import LocalDeployment

    with LocalDeployment(3, log_dir="logs") as dep:
        result = dep.run("examples/flower-app",
                         {"method": "ptopofl", "num-server-rounds": 2,
                          "scenario-params": "n_clients=3,adversarial=(1,)"},
                         timeout=300)
        print(result.status)          # "finished:completed"

By default (``secure=True``) it is laid out as a real deployment should be with Flower
1.41, where the Control API (``flwr`` CLI) shares the SuperLink's port and has no
authentication:

* a throwaway CA, a server certificate for ``127.0.0.1``/``localhost`` (and ``host``) and
  one EC key pair per SuperNode, made with ``cryptography`` (:func:`generate_credentials`);
* the SuperLink serves TLS on ``127.0.0.1`` only, with ``--enable-supernode-auth``; each
  SuperNode's public key is registered with ``flwr supernode register`` before it starts;
* SuperNodes connect to :mod:`topofl.flower.fleet_proxy` on ``host``, which forwards only
  ``/v1/fleet/*`` and ``/health``, so nobody but the operator on the SuperLink host can
  register keys, list or unregister nodes, or submit runs;
* the CLI talks to the loopback SuperLink port with ``root-certificates = ca.pem``.

``secure=False`` gives the old plain-HTTP layout (every API on ``host``), for fast
local trials.

In both layouts the SuperLink keeps its state in ``<log_dir>/superlink/state.db``
(``--database``) and runs with ``--isolation process`` next to a long-lived
``flower-superexec`` started without ``--parent-pid``: killing and restarting the
SuperLink (:meth:`LocalDeployment.restart_superlink`) within ~60 s lets a running
ServerApp reconnect and finish its run. SuperNodes keep Flower's default of retrying
forever. :meth:`LocalDeployment.restart_node` restarts a SuperNode with the same key
(the same node ID), waiting out Flower's rule that a node still listed ``online``
(up to ~60 s after a kill -9) may not activate again.

It only drives Flower's command-line tools (it does not import ``flwr``), so it works
with whatever Flower is installed next to the current interpreter (written for and
checked with flwr 1.41). POSIX only: processes are started in their own session,
signalled by process group and tracked with :mod:`psutil`.

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
import datetime
import ipaddress
import json
import logging
import math
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import psutil

__all__ = [
    "FLOWER_QUIET_ENV",
    "MIN_HEARTBEAT_INTERVAL",
    "ConfigValue",
    "Credentials",
    "FlowerRun",
    "FlowerRunResult",
    "LocalDeployment",
    "ManagedProcess",
    "find_free_ports",
    "format_config",
    "generate_credentials",
    "generate_supernode_key",
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
_REGISTERED_RE = re.compile(r"SuperNode (\d+) registered successfully")
_BARE_KEY_RE = re.compile(r"^[A-Za-z0-9_-]+$")
_POLL_S = 0.2
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


# ---------------------------------------------------------------------- credentials


@dataclass(frozen=True)
class Credentials:
    """Throwaway TLS and SuperNode-authentication material (see :func:`generate_credentials`).

    File names are those of ``examples/flower-app/gen-certs.sh``.
    """

    directory: Path
    ca: Path
    """``ca.pem``: the CA certificate (what SuperNodes and the CLI verify the server with)."""
    ca_key: Path
    server_cert: Path
    """``server.pem``: the SuperLink's (and the Fleet proxy's) certificate."""
    server_key: Path
    node_keys: tuple[Path, ...]
    """``supernode-<i>``: each SuperNode's private key (OpenSSH); ``.pub`` next to it."""

    def public_key(self, index: int) -> Path:
        """``supernode-<index>.pub``."""
        return self.node_keys[index].with_name(self.node_keys[index].name + ".pub")


def _write_private(path: Path, data: bytes) -> None:
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def generate_supernode_key(path: str | os.PathLike[str]) -> Path:
    """Write an ECDSA P-384 key pair in OpenSSH format: ``path`` (0600) and ``path.pub``.

    What ``flower-supernode --auth-supernode-private-key`` and ``flwr supernode
    register`` read (the same as ``ssh-keygen -t ecdsa -b 384 -N ""``). Returns the
    public key's path.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    path = Path(path)
    key = ec.generate_private_key(ec.SECP384R1())
    _write_private(
        path,
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        ),
    )
    public = path.with_name(path.name + ".pub")
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
        + f" {path.name}\n".encode()
    )
    return public


def generate_credentials(
    directory: str | os.PathLike[str],
    num_nodes: int,
    *,
    hosts: Iterable[str] = ("127.0.0.1", "localhost"),
    days: int = 30,
) -> Credentials:
    """Make a throwaway CA, a server certificate and one SuperNode key pair per node.

    Parameters
    ----------
    directory
        Where to write ``ca.pem``, ``ca.key``, ``server.pem``, ``server.key`` and
        ``supernode-<i>``/``supernode-<i>.pub`` (created; existing files are replaced).
    num_nodes
        Number of SuperNode key pairs (>= 0).
    hosts
        Names the server certificate is valid for (its subject alternative names): IP
        addresses and DNS names. ``0.0.0.0``/``::`` are skipped.
    days
        Validity of the certificates (>= 1).

    Returns
    -------
    Credentials
        The paths. Private keys are unencrypted (mode 0600): for trials only.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 0:
        raise ValueError(f"num_nodes must be an int >= 0; got {num_nodes!r}")
    if isinstance(days, bool) or not isinstance(days, int) or days < 1:
        raise ValueError(f"days must be an int >= 1; got {days!r}")
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            if not host or not re.match(r"^[A-Za-z0-9.-]+$", host):
                raise ValueError(f"hosts: {host!r} is neither an IP address nor a DNS name") from None
            names.append(x509.DNSName(host))
        else:
            if not ip.is_unspecified:
                names.append(x509.IPAddress(ip))
    if not names:
        raise ValueError("hosts must name at least one address or DNS name")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    pem = serialization.Encoding.PEM
    no_pass = serialization.NoEncryption()

    def signed(subject: x509.Name, public_key: object, ca: bool, usage: dict[str, bool], extra: list[tuple[object, bool]]) -> x509.Certificate:
        """A certificate for ``subject`` signed by the CA key, valid from 5 minutes ago for ``days``."""
        flags = dict.fromkeys(("digital_signature", "content_commitment", "key_encipherment", "data_encipherment", "key_agreement",
                               "key_cert_sign", "crl_sign", "encipher_only", "decipher_only"), False) | usage
        builder = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(ca_name).public_key(public_key)  # type: ignore[arg-type]
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
            .add_extension(x509.KeyUsage(**flags), critical=True)
        )
        for extension, critical in extra:
            builder = builder.add_extension(extension, critical=critical)  # type: ignore[arg-type]
        return builder.sign(ca_key, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "topofl throwaway CA")])
    ca_cert = signed(ca_name, ca_key.public_key(), True, {"key_cert_sign": True, "crl_sign": True},
                     [(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)])
    server_key = ec.generate_private_key(ec.SECP384R1())
    server_cert = signed(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, str(names[0].value))]), server_key.public_key(), False,
        {"digital_signature": True, "key_agreement": True},
        [(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False), (x509.SubjectAlternativeName(names), False),
         (x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False)],
    )
    pkcs8 = serialization.PrivateFormat.PKCS8
    _write_private(out / "ca.key", ca_key.private_bytes(pem, pkcs8, no_pass))
    (out / "ca.pem").write_bytes(ca_cert.public_bytes(pem))
    _write_private(out / "server.key", server_key.private_bytes(pem, pkcs8, no_pass))
    (out / "server.pem").write_bytes(server_cert.public_bytes(pem))
    node_keys = []
    for i in range(num_nodes):
        generate_supernode_key(out / f"supernode-{i}")
        node_keys.append(out / f"supernode-{i}")
    return Credentials(
        directory=out, ca=out / "ca.pem", ca_key=out / "ca.key",
        server_cert=out / "server.pem", server_key=out / "server.key",
        node_keys=tuple(node_keys),
    )


# ------------------------------------------------------------------------ processes


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
    """One process started by :class:`LocalDeployment`, and the processes it spawned."""

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


# ----------------------------------------------------------------------------- runs


class FlowerRunResult(subprocess.CompletedProcess):
    """Outcome of ``flwr run --stream``: the CLI's exit status and output, plus the run.

    ``returncode`` is the CLI's. Flower 1.41 exits 0 even when the ServerApp fails, and
    1 when its log stream breaks (a SuperLink restart) although the run may go on and
    complete, so look at ``status`` (``"finished:completed"``, ``"finished:failed"``,
    ...; ``None`` if it could not be read) and ``status_details`` (Flower's reason).
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
        status_details: str = "",
    ) -> None:
        super().__init__(args, returncode, stdout=stdout, stderr="")
        self.run_id = run_id
        self.status = status
        self.status_details = status_details
        self.log_path = log_path

    @property
    def ok(self) -> bool:
        """The run finished as completed (``status == "finished:completed"``)."""
        return self.status == "finished:completed"


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
        """What the CLI printed so far (the streamed ServerApp log included)."""
        return self.process.log_text()

    def done(self) -> bool:
        """Whether the CLI exited (its log stream ended or broke)."""
        return not self.process.running

    def wait(self, timeout: float, *, check: bool = False) -> FlowerRunResult:
        """Wait until the run ends.

        The CLI stops streaming when the run ends, or earlier when the SuperLink goes
        away; then the run's status is polled (``flwr list``) until it is final.

        Raises :class:`TimeoutError` (after stopping the CLI and the run) when it takes
        longer than ``timeout`` seconds, and with ``check=True``
        :class:`RuntimeError` naming the status, Flower's reason and the tail of the
        ServerApp's log when the run did not complete.
        """
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 s; got {timeout!r}")
        deadline = time.monotonic() + timeout
        try:
            returncode = self.process.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._give_up(timeout)
        _terminate([self.process], 2.0)  # anything it left behind
        run_id = self.run_id
        info: dict[str, Any] = {}
        if run_id is not None:
            # a finished run is marked so a moment after the stream closes; a stream broken
            # by a SuperLink outage leaves the run running: wait for it (bounded by timeout)
            info = self._deployment.run_info(
                run_id, timeout=max(deadline - time.monotonic(), 30.0)
            )
            if not str(info.get("status", "")).startswith("finished") and time.monotonic() >= deadline:
                self._give_up(timeout)
        status = info.get("status")
        result = FlowerRunResult(
            self.args,
            returncode,
            self.output(),
            run_id=run_id,
            status=None if status is None else str(status),
            status_details=str(info.get("status-details") or ""),
            log_path=self.process.log_path,
        )
        log.info("run %s ended: exit %s, status %s %s", run_id, returncode, status,
                 result.status_details)
        if check and not result.ok:
            raise RuntimeError(
                f"run {run_id} did not complete: status {status}"
                f"{': ' + result.status_details if result.status_details else ''} "
                f"(flwr run exit {returncode}); ServerApp log "
                f"{self.process.log_path} ends:\n{self._deployment.serverapp_log_tail(self)}"
            )
        return result

    def _give_up(self, timeout: float) -> None:
        run_id = self.run_id
        _terminate([self.process], 5.0)
        if run_id is not None:
            self._deployment.stop_run(run_id)
        raise TimeoutError(
            f"run {run_id} did not finish within {timeout:.0f} s; "
            f"log {self.process.log_path}:\n{self.process.log_tail()}"
        ) from None


# ----------------------------------------------------------------------- deployment


class LocalDeployment:
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

    def __init__(
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

    def _require_running(self) -> None:
        if not self._started or self._stopped:
            raise RuntimeError("deployment not running")

    # ------------------------------------------------------------ faults, recovery

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
        listed = self.authorized_keys
        line = key.read_text().strip()
        current = listed.read_text().splitlines() if listed.is_file() else []
        if line not in (x.strip() for x in current):  # the Fleet proxy lets through only the keys listed there
            listed.write_text("".join(x + "\n" for x in [*current, line]))
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

    def _launch(
        self, name: str, args: list[str], flwr_home: Path, *, port: int | None
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
                env=self._env(flwr_home),
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
        keys.write_bytes(b"".join(creds.public_key(i).read_bytes() for i in range(self.num_nodes)))
        per_ip = max(64, 8 * self.num_nodes)
        args = [
            sys.executable, "-m", "topofl.flower.fleet_proxy",
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
        return self._launch(f"supernode-{index}", args, home, port=self._node_ports[index])

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
