"""SuperNode authentication at the Fleet proxy: authorized keys, signed timestamps, no replays, no body read."""

from __future__ import annotations

import base64
import binascii
import datetime
import heapq
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from topofl.deploy.proxy_rules import _positive

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import ec

__all__ = [
    "MAX_SIGNATURES_PER_KEY", "PUBLIC_KEY_HEADER", "SIGNATURE_HEADER", "SIGNATURE_MAX_AGE", "SYSTEM_TIME_TOLERANCE",
    "TIMESTAMP_HEADER", "TIMESTAMP_TOLERANCE", "AuthorizedKeys", "NodeAuthenticator", "Refusal",
    "load_authorized_keys", "signed_headers",
]

log = logging.getLogger("topofl.deploy.proxy")  # one name for the whole proxy's log

# SuperNode authentication over Flower's protobuf-over-HTTP Fleet API (flwr 1.41/1.42:
# flwr.supercore.constant.FLEET_HTTP_*_HEADER, flwr.common.constant.TIMESTAMP_*; a test checks
# these against the installed flwr).
PUBLIC_KEY_HEADER = "flwr-public-key"
"""Base64 of the SuperNode's public key, PEM SubjectPublicKeyInfo (what ``flwr supernode register`` stores)."""
TIMESTAMP_HEADER = "flwr-timestamp"
"""``datetime.now(timezone.utc).isoformat()`` when the request was signed."""
SIGNATURE_HEADER = "flwr-signature"
"""Base64 of the DER ECDSA/SHA-256 signature of the timestamp's ASCII bytes."""
TIMESTAMP_TOLERANCE = 300.0
"""Seconds a signed timestamp stays valid (Flower's ``TIMESTAMP_TOLERANCE``)."""
SYSTEM_TIME_TOLERANCE = 5.0
"""Clock drift allowed either way (Flower's ``SYSTEM_TIME_TOLERANCE``)."""
SIGNATURE_MAX_AGE = TIMESTAMP_TOLERANCE + SYSTEM_TIME_TOLERANCE
"""The SuperLink accepts a timestamp ``-5 s < age < 305 s``; so does the proxy by default."""

MAX_SIGNATURES_PER_KEY = 10_000
"""Signatures of one key remembered at once (against replays): ~33 requests/s over the 305 s window."""


def _spki_pem(key: ec.EllipticCurvePublicKey) -> bytes:
    """The key as Flower's SuperNode sends it and the SuperLink stores it (PEM SubjectPublicKeyInfo)."""
    from cryptography.hazmat.primitives import serialization

    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def load_authorized_keys(path: str | os.PathLike[str]) -> dict[bytes, ec.EllipticCurvePublicKey]:
    """The SuperNode public keys in an authorized-keys file, by their PEM (SubjectPublicKeyInfo) bytes.

    One OpenSSH public key a line (``ecdsa-sha2-nistp384 AAAA... comment``: what
    ``ssh-keygen -t ecdsa`` writes to ``.pub`` and ``flwr supernode register`` reads); blank
    lines and lines starting with ``#`` are skipped. Keys must be EC keys on a NIST curve, as
    Flower requires. ``ValueError`` naming the file and line otherwise.
    """
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    path = Path(path)
    keys: dict[bytes, ec.EllipticCurvePublicKey] = {}
    for number, line in enumerate(path.read_bytes().splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith(b"#"):
            continue
        try:
            key = serialization.load_ssh_public_key(line)
        except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
            raise ValueError(
                f"authorized keys {str(path)!r}, line {number}: not an OpenSSH public key ({exc})"
            ) from None
        if not isinstance(key, ec.EllipticCurvePublicKey) or not isinstance(
            key.curve, (ec.SECP256R1, ec.SECP384R1, ec.SECP521R1)
        ):
            raise ValueError(
                f"authorized keys {str(path)!r}, line {number}: a SuperNode key must be ECDSA on "
                f"NIST P-256/P-384/P-521; got {type(key).__name__}"
            )
        keys[_spki_pem(key)] = key
    return keys


class AuthorizedKeys:
    """An authorized-keys file (see :func:`load_authorized_keys`), re-read when it changes.

    The file's size, modification time and inode are looked at most every ``recheck``
    seconds. A file that no longer parses keeps the keys last read (and logs an error).

    Parameters
    ----------
    path
        The file. It must exist and parse when this object is made.
    recheck
        Seconds between looks at the file (> 0).
    """

    def __init__(self, path: str | os.PathLike[str], recheck: float = 1.0) -> None:
        _positive("recheck", recheck, float)
        self.path = Path(path)
        self.recheck = float(recheck)
        self._keys = load_authorized_keys(self.path)
        self._stamp = self._stat()
        self._checked = time.monotonic()

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size, st.st_ino

    def __len__(self) -> int:
        return len(self._keys)

    def get(self, pem: bytes) -> ec.EllipticCurvePublicKey | None:
        """The key whose PEM bytes are ``pem``, or ``None`` when it is not authorized."""
        now = time.monotonic()
        if now - self._checked >= self.recheck:
            self._checked = now
            stamp = self._stat()
            if stamp != self._stamp:
                self._stamp = stamp
                try:
                    self._keys = load_authorized_keys(self.path)
                    log.info("re-read %s: %d authorized SuperNode keys", self.path, len(self._keys))
                except (OSError, ValueError) as exc:
                    log.error("kept the %d keys read before: %s", len(self._keys), exc)
        return self._keys.get(pem)


@dataclass(frozen=True)
class Refusal:
    """Why a request was refused: the HTTP status and a reason for the proxy's log (never sent)."""

    status: int
    reason: str
    unknown_key: bool = False
    """The key is not an authorized one (whatever the signature)."""


def _header(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    """The value of header ``name`` (lower case); ``None`` if absent, and also if repeated."""
    values = [v for k, v in headers if k.lower() == name]
    return values[0] if len(values) == 1 else None


@dataclass
class _Seen:
    """The timestamps one key signed that are still valid: a set, and a heap to forget them in order."""

    stamps: set[str] = field(default_factory=set)
    heap: list[tuple[float, float, str]] = field(default_factory=list)


class NodeAuthenticator:
    """Checks a request's SuperNode-authentication headers, without its body.

    A request passes when ``flwr-public-key`` is an authorized key, ``flwr-timestamp`` is
    within ``(-SYSTEM_TIME_TOLERANCE, max_age)`` seconds of now, ``flwr-signature`` is that
    key's ECDSA/SHA-256 signature of the timestamp, and this (key, timestamp) pair has not
    passed before. Accepted pairs are remembered until their timestamp can no longer pass
    (wall clock) and ``max_age + SYSTEM_TIME_TOLERANCE`` seconds have gone by (monotonic
    clock), so neither a replay nor a clock step lets one through twice. The pair is the
    key, not the signature bytes: ECDSA signatures are malleable (``(r, s)`` and
    ``(r, n - s)`` both verify), so a replay with a re-encoded signature is refused too.

    Parameters
    ----------
    keys
        The authorized keys.
    max_age
        Oldest accepted signature, seconds (0 < max_age <= 305, Flower's window).
    max_per_key
        Pairs remembered per key at once; a key that signs faster than
        ``max_per_key / max_age`` requests a second gets 503 (which SuperNodes retry).
    clock, monotonic
        Wall clock (epoch seconds) and monotonic clock; for tests.
    """

    def __init__(
        self,
        keys: AuthorizedKeys,
        *,
        max_age: float = SIGNATURE_MAX_AGE,
        max_per_key: int = MAX_SIGNATURES_PER_KEY,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        _positive("max_age", max_age, float)
        if max_age > SIGNATURE_MAX_AGE:
            raise ValueError(f"max_age must be <= {SIGNATURE_MAX_AGE} s (the SuperLink's own window); got {max_age!r}")
        _positive("max_per_key", max_per_key)
        self.keys = keys
        self.max_age = float(max_age)
        self.max_per_key = max_per_key
        self._clock, self._monotonic = clock, monotonic
        self._seen: dict[bytes, _Seen] = {}

    def remembered(self) -> int:
        """Number of (key, timestamp) pairs remembered now."""
        return sum(len(s.stamps) for s in self._seen.values())

    def _forget_expired(self, seen: _Seen, now: float, mono: float) -> None:
        hold = self.max_age + SYSTEM_TIME_TOLERANCE
        while seen.heap and seen.heap[0][0] + self.max_age <= now and seen.heap[0][1] + hold <= mono:
            _, _, stamp = heapq.heappop(seen.heap)
            seen.stamps.discard(stamp)

    def check(self, headers: Sequence[tuple[bytes, bytes]]) -> Refusal | None:
        """``None`` when the request may go on (and its signature is remembered); else why not.

        ``headers`` are the raw request headers (names in lower case, as ASGI gives them).
        Nothing here reads the request body.
        """
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        raw_key, raw_stamp, raw_sig = (
            _header(headers, name.encode()) for name in (PUBLIC_KEY_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER)
        )
        if raw_key is None or raw_stamp is None or raw_sig is None:
            return Refusal(401, "no SuperNode-authentication headers (or one repeated)")
        if len(raw_key) > 2048 or len(raw_stamp) > 64 or len(raw_sig) > 512:
            return Refusal(401, "SuperNode-authentication header too long")
        try:
            pem = base64.b64decode(raw_key, validate=True)
            signature = base64.b64decode(raw_sig, validate=True)
            stamp = raw_stamp.decode("ascii")
            signed_at = datetime.datetime.fromisoformat(stamp)
        except (binascii.Error, ValueError) as exc:
            return Refusal(401, f"malformed SuperNode-authentication header: {exc}")
        if signed_at.utcoffset() is None:
            return Refusal(401, f"{TIMESTAMP_HEADER} {stamp!r} has no time zone")
        key = self.keys.get(pem)
        if key is None:
            return Refusal(401, "public key not in the authorized keys", unknown_key=True)
        now, mono = self._clock(), self._monotonic()
        age = now - signed_at.timestamp()
        if not -SYSTEM_TIME_TOLERANCE < age < self.max_age:
            return Refusal(401, f"{TIMESTAMP_HEADER} {stamp!r} is {age:.0f} s old, "
                                f"outside (-{SYSTEM_TIME_TOLERANCE:.0f}, {self.max_age:.0f}) s")
        seen = self._seen.setdefault(pem, _Seen())
        self._forget_expired(seen, now, mono)
        if stamp in seen.stamps:
            return Refusal(401, f"replayed signature ({TIMESTAMP_HEADER} {stamp!r} was already used)")
        try:
            key.verify(signature, stamp.encode("ascii"), ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            return Refusal(401, "bad signature")
        if len(seen.stamps) >= self.max_per_key:
            return Refusal(503, f"more than {self.max_per_key} signed requests of one key within {self.max_age:.0f} s")
        seen.stamps.add(stamp)
        heapq.heappush(seen.heap, (signed_at.timestamp(), mono, stamp))
        return None


def signed_headers(private_key: ec.EllipticCurvePrivateKey, timestamp: str | None = None) -> dict[str, str]:
    """The authentication headers a SuperNode sends with every Fleet request (as Flower's
    ``NodeAuthHttpInterceptor`` makes them): for tests, benchmarks and clients of the proxy.

    ``timestamp`` defaults to now (UTC, ISO 8601).
    """
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    stamp = timestamp if timestamp is not None else datetime.datetime.now(datetime.timezone.utc).isoformat()
    signature = private_key.sign(stamp.encode("ascii"), ec.ECDSA(hashes.SHA256()))
    return {
        PUBLIC_KEY_HEADER: base64.b64encode(_spki_pem(private_key.public_key())).decode("ascii"),
        TIMESTAMP_HEADER: stamp,
        SIGNATURE_HEADER: base64.b64encode(signature).decode("ascii"),
    }
