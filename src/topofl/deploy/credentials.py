"""Throwaway TLS certificates, SuperNode key pairs and the authorized-keys file of the Fleet proxy."""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Credentials", "authorize_key", "generate_credentials", "generate_supernode_key", "write_authorized_keys"]


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
    register`` read (the same as ``ssh-keygen -t ecdsa -b 384 -N ""``).

    Parameters
    ----------
    path
        The private key's file (replaced); the public key goes to ``path.pub``.

    Returns
    -------
    Path
        The public key's path.
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

    def signed(
        subject: x509.Name, public_key: object, ca: bool, usage: dict[str, bool], extra: list[tuple[object, bool]]
    ) -> x509.Certificate:
        """A certificate for ``subject`` signed by the CA key, valid from 5 minutes ago for ``days``."""
        flags = dict.fromkeys(("digital_signature", "content_commitment", "key_encipherment", "data_encipherment",
                               "key_agreement", "key_cert_sign", "crl_sign", "encipher_only", "decipher_only"),
                              False) | usage
        builder = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(ca_name)
            .public_key(public_key)  # type: ignore[arg-type]
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
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
        [(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False),
         (x509.SubjectAlternativeName(names), False),
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


def write_authorized_keys(path: str | os.PathLike[str], public_keys: Iterable[str | os.PathLike[str]]) -> Path:
    """Write an authorized-keys file for the Fleet proxy: the given ``.pub`` files, one after another.

    Parameters
    ----------
    path
        The file (replaced).
    public_keys
        OpenSSH public-key files (``supernode-<i>.pub``), each one line.

    Returns
    -------
    Path
        ``path``.
    """
    path = Path(path)
    path.write_bytes(b"".join(Path(key).read_bytes() for key in public_keys))
    return path


def authorize_key(path: str | os.PathLike[str], public_key: str | os.PathLike[str]) -> None:
    """Append the line of ``public_key`` (a ``.pub`` file) to the authorized-keys file ``path``, unless listed.

    The Fleet proxy lets through only the keys listed there, and re-reads the file when it changes.

    Parameters
    ----------
    path
        The authorized-keys file (created if missing).
    public_key
        An OpenSSH public-key file.
    """
    listed = Path(path)
    line = Path(public_key).read_text().strip()
    current = listed.read_text().splitlines() if listed.is_file() else []
    if line not in (x.strip() for x in current):
        listed.write_text("".join(x + "\n" for x in [*current, line]))
