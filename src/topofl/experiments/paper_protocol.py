"""The authors' paper-era protocol behind the pTopoFL paper's Table 1 (§4.1–4.2), beside ours.

Our own implementation of what the authors' pre-June-2026 ``framework/`` code does (the same random draws,
solvers and settings), so that ``topofl experiment paper-protocol`` prints Table 1 and then changes one thing
at a time: pTopoFL (§3, Algorithm 1), FedAvg as Table 1 scores it (``fedavg-refit``) and its control
(``fedavg-global``), FedProx, SCAFFOLD, pFedMe and local fits. Runs plug into the runner through
:func:`execute_paper_protocol` (a ``paper:`` method). See docs/internals.md#topofl.experiments.paper_protocol
for each step.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache, partial
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from topofl.data.federation import ClientData
from topofl.data.scenarios.paper_era import PUBLISHED_SEED, paper_benchmark_clients, paper_healthcare_clients
from topofl.experiments.results import CsvAppender, append_jsonl
from topofl.experiments.store import write_done
from topofl.job import Job
from topofl.methods import PAPER_METHODS, PAPER_PREFIX

log = logging.getLogger(__name__)

#: a run of this protocol is a Job whose method is ``PREFIX + one of METHODS`` (registered in :mod:`topofl.methods`)
PREFIX, METHODS = PAPER_PREFIX, PAPER_METHODS
#: our scenario name → the authors' paper-era generator
SCENARIOS: dict[str, Callable[..., list[ClientData]]] = {"paper-healthcare": paper_healthcare_clients,
                                                         "paper-benchmark": paper_benchmark_clients}
ROUNDS = 15
#: Table 1 as printed (pTopoFL paper §4.2): (scenario, method) → (AUC, accuracy, convergence round)
PUBLISHED: dict[tuple[str, str], tuple[float, float, int]] = {
    ("paper-healthcare", "ptopofl"): (0.841, 0.786, 1), ("paper-benchmark", "ptopofl"): (0.910, 0.791, 1),
    ("paper-healthcare", "fedavg-refit"): (0.790, 0.792, 1), ("paper-benchmark", "fedavg-refit"): (0.897, 0.856, 1),
    ("paper-healthcare", "fedprox"): (0.829, 0.788, 1), ("paper-benchmark", "fedprox"): (0.909, 0.785, 1),
    ("paper-healthcare", "scaffold"): (0.805, 0.743, 1), ("paper-benchmark", "scaffold"): (0.846, 0.725, 1),
    ("paper-healthcare", "pfedme"): (0.821, 0.749, 5), ("paper-benchmark", "pfedme"): (0.902, 0.801, 2),
}
#: what Table 1 calls each row
PAPER_NAMES = {"ptopofl": "pTopoFL", "fedavg-refit": "FedAvg", "fedprox": "FedProx", "scaffold": "SCAFFOLD",
               "pfedme": "pFedMe"}

Linear = tuple[np.ndarray, np.ndarray]  # (coef of shape (1, d), intercept of shape (1,)), scikit-learn's layout


# ---- the paper-era descriptor (Appendix B) and sample weights (§3.2) --------------------------------------


@dataclass(frozen=True)
class Descriptor:
    """A client's 48-d paper-era descriptor (Appendix B) and the H0 amplitude its sample weights use."""

    vector: np.ndarray
    h0_amplitude: float


def _running_sum(values: np.ndarray) -> float:
    """Left-to-right sum (as a Python loop over float64 values adds), not NumPy's pairwise sum."""
    return float(np.add.accumulate(values)[-1]) if values.size else 0.0


def _mst_weights(D: np.ndarray) -> np.ndarray:
    """The edge lengths of a minimum spanning tree of the complete graph ``D``, ascending: H0's
    finite deaths (every MST has the same sorted edge lengths; Prim's algorithm, O(n²)).
    """
    n = D.shape[0]
    if n < 2:
        return np.empty(0)
    joined = np.zeros(n, dtype=bool)
    joined[0] = True
    reach = D[0].copy()
    out = np.empty(n - 1)
    for i in range(n - 1):
        j = int(np.argmin(np.where(joined, np.inf, reach)))
        out[i] = reach[j]
        joined[j] = True
        reach = np.minimum(reach, D[j])
    return np.sort(out)


@lru_cache(maxsize=8)
def _triangles(n: int) -> np.ndarray:
    """Every vertex triple ``i < j < k`` of ``n`` points, in lexicographic order, as an (m, 3) array."""
    flat = np.fromiter((v for t in combinations(range(n), 3) for v in t), dtype=np.intp,
                       count=3 * (n * (n - 1) * (n - 2) // 6))
    return flat.reshape(-1, 3)


def _triangle_h1(D: np.ndarray, keep: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """The paper-era H1 approximation (§4.1: "H1 approximate via the triangle-filtration algorithm").

    Every triangle contributes a pair (its middle edge, its longest edge) when the middle edge is
    below the 75th percentile of the nonzero distances and the pair is not degenerate; the ``keep``
    most persistent pairs are kept (ties in the order the triangles are listed). Not the H1 of a
    Vietoris–Rips filtration: every triangle is a "loop".
    """
    n = D.shape[0]
    if n < 3:
        return np.empty(0), np.empty(0)
    limit = np.percentile(D[D > 0], 75)
    t = _triangles(n)
    sides = np.sort(np.stack([D[t[:, 0], t[:, 1]], D[t[:, 0], t[:, 2]], D[t[:, 1], t[:, 2]]], axis=1), axis=1)
    birth, death = sides[:, 1], sides[:, 2]
    ok = (birth < limit) & (death - birth > 1e-8)
    birth, death = birth[ok], death[ok]
    top = np.argsort(-(death - birth), kind="stable")[:keep]
    return birth[top], death[top]


def _entropy(persistence: np.ndarray) -> float:
    """Persistence entropy −Σ p_i log(p_i + 1e-12), p_i = pers_i / Σ pers (Appendix B), summed left to right."""
    total = _running_sum(persistence)
    if persistence.size == 0 or total == 0:
        return 0.0
    p = persistence / total
    return -_running_sum(p * np.log(p + 1e-12))


def _betti_curve(birth: np.ndarray, death: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """How many pairs are alive (``birth ≤ t < death``) at each threshold."""
    alive = (birth[None, :] <= thresholds[:, None]) & (thresholds[:, None] < death[None, :])
    return alive.sum(axis=1).astype(float)


def descriptor(X: np.ndarray, seed: int, n_sample: int = 80, n_thresholds: int = 20) -> Descriptor:
    """The 48-d descriptor as the paper-era code computes it (Appendix B; n_sub = 80, L = 20 of Table 3).

    A ``RandomState(seed)`` draws ``n_sample`` of the rows without replacement (all rows when
    there are no more), which are z-scored; on their Euclidean distances H0 is exact (minimum
    spanning tree) and H1 the triangle approximation of :func:`_triangle_h1`. The vector is: the
    Betti curves of H0 and H1 at ``n_thresholds`` points from 0 to the 95th percentile of all
    finite deaths, the persistence entropy and L2 amplitude of H0 and H1, the counts of H0 and H1
    pairs above their median persistence, and the counts of finite H0 and kept H1 pairs.
    """
    from scipy.spatial.distance import cdist

    rng = np.random.RandomState(seed)
    sub = X[rng.choice(X.shape[0], n_sample, replace=False)] if X.shape[0] > n_sample else X.copy()
    Z = (sub - sub.mean(0)) / (sub.std(0) + 1e-8)
    D = cdist(Z, Z, metric="euclidean")
    h0 = _mst_weights(D)
    b1, d1 = _triangle_h1(D)
    deaths = np.concatenate([h0, d1])
    top = np.percentile(deaths, 95) if deaths.size else (np.max(D) if D.size else 1.0)
    thresholds = np.linspace(0, top, n_thresholds)
    p0, p1 = h0 - 0.0, d1 - b1
    amplitudes = [float(np.sum(p**2) ** 0.5) if p.size else 0.0 for p in (p0, p1)]
    above = [int(np.sum(p > np.median(p))) if p.size else 0 for p in (p0, p1)]
    vector = np.concatenate([_betti_curve(np.zeros_like(h0), h0, thresholds), _betti_curve(b1, d1, thresholds),
                             [_entropy(p0), _entropy(p1), *amplitudes, *above, h0.size, b1.size]])
    return Descriptor(vector, amplitudes[0])


def sample_weights(X: np.ndarray, h0_amplitude: float) -> np.ndarray:
    """§3.2 as the paper-era code implements it: weights, not features.

    A sample's weight is ``exp(−‖z − z̄‖ / max(A0, 0.1))`` with ``z`` its z-scored features and A0
    the client's H0 amplitude, divided by the mean weight and clipped to [0.2, 5].
    """
    Z = (X - X.mean(0)) / (X.std(0) + 1e-8)
    w = np.exp(-np.linalg.norm(Z - Z.mean(0), axis=1) / max(h0_amplitude, 0.1))
    return np.clip(w / (w.mean() + 1e-8), 0.2, 5.0)


# ---- clients, models and scores ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Site:
    """One client as every paper-era method sees it: raw training features (descriptor, sample
    weights) and train/test features z-scored with the client's own training statistics.
    """

    X_raw: np.ndarray
    X: np.ndarray
    y: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray

    @property
    def n(self) -> int:
        return int(self.y.size)


def sites(clients: Sequence[ClientData]) -> list[Site]:
    """Each client's :class:`Site` (scikit-learn's ``StandardScaler`` fitted on its training rows)."""
    from sklearn.preprocessing import StandardScaler

    out = []
    for c in clients:
        scaler = StandardScaler().fit(c.X_train)
        out.append(Site(c.X_train, scaler.transform(c.X_train), np.asarray(c.y_train, dtype=float),
                        scaler.transform(c.X_test), np.asarray(c.y_test, dtype=float)))
    return out


def _auc(y: np.ndarray, p: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, p)) if np.unique(y).size == 2 else 0.5


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -30, 30)))


def score(site: Site, model: Linear) -> tuple[float, float]:
    """(AUC, accuracy) of a linear model on the client's test split: σ(x·w + b), threshold 0.5."""
    from sklearn.metrics import accuracy_score

    p = _sigmoid((site.X_test @ model[0].T + model[1])[:, 0])
    return _auc(site.y_test, p), float(accuracy_score(site.y_test, (p >= 0.5).astype(int)))


def _score_fitted(site: Site, fitted: Any) -> tuple[float, float]:
    """(AUC, accuracy) of a fitted scikit-learn classifier on the client's test split (its own
    predict/predict_proba).
    """
    from sklearn.metrics import accuracy_score

    return (_auc(site.y_test, fitted.predict_proba(site.X_test)[:, 1]),
            float(accuracy_score(site.y_test, fitted.predict(site.X_test))))


def _lbfgs(site: Site, start: Linear | None = None, weights: np.ndarray | None = None) -> Any:
    """L-BFGS logistic regression (C = 1, ≤ 300 iterations) on the client's training data, warm-started
    from ``start``.
    """
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=1.0, max_iter=300, solver="lbfgs", warm_start=start is not None)
    if start is not None:
        model.coef_, model.intercept_ = start[0].copy(), start[1].copy()
    return model.fit(site.X, site.y, sample_weight=weights)


def _coefs(fitted: Any) -> Linear:
    return fitted.coef_, fitted.intercept_


def _weighted_sum(weights: Sequence[float] | np.ndarray, models: Sequence[Linear]) -> Linear:
    """Σ_k w_k θ_k, accumulated client by client."""
    coef, intercept = np.zeros_like(models[0][0]), np.zeros_like(models[0][1])
    for w, m in zip(weights, models, strict=True):
        coef, intercept = coef + w * m[0], intercept + w * m[1]
    return coef, intercept


def _by_size(models: Sequence[Linear], site_list: Sequence[Site]) -> Linear:
    """The sample-size-weighted mean of the clients' models (FedAvg's aggregation)."""
    n = np.array([s.n for s in site_list], dtype=float)
    return _weighted_sum(n / n.sum(), models)


Direction = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], Linear]


def _descend(site: Site, start: Linear, steps: int, lr: float, direction: Direction) -> Linear:
    """``steps`` full-batch gradient steps on the logistic loss (+ ‖w‖²/(2n), i.e. C = 1) from ``start``;
    ``direction(g_w, g_b, w, b)`` turns the gradient into the step taken (a method's correction).
    """
    coef, intercept = start[0].copy(), start[1].copy()
    for _ in range(steps):
        err = _sigmoid((site.X @ coef.T + intercept)[:, 0]) - site.y
        g_coef = ((site.X.T @ err) / site.n + coef / (1.0 * site.n)).reshape(coef.shape)
        step = direction(g_coef, np.array([err.mean()]), coef, intercept)
        coef, intercept = coef - lr * step[0], intercept - lr * step[1]
    return coef, intercept


def _proximal(g_coef: np.ndarray, g_int: np.ndarray, coef: np.ndarray, intercept: np.ndarray, anchor: Linear,
              mu: float) -> Linear:
    """A proximal step direction ∇f + μ(θ − θ_anchor) (FedProx's μ/2‖θ − θ_g‖², pFedMe's Moreau envelope)."""
    return g_coef + mu * (coef - anchor[0]), g_int + mu * (intercept - anchor[1])


def _drift_corrected(g_coef: np.ndarray, g_int: np.ndarray, coef: np.ndarray, intercept: np.ndarray, own: Linear,
                     server: Linear) -> Linear:
    """SCAFFOLD's step direction ∇f − c_k + c."""
    return g_coef - own[0] + server[0], g_int - own[1] + server[1]


def _random_starts(site_list: Sequence[Site], seed: int) -> list[Linear]:
    """Each client's first model, ``RandomState(seed + k).randn(1, d) · 0.01`` and a zero intercept."""
    return [(np.random.RandomState(seed + k).randn(1, s.X.shape[1]) * 0.01, np.zeros(1))
            for k, s in enumerate(site_list)]


# ---- the methods: each yields, per round, every client's (AUC, accuracy) and a server log -------------------

Round = tuple[list[tuple[float, float]], dict[str, Any]]


def _normalised(vectors: np.ndarray) -> np.ndarray:
    return vectors / (np.linalg.norm(vectors, axis=1, keepdims=True) + 1e-8)


def cluster_labels(vectors: np.ndarray, n_clusters: int = 2) -> np.ndarray:
    """§3.3 Step 1: average-linkage clustering of the L2-normalised descriptors (Euclidean distances), once."""
    from sklearn.cluster import AgglomerativeClustering
    from sklearn.metrics.pairwise import euclidean_distances

    k = min(n_clusters, len(vectors) - 1)
    if k < 2:
        return np.zeros(len(vectors), dtype=int)
    return np.asarray(AgglomerativeClustering(n_clusters=k, metric="precomputed", linkage="average")
                      .fit_predict(euclidean_distances(_normalised(vectors))))


def trust_weights(vectors: np.ndarray) -> np.ndarray:
    """§3.4, Eq. 8 on normalised descriptors: z-score of each client's mean distance to the others,
    trust ``exp(−max(z − 1, 0))`` clipped to [0.05, 1] (all 1 with fewer than 3 clients).
    """
    from sklearn.metrics.pairwise import euclidean_distances

    n = len(vectors)
    if n < 3:
        return np.ones(n)
    mean_d = euclidean_distances(_normalised(vectors)).sum(1) / (n - 1)
    z = (mean_d - mean_d.mean()) / (mean_d.std() + 1e-8)
    return np.clip(np.exp(-np.maximum(z - 1.0, 0)), 0.05, 1.0)


def cluster_models(local: Sequence[Linear], site_list: Sequence[Site], vectors: np.ndarray, labels: np.ndarray,
                   trust: np.ndarray, beta: float = 0.3) -> dict[int, Linear]:
    """§3.3 Steps 2–3: each cluster's ``n_k · exp(−‖φ̂_k − φ̂_C‖) · t_k``-weighted mean (Eq. 6), then
    blended with the cluster-size-weighted mean of the cluster models (Eq. 7). Normalisations add
    1e-8 to the denominator, as the paper-era code does.
    """
    unit = _normalised(vectors)
    models: dict[int, Linear] = {}
    for c in range(len(set(labels.tolist()))):
        members = [k for k in range(len(labels)) if labels[k] == c]
        if not members:
            continue
        similarity = np.exp(-np.linalg.norm(unit[members] - unit[members].mean(0), axis=1))
        w = np.array([site_list[k].n for k in members], dtype=float) * similarity * trust[members]
        models[c] = _weighted_sum(w / (w.sum() + 1e-8), [local[k] for k in members])
    if not models:
        return models
    sizes = np.array([np.sum(labels == c) for c in models], dtype=float)
    consensus = _weighted_sum(sizes / (sizes.sum() + 1e-8), list(models.values()))
    return {c: ((1 - beta) * m[0] + beta * consensus[0], (1 - beta) * m[1] + beta * consensus[1])
            for c, m in models.items()}


def _ptopofl(site_list: Sequence[Site], seed: int, rounds: int) -> Iterator[Round]:
    """The pTopoFL of the paper-era code (§3, Algorithm 1; docs/internals.md#topofl.experiments.paper_protocol)."""
    found = [descriptor(s.X_raw, int(np.random.RandomState(seed + k).randint(0, 10_000)))
             for k, s in enumerate(site_list)]
    vectors = np.array([d.vector for d in found])
    weights = [sample_weights(s.X_raw, d.h0_amplitude) for s, d in zip(site_list, found, strict=True)]
    labels: np.ndarray | None = None
    models: dict[int, Linear] = {}
    for _ in range(rounds):
        starts = [None if labels is None else models.get(int(labels[k])) for k in range(len(site_list))]
        local = [_coefs(_lbfgs(s, start, w)) for s, start, w in zip(site_list, starts, weights, strict=True)]
        if labels is None:
            labels = cluster_labels(vectors)
        trust = trust_weights(vectors)
        models = cluster_models(local, site_list, vectors, labels, trust)
        held = [models.get(int(labels[k]), local[k]) for k in range(len(site_list))]
        yield ([score(s, m) for s, m in zip(site_list, held, strict=True)],
               {"clusters": labels.tolist(), "trust": trust.tolist(),
                "flagged": [k for k, t in enumerate(trust) if t < 0.5]})


def _fedavg(site_list: Sequence[Site], rounds: int, scored: str) -> Iterator[Round]:
    """FedAvg with L-BFGS local fits; ``scored="refit"`` scores each client's own fit (Table 1's
    FedAvg row), ``"global"`` the aggregated model (the control).
    """
    global_model: Linear | None = None
    for _ in range(rounds):
        fitted = [_lbfgs(s, global_model) for s in site_list]
        global_model = _by_size([_coefs(f) for f in fitted], site_list)
        g = global_model
        scores = ([score(s, g) for s in site_list] if scored == "global"
                  else [_score_fitted(s, f) for s, f in zip(site_list, fitted, strict=True)])
        yield scores, {}


def _local(site_list: Sequence[Site], rounds: int) -> Iterator[Round]:
    """Each client's own L-BFGS fit; re-fitting from scratch every round gives the same model, so it is fitted once."""
    scores = [_score_fitted(s, _lbfgs(s)) for s in site_list]
    for _ in range(rounds):
        yield scores, {}


def _fedprox(site_list: Sequence[Site], seed: int, rounds: int, mu: float = 0.1) -> Iterator[Round]:
    """FedProx (μ = 0.1): 30 gradient steps of 0.05 on loss + μ/2‖θ − θ_g‖², θ_g the last global model
    (own start in round 1).
    """
    held = _random_starts(site_list, seed + 200)
    anchors = list(held)
    for _ in range(rounds):
        local = []
        for s, start, a in zip(site_list, held, anchors, strict=True):
            local.append(_descend(s, start, 30, 0.05, partial(_proximal, anchor=a, mu=mu)))
        g = _by_size(local, site_list)
        held = anchors = [g] * len(site_list)
        yield [score(s, g) for s in site_list], {}


def _scaffold(site_list: Sequence[Site], seed: int, rounds: int, steps: int = 30, lr: float = 0.05) -> Iterator[Round]:
    """SCAFFOLD as the paper-era code has it: steps along g − c_k + c; c_k += (θ_start − θ)/(K·lr) − c;
    the server adds the mean of the clients' whole c_k to c (not of their changes).
    """
    held = _random_starts(site_list, seed + 300)
    own = [(np.zeros_like(m[0]), np.zeros_like(m[1])) for m in held]
    control: Linear | None = None
    for _ in range(rounds):
        c = control if control is not None else (np.zeros_like(held[0][0]), np.zeros_like(held[0][1]))
        local = []
        for k, (s, start) in enumerate(zip(site_list, held, strict=True)):
            ck = own[k]
            new = _descend(s, start, steps, lr, partial(_drift_corrected, own=ck, server=c))
            own[k] = (ck[0] + ((start[0] - new[0]) / (steps * lr) - c[0]),
                      ck[1] + ((start[1] - new[1]) / (steps * lr) - c[1]))
            local.append(new)
        g = _by_size(local, site_list)
        total = _weighted_sum([1.0] * len(own), own)
        base = control if control is not None else (np.zeros_like(g[0]), np.zeros_like(g[1]))
        control = (base[0] + total[0] / len(own), base[1] + total[1] / len(own))
        held = [g] * len(site_list)
        yield [score(s, g) for s in site_list], {}


def _pfedme(site_list: Sequence[Site], seed: int, rounds: int, lam: float = 15.0, lr: float = 0.01) -> Iterator[Round]:
    """The pFedMe (λ = 15) of the paper-era code: 20 steps of 0.01 on the personal θ_k along
    ∇f + λ(θ_k − w), then w ← w − lr·λ(w − θ_k); the server averages the w; clients are scored with θ_k.
    """
    theta = _random_starts(site_list, seed + 400)
    w_local = list(theta)
    g: Linear | None = None
    for _ in range(rounds):
        sent = []
        for k, s in enumerate(site_list):
            w = g if g is not None else w_local[k]
            theta[k] = _descend(s, theta[k], 20, lr, partial(_proximal, anchor=w, mu=lam))
            sent.append((w[0] - lr * lam * (w[0] - theta[k][0]), w[1] - lr * lam * (w[1] - theta[k][1])))
        g = _by_size(sent, site_list)
        yield [score(s, m) for s, m in zip(site_list, theta, strict=True)], {}


def run_protocol(method: str, clients: Sequence[ClientData], seed: int, rounds: int = ROUNDS) -> Iterator[Round]:
    """Run one method of the paper-era protocol on ``clients``, yielding each round's per-client
    (AUC, accuracy) and server log as it finishes.

    Parameters
    ----------
    method : str
        One of :data:`METHODS`.
    clients : sequence of ClientData
        Raw client data (e.g. :func:`topofl.data.scenarios.paper_era.paper_healthcare_clients`).
    seed : int
        The run's seed: clients' draws use ``seed + offset + k`` as the authors' script does.
    rounds : int
        Communication rounds (15 in Table 1).
    """
    from topofl._validation import check_choice, check_int

    check_choice("method", method, METHODS)
    check_int("rounds", rounds, 1, 10_000)
    check_int("seed", seed, 0, 2**32 - 1 - 1000)
    site_list = sites(clients)
    runs: dict[str, Callable[[], Iterator[Round]]] = {
        "ptopofl": lambda: _ptopofl(site_list, seed, rounds),
        "fedavg-refit": lambda: _fedavg(site_list, rounds, "refit"),
        "fedavg-global": lambda: _fedavg(site_list, rounds, "global"),
        "fedprox": lambda: _fedprox(site_list, seed, rounds),
        "scaffold": lambda: _scaffold(site_list, seed, rounds),
        "pfedme": lambda: _pfedme(site_list, seed, rounds),
        "local": lambda: _local(site_list, rounds),
    }
    return runs[method]()


def scenario_clients(scenario: str, seed: int, params: Mapping[str, Any] | None = None) -> list[ClientData]:
    """The clients of a paper-era scenario (``paper-healthcare`` or ``paper-benchmark``) for ``seed``."""
    if scenario not in SCENARIOS:
        raise ValueError(f"the paper protocol runs on {', '.join(SCENARIOS)}; got scenario {scenario!r}")
    return SCENARIOS[scenario](seed, **dict(params or {}))


def convergence_round(curve: Sequence[float], fraction: float = 0.95) -> int:
    """Table 1's "Conv. Round": the first round (1-based) whose AUC reaches ``fraction`` × the final AUC."""
    c = np.asarray(curve, dtype=float)
    return int(np.nonzero(c >= fraction * c[-1])[0][0]) + 1


def final_scores(scenario: str, method: str, seed: int = PUBLISHED_SEED, rounds: int = ROUNDS) -> dict[str, float]:
    """Final-round mean AUC and accuracy over clients, and the convergence round, of one run."""
    curve = [(float(np.mean([a for a, _ in r[0]])), float(np.mean([b for _, b in r[0]])))
             for r in run_protocol(method, scenario_clients(scenario, seed), seed, rounds)]
    return {"auc": curve[-1][0], "accuracy": curve[-1][1],
            "convergence_round": convergence_round([a for a, _ in curve])}


# ---- the experiment runner's executor ----------------------------------------------------------------------

ROUND_COLUMNS = ("round", "client", "auc", "accuracy")
CURVE_COLUMNS = ("round", "auc", "auc_std", "accuracy", "accuracy_std")


def is_protocol_run(spec: Job) -> bool:
    """Whether ``spec`` names a method of this protocol (``paper:<method>``)."""
    return spec.method.startswith(PREFIX)


def execute_paper_protocol(spec: Job, paths: Mapping[str, Path]) -> dict[str, Any]:
    """Run one ``paper:<method>`` spec, writing its per-client and per-round files as rounds finish;
    return its done-record (``final`` holds the last round's mean AUC and accuracy over clients).
    """
    method = spec.method[len(PREFIX):]
    if method not in METHODS:
        raise ValueError(f"unknown paper-protocol method {spec.method!r}; "
                         f"available: {', '.join(PREFIX + m for m in METHODS)}")
    if spec.hyperparameters or spec.attack or spec.model != "linear" or spec.validation:
        raise ValueError(f"run {spec.run_id}: the paper protocol has fixed settings (logistic regression, the "
                         "paper-era hyper-parameters, no attack, scored on the test splits); it takes no "
                         "hyperparameters, attack, model or validation")
    clients = scenario_clients(spec.data, spec.seed, spec.data_params)
    for p in paths.values():
        p.unlink(missing_ok=True)
    key = spec.key
    t0 = time.perf_counter()
    curve: list[float] = []
    scores: list[tuple[float, float]] = []
    with (CsvAppender(paths["rounds"], tuple(key) + ROUND_COLUMNS) as rounds_out,
          CsvAppender(paths["curves"], tuple(key) + CURVE_COLUMNS) as curves_out):
        for r, (scores, server_log) in enumerate(run_protocol(method, clients, spec.seed, spec.rounds), start=1):
            auc, acc = np.array([a for a, _ in scores]), np.array([b for _, b in scores])
            rounds_out.write({**key, "round": r, "client": k, "auc": a, "accuracy": b}
                             for k, (a, b) in enumerate(scores))
            summary = {"round": r, "auc": float(np.mean(auc)), "auc_std": float(auc.std()),
                       "accuracy": float(np.mean(acc)), "accuracy_std": float(acc.std())}
            curves_out.write([{**key, **summary}])
            append_jsonl(paths["log"], {**key, "round": r, **server_log})
            curve.append(summary["auc"])
            final = {"auc": summary["auc"], "accuracy": summary["accuracy"]}
    log.debug("paper protocol %s: final AUC %.4f", spec.run_id, curve[-1])
    done = {**key, "final": final, "seconds": time.perf_counter() - t0, "convergence_round": convergence_round(curve),
            "client_metrics": {str(k): {"auc": a, "accuracy": b} for k, (a, b) in enumerate(scores)},
            "adversarial": [c.client_id for c in clients if c.meta.get("adversarial")]}
    return write_done(paths, done)
