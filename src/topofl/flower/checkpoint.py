"""Checkpoints of a Flower run: the server's state after every round, so a killed ServerApp resumes.

After each round the ServerApp of a federated method writes ``checkpoint.pkl`` and then
``checkpoint.json`` (hashes of the pickle and of every results file); :func:`load_checkpoint` trusts
nothing it reads and unpickles only after the hash matches.
See docs/internals.md#topofl.flower.checkpoint for the files and the checks.
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from topofl.atomic import directory_lock, write_bytes_atomic
from topofl.experiments.results import write_json_atomic

#: the results files a checkpoint pins (those a round appends to)
RESULT_FILES = ("rounds.csv", "curves.csv", "server_log.jsonl", "failures.jsonl")
CHECKPOINT = "checkpoint.pkl"
MANIFEST = "checkpoint.json"
FORMAT = 1


@dataclass
class Checkpoint:
    """What :func:`load_checkpoint` returns: the round it was taken after, the run's settings (as
    :meth:`FlowerSettings.as_dict` wrote them), the pickled payload and the results files' cuts,
    which :meth:`cut_files` applies once the caller has checked everything else.
    """

    round: int
    settings: dict[str, Any]
    payload: Any
    cuts: list[tuple[Path, int]] = field(default_factory=list)

    def cut_files(self) -> None:
        """Cut each results file back to its checkpointed length: rows written after the checkpoint
        go, so the resumed run redoes that round (a symlink in their place is refused).
        """
        for path, keep in self.cuts:
            fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW)
            try:
                os.ftruncate(fd, keep)
                os.fsync(fd)
            finally:
                os.close(fd)


@contextmanager
def run_lock(run_dir: str | os.PathLike[str], key: str = "out-dir") -> Iterator[None]:
    """Hold ``run_dir``'s lock for as long as a ServerApp writes there: a second ServerApp on the same
    host — a resume of a run whose ServerApp is still alive (it reconnects after a SuperLink
    restart) — is refused (a ``ValueError`` naming ``key`` and the directory) instead of both
    appending to the same files. The lock is :func:`topofl.atomic.directory_lock`'s, the one
    experiment directories use.
    """
    with directory_lock(run_dir, f"{key}=", busy="another ServerApp is still writing that run",
                        hint="stop it first (flwr stop <run-id>)"):
        yield


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def save_checkpoint(run_dir: str | os.PathLike[str], rnd: int, settings: Mapping[str, Any], payload: Any) -> None:
    """Pin the results files of ``run_dir`` and write ``payload`` as the checkpoint after round ``rnd``.

    The pickle goes first and the manifest naming its hash last, both atomically: a crash at any
    point leaves the previous checkpoint (manifest and pickle of one round) or the new one.
    """
    d = Path(run_dir)
    blob = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    files = {}
    for name in RESULT_FILES:
        p = d / name
        data = b""
        if p.is_file():
            with p.open("rb") as fh:  # on disk before the manifest that pins them (a power loss keeps what it names)
                os.fsync(fh.fileno())
                data = fh.read()
        files[name] = {"bytes": len(data), "sha256": _sha256(data)}
    # a previous manifest names the previous pickle: write the new pickle under a round-specific
    # name first, so the old pair stays valid until the new manifest replaces the old one
    name = f"checkpoint-{int(rnd)}.pkl"
    write_bytes_atomic(d / name, blob)
    previous = _read_manifest(d) if (d / MANIFEST).is_file() else None
    write_json_atomic(d / MANIFEST, {"format": FORMAT, "round": int(rnd), "pickle": name,
                                     "pickle_sha256": _sha256(blob), "settings": dict(settings), "files": files})
    old = previous.get("pickle") if previous is not None else None
    if isinstance(old, str) and old != name and _pickle_name(old):
        (d / old).unlink(missing_ok=True)


def _pickle_name(name: object) -> bool:
    """Whether ``name`` is a checkpoint pickle's name in the run directory (no path)."""
    return (isinstance(name, str) and name.startswith("checkpoint-") and name.endswith(".pkl")
            and "/" not in name and "\\" not in name)


def _read_manifest(d: Path) -> dict[str, Any]:
    path = d / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable checkpoint manifest ({exc})") from None
    if not isinstance(manifest, dict):
        raise ValueError(f"{path}: not a checkpoint manifest (a JSON object)")
    return manifest


def checkpoint_settings(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The settings recorded in ``run_dir``'s checkpoint manifest (read only; nothing is verified or cut)."""
    d = Path(run_dir)
    if (d / "result.json").is_file():
        raise ValueError(f"{d}: that run finished ({d / 'result.json'}); nothing to resume")
    if not (d / MANIFEST).is_file():
        raise ValueError(f"{d} has no {MANIFEST}: not an unfinished topofl Flower run directory")
    settings = _read_manifest(d).get("settings")
    if not isinstance(settings, dict):
        raise ValueError(f"{d / MANIFEST}: settings are missing")
    return {k: v for k, v in settings.items() if k != "resume_dir"}


def load_checkpoint(run_dir: str | os.PathLike[str]) -> Checkpoint:
    """The verified checkpoint of ``run_dir``; nothing on disk is changed (:meth:`Checkpoint.cut_files`
    cuts the results files back to it, once the caller has checked the rest).

    Raises
    ------
    ValueError
        When ``run_dir`` has no checkpoint, or any file disagrees with its manifest (named).
    """
    d = Path(run_dir)
    if not (d / MANIFEST).is_file():
        raise ValueError(f"{d} has no {MANIFEST}: not a topofl Flower run directory, or it stopped before its first "
                         "round finished")
    rnd, name, digest, settings, files = _manifest_fields(d, _read_manifest(d))
    blob = _verified_blob(d / name, digest)
    cuts = _result_cuts(d, files, rnd)
    payload = pickle.loads(blob)  # noqa: S301 — the server's own file, its hash checked against the manifest above
    return Checkpoint(rnd, settings, payload, cuts)


def _manifest_fields(d: Path, m: dict[str, Any]) -> tuple[int, str, str, dict[str, Any], dict[str, Any]]:
    """The manifest's round, pickle name, pickle hash, settings and files, each checked; ``ValueError`` otherwise."""
    if m.get("format") != FORMAT:
        raise ValueError(f"{d / MANIFEST}: format {m.get('format')!r}, expected {FORMAT}")
    rnd, name, digest, settings, files = (m.get(k) for k in ("round", "pickle", "pickle_sha256", "settings", "files"))
    if isinstance(rnd, bool) or not isinstance(rnd, int) or rnd < 1:
        raise ValueError(f"{d / MANIFEST}: round must be a positive integer; got {rnd!r}")
    if not isinstance(name, str) or not _pickle_name(name) or not isinstance(digest, str):
        raise ValueError(f"{d / MANIFEST}: pickle and pickle_sha256 must name a checkpoint file and its hash")
    if not isinstance(settings, dict) or not isinstance(files, dict) or set(files) != set(RESULT_FILES):
        raise ValueError(f"{d / MANIFEST}: settings and files ({', '.join(RESULT_FILES)}) are required")
    return rnd, name, digest, settings, files


def _verified_blob(blob_path: Path, digest: str) -> bytes:
    """The checkpoint pickle's bytes, once their SHA-256 is ``digest``; ``ValueError`` otherwise."""
    try:
        blob = blob_path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{blob_path}: cannot read the checkpoint ({exc})") from None
    if _sha256(blob) != digest:
        raise ValueError(f"{blob_path}: its SHA-256 differs from {MANIFEST}'s (a torn or altered checkpoint); "
                         "not resuming")
    return blob


def _result_cuts(d: Path, files: dict[str, Any], rnd: int) -> list[tuple[Path, int]]:
    """Where each results file is cut back to its checkpointed length (those that grew since); ``ValueError``
    when a file's pinned head is not what the manifest recorded.
    """
    cuts: list[tuple[Path, int]] = []
    for fname in RESULT_FILES:
        spec = files[fname]
        if (not isinstance(spec, dict) or not isinstance(spec.get("bytes"), int)
                or not isinstance(spec.get("sha256"), str)):
            raise ValueError(f"{d / MANIFEST}: files.{fname} must hold bytes and sha256")
        p = d / fname
        data = p.read_bytes() if p.is_file() else b""
        head = data[: spec["bytes"]]
        if len(head) != spec["bytes"] or _sha256(head) != spec["sha256"]:
            raise ValueError(f"{p}: its first {spec['bytes']} bytes are not those of the checkpoint after round {rnd} "
                             "(the file was shortened or altered); not resuming")
        if len(data) > spec["bytes"]:
            cuts.append((p, spec["bytes"]))
    return cuts


def remove_checkpoint(run_dir: str | os.PathLike[str]) -> None:
    """Delete the checkpoint of a finished run (its ``result.json`` is the record now)."""
    d = Path(run_dir)
    for p in [*d.glob("checkpoint-*.pkl"), *d.glob(".checkpoint-*.tmp"), *d.glob(f".{MANIFEST}.*.tmp")]:
        p.unlink(missing_ok=True)  # with any temporary file a crash mid-write left
    (d / MANIFEST).unlink(missing_ok=True)
