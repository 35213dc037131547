"""The ``privacy-attacks`` probe: the attacks of an honest-but-curious server on one finished
healthcare run, computed in the run's own (resumable) job and stored in its done-record.

Every run: loss-threshold membership inference on each honest hospital's final model. The FedAvg
run also: gradient inversion of one hospital's rows from the models it broadcast (replayed in
process: the run keeps only its last model) and descriptor inversion over a public pool.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from typing import Any

import numpy as np

from topofl.privacy.inversion import (
    CLOUD_STATISTICS,
    cloud_statistics,
    descriptor_scale_ratio,
    infer_label_count,
    invert_single_gradient,
    match_updates,
    nearest_descriptor,
    predict_statistics,
    reconstruction_error,
    relative_chamfer,
    rescale_cloud,
    update_to_gradient,
)
from topofl.privacy.membership import advantage_at_threshold, example_losses, loss_threshold_attack
from topofl.privacy.risk import ALPHA_C, descriptor_risk, gradient_risk
from topofl.tda.descriptor import DESCRIPTOR_DIM, client_seed, descriptor

NAME = "privacy-attacks"
SCENARIO = "healthcare"
FULL = "client"  # batch label of a hospital's whole training set
CHANNELS = ("gradient", "update (naive)", "update (unrolled)")
#: a reconstruction counts as recovered below this relative error
RECOVERED = 0.01


@dataclass(frozen=True)
class ProbeBudget:
    """What the attacks spend: batch sizes inverted, L-BFGS restarts and iterations, the attacker's pool (seeds)."""

    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    restarts: int = 3
    max_iter: int = 2000
    pool_seeds: tuple[int, ...] = tuple(range(1000, 1020))

    def spec(self) -> str:
        """The probe's name with the fields that differ from the defaults: ``privacy-attacks[:k=a/b,...]``."""
        changed = [f"{f.name}={_text(getattr(self, f.name))}" for f in fields(self)
                   if getattr(self, f.name) != f.default]
        return NAME + (":" + ",".join(changed) if changed else "")

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> ProbeBudget:
        """The budget a :meth:`spec` names (its ``key=value`` pairs); ``ValueError`` for an unknown key."""
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(params) - set(known))
        if unknown:
            raise ValueError(f"probe {NAME!r} has no parameter(s) {', '.join(unknown)}; known: {', '.join(known)}")
        values: dict[str, Any] = {}
        for k, v in params.items():
            values[k] = tuple(int(x) for x in v.split("/")) if isinstance(known[k].default, tuple) else int(v)
        return replace(cls(), **values)


def _text(v: Any) -> str:
    return "/".join(map(str, v)) if isinstance(v, tuple) else str(v)


# ---- membership ----------------------------------------------------------------------------------
def membership_rows(fed: Any, result: Any, method: str, seed: int) -> list[dict[str, Any]]:
    """Loss-threshold attack on every honest hospital's final model (one row per hospital)."""
    rows = []
    for c in fed:  # the federation's rows are preprocessed already
        if c.meta.get("adversarial"):  # their training labels are flipped: members would be mislabelled records
            continue
        lm = example_losses(result.predict(c.X_train, client=c.client_id, preprocessed=True), c.y_train)
        ln = example_losses(result.predict(c.X_test, client=c.client_id, preprocessed=True), c.y_test)
        r = loss_threshold_attack(lm, ln)
        rows.append({"seed": seed, "method": method, "client": c.client_id, "advantage": r.advantage,
                     "null_advantage": r.null_advantage,
                     "p_value": r.p_value, "auc": r.auc,
                     "yeom_advantage": advantage_at_threshold(lm, ln, float(lm.mean())),
                     "train_loss": float(lm.mean()), "test_loss": float(ln.mean())})
    return rows


# ---- model channel -------------------------------------------------------------------------------
def broadcast(fed: Any, job: Any) -> tuple[np.ndarray, Any, float]:
    """FedAvg's broadcast models θ_1…θ_R of ``job`` (replayed in process: deterministic given the
    seed), its config, and the replay's final AUC.
    """
    from topofl.federation.runner import run_federation
    from topofl.methods import build_server

    fedavg = build_server("fedavg", job.hyperparameters)
    # FedAvg's first global model: zeros for a linear model (GlobalModelAlgorithm.setup)
    seen = [np.zeros(fed.n_features + 1)]

    def record(history: Any, summary: Any) -> None:
        seen.append(np.array(fedavg.server_params(), dtype=np.float64, copy=True))

    replay = run_federation(fed, fedavg, job.rounds, job.seed, client_fraction=job.client_fraction, on_round=record,
                            model=job.model)
    return np.vstack(seen[: job.rounds]), fedavg.config, float(replay.final["auc"])


def _observations(channel: str, X: np.ndarray, y: np.ndarray, thetas: np.ndarray, cfg: Any,
                  seed: int) -> tuple[np.ndarray, int]:
    """What the server sees from a client holding ``(X, y)`` at each broadcast ``θ_t``, and the
    number of local steps: gradients (one full-batch step), or FedAvg's default update.
    """
    from topofl.federation.local import sgd
    from topofl.models.linear import BinaryLogistic
    from topofl.models.optimizers import steps_per_round

    model = BinaryLogistic(X.shape[1], cfg.l2)
    if channel == "gradient":
        return np.vstack([model.grad(t, X, y) for t in thetas]), 1
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x1D]))
    if cfg.optimizer != "sgd":
        raise ValueError(f"optimizer={cfg.optimizer!r}: the update inversion unrolls plain SGD steps; "
                         "use optimizer='sgd'")
    updates = np.vstack([sgd(model, t, X, y, epochs=cfg.local_epochs, lr=cfg.lr, batch_size=cfg.batch_size,
                             rng=rng, local_steps=cfg.local_steps) - t for t in thetas])
    return updates, steps_per_round(X.shape[0], cfg.batch_size, cfg.local_epochs, cfg.local_steps)


def _reconstruct(channel: str, obs: np.ndarray, grads: np.ndarray, thetas: np.ndarray, T: int,
                 labels: np.ndarray, steps: int, cfg: Any, options: dict[str, Any],
                 naive: dict[int, np.ndarray]) -> tuple[np.ndarray, np.ndarray, str]:
    """The attacker's rows and labels from the first ``T`` observations of one channel, and the attack's name."""
    B = len(labels)  # the batch's size: ``labels`` holds one (inferred) label per row
    if B == 1 and channel != "update (unrolled)":
        x, label = invert_single_gradient(grads[0], thetas[0], cfg.l2)
        return x[None, :], np.array([label]), "closed form"
    if channel == "update (unrolled)":  # warm start: the naive reading of the same updates
        rec = match_updates(obs[:T], thetas[:T], B, lr=cfg.lr, steps=steps, labels=labels, init=naive.get(T), **options)
    else:
        rec = match_updates(-grads[:T], thetas[:T], B, lr=1.0, labels=labels, **options)
        if channel == "update (naive)":
            naive[T] = rec.X
    return rec.X, rec.labels, "iDLG (L-BFGS)"


def _batch_rows(X: np.ndarray, y: np.ndarray, full: bool, thetas: np.ndarray, cfg: Any, seed: int, budget: ProbeBudget,
                d: int, base: dict[str, Any]) -> list[dict[str, Any]]:
    """Every channel's attack on one batch ``(X, y)`` at every number of observed uploads."""
    B = X.shape[0]
    options = {"l2": cfg.l2, "seed": seed, "n_restarts": 1 if full else budget.restarts, "max_iter": budget.max_iter}
    naive: dict[int, np.ndarray] = {}
    rows = []
    for channel in CHANNELS[:1] if full else CHANNELS:
        obs, steps = _observations(channel, X, y, thetas, cfg, seed)
        grads = obs if channel == "gradient" else update_to_gradient(obs, cfg.lr, steps)
        count = infer_label_count(grads[0], thetas[0], B)
        k = int(np.clip(round(count), 0, B))
        labels = np.r_[np.ones(k), np.zeros(B - k)]  # rows are exchangeable: the count is all a batch's labels say
        for T in (1, len(thetas)):
            X_hat, y_hat, attack = _reconstruct(channel, obs, grads, thetas, T, labels, steps, cfg, options, naive)
            err = reconstruction_error(X, X_hat, y, y_hat)
            rows.append({
                **base, "batch": FULL if full else B, "rows": B, "channel": channel, "observed_rounds": T,
                "attack": attack, "relative_error": err.relative_error,
                "recovered": float(err.relative_error < RECOVERED),
                "mean_cosine": err.mean_cosine,
                "label_accuracy": err.label_accuracy, "label_count_error": abs(count - float(y.sum())),
                "label_count_exact": float(k == int(y.sum())),
                "rho_one_upload": gradient_risk(d + 1, B, d), "rho_all_uploads": gradient_risk(T * (d + 1), B, d),
            })
    return rows


def inversion_rows(fed: Any, seed: int, thetas: np.ndarray, cfg: Any, budget: ProbeBudget) -> list[dict[str, Any]]:
    """Gradient-inversion attacks on one honest hospital's rows (hospital ``seed mod #honest``), per
    batch size, channel and number of observed uploads (1 and all). The whole training set (batch
    ``"client"``) is attacked through the gradient channel only: with more than ``batch_size`` rows
    FedAvg's client takes shuffled mini-batch steps that the attack does not model.
    """
    honest = [c for c in fed if not c.meta.get("adversarial")]
    c = honest[seed % len(honest)]
    order = np.random.default_rng(np.random.SeedSequence([seed, 0xB47C])).permutation(c.n_train)
    rows = []
    for B in (*budget.batch_sizes, c.n_train):
        X, y = c.X_train[order[:B]], c.y_train[order[:B]]
        rows += _batch_rows(X, y, B == c.n_train, thetas, cfg, seed, budget, fed.n_features,
                            {"seed": seed, "client": c.client_id})
    return rows


# ---- descriptor channel --------------------------------------------------------------------------
@lru_cache(maxsize=2)
def public_pool(pool_seeds: tuple[int, ...]) -> tuple[tuple[np.ndarray, ...], np.ndarray, np.ndarray, tuple[int, ...]]:
    """The attacker's pool: clouds, descriptors, statistics and groups of the clients of federations ``pool_seeds``."""
    from topofl.data.scenarios import make_scenario

    clouds, phis, groups = [], [], []
    for s in pool_seeds:
        for c in make_scenario(SCENARIO, seed=s):
            clouds.append(c.X_train)
            phis.append(descriptor(c.X_train, seed=client_seed(s, c.client_id)))
            groups.append(int(c.meta["group"]))
    stats = np.array([[cloud_statistics(X)[k] for k in CLOUD_STATISTICS] for X in clouds])
    return tuple(clouds), np.vstack(phis), stats, tuple(groups)


def _moments_error(true: np.ndarray, guess: np.ndarray) -> tuple[float, float]:
    """Centroid distance relative to the true RMS radius, and relative Frobenius error of the covariance."""
    radius = cloud_statistics(true)["rms_radius"]
    ct, cg = np.cov(true.T, bias=True), np.cov(guess.T, bias=True)
    centroid = float(np.linalg.norm(true.mean(axis=0) - guess.mean(axis=0)) / radius)
    return centroid, float(np.linalg.norm(cg - ct) / np.linalg.norm(ct))


def _cloud_attacks(c: Any, phi: np.ndarray, pool: tuple[Any, ...], seed: int) -> list[dict[str, Any]]:
    """Descriptor-inversion errors of every guess at client ``c``'s cloud from its descriptor ``phi``."""
    clouds, P, _, groups = pool
    i = nearest_descriptor(phi, P)
    guesses = {
        "nearest descriptor": clouds[i],
        "nearest, rescaled to φ's H0 amplitude": rescale_cloud(clouds[i], descriptor_scale_ratio(phi, P[i])),
        "same distribution (own test rows)": c.X_test,
    }
    rows = []
    for name, G in guesses.items():
        centroid, cov = _moments_error(c.X_train, G)
        rows.append({"seed": seed, "client": c.client_id, "attack": name,
                     "relative_chamfer": relative_chamfer(c.X_train, G),
                     "centroid_error": centroid, "covariance_error": cov,
                     "group_correct": float(groups[i] == c.meta["group"]) if name.startswith("nearest")
                     else float("nan")})
    pool_errors = np.array([[relative_chamfer(c.X_train, G), *_moments_error(c.X_train, G)] for G in clouds])
    share = float(np.mean(np.array(groups) == c.meta["group"]))
    for name, e in (("random pool cloud (mean)", pool_errors.mean(axis=0)),
                    ("best pool cloud (oracle)", pool_errors.min(axis=0))):
        rows.append({"seed": seed, "client": c.client_id, "attack": name, "relative_chamfer": e[0],
                     "centroid_error": e[1],
                     "covariance_error": e[2], "group_correct": share if name.startswith("random") else float("nan")})
    return rows


def descriptor_rows(fed: Any, seed: int, budget: ProbeBudget) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Descriptor-inversion errors per hospital and attack, and recovered statistics per hospital."""
    pool = public_pool(budget.pool_seeds)
    _, P, S, _ = pool
    attacks, stats = [], []
    base = np.exp(np.log(S).mean(axis=0))  # the pool's geometric mean: the guess without φ
    for c in fed:
        phi = descriptor(c.X_train, seed=client_seed(seed, c.client_id))
        attacks += _cloud_attacks(c, phi, pool, seed)
        i = nearest_descriptor(phi, P)
        truth = np.array([cloud_statistics(c.X_train)[k] for k in CLOUD_STATISTICS])
        pred = predict_statistics(P, S, phi[None, :])[0]
        for j, k in enumerate(CLOUD_STATISTICS):
            stats.append({"seed": seed, "client": c.client_id, "statistic": k, "true": truth[j], "from_phi": pred[j],
                          "nearest_cloud": S[i, j],
                          "pool_mean": base[j], "error_from_phi": abs(pred[j] - truth[j]) / truth[j],
                          "error_nearest_cloud": abs(S[i, j] - truth[j]) / truth[j],
                          "error_pool_mean": abs(base[j] - truth[j]) / truth[j],
                          "rho_descriptor": descriptor_risk(DESCRIPTOR_DIM, c.n_train, fed.n_features, ALPHA_C)})
    return attacks, stats


# ---- the probe -----------------------------------------------------------------------------------
def probe(params: Mapping[str, str], job: Any, result: Any, federation: Any) -> dict[str, Any]:
    """The attacks on one run (``params``: the :class:`ProbeBudget` its spec names), as JSON-ready rows."""
    from threadpoolctl import threadpool_limits

    budget = ProbeBudget.from_params(params)
    with threadpool_limits(limits=1):  # small matrices: BLAS threads only slow them down
        out: dict[str, Any] = {"membership": membership_rows(federation, result, job.method, job.seed)}
        if job.method == "fedavg":
            thetas, cfg, replay_auc = broadcast(federation, job)
            out["inversion"] = inversion_rows(federation, job.seed, thetas, cfg, budget)
            out["descriptor"], out["statistics"] = descriptor_rows(federation, job.seed, budget)
            out["n_features"] = int(federation.n_features)
            out["replay_auc_difference"] = abs(replay_auc - float(result.final["auc"]))
    return out

