"""A ``flwr run --stream`` in flight (:class:`FlowerRun`) and its outcome (:class:`FlowerRunResult`)."""

from __future__ import annotations

import logging
import re
import subprocess
import time
from pathlib import Path
from typing import Any, Protocol

from topofl.deploy.processes import ManagedProcess, _terminate

__all__ = ["FlowerRun", "FlowerRunResult", "RunHost"]

log = logging.getLogger(__name__)

_RUN_ID_RE = re.compile(r"Successfully started run (\d+)")


class RunHost(Protocol):
    """What a :class:`FlowerRun` asks of its deployment (a :class:`~topofl.deploy.deployment.LocalDeployment`)."""

    def run_info(self, run_id: int, timeout: float = 30.0) -> dict[str, Any]: ...

    def stop_run(self, run_id: int, timeout: float = 30.0) -> None: ...

    def serverapp_log_tail(self, run: FlowerRun, lines: int = 30) -> str: ...


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

    def __init__(self, deployment: RunHost, proc: ManagedProcess, args: list[str]):
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

