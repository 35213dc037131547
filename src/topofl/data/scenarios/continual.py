"""Continual scenario (pTopoFL paper §4.5): 6 clients whose data drift over 20 rounds.

Each client has a fixed latent sample Z (a full-dimensional cloud). At round r, with
t = (r−1)/(rounds−1) going from 0 to 1, a drifting client's features are
``((1 − t)·Z + t·Z_low)·(1 + drift_scale·t) + drift_magnitude·t·u``: the cloud morphs towards a
low-rank version Z_low of itself (a few correlated factors — its *shape* changes, which persistent
homology sees; a pure shift would be invisible to it, PH being translation-invariant), grows in
spread and moves along a client-specific unit direction u. Labels follow one logistic rule of
the current features with fixed per-sample noise, so a drifting client's task changes with its
data. Test data drift the same way: a client is scored on its current distribution.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topofl._validation import check_int, check_range
from topofl.data.federation import ClientData, Federation
from topofl.data.scenarios.common import build_config, check_size
from topofl.limits import MAX_ROUNDS


@dataclass(frozen=True)
class ContinualConfig:
    """Parameters of the continual (drifting) scenario (module docstring); validated at construction."""

    n_clients: int = 6
    n_features: int = 20
    n_informative: int = 10
    rounds: int = 20
    n_per_client: int = 150
    drifting: tuple = (3, 4, 5)
    drift_magnitude: float = 3.0
    drift_scale: float = 0.5
    drift_rank: int = 2
    signal: float = 2.0
    test_fraction: float = 0.3

    def __post_init__(self) -> None:
        check_size(self.n_clients, self.n_per_client, self.n_features, "n_per_client")
        check_int("n_informative", self.n_informative, 1, self.n_features)
        check_int("rounds", self.rounds, 2, MAX_ROUNDS)
        check_int("n_per_client", self.n_per_client, 10)
        for k in self.drifting:
            check_int("drifting client", k, 0, self.n_clients - 1)
        check_range("drift_magnitude", self.drift_magnitude, 0.0)
        check_range("drift_scale", self.drift_scale, 0.0)
        check_int("drift_rank", self.drift_rank, 1, self.n_features)
        check_range("signal", self.signal, 0.0)
        check_range("test_fraction", self.test_fraction, 0.0, 1.0, low_open=True, high_open=True)


class DriftingFederation(Federation):
    """A federation whose clients' data change from round to round (see module docstring)."""

    def __init__(self, cfg: ContinualConfig, seed: int) -> None:
        rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0xC]))
        d, n = cfg.n_features, cfg.n_per_client
        w = rng.standard_normal(cfg.n_informative)
        self._w = w / np.linalg.norm(w)
        self._latent = [rng.standard_normal((n, d)) + rng.standard_normal(d) * 0.5 for _ in range(cfg.n_clients)]
        q = cfg.drift_rank
        self._low = [
            Z.mean(axis=0) + (Z - Z.mean(axis=0))[:, :q] @ (rng.standard_normal((q, d)) / np.sqrt(q))
            + rng.standard_normal((n, d)) * 0.1
            for Z in self._latent
        ]
        self._noise = [rng.random(n) for _ in range(cfg.n_clients)]
        dirs = rng.standard_normal((cfg.n_clients, d))
        self._dirs = dirs / np.linalg.norm(dirs, axis=1, keepdims=True)
        self._split = [rng.permutation(n) for _ in range(cfg.n_clients)]
        self._cfg = cfg
        self._cache: dict[int, list[ClientData]] = {}
        super().__init__(self._clients_at(1), task="binary", name="continual",
                         info={"config": cfg.__dict__, "seed": seed})

    def _clients_at(self, rnd: int) -> list[ClientData]:
        if rnd in self._cache:
            return self._cache[rnd]
        from scipy.special import expit  # lazy: SciPy adds ~0.15 s to every import of topofl.data

        cfg = self._cfg
        t = min(max(rnd - 1, 0), cfg.rounds - 1) / (cfg.rounds - 1)
        n_test = max(1, int(round(cfg.test_fraction * cfg.n_per_client)))
        out = []
        for k in range(cfg.n_clients):
            X = self._latent[k]
            drifting = k in cfg.drifting
            if drifting:
                X = (((1.0 - t) * X + t * self._low[k]) * (1.0 + cfg.drift_scale * t)
                     + cfg.drift_magnitude * t * self._dirs[k])
            y = (self._noise[k] < expit(cfg.signal * X[:, : cfg.n_informative] @ self._w)).astype(np.float64)
            te, tr = self._split[k][:n_test], self._split[k][n_test:]
            meta = {"drifting": drifting, "adversarial": False, "t": t}
            out.append(ClientData(X[tr], y[tr], X[te], y[te], client_id=k, meta=meta))
        self._cache[rnd] = out
        return out

    def at_round(self, rnd: int) -> Federation:
        fed = Federation.__new__(Federation)
        fed.__dict__.update(self.__dict__)
        fed.clients = self._clients_at(rnd)
        return fed


def make_continual(seed: int = 0, **overrides) -> Federation:
    """The continual (drifting) federation; every parameter can be overridden."""
    return DriftingFederation(build_config(ContinualConfig, overrides), seed)
