"""Secure aggregation: the primitives and each party's steps of SecAgg+ (Bell, Bonawitz, Gascón,
Lepoint and Raykova 2020, "Secure single-server aggregation with (poly)logarithmic overhead", CCS,
Algorithm 2), the protocol of Bonawitz et al. (2017, "Practical secure aggregation for
privacy-preserving machine learning", CCS, Fig. 4) on a sparse neighbour graph.

A client's input is its weighted model ``w_k θ_k`` in fixed point (:func:`quantise`: every coordinate
clipped to ``[−clip, clip]``, then ``2^bits − 1`` levels), followed by its quantised weight and its count
of clipped coordinates. It uploads

    y_k = q_k + PRG(b_k) + Σ_{v ∈ N(k)} ±PRG(s_kv)   (mod 2^64)

where ``b_k`` is a fresh self-mask seed and ``s_kv`` the key ``k`` agrees with neighbour ``v`` (X25519 +
HKDF-SHA256); the pairwise masks cancel in the sum, ``+`` when ``k < v``. Before masking, each client
splits ``b_k`` and the seed of its masking private key (16-byte secrets, each expanded by HKDF to a
32-byte key) into Shamir shares (threshold ``t``) for its neighbours, sent
through the server encrypted and authenticated for each recipient (AES-256-GCM under the agreed key,
the round, group, sender and recipient bound as associated data). After the masked inputs, the
survivors reveal, for each neighbour, the share of ``b`` if it survived or of the masking key if it
dropped — never both — and the server removes the masks of exactly the survivors' sum.

What is whose: the cryptography is the ``cryptography`` package's (X25519, HKDF, AES-GCM, AES-CTR)
and pycryptodome's Shamir secret sharing over GF(2^128), the two libraries Flower's own SecAgg+
builds on; the protocol's steps, the quantiser, the per-group orchestration and the checks are
topofl's. Unlike Flower 1.41's ``pseudo_rand_gen`` (which folds a seed to 32 bits for NumPy's
Mersenne Twister), masks here are the AES-256-CTR keystream of the full 256-bit seed.

Threat model (docs/secure-aggregation.md): an honest-but-curious server and clients; a server that
sends different clients different survivor lists (an active adversary) is out of scope.
"""
from __future__ import annotations

import hashlib
import math
import secrets
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from Crypto.Protocol.SecretSharing import Shamir
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

#: bytes of a key (X25519 private and public keys, agreed keys, PRG keys)
KEY_BYTES = 32
#: bytes of a shared secret — a self-mask seed, the seed of a masking private key — from which
#: :func:`derive` expands a 32-byte key: 128 bits, X25519's own security level, in one GF(2^128)
#: element, so each secret is one Shamir polynomial (pycryptodome's field arithmetic is pure Python)
SECRET_BYTES = 16
#: bytes of one Shamir share of a secret: a 2-byte index and the 16-byte share
SHARE_BYTES = 2 + SECRET_BYTES
#: AES-GCM nonce and tag
_NONCE, _TAG = 12, 16
#: bytes of an encrypted share pair (b's share, then the masking key's share)
SEALED_BYTES = _NONCE + 2 * SHARE_BYTES + _TAG
#: largest number of quantisation bits (the sum of 2^(64 − bits) inputs fits in 64 bits)
MAX_BITS = 48
#: numbers appended to a client's weighted model: its weight, its count of clipped coordinates
TRAILER = 2

_INFO_SHARE = b"topofl secagg+ share encryption"
_INFO_MASK = b"topofl secagg+ pairwise mask"
_INFO_SELF = b"topofl secagg+ self mask"
_INFO_MASKING_KEY = b"topofl secagg+ masking private key"


# ---- keys, encryption, masks ------------------------------------------------------------------
def new_private_key() -> bytes:
    """A fresh X25519 private key (32 raw bytes from the operating system's generator)."""
    return X25519PrivateKey.generate().private_bytes_raw()


def new_secret() -> bytes:
    """A fresh 16-byte secret (the operating system's generator): a self-mask seed or a masking-key seed."""
    return secrets.token_bytes(SECRET_BYTES)


def derive(secret: bytes, info: bytes) -> bytes:
    """The 32-byte key HKDF-SHA256 expands from a 16-byte ``secret`` for purpose ``info``."""
    if len(secret) != SECRET_BYTES:
        raise ValueError(f"a shared secret must be {SECRET_BYTES} bytes; got {len(secret)}")
    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=info).derive(secret)


def masking_key(seed: bytes) -> bytes:
    """The X25519 masking private key a client derives from its 16-byte ``seed`` (the seed is what it shares)."""
    return derive(seed, _INFO_MASKING_KEY)


def self_mask(seed: bytes, n: int) -> np.ndarray:
    """PRG(b): the self mask of a 16-byte self-mask seed."""
    return prg(derive(seed, _INFO_SELF), n)


def public_key(private: bytes) -> bytes:
    """The X25519 public key (32 raw bytes) of ``private``."""
    return X25519PrivateKey.from_private_bytes(private).public_key().public_bytes_raw()


def agree(private: bytes, peer_public: bytes, info: bytes) -> bytes:
    """A 32-byte key both parties derive: HKDF-SHA256 of the X25519 shared secret, bound to ``info``.

    Raises ``ValueError`` for a peer key that is not 32 bytes or gives the all-zero secret (a
    low-order point).
    """
    if len(peer_public) != KEY_BYTES:
        raise ValueError(f"a public key must be {KEY_BYTES} bytes; got {len(peer_public)}")
    shared = X25519PrivateKey.from_private_bytes(private).exchange(X25519PublicKey.from_public_bytes(peer_public))
    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=info).derive(shared)


def valid_public_key(public: bytes) -> bool:
    """Whether ``public`` is a canonical 32-byte X25519 key (u < 2^255 − 19: X25519 ignores the top bit,
    so a key with it set would be another client's key in disguise) that agrees a non-zero secret (not
    a low-order point, with which every agreement fails: its neighbours would leave).
    """
    if not isinstance(public, bytes) or len(public) != KEY_BYTES:
        return False
    if int.from_bytes(public, "little") >= 2**255 - 19:   # non-canonical: the same point as a smaller key
        return False
    try:
        X25519PrivateKey.generate().exchange(X25519PublicKey.from_public_bytes(public))
    except ValueError:
        return False
    return True


def share_key(private: bytes, peer_public: bytes) -> bytes:
    """The key encrypting shares between two clients (their encryption key pairs)."""
    return agree(private, peer_public, _INFO_SHARE)


def mask_seed(private: bytes, peer_public: bytes, rnd: int, group: int, pair: tuple[int, int]) -> bytes:
    """The pairwise mask seed s_uv of clients ``pair`` = (u, v) in round ``rnd`` and group ``group`` (their
    masking key pairs); bound to the pair's ids, so that a client advertising a copy of another's key
    cannot make two of a victim's pairwise masks equal (and cancel).
    """
    lo, hi = sorted(int(c) for c in pair)
    return agree(private, peer_public, _INFO_MASK + struct.pack(">qqqq", rnd, group, lo, hi))


def associated(rnd: int, group: int, src: int, dst: int) -> bytes:
    """What an encrypted share is bound to: a share replayed from another round, group or pair fails to open."""
    return struct.pack(">qqqq", rnd, group, src, dst)


def seal(key: bytes, plaintext: bytes, aad: bytes) -> bytes:
    """AES-256-GCM encryption of ``plaintext`` with a fresh nonce, authenticating ``aad``."""
    nonce = secrets.token_bytes(_NONCE)
    return nonce + AESGCM(key).encrypt(nonce, plaintext, aad)


def open_sealed(key: bytes, blob: bytes, aad: bytes) -> bytes:
    """The plaintext of :func:`seal`; ``ValueError`` when ``blob`` was altered, replayed or misaddressed."""
    if len(blob) < _NONCE + _TAG:
        raise ValueError(f"an encrypted share is at least {_NONCE + _TAG} bytes; got {len(blob)}")
    try:
        return AESGCM(key).decrypt(blob[:_NONCE], blob[_NONCE:], aad)
    except InvalidTag:
        raise ValueError("an encrypted share failed authentication (altered, replayed or misaddressed)") from None


def prg(seed: bytes, n: int) -> np.ndarray:
    """``n`` pseudo-random uint64 words: the AES-256-CTR keystream of the 32-byte ``seed`` (nonce 0;
    every seed is fresh or bound to its round and group, so a keystream is never reused).
    """
    if len(seed) != KEY_BYTES:
        raise ValueError(f"a mask seed must be {KEY_BYTES} bytes; got {len(seed)}")
    stream = Cipher(algorithms.AES(seed), modes.CTR(bytes(16))).encryptor().update(bytes(8 * n))
    return np.frombuffer(stream, dtype="<u8").astype(np.uint64, copy=False)


def share_digest(aad: bytes, kind: bytes, share: bytes) -> bytes:
    """SHA-256 of one Shamir share bound to its dealer, holder, round and group (``aad``) and its kind
    (``b"b"``: of the self-mask seed; ``b"s"``: of the masking-key seed). The dealer sends these with
    its sealed shares, so the server can drop a wrong share revealed at unmask without any search.
    A share is a uniformly random 128-bit value, so its digest reveals nothing.
    """
    return hashlib.sha256(aad + kind + share).digest()


def commitment(seed: bytes) -> bytes:
    """SHA-256 of a self-mask seed: the server checks a reconstructed seed against it (a 128-bit seed is
    not guessable from its hash).
    """
    return hashlib.sha256(seed).digest()


# ---- Shamir secret sharing --------------------------------------------------------------------
def share_secret(secret: bytes, threshold: int, n: int) -> list[bytes]:
    """``n`` Shamir shares of a 16-byte ``secret``, any ``threshold`` of which rebuild it (pycryptodome's
    ``Shamir`` over GF(2^128)). Share ``i`` (1-based index in its first two bytes) goes to the ``i``-th
    party of the sorted share set.
    """
    if len(secret) != SECRET_BYTES:
        raise ValueError(f"a shared secret must be {SECRET_BYTES} bytes; got {len(secret)}")
    if not 2 <= threshold <= n <= 65535:
        raise ValueError(f"Shamir sharing needs 2 <= threshold <= n <= 65535; got threshold={threshold}, n={n}")
    return [struct.pack(">H", i) + share for i, share in Shamir.split(threshold, n, secret, ssss=False)]


def combine_secret(shares: Sequence[bytes]) -> bytes:
    """The secret of :func:`share_secret` from at least its threshold of distinct shares (with fewer,
    or with a wrong share, the result is another 16-byte string: callers check it against a commitment).
    """
    if any(len(s) != SHARE_BYTES for s in shares):
        raise ValueError(f"a Shamir share is {SHARE_BYTES} bytes")
    index = [struct.unpack(">H", s[:2])[0] for s in shares]
    if len(set(index)) != len(index) or 0 in index:
        raise ValueError("Shamir shares must have distinct non-zero indices")
    return bytes(Shamir.combine([(i, s[2:]) for i, s in zip(index, shares, strict=True)], ssss=False))


def threshold_for(n_shares: int, fraction: float) -> int:
    """Shares needed to rebuild a secret split ``n_shares`` ways: ``ceil(fraction · n_shares)``, at least 2."""
    return min(n_shares, max(2, math.ceil(fraction * n_shares - 1e-9)))


# ---- fixed point ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Quantiser:
    """Fixed point of ``[−clip, clip]`` on ``2^bits − 1`` levels, rounded to nearest (deterministic, so
    every runtime sums the same integers); a sum of ``m`` inputs is exact while ``m < 2^(64 − bits)``.
    """

    clip: float
    bits: int

    def __post_init__(self) -> None:
        if not (math.isfinite(self.clip) and self.clip > 0):
            raise ValueError(f"secure_clip must be a positive finite number; got {self.clip!r}")
        if not 8 <= self.bits <= MAX_BITS:
            raise ValueError(f"secure_bits must be in [8, {MAX_BITS}]; got {self.bits!r}")

    @property
    def step(self) -> float:
        """The value of one level: ``2·clip / (2^bits − 1)``; a coordinate's rounding error is at most half of it."""
        return 2.0 * self.clip / float(2**self.bits - 1)

    def encode(self, x: np.ndarray) -> tuple[np.ndarray, int]:
        """``(levels, clipped)``: ``x`` clipped to ``[−clip, clip]`` in uint64 levels, and how many
        coordinates the clip changed.
        """
        x = np.asarray(x, dtype=np.float64)
        if not np.all(np.isfinite(x)):
            raise ValueError("secure aggregation: the model holds non-finite values and cannot be quantised")
        clipped = int(np.count_nonzero(np.abs(x) > self.clip))
        scaled = (np.clip(x, -self.clip, self.clip) + self.clip) * (1.0 / self.step)
        return np.rint(scaled).astype(np.uint64), clipped

    def decode(self, total: np.ndarray, count: int) -> np.ndarray:
        """The float64 sum of ``count`` encoded inputs whose levels add up to ``total``."""
        return total.astype(np.float64) * self.step - count * self.clip


# ---- the neighbour graph ----------------------------------------------------------------------
def neighbour_graph(members: Sequence[int], k: int, seed: Sequence[int]) -> dict[int, tuple[int, ...]]:
    """Each member's neighbours (SecAgg+'s sparse graph): everyone else when ``k`` is 0 or at least
    the group's size − 1 (SecAgg); else the ``k`` nearest (``k`` rounded up to even, half on each
    side) on a ring of the members in a random order drawn from ``seed`` (the server's; the graph
    is public).
    """
    ids = sorted(int(c) for c in members)
    m = len(ids)
    if k <= 0 or k >= m - 1:
        return {c: tuple(x for x in ids if x != c) for c in ids}
    half = (k + 1) // 2
    ring = [ids[i] for i in np.random.default_rng(np.random.SeedSequence(list(seed))).permutation(m)]
    out = {}
    for pos, c in enumerate(ring):
        near = {ring[(pos + d) % m] for d in range(-half, half + 1) if d}
        out[c] = tuple(sorted(near))
    return out


def connected(graph: Mapping[int, Sequence[int]], nodes: Sequence[int]) -> bool:
    """Whether ``nodes`` form one connected piece of ``graph`` restricted to them. Once the survivors'
    self masks and the dropped clients' pairwise masks are removed, the masks between survivors cancel
    within each such piece, so the server learns each piece's sum: with the sparse graph, survivors
    split into pieces must not be unmasked (Bell et al. 2020 need the graph connected after dropouts).
    """
    left = set(int(c) for c in nodes)
    if not left:
        return False
    stack = [next(iter(left))]
    seen = {stack[0]}
    while stack:
        for v in graph.get(stack.pop(), ()):
            if v in left and v not in seen:
                seen.add(v)
                stack.append(v)
    return seen == left


def pairwise_sign(u: int, v: int) -> int:
    """+1 when ``u`` adds the mask it shares with ``v`` (``u < v``), −1 when it subtracts it."""
    return 1 if u < v else -1


def masked_input(levels: np.ndarray, self_seed: bytes, pair_seeds: Mapping[int, bytes], me: int) -> np.ndarray:
    """The masked input ``levels + PRG(b) + Σ_v ±PRG(s_v)`` (mod 2^64), ``pair_seeds`` keyed by neighbour id."""
    y = levels.astype(np.uint64, copy=True)
    n = y.size
    y += self_mask(self_seed, n)
    for v, seed in pair_seeds.items():
        if pairwise_sign(me, v) > 0:
            y += prg(seed, n)
        else:
            y -= prg(seed, n)
    return y
